# Two commands set everything up on a fresh machine:
#   make demo   -> local venv + dependencies, then a real rollout on the embedded defaults (no server)
#   make test   -> local venv + dependencies (CPU torch for SB3), then the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: demo numeric-demo test venv baselines clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# CPU torch first, from the pinned constraint, so that SB3 never pulls a CUDA build.
	$(PIP) install --quiet -c constraints.txt torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e ".[dev,sb3,cli,openai,parquet,fast]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	# The main job: a real rollout of the text env with the embedded offline LLM (no server, no key).
	$(VENV)/bin/rlaif-gym rollout --agent scripted --episodes 8 --num-envs 8 --seed 0 --out runs/demo --overwrite --no-progress
	$(VENV)/bin/rlaif-gym report runs/demo

numeric-demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest

baselines: $(STAMP)
	$(PY) examples/baselines.py --seeds 200

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
