"""The batched env adapter: world state + encoders + composite reward for B worlds at once.

`RLAIFEnv` is this with B = 1; the native vector env and batch evaluation use larger B. One code
path, so the single env and any batch agree exactly (a test checks it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import sim
from ..config import RLAIFEnvConfig
from ..encoding import action_nvec, decode_actions, encode_observations, feature_layout
from ..errors import ConfigError, DependencyNotInstalled, InvalidActionError, ResetNeeded
from ..rewards.composite import RewardFunction
from ..sim import rules as sim_rules
from .glue import check_archetype, fill_info

__all__ = ["CoreStep", "RLAIFCore", "check_numeric_action", "check_numeric_actions", "check_reset_options",
           "fill_info", "integral_array",  # fill_info: defined in envs.glue, kept here for its importers
           "world_params"]


def check_reset_options(options: object) -> None:
    """`reset(options=...)` takes none: refuse any, rather than ignore them silently.

    The world is set by the config at `make` time and the episode by the seed; a saved state is
    restored with `set_state` (or `fork`). None and {} (what vector wrappers pass) are accepted.
    """
    if options is None or (isinstance(options, dict) and not options):
        return
    keys = sorted(map(str, options)) if isinstance(options, dict) else type(options).__name__
    raise ConfigError(f"reset(options=...) takes no options, got {keys}: the world comes from the config at make "
                      "time (gym.make('RLAIF-v0', num_markets=6, ...)) and the episode from the seed; restore a "
                      "saved state with env.unwrapped.set_state(...)")


def check_numeric_action(action: object, nvec: np.ndarray, who: str = "") -> np.ndarray:
    """A numeric-face action as int64 `[kind, target, size, side]`, each in `[0, nvec[i])`.

    The one check of the single env (`RLAIFEnv`, off its compiled fast path) and the multi-agent env.

    Args:
        action: what the policy sent (a list, a tuple, an array of any dtype).
        nvec: the `MultiDiscrete` sizes.
        who: a prefix for the message (e.g. the agent's name and ": ").

    Raises:
        InvalidActionError: not 4 integers (a float with a fraction, an integer beyond int64, a string,
            another shape) or one out of range.
    """
    ints = integral_array(action)
    if ints is None:
        raise InvalidActionError(f"{who}action must be 4 integers [kind, target, size, side], got {action!r}")
    if ints.shape != nvec.shape or np.any(ints < 0) or np.any(ints >= nvec):
        raise InvalidActionError(
            f"{who}action must be 4 integers with 0 <= a[i] < {nvec.tolist()} ([kind, target, size, side]), "
            f"got {action!r}; sample one with env.action_space.sample()"
        )
    return ints


def check_numeric_actions(actions: object, nvec: np.ndarray, num_worlds: int) -> np.ndarray:
    """A batch of numeric-face actions as int64 (num_worlds, 4), by the single env's rules row by row.

    The check of the vector envs (`RLAIFVectorEnv`, `RLAIFSB3VecEnv`): what `SyncVectorEnv` or SB3's
    `DummyVecEnv` would pass to each sub-env's `step` is accepted (lists, integral floats, bools), and
    what a sub-env would refuse is refused for the whole batch before any world moves.

    Raises:
        InvalidActionError: not (num_worlds, 4) integers (a float with a fraction, a string, another
            shape) or one out of range.
    """
    ints = integral_array(actions)
    shaped = ints is not None and ints.shape == (num_worlds, len(nvec))
    bad = np.nonzero(((ints < 0) | (ints >= nvec)).any(axis=1))[0] if shaped else None
    if not shaped or len(bad):
        got = (f"world {bad[0]} sent {ints[bad[0]].tolist()} ({len(bad)} world(s) out of range)" if shaped else
               f"shape {np.shape(ints) if ints is not None else np.asarray(actions, dtype=object).shape}"
               + ("" if ints is not None else " of non-integers"))
        raise InvalidActionError(
            f"actions must be integers of shape ({num_worlds}, {len(nvec)}) with 0 <= a[:, i] < {nvec.tolist()} "
            f"([kind, target, size, side] per world), got {got}; sample a batch with envs.action_space.sample()")
    return ints


def integral_array(values: object) -> np.ndarray | None:
    """`values` as an int64 array if every entry is a whole number (ints, bools, integral floats), else None.

    What a numeric action may be: an integral float is the integer it equals (Gymnasium's and SB3's
    wrappers pass floats), a fraction, NaN, text or an integer beyond int64 is not an action."""
    try:
        arr = np.asarray(values)
        if arr.dtype.kind in "iub":
            return arr.astype(np.int64)
        if arr.dtype.kind not in "fO" or (arr.dtype.kind == "f" and not np.all(np.isfinite(arr))):
            return None  # text, or a NaN / inf (whose cast numpy warns about)
        ints = arr.astype(np.int64)
        return ints if bool(np.all(ints == arr)) else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond int64
        return None


def world_params(config: RLAIFEnvConfig) -> sim.WorldParams:
    """The sim parameters named in the config (same names, same meaning)."""
    return sim.WorldParams(**{name: getattr(config, name) for name in sim.WorldParams.field_names()})


def compiled_backend(backend: str) -> bool:
    """Whether a config's `backend` runs the world's rules compiled (numba) rather than as Python: "numba", and
    "auto" where numba imports. Raises DependencyNotInstalled for "numba" without numba."""
    if backend == "numpy":
        return False
    if not sim_rules.available():
        if backend == "numba":
            raise DependencyNotInstalled('backend="numba" needs numba: pip install numba (or use backend="numpy")')
        return False
    return True


def _select_backend(backend: str):
    """The world-step and observation-encoding functions for a config's `backend`, and whether they are compiled.

    Both run the world's one text of its rules (`sim.rules`): compiled by numba, or as Python for "numpy" (and for
    "auto" where numba is missing)."""
    if not compiled_backend(backend):
        return functools.partial(sim_rules.step, compiled=False), encode_observations, False
    from ..encoding import fast as encoding_fast

    return sim_rules.step, encoding_fast.encode_observations_fast, True


@dataclass
class CoreStep:
    """One batched transition."""

    observation: np.ndarray  # (B, D) float32
    reward: np.ndarray  # (B,) float64
    terminated: np.ndarray  # (B,) bool: bankruptcy
    truncated: np.ndarray  # (B,) bool: the world reached num_ticks
    components: dict[str, np.ndarray]  # name -> (B,)
    outcome: sim.StepOutcome


class RLAIFCore:
    """Holds B worlds and turns integer actions into observations, rewards and flags."""

    def __init__(self, config: RLAIFEnvConfig, num_worlds: int, *, fused: bool = True) -> None:
        """fused=False keeps the compiled backend off its fused step (the same bits, one compiled call per stage): for
        a caller that should not wait for that kernel's compile, such as a report replaying baselines."""
        self.config = config
        self.params = world_params(config)
        self.layout = feature_layout(self.params)
        self.nvec = action_nvec(self.params)
        self.num_worlds = num_worlds
        self.archetype = check_archetype(config.archetype)
        self.reward_fn = RewardFunction.from_config(config, self.archetype)
        self.weights = self.reward_fn.weights
        self._sim_step, self._encode, self.compiled = _select_backend(config.backend)
        self.fused = None
        if self.compiled and fused:
            from . import fused as fused_step  # imports numba: only for the compiled backend

            if fused_step.supports(self.reward_fn, self.archetype):
                self.fused = fused_step.FusedStep(self.params, self.layout, self.reward_fn, self.nvec,
                                             config.numeric_perp_leverage, num_worlds)
        self.state: sim.WorldState | None = None

    def reset(self, keys: np.ndarray, *, compiled: bool | None = None) -> np.ndarray:
        """Start fresh worlds from their keys; returns the observations. compiled: reset's own backend (None: the
        core's)."""
        self.state = self.fresh_worlds(keys, compiled=compiled)
        return self.observe()

    def fresh_worlds(self, keys: np.ndarray, *, compiled: bool | None = None) -> sim.WorldState:
        """New worlds from their keys (uint64, shape (n,)), reset by this core's backend (or `compiled`'s); the core
        keeps none."""
        return sim.reset(self.params, keys, compiled=self.compiled if compiled is None else compiled and self.compiled)

    # -- state fork (GRPO groups from one mid-episode state) ------------------------------------

    def get_state(self) -> sim.WorldState:
        """A deep copy of every world now; `set_state` restores it (the core holds no other episode data)."""
        if self.state is None:
            raise ResetNeeded("call reset() before get_state()")
        return self.state.copy()

    def set_state(self, state: sim.WorldState) -> None:
        """Continue from `state` (copied, so one snapshot can be restored any number of times)."""
        if state.batch_size != self.num_worlds:
            raise ValueError(f"set_state expects a state of {self.num_worlds} world(s), got {state.batch_size}; "
                             "use fork(k, world) to branch one world into several")
        self.state = state.copy()

    def fork(self, k: int, world: int = 0) -> RLAIFCore:
        """A new core of `k` worlds, each an exact copy of world `world` of this one at its current tick.

        The branches step as one batch: under identical actions they stay bit-identical (every random
        draw is keyed by the world key and the tick, both copied), under different ones they diverge.
        This core is not touched.
        """
        if k < 1:
            raise ValueError(f"fork needs k >= 1 branches, got {k}")
        if self.state is None:
            raise ResetNeeded("call reset() before fork()")
        if not 0 <= world < self.num_worlds:
            raise ValueError(f"world must be in [0, {self.num_worlds}), got {world}")
        branch = RLAIFCore(self.config, num_worlds=k)
        branch.state = self.state.take(np.full(k, world))
        return branch

    def observe(self) -> np.ndarray:
        """Observations of every world, (B, D) float32."""
        return self.encode(self.state)

    def encode(self, state: sim.WorldState) -> np.ndarray:
        """Observations of `state`'s worlds with this core's encoder (numpy, or compiled with numba)."""
        return self._encode(state, self.params, self.layout)

    def step(self, actions: np.ndarray) -> CoreStep:
        """Apply integer actions of shape (B, 4) (already validated against the space).

        With the compiled backend and the skill reward this is one compiled call (`fused`); otherwise
        decode, world step, reward and encoding run one after another. Both give the same result.
        """
        if self.fused is not None:
            obs, out_f, out_i, out_b = self.fused.step(self.state, np.asarray(actions, np.int64))
            out = self.fused.outcome(out_f, out_i, out_b)
            truncated = (self.state.tick >= self.params.num_ticks) & ~out.bankrupt
            return CoreStep(obs, self.fused.reward_of(out_f), out.bankrupt.copy(), truncated,
                            self.fused.components_of(out_f), out)
        batch = decode_actions(actions, self.state, self.params, self.config.numeric_perp_leverage)
        return self.step_batch(batch)

    def step_batch(
        self,
        batch: sim.ActionBatch,
        judged: tuple[np.ndarray, np.ndarray] | None = None,
        post: Callable[[sim.StepOutcome], dict[str, np.ndarray]] | None = None,
    ) -> CoreStep:
        """Apply an `ActionBatch` (the text face builds these from canonical actions).

        Args:
            batch: one action per world.
            judged: the rule judge's (format score in [-1, 1], reasoning in [0, 1]) per world, for
                the text face; the reward function turns them into the format and reasoning
                components.
            post: computes components that need the transition's result (e.g. behavior).
        """
        truth = self.reward_fn.mark == "truth"
        phi0 = sim.truth_potential(self.state, self.params) if truth else None
        out = self._sim_step(self.state, batch, self.params)
        fmt, reasoning = judged if judged is not None else (None, None)
        behavior = post(out)["behavior"] if post else None
        gain = sim.truth_potential(self.state, self.params) - phi0 if truth else None
        components = self.reward_fn.components(out, format_score=fmt, reasoning=reasoning, behavior=behavior,
                                               truth_gain=gain)
        reward = self.reward_fn.combine(components, out.bankrupt)
        truncated = (self.state.tick >= self.params.num_ticks) & ~out.bankrupt
        return CoreStep(self.observe(), reward, out.bankrupt.copy(), truncated, components, out)
