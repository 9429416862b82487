"""One face glue (rlaif_gym/envs/glue.py): the text env, the multi-agent env and the replay read a reply alike."""

from __future__ import annotations

import pytest

from rlaif_gym import sim
from rlaif_gym.envs.glue import action_row, decode_reply
from rlaif_gym.envs.multi_agent import RLAIFMultiAgentEnv
from rlaif_gym.envs.text_env import RLAIFTextEnv
from rlaif_gym.errors import ConfigError

REPLIES = {
    "no action": "I would rather not trade this hour.",
    "unknown market": '{"type": "buy_prediction", "market": "market-999", "outcome": "YES", "amount": 50}',
    "wait": '{"type": "wait"}',
}


@pytest.mark.parametrize("reply", list(REPLIES.values()), ids=list(REPLIES))
def test_text_and_multi_agent_envs_give_one_feedback_for_one_reply(reply):
    single = RLAIFTextEnv(num_ticks=4)
    single.reset(seed=5)
    multi = RLAIFMultiAgentEnv({"num_ticks": 4}, num_agents=1, face="text")
    multi.reset(seed=5)
    parsed, row = decode_reply(reply, single.state, single.params)
    info = single.step(reply)[4]
    agent_info = multi.step({"trader_0": reply})[4]["trader_0"]
    assert agent_info["feedback"] == info["feedback"]
    assert agent_info["parsed_action"] == info["parsed_action"]
    common = {"reward_components", "pnl_delta", "equity", "cash", "feedback", "tick", "fill"}
    assert common <= set(info) and common <= set(agent_info)
    if parsed.action is None:  # what the replay executes for a recorded reply without an action
        assert row == action_row(single.state, single.params, 0, None) == sim.ResolvedAction.invalid_reply()
        assert info["feedback"] == {"success": False, "error": "; ".join(parsed.errors)}
    elif parsed.action.type == "wait":
        assert row == sim.ResolvedAction.wait() and info["feedback"] == {"success": True, "error": None}
    else:
        assert row.pre_error == sim.ErrorCode.UNKNOWN_MARKET
        assert info["feedback"]["error"] == sim.error_message(row.pre_error, row.pre_a, row.pre_b)


def test_resolved_action_is_still_the_eight_tuple():
    row = sim.ResolvedAction.invalid_reply()
    kind, _, _, _, leverage, code, _, _ = row
    assert (kind, leverage, code) == (row.kind, row.leverage, row.pre_error) == (sim.ActionType.WAIT, 1.0,
                                                                                   sim.ErrorCode.INVALID_REPLY)
    batch = sim.ActionBatch.from_rows([row, sim.ResolvedAction.wait()])
    assert batch.pre_error.tolist() == [sim.ErrorCode.INVALID_REPLY, sim.ErrorCode.OK]


def test_every_env_refuses_an_unknown_archetype_with_one_message():
    messages = []
    for make in (lambda: RLAIFTextEnv(archetype="astrologer"),
                 lambda: RLAIFMultiAgentEnv({"archetype": "astrologer"}, num_agents=2)):
        with pytest.raises(ConfigError, match="archetype") as err:
            make()
        messages.append(str(err.value))
    assert messages[0] == messages[1]
