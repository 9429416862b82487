"""Reference equity curves on a run's own seeds: the numeric baseline agents and buy-and-hold.

Each baseline plays `RLAIF-v0` on the same env seeds and config as the run (the numeric and text
faces share one world, so seed s starts from the same state), all seeds as one batch on
`RLAIFCore`, for as many ticks as the run's longest episode.

**Buy-and-hold** is the passive investor of this world: the starting cash split equally over the
`num_perps` perpetual futures, long at 1x from the first tick to the last, without fees or funding:
equity[t] = starting_cash x mean_j(price_j[t] / price_j[0]). Perp prices do not depend on the
agent, so the same prices hold in every run on that seed. (Prediction markets have no
buy-and-hold: holding both sides is flat, holding one side is a forecast.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import sim
from ..agents import InformedAgent, OracleAgent, PassiveAgent, RandomAgent
from ..config import RLAIFEnvConfig
from ..envs import RLAIFCore, seed_keys

__all__ = ["BASELINE_AGENTS", "BUY_AND_HOLD", "BaselineCurves", "baseline_curves"]

BUY_AND_HOLD = "buy-and-hold"
"""The name of the buy-and-hold curve (see the module docstring)."""

BASELINE_AGENTS = {"informed": InformedAgent, "passive": PassiveAgent, "random": RandomAgent, "oracle": OracleAgent}
"""Baseline name -> agent class (`rlaif_gym.agents.baselines`). The oracle reads the hidden truth: an upper bound."""


@dataclass(frozen=True)
class BaselineCurves:
    """Equity curves (USD) per baseline, shape (seeds, ticks + 1), over the given seeds.

    Attributes:
        seeds: the env seeds, in order.
        ticks: ticks played (equity point 0 is before the first tick).
        curves: name -> equity; BUY_AND_HOLD included. A bankrupt world keeps its last equity.
    """

    seeds: np.ndarray
    ticks: int
    curves: dict[str, np.ndarray]

    def final_pnl(self, name: str) -> np.ndarray:
        """Per-seed PnL at the last tick, USD."""
        c = self.curves[name]
        return c[:, -1] - c[:, 0]


def baseline_curves(config: RLAIFEnvConfig | Mapping[str, Any] | None, seeds: Sequence[int], ticks: int,
                    agents: Sequence[str] = tuple(BASELINE_AGENTS)) -> BaselineCurves:
    """Play each baseline agent on `seeds` for `ticks` ticks (at most the config's num_ticks).

    The random agent draws from a generator seeded with 0, so the curves are reproducible.
    """
    # The run's own backend: compiled where numba is (the world step and encoder a rollout already compiled; not the
    # fused step, whose first compile a report should not wait for), as Python otherwise.
    cfg = RLAIFEnvConfig.from_any(config)
    ticks = int(min(max(ticks, 0), cfg.num_ticks))
    seeds = np.asarray(list(seeds), dtype=np.int64)
    core = RLAIFCore(cfg, num_worlds=len(seeds), fused=False)
    keys = seed_keys(seeds.tolist())
    curves: dict[str, np.ndarray] = {}
    prices = None
    for name in agents:
        agent = BASELINE_AGENTS[name](core, seed=0)
        obs = core.reset(keys, compiled=False)  # a reset per agent: no kernel to compile for it
        eq = np.empty((len(seeds), ticks + 1))
        eq[:, 0] = sim.equity(core.state, core.params)
        path = [core.state.perp_price.copy()]
        done = np.zeros(len(seeds), dtype=bool)
        for t in range(ticks):
            actions = np.asarray(agent.act(obs, core.state), dtype=np.int64)
            actions[done] = 0
            res = core.step(actions)
            eq[:, t + 1] = np.where(done, eq[:, t], res.outcome.equity_after)
            done |= res.terminated | res.truncated
            obs = res.observation
            path.append(core.state.perp_price.copy())
        curves[name] = eq
        prices = np.stack(path, axis=1) if prices is None else prices  # (seeds, ticks + 1, P)
    if prices is None:  # no agent asked for: the prices alone
        core.reset(keys, compiled=False)
        prices = np.repeat(core.state.perp_price[:, None, :], ticks + 1, axis=1)
        for t in range(ticks):
            core.step(np.zeros((len(seeds), 4), dtype=np.int64))
            prices[:, t + 1] = core.state.perp_price
    curves[BUY_AND_HOLD] = cfg.starting_cash * (prices / prices[:, :1, :]).mean(axis=2)
    return BaselineCurves(seeds, ticks, curves)
