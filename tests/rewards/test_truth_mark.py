"""`reward_mark="truth"` (issue 28, item 2): credit at the decision's own tick, from the hidden truth, in the reward
only.

* Nothing the policy sees changes: every prompt, numeric observation, feedback line and info field but the
  reward is byte-identical with and without it, in both faces, over whole episodes.
* It telescopes: per episode, the sum of `truth_mark` is Phi(s_T) / starting_cash (the held shares at p* less
  what they would fetch now), so the return is the default return plus that, within 1e-9.
* It is a learning signal: from fork states, a bet on the side p* favours beats waiting and the other side
  loses to it in almost every state already at H=1, where the default reward cannot tell them apart.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlaif_gym import ConfigError, RLAIFEnv, RLAIFEnvConfig, RLAIFTextEnv
from rlaif_gym.envs.multi_agent import RLAIFMultiAgentEnv
from rlaif_gym.llm import ScriptedLLM
from rlaif_gym.ranking import bet_signal
from rlaif_gym.sim import truth_potential

MODEL = ScriptedLLM()


def _reply(prompt: str) -> str:
    think, action = MODEL.decide(prompt)
    return f"<think>{think}</think>\n{json.dumps(action)}"


def _without_truth(info: dict) -> str:
    info = {**info, "reward_components": {k: v for k, v in info["reward_components"].items() if k != "truth_mark"}}
    return json.dumps(info, sort_keys=True, default=str)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_text_face_shows_exactly_the_same_with_the_truth_mark(seed):
    config = {"num_ticks": 40}
    plain, marked = RLAIFTextEnv(config), RLAIFTextEnv({**config, "reward_mark": "truth"})
    (p1, i1), (p2, i2) = plain.reset(seed=seed), marked.reset(seed=seed)
    assert p1 == p2 and i1 == i2
    ret_plain = ret_marked = truth = 0.0
    for _ in range(40):
        reply = _reply(p1)
        p1, r1, t1, u1, i1 = plain.step(reply)
        p2, r2, t2, u2, i2 = marked.step(reply)
        assert p1 == p2, "the prompt changed"
        assert np.array_equal(plain.numeric_observation, marked.numeric_observation)
        assert (t1, u1) == (t2, u2) and i1["feedback"] == i2["feedback"]
        assert _without_truth(i1) == _without_truth(i2), "an info field other than the reward changed"
        assert "truth_mark" not in i1["reward_components"]
        assert r2 == pytest.approx(r1 + i2["reward_components"]["truth_mark"], abs=1e-12)
        ret_plain, ret_marked, truth = ret_plain + r1, ret_marked + r2, truth + i2["reward_components"]["truth_mark"]
        if t1 or u1:
            break
    phi_end = float(truth_potential(marked.state, marked.params)[0]) / marked.config.starting_cash
    assert truth == pytest.approx(phi_end, abs=1e-9)
    assert ret_marked == pytest.approx(ret_plain + phi_end, abs=1e-9)


@pytest.mark.parametrize("backend", ["numpy", "auto"])
def test_the_numeric_face_telescopes_to_the_default_return_plus_the_final_potential(backend):
    config = {"num_ticks": 60, "backend": backend}
    rng = np.random.default_rng(5)
    for seed in range(4):
        plain, marked = RLAIFEnv(config), RLAIFEnv({**config, "reward_mark": "truth"})
        o1, _ = plain.reset(seed=seed)
        o2, _ = marked.reset(seed=seed)
        ret_plain = ret_marked = 0.0
        while True:
            action = rng.integers(0, plain.action_space.nvec)
            action[0] = 1 if rng.random() < 0.3 else action[0]  # plenty of buys: positions to value
            o1, r1, t1, u1, i1 = plain.step(action)
            o2, r2, t2, u2, i2 = marked.step(action)
            assert np.array_equal(o1, o2) and (t1, u1) == (t2, u2) and i1["feedback"] == i2["feedback"]
            assert i1["pnl_delta"] == i2["pnl_delta"] and i1["equity"] == i2["equity"]
            ret_plain, ret_marked = ret_plain + r1, ret_marked + r2
            if t1 or u1:
                break
        phi_end = float(truth_potential(marked.state, marked.params)[0]) / marked.config.starting_cash
        assert ret_marked == pytest.approx(ret_plain + phi_end, abs=1e-9), seed


def test_the_multi_agent_env_marks_each_agent_at_the_truth():
    """Two agents take opposite sides of the market p* is furthest from: the truth mark credits the right one and
    charges the wrong one on that very tick; the market-marked pnl cannot tell them apart yet."""
    env = RLAIFMultiAgentEnv({"num_ticks": 20, "reward_mark": "truth"}, num_agents=2)
    env.reset(seed=3)
    world = env.world
    gap = world.pm_truth[0] - world.pm_no[0] / (world.pm_yes[0] + world.pm_no[0])
    m = int(np.argmax(np.abs(gap)))
    right = 0 if gap[m] > 0 else 1
    right_agent, wrong_agent = env.agents
    _, _, _, _, infos = env.step({right_agent: np.array([1, m, 2, right]), wrong_agent: np.array([1, m, 2, 1 - right])})
    assert infos[right_agent]["reward_components"]["truth_mark"] > 0 > infos[wrong_agent]["reward_components"][
        "truth_mark"], infos


def test_the_truth_mark_is_a_skill_scheme_option_with_its_own_weight():
    with pytest.raises(ConfigError, match="skill scheme"):
        RLAIFEnvConfig(reward_mark="truth", reward_scheme="original")
    with pytest.raises(ConfigError):
        RLAIFEnvConfig(reward_mark="mid")
    env = RLAIFEnv({"reward_mark": "truth"})
    assert env.reward_function.coefficients["truth_mark"] == env.reward_function.coefficients["pnl"] == 1.0
    assert "truth_mark" not in RLAIFEnv().reward_function.weights
    weighted = RLAIFEnv({"reward_mark": "truth", "reward_weights": {"truth_mark": 0.25}})
    assert weighted.reward_function.coefficients["truth_mark"] == 0.5


@pytest.mark.parametrize("config", [{}, {"num_ticks": 48, "num_markets": 2, "market_duration_min": 12,
                                         "market_duration_max": 36}], ids=["default world", "short world"])
def test_a_right_bet_beats_waiting_and_a_wrong_one_loses_to_it_at_the_first_tick(config):
    ticks = (8, 24, 48, 96) if not config else (8, 16, 24, 32)
    marked = bet_signal(range(3_100_000, 3_100_032), {**config, "reward_mark": "truth"}, horizon=1, fork_ticks=ticks)
    assert marked.right_beats_wait >= 0.85 and marked.wrong_beats_wait <= 0.1, marked
    assert marked.right_gain > 0 > marked.wrong_gain
    default = bet_signal(range(3_100_000, 3_100_032), config, horizon=1, fork_ticks=ticks)
    assert default.right_beats_wait < 0.5, default  # the default reward charges the bet's round trip at once
