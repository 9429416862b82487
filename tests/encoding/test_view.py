"""`build_view` sums in Python what numpy sums, and must give numpy's bits (the prompt and the judge read them)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from rlaif_gym import sim
from rlaif_gym.encoding.view import build_view, pairwise_sum
from rlaif_gym.llm import ScriptedLLM


@pytest.mark.parametrize("n", [*range(0, 20), 23, 31, 32, 33, 64, 100, 128])
def test_pairwise_sum_is_numpys_sum_bit_for_bit(n):
    rng = np.random.default_rng(n)
    for scale in (1.0, 1e-3, 1e6):
        row = rng.standard_normal((1, n)) * scale * rng.choice([1.0, 1e8, 1e-8], size=(1, n))
        assert pairwise_sum(row[0].tolist()).hex() == float(row.sum(axis=1)[0]).hex()


@pytest.mark.parametrize("config", [{"backend": "numba"}, {"backend": "numpy", "num_markets": 11, "num_perps": 5}])
def test_the_views_equity_and_exposure_are_the_worlds(config):
    """Over whole episodes with trades, perps and liquidations, the view's equity (given by the step or computed)
    and exposure ratio equal `sim.equity` and `sim.exposure` exactly."""
    env = gym.make("RLAIF-Text-v0", config={"num_ticks": 80, **config}, disable_env_checker=True)
    base = env.unwrapped
    rng = np.random.default_rng(3)
    model = ScriptedLLM()
    prompt, _ = env.reset(seed=3)
    held_perp = 0
    for _ in range(80):
        think, action = model.decide(prompt, rng)
        if action["type"] in ("buy_prediction", "open_perp"):
            action["amount"] = float(action.get("amount", 50)) * float(rng.choice([1, 5, 20]))
        prompt, _, terminated, truncated, _ = env.step(f"<think>{think}</think>{json.dumps(action)}")
        state = base.state
        equity = float(sim.equity(state, base.params)[0])
        ratio = float(sim.exposure(state)[0]) / max(equity, 1e-9)
        for view in (base.view, build_view(state, base.params, 0)):
            assert view.equity.hex() == equity.hex()
            assert view.exposure_ratio.hex() == ratio.hex()
        held_perp += any(p.side for p in base.view.perps)
        if terminated or truncated:
            break
    assert held_perp > 0
