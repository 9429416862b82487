"""Several agents around one world (`sim.multi.step_agents`), run on the world's own phases, against the frozen
numpy engine's multi-agent tick (`engine_oracle.step_agents`), and compiled against Python.

Random numeric actions of three agents in five worlds over whole episodes: every account and outcome field agrees
with the oracle (integers and booleans exactly, floats within a relative 1e-9, as tests/sim/test_world_rules.py
holds the single step), and the compiled and Python runs agree bit for bit.
"""

from __future__ import annotations

from dataclasses import fields

import engine_oracle as oracle
import numpy as np
import pytest

from rlaif_gym.encoding import ACTION_KINDS, action_nvec, decode_actions
from rlaif_gym.sim import WorldParams, WorldState, draw_keys, multi, reset, rules

RTOL = 1e-9


def _agree(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if a.dtype.kind == "f":
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=0.0, equal_nan=True, err_msg=what)
    else:
        assert np.array_equal(a, b), what


@pytest.mark.parametrize("params", [WorldParams(), WorldParams(num_markets=3, num_perps=2, num_npcs=9,
                                                               funding_interval=2, market_duration_min=3,
                                                               market_duration_max=5, perp_volatility=0.05)],
                         ids=["default", "volatile"])
def test_three_agents_tick_as_the_oracle_and_compiled_as_python(params):
    if not rules.available():
        pytest.skip("numba is not installed: only the Python run exists")
    b, n, rng = 5, 3, np.random.default_rng(4)
    keys = draw_keys(rng, b)
    worlds = {"oracle": oracle.reset(params, keys), "compiled": reset(params, keys),
              "python": reset(params, keys, compiled=False)}
    accounts = {name: multi.Accounts.fresh(state, n) for name, state in worlds.items()}
    nvec = action_nvec(params)
    known = [i for i, kind in enumerate(ACTION_KINDS) if kind in oracle.KINDS]  # a kind declared since waits here
    seen = {"liquidated": 0, "resolved": 0, "success": 0}
    for tick in range(params.num_ticks):
        raw = [rng.integers(0, nvec, size=(b, 4)) for _ in range(n)]
        for r in raw:
            r[:, 0] = np.where(np.isin(r[:, 0], known), r[:, 0], 0)
        outs = {}
        for name, state in worlds.items():
            batches = []
            for agent in range(n):  # each agent's numeric action, decoded against its own account
                accounts[name].load(state, agent)
                batches.append(decode_actions(raw[agent], state, params, 3.0))
            if name == "oracle":
                outs[name] = oracle.step_agents(state, accounts[name], batches, params)
            else:
                outs[name] = multi.step_agents(state, accounts[name], batches, params, compiled=name == "compiled")
        for agent in range(n):
            for f in fields(outs["oracle"][agent]):
                ref, got, py = (getattr(outs[k][agent], f.name) for k in ("oracle", "compiled", "python"))
                _agree(ref, got, f"tick {tick}, agent {agent}: outcome {f.name}")
                assert np.array_equal(got, py, equal_nan=True), f"tick {tick}, agent {agent}: {f.name}, python"
            seen["liquidated"] += int(outs["oracle"][agent].liquidated.sum())
            seen["resolved"] += int(outs["oracle"][agent].resolved.sum())
            seen["success"] += int(outs["oracle"][agent].success.sum())
    for name in multi.ACCOUNT_FIELDS:
        _agree(accounts["oracle"].arrays[name], accounts["compiled"].arrays[name], f"account field {name}")
        assert np.array_equal(accounts["compiled"].arrays[name], accounts["python"].arrays[name]), name
    for f in fields(WorldState):
        if f.name not in multi.ACCOUNT_FIELDS:
            _agree(getattr(worlds["oracle"], f.name), getattr(worlds["compiled"], f.name), f"world field {f.name}")
            assert np.array_equal(getattr(worlds["compiled"], f.name), getattr(worlds["python"], f.name)), f.name
    assert seen["resolved"] > 0 and seen["success"] > 0, seen
    if params.perp_volatility > 0.01:
        assert seen["liquidated"] > 0, seen
