"""The world carries a learnable signal: over 200 seeds, oracle >> informed > passive = 0 > random."""

from __future__ import annotations

import numpy as np
import pytest

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.agents import InformedAgent, OracleAgent, PassiveAgent, RandomAgent
from rlaif_gym.envs import RLAIFCore, evaluate_policy

SEEDS = list(range(200))


@pytest.fixture(scope="module")
def table():
    core = RLAIFCore(RLAIFEnvConfig(), num_worlds=len(SEEDS))
    return {cls.__name__: evaluate_policy(cls(core, seed=0), SEEDS, core=core).final_pnl
            for cls in (OracleAgent, InformedAgent, PassiveAgent, RandomAgent)}


def _ci(pnl):
    half = 1.96 * pnl.std(ddof=1) / np.sqrt(len(pnl))
    return pnl.mean() - half, pnl.mean() + half


def test_passive_agent_makes_exactly_zero(table):
    assert np.all(table["PassiveAgent"] == 0.0)


def test_random_agent_loses_money_to_fees_and_slippage(table):
    assert _ci(table["RandomAgent"])[1] < 0.0


def test_informed_agent_clearly_beats_passive_and_random(table):
    lo, _ = _ci(table["InformedAgent"])
    assert lo > 0.0
    assert np.mean(table["InformedAgent"] > table["RandomAgent"]) > 0.9


def test_oracle_is_far_above_informed(table):
    assert table["OracleAgent"].mean() > 2.0 * table["InformedAgent"].mean()
    assert _ci(table["OracleAgent"])[0] > _ci(table["InformedAgent"])[1]


def test_oracle_refuses_to_act_without_the_world_state():
    core = RLAIFCore(RLAIFEnvConfig(), num_worlds=1)
    obs = core.reset(np.array([1], dtype=np.uint64))
    with pytest.raises(ValueError, match="needs the world state"):
        OracleAgent(core).act(obs)
