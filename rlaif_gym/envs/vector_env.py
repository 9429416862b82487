"""`RLAIFVectorEnv`: the native Gymnasium vector env of `RLAIF-v0` (one batched core, no copies).

`gym.make_vec("RLAIF-v0", num_envs=N, vectorization_mode="vector_entry_point")` builds it. World i
runs exactly the episode `SyncVectorEnv`'s sub-env i would: the same seeding (an int seed s gives
world i the seed s + i), the same per-world generator for later resets, the same NEXT_STEP autoreset
(the step after an episode ends returns the new episode's first observation with reward 0 and no
flags, and ignores that world's action), and the same single-env truncation at `num_ticks` or
`max_episode_steps`. A test checks that sync, async and native modes agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .. import sim
from ..config import RLAIFEnvConfig
from ..errors import InvalidActionError, ResetNeeded
from .behavior import BatchBehavior
from .core import RLAIFCore, check_reset_options

__all__ = ["RLAIFVectorEnv"]


class RLAIFVectorEnv(VectorEnv):
    """N worlds of `RLAIF-v0` stepped as one numpy batch.

    Args:
        num_envs: number of worlds.
        config: an `RLAIFEnvConfig`, a mapping or None; `overrides` are config fields.
        max_episode_steps: truncation limit (the registry passes the spec's; the env also truncates
            at `num_ticks`).
        render_mode: not supported for the batch (use a single env to render).

    Info: `reward_components` (dict of arrays), `pnl_delta`, `equity`, `cash`, `tick` and
    `feedback_success`, each an array over worlds with a boolean `_<key>` mask (False for worlds
    that were reset this step), as Gymnasium batches info.
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *,
                 max_episode_steps: int | None = None, render_mode: str | None = None, **overrides: Any) -> None:
        if render_mode is not None:
            raise ValueError("RLAIFVectorEnv does not render; render a single RLAIF-v0 env instead")
        self.num_envs = int(num_envs)
        self.config = RLAIFEnvConfig.from_any(config, **overrides)
        self.core = RLAIFCore(self.config, num_worlds=self.num_envs)
        # With an archetype, one behaviour tracker per world pays `behavior` exactly as the single env does.
        self._behavior = BatchBehavior(self.core.archetype, self.num_envs) if self.core.archetype else None
        self.params = self.core.params
        self.layout = self.core.layout
        self.single_observation_space = spaces.Box(self.layout.low, self.layout.high, dtype=np.float32)
        self.single_action_space = spaces.MultiDiscrete(self.core.nvec)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        self.limit = min(self.params.num_ticks, max_episode_steps or self.params.num_ticks)
        self._rngs: list[np.random.Generator] = []
        self._autoreset = np.zeros(self.num_envs, dtype=bool)

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset every world. An int seed gives world i the seed `seed + i`, as SyncVectorEnv does.

        `options` must be None or empty (see `check_reset_options`).
        """
        check_reset_options(options)
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"expected {self.num_envs} seeds (one per world), got {len(seeds)}")
        if not self._rngs:
            self._rngs = [seeding.np_random(s)[0] for s in seeds]
        else:
            self._rngs = [seeding.np_random(s)[0] if s is not None else r for s, r in zip(seeds, self._rngs,
                                                                                          strict=True)]
        keys = np.concatenate([sim.draw_keys(r, 1) for r in self._rngs])
        obs = self.core.reset(keys)
        self._autoreset[:] = False
        if self._behavior is not None:
            self._behavior.reset()
        state = self.core.state
        equity = sim.equity(state, self.params)
        mask = np.ones(self.num_envs, dtype=bool)
        return obs, {"equity": equity, "_equity": mask, "cash": state.cash.copy(), "_cash": mask,
                     "tick": state.tick.copy(), "_tick": mask.copy()}

    def step(self, actions):
        """Step every world; worlds whose episode ended at the previous step are reset instead."""
        if self.core.state is None:
            raise ResetNeeded("call reset() before step()")
        acts = np.asarray(actions)
        # The fused compiled step checks the bounds itself (and refuses the batch before any world moves).
        checked = self.core.fused is not None  # None with an archetype or the numpy backend
        if acts.shape != (self.num_envs, 4) or acts.dtype.kind not in "iu" or (
                not checked and (np.any(acts < 0) or np.any(acts >= self.core.nvec))):
            raise self._refusal(acts)
        stepped = ~self._autoreset
        acts = acts.astype(np.int64, copy=False)
        if self._behavior is not None:
            res = self._behavior.step(self.core, acts, stepped)
        else:
            try:
                res = self.core.step(acts)
            except InvalidActionError:
                raise self._refusal(acts) from None
        obs, reward = res.observation, res.reward
        terminated = res.terminated.copy()
        truncated = (self.core.state.tick >= self.limit) & ~terminated
        out = res.outcome
        equity = out.equity_after.copy()
        if self._autoreset.any():
            idx = np.nonzero(self._autoreset)[0]
            keys = np.concatenate([sim.draw_keys(self._rngs[i], 1) for i in idx])
            fresh = sim.reset(self.params, keys)
            self.core.state.put(idx, fresh)
            if self._behavior is not None:
                self._behavior.reset(idx)
            obs[idx] = self.core.encode(fresh)
            equity[idx] = sim.equity(fresh, self.params)
            reward = reward.copy()
            reward[idx] = 0.0
            terminated[idx] = False
            truncated[idx] = False
        self._autoreset = terminated | truncated
        everyone = np.ones(self.num_envs, dtype=bool)
        info = {
            "reward_components": {k: v for name, arr in res.components.items()
                                  for k, v in ((name, arr), (f"_{name}", stepped))},
            "_reward_components": stepped,
            "pnl_delta": out.pnl_delta, "_pnl_delta": stepped,
            "equity": equity, "_equity": everyone,
            "cash": self.core.state.cash.copy(), "_cash": everyone.copy(),
            "tick": self.core.state.tick.copy(), "_tick": everyone.copy(),
            "feedback_success": out.success, "_feedback_success": stepped,
        }
        return obs, reward, terminated, truncated, info

    def _refusal(self, acts: np.ndarray) -> InvalidActionError:
        return InvalidActionError(f"actions must be integers of shape ({self.num_envs}, 4) with 0 <= a[:, i] < "
                                 f"{self.core.nvec.tolist()}, got shape {acts.shape} dtype {acts.dtype}")

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the worlds are arrays."""
