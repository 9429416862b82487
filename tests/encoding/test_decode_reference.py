"""`decode_actions` (the numeric env's hot path, which prices only the kinds present) equals a plain
per-row reading of the action table in `rlaif_gym.encoding.action` (each kind priced by its declared size
rule), on real mid-episode states."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlaif_gym  # noqa: F401  (registers the env ids)
from rlaif_gym.encoding.action import ACTION_KINDS, BUY_FRACTIONS, SELL_FRACTIONS, decode_actions
from rlaif_gym.sim import SPEC_OF, equity


def reference(actions: np.ndarray, state, params, leverage: float) -> np.ndarray:
    """The amount of each row, one row at a time, straight from the module docstring's table."""
    eq = equity(state, params)
    out = np.zeros(len(actions))
    for b, (k, target, bucket, side) in enumerate(actions):
        size = SPEC_OF[ACTION_KINDS[k].name.lower()].numeric_size
        if size in ("equity", "leveraged"):
            out[b] = BUY_FRACTIONS[bucket] * eq[b] * (leverage if size == "leveraged" else 1.0)
        elif size == "held":
            m = min(target, params.num_markets - 1)
            held = state.hold_yes[b, m] if side == 0 else state.hold_no[b, m]
            out[b] = SELL_FRACTIONS[bucket] * held
    return out


@pytest.mark.parametrize("num_envs", [1, 7])
def test_decode_matches_the_per_row_reference(num_envs):
    envs = gym.make_vec("RLAIF-v0", num_envs=num_envs, vectorization_mode="vector_entry_point")
    rng = np.random.default_rng(num_envs)
    envs.reset(seed=3)
    core = envs.unwrapped.core
    nvec = core.nvec
    for step in range(60):
        acts = rng.integers(0, nvec, size=(num_envs, 4))
        if step % 3 == 0:  # batches of one kind too: each branch alone, and none priced
            acts[:, 0] = rng.integers(0, len(ACTION_KINDS))
        batch = decode_actions(acts, core.state, core.params, 3.0)
        want = reference(acts, core.state, core.params, 3.0)
        assert np.array_equal(batch.amount, want), (step, acts, batch.amount, want)
        assert np.array_equal(batch.kind, np.asarray(ACTION_KINDS, np.int64)[acts[:, 0]])
        assert np.array_equal(batch.target, acts[:, 1]) and np.array_equal(batch.side, acts[:, 3])
        assert np.all(batch.leverage == 3.0) and not batch.pre_error.any()
        envs.step(acts)
