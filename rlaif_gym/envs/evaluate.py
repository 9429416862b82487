"""Run a batch policy over many seeds at once, on the same core as the single env.

World b here is bit-for-bit the episode `gym.make("RLAIF-v0").reset(seed=seeds[b])` produces under
the same actions (a test checks it), so the baseline table is the single env's, just faster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from gymnasium.utils import seeding

from .. import sim
from ..config import RLAIFEnvConfig
from .core import RLAIFCore

__all__ = ["EpisodeStats", "evaluate_policy", "seed_keys"]


class BatchPolicy(Protocol):
    """Anything with `act(obs (B, D), state) -> actions (B, 4)`, e.g. the baseline agents."""

    def act(self, obs: np.ndarray, state: sim.WorldState | None = None) -> np.ndarray: ...


def seed_keys(seeds: Sequence[int]) -> np.ndarray:
    """The world keys `RLAIFEnv.reset(seed=s)` draws, one per seed."""
    return np.concatenate([sim.draw_keys(seeding.np_random(int(s))[0], 1) for s in seeds])


@dataclass
class EpisodeStats:
    """Per-seed results of one policy."""

    seeds: np.ndarray
    final_pnl: np.ndarray  # equity at the end minus starting cash, USD
    episode_return: np.ndarray  # sum of rewards
    length: np.ndarray  # steps taken
    bankrupt: np.ndarray  # bool


def evaluate_policy(
    policy: BatchPolicy,
    seeds: Sequence[int],
    config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
    core: RLAIFCore | None = None,
) -> EpisodeStats:
    """Play one episode per seed, all seeds in one batch, until truncation or bankruptcy."""
    cfg = RLAIFEnvConfig.from_any(config)
    core = core or RLAIFCore(cfg, num_worlds=len(seeds))
    obs = core.reset(seed_keys(seeds))
    b = len(seeds)
    done = np.zeros(b, dtype=bool)
    returns, lengths = np.zeros(b), np.zeros(b, dtype=np.int64)
    bankrupt = np.zeros(b, dtype=bool)
    final_equity = np.full(b, cfg.starting_cash)
    while not done.all():
        actions = np.asarray(policy.act(obs, core.state), dtype=np.int64)
        actions[done] = 0  # finished worlds wait; nothing they do is counted
        res = core.step(actions)
        live = ~done
        returns += np.where(live, res.reward, 0.0)
        lengths += live
        final_equity = np.where(live, res.outcome.equity_after, final_equity)
        bankrupt |= live & res.terminated
        done |= res.terminated | res.truncated
        obs = res.observation
    return EpisodeStats(np.asarray(seeds), final_equity - cfg.starting_cash, returns, lengths, bankrupt)
