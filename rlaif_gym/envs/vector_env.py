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
from .core import RLAIFCore, check_numeric_actions, check_reset_options

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
        """Reset every world, or the worlds of `options["reset_mask"]`, as `SyncVectorEnv` does.

        An int seed gives world i the seed `seed + i`; a list gives one seed per world (a partial reset
        uses the seeds of the worlds it resets). `options` may hold only Gymnasium's `reset_mask` (a bool
        array of shape (num_envs,), at least one True): those worlds start new episodes, the others keep
        theirs, and the observation holds every world's current one. Any other option raises `ConfigError`
        (see `check_reset_options`); `reset_mask` is taken out of `options`, as `SyncVectorEnv` takes it.
        """
        mask = None
        if isinstance(options, dict) and "reset_mask" in options:
            mask = self._reset_mask(options.pop("reset_mask"))
        check_reset_options(options)
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"expected {self.num_envs} seeds (one per world), got {len(seeds)}")
        if mask is not None and not mask.all():
            return self._reset_worlds(np.nonzero(mask)[0], seeds)
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
        return obs, self._reset_info(self.core.state, np.ones(self.num_envs, dtype=bool))

    def _reset_mask(self, mask: object) -> np.ndarray:
        """Gymnasium's checks of `options["reset_mask"]` (`SyncVectorEnv.reset`), with its error types."""
        if not isinstance(mask, np.ndarray):
            raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
        if mask.shape != (self.num_envs,):
            raise ValueError(f"`options['reset_mask']` must have shape `({self.num_envs},)`, got {mask.shape}")
        if mask.dtype != np.bool_:
            raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
        if not mask.any():
            raise ValueError(f"`options['reset_mask']` must contain at least one True value, got {mask}")
        return mask

    def _reset_worlds(self, idx: np.ndarray, seeds: Sequence[int | None]):
        """New episodes in worlds `idx` only (a partial reset); every world's observation is returned."""
        if self.core.state is None:
            raise ResetNeeded("a partial reset (options['reset_mask']) needs every world reset once first: call "
                              "reset() without a mask")
        for i in idx:
            if seeds[i] is not None:
                self._rngs[i] = seeding.np_random(seeds[i])[0]
        fresh = self.core.fresh_worlds(np.concatenate([sim.draw_keys(self._rngs[i], 1) for i in idx]))
        self.core.state.put(idx, fresh)
        self._autoreset[idx] = False
        if self._behavior is not None:
            self._behavior.reset(idx)
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[idx] = True
        return self.core.observe(), self._reset_info(self.core.state, mask)

    def _reset_info(self, state: sim.WorldState, mask: np.ndarray) -> dict[str, Any]:
        """The single env's reset info (equity, cash, tick) batched over worlds, `mask` marking the reset ones."""
        equity = np.where(mask, sim.equity(state, self.params), 0.0)
        return {"equity": equity, "_equity": mask.copy(), "cash": np.where(mask, state.cash, 0.0),
                "_cash": mask.copy(), "tick": np.where(mask, state.tick, 0), "_tick": mask.copy()}

    def step(self, actions):
        """Step every world; worlds whose episode ended at the previous step are reset instead."""
        if self.core.state is None:
            raise ResetNeeded("call reset() before step()")
        # An int64 batch goes straight to the fused compiled step, which checks the bounds itself (and
        # refuses the batch before any world moves); anything else is checked as SyncVectorEnv's sub-envs would.
        fast = (self.core.fused is not None and type(actions) is np.ndarray and actions.dtype == np.int64
                and actions.shape == (self.num_envs, 4))
        acts = actions if fast else check_numeric_actions(actions, self.core.nvec, self.num_envs)
        stepped = ~self._autoreset
        if self._behavior is not None:
            res = self._behavior.step(self.core, acts, stepped)
        else:
            try:
                res = self.core.step(acts)
            except InvalidActionError:
                check_numeric_actions(acts, self.core.nvec, self.num_envs)  # raises with the vector env's message
                raise
        obs, reward = res.observation, res.reward
        terminated = res.terminated.copy()
        truncated = (self.core.state.tick >= self.limit) & ~terminated
        out = res.outcome
        equity = out.equity_after.copy()
        if self._autoreset.any():
            idx = np.nonzero(self._autoreset)[0]
            keys = np.concatenate([sim.draw_keys(self._rngs[i], 1) for i in idx])
            fresh = self.core.fresh_worlds(keys)
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

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the worlds are arrays."""
