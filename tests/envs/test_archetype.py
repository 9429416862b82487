"""Archetypes: the original's weight row applies, and the behavior component is exact shaping."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlaif_gym import ConfigError
from rlaif_gym.rewards import combine_components
from rlaif_gym.rewards.archetypes import ARCHETYPE_REWARD_WEIGHTS, behavior_score

REPLIES = [
    '<think>Tips are reliable, so I join Alpha Insiders.</think>{"type": "join_group", "group": "Alpha Insiders"}',
    '<think>x</think>{"type": "buy_prediction", "market": "market-1", "outcome": "YES", "amount": 400}',
    '<think>x</think>{"type": "create_post", "content": "market-1 is going YES"}',
    '<think>x</think>{"type": "send_dm", "recipient": "agent-2", "content": "hi"}',
    '<think>x</think>{"type": "open_perp", "ticker": "BTCAI", "side": "LONG", "size": 800, "leverage": 3}',
    '<think>x</think>{"type": "close_perp", "ticker": "BTCAI"}',
    '<think>x</think>{"type": "wait"}',
]


def _skill_total(comps, row, num_ticks):
    """The skill scheme's per-step sum written out (composite.py): weights relative to the row's pnl weight,
    form over the episode length times form_scale (0.25)."""
    unit = row["pnl"]
    return (comps["pnl"] + comps["risk"] + row["behavior"] / unit * comps["behavior"]
            + 0.25 * (row["format"] * comps["format"] + row["reasoning"] * comps["reasoning"]) / (unit * num_ticks))


@pytest.mark.parametrize("scheme", ["skill", "original"])
@pytest.mark.parametrize("archetype", ["degen", "social-butterfly", "trader", "researcher"])
def test_archetype_row_weights_the_text_reward_and_behavior_sums_to_the_episode_score(archetype, scheme):
    env = gym.make("RLAIF-Text-v0", archetype=archetype, num_ticks=60, reward_scheme=scheme)
    env.reset(seed=1)
    row = ARCHETYPE_REWARD_WEIGHTS[archetype]
    weights = {**row, "risk": row["pnl"]}
    total_behavior = 0.0
    for t in range(60):
        _, reward, terminated, truncated, info = env.step(REPLIES[t % len(REPLIES)])
        comps = info["reward_components"]
        assert set(comps) == {"pnl", "risk", "format", "reasoning", "behavior"}
        if scheme == "original":
            expected = float(combine_components({k: np.array([v]) for k, v in comps.items()}, weights)[0])
        else:
            expected = _skill_total(comps, row, 60)
        assert reward == pytest.approx(expected, abs=1e-12), t
        total_behavior += comps["behavior"]
        if terminated or truncated:
            break
    (tracker,) = env.unwrapped._behavior.trackers
    final = behavior_score(archetype, tracker.metrics())
    start = behavior_score(archetype, type(tracker.metrics())())
    assert total_behavior == pytest.approx(final - start, abs=1e-9)
    m = tracker.metrics()
    assert m.group_chats_joined >= 1 and m.posts_created >= 1 and m.dms_initiated >= 1 and m.trades_executed >= 2


def test_numeric_env_gets_behavior_too_when_an_archetype_is_set():
    env = gym.make("RLAIF-v0", archetype="perps-trader")
    env.reset(seed=0)
    _, _, _, _, info = env.step([3, 0, 2, 0])
    assert set(info["reward_components"]) == {"pnl", "risk", "behavior"}


def test_without_archetype_there_is_no_behavior_component():
    env = gym.make("RLAIF-Text-v0")
    env.reset(seed=0)
    assert "behavior" not in env.step(REPLIES[0])[4]["reward_components"]


def test_unknown_archetype_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown archetype 'degenerate'.*degen"):
        gym.make("RLAIF-v0", archetype="degenerate")
