"""Stable-Baselines3 integration: a native VecEnv, a metrics callback and a baseline comparison.

* `RLAIFSB3VecEnv`: N worlds of `RLAIF-v0` stepped as one numpy batch on the env core, with SB3's
  own autoreset convention (the step that ends an episode returns the next episode's first
  observation, the last one goes to `info["terminal_observation"]`). World i is exactly the episode
  `DummyVecEnv` sub-env i runs (same seeds, same later resets; a test checks it), only faster: one
  batched world step instead of N.
* `JointActionPolicy`: the policy for the env's own `MultiDiscrete([K, T, 5, 2])` space. SB3's
  default samples kind, target, size and side from independent heads and learns nothing here
  (PPO ends at the passive agent's level); this one chooses what to do (kind, target, side) as
  one categorical, then a size per kind, and trades at a profit (docs/training.md).
* Action masks: `RLAIFSB3VecEnv.action_masks()` (and `env_method("action_masks")`, as on `DummyVecEnv`) says
  which actions the world would accept, for sb3-contrib's `MaskablePPO` (per-dimension masks for its own
  MultiDiscrete policy, exact ones for a Discrete table or, with `mask_layout="joint"`, for
  `MaskableJointActionPolicy` with `JointMaskRolloutBuffer`).
* `RLAIFMetricsCallback`: logs every reward component and the trading metrics of each finished
  episode to the SB3 logger (so to stdout, CSV and TensorBoard, whichever formats are configured).
* `evaluate_against_baselines` / `comparison_table`: mean episode PnL of a trained model on
  held-out seeds next to `RandomAgent`, `PassiveAgent` and `InformedAgent`, as a Markdown table.

Needs the `[sb3]` extra (stable-baselines3; sb3-contrib for MaskablePPO and TensorBoard for the
callback's event files, which the extra installs too).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from .. import sim
from ..agents import InformedAgent, PassiveAgent, RandomAgent
from ..config import RLAIFEnvConfig
from ..encoding import action as encoding_action
from ..encoding import mask as _mask
from ..envs import EpisodeStats, RLAIFCore, evaluate_policy, world_params
from ..envs.behavior import BatchBehavior
from ..envs.core import check_numeric_actions, check_reset_options, integral_array
from ..envs.glue import reset_infos, step_feedback, step_info
from ..envs.rlaif_env import RLAIFEnv
from ..errors import DependencyNotInstalled, InvalidActionError, ResetNeeded, install_hint

try:
    import torch as th
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.distributions import CategoricalDistribution
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled(
        "rlaif_gym.integrations.sb3 needs stable-baselines3: " + install_hint("sb3")
    ) from exc
try:
    from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
except ImportError:  # pragma: no cover - the [sb3] extra installs sb3-contrib
    MaskableActorCriticPolicy = MaskableRolloutBuffer = None

__all__ = [
    "ACTION_KINDS",
    "COMPACT_ACTIONS",
    "EASY_CONFIG",
    "JointActionPolicy",
    "JointMaskRolloutBuffer",
    "MaskableJointActionPolicy",
    "RLAIFMetricsCallback",
    "RLAIFSB3VecEnv",
    "SB3BatchPolicy",
    "canonical_actions",
    "comparison_table",
    "discrete_action_table",
    "evaluate_against_baselines",
]

EASY_CONFIG: dict[str, Any] = {
    "num_ticks": 48,
    "num_markets": 2,
    "market_duration_min": 6,
    "market_duration_max": 12,
    "news_rate": 1.0,
    "npc_trade_rate": 0.2,
}
"""A documented easier world for short CPU training budgets (the SB3 test and `--preset easy`).

Same rules, denser feedback: 48-tick episodes; 2 markets that resolve 6-12 ticks after they open
(so a trade's payoff arrives within the GAE horizon instead of after up to 72 ticks); a news item
every tick; NPCs trading 20% of ticks instead of 50% (less noise between the news and the
resolution). With the `COMPACT_ACTIONS` action set, PPO beats the random and passive baselines
after about 100k steps (under a minute on one core). The default world needs about 1M steps.
"""
COMPACT_ACTIONS: dict[str, Any] = {"buy_sizes": [2], "sell_sizes": [4], "perps": False}
"""`discrete_action_table` arguments of a compact action set: buy 5% of equity per order, sell a
whole holding, no perps (wait, buy YES/NO and sell YES/NO per market, join a group chat)."""

ACTION_KINDS = tuple(kind.name.lower() for kind in encoding_action.ACTION_KINDS)
"""Names of the numeric face's action kinds (index 0 of a MultiDiscrete action), in its order."""
_TRADE_KINDS = tuple(i for i, spec in enumerate(encoding_action.NUMERIC_SPECS) if spec.trade)
"""The numeric kinds that trade (`sim.ActionSpec.trade`)."""


def discrete_action_table(params: sim.WorldParams, *, buy_sizes: Sequence[int] = range(5),
                          sell_sizes: Sequence[int] = range(5), perps: bool = True, groups: bool = True) -> np.ndarray:
    """Distinct executable numeric actions as rows of [kind, target, size, side], shape (K, 4).

    One row per kind and each entry it reads (`encoding.action.KIND_READS`), in the kinds' order: wait
    once; buy (per market x `buy_sizes` x side), sell (per market x `sell_sizes` x side), open (per
    perp x `buy_sizes` x side) and close (per perp) when `perps`, and join (per group) when `groups`.
    A kind sized by equity takes `buy_sizes`, one sized by its holding `sell_sizes`. With the
    defaults (117 rows in the default world) `Discrete(K)` over these rows offers exactly the
    MultiDiscrete face's actions, without its duplicates (a wait with any target) and as one joint
    choice. Size indices index `BUY_FRACTIONS` / `SELL_FRACTIONS`.
    """
    counts = {None: 1, "market": params.num_markets, "perp": params.num_perps if perps else 0,
              "group": params.num_groups if groups else 0}
    rows = []
    for kind, spec in enumerate(encoding_action.NUMERIC_SPECS):
        sizes = (0,) if spec.numeric_size is None else sell_sizes if spec.numeric_size == "held" else buy_sizes
        sides = (0, 1) if spec.numeric_side else (0,)
        rows += [(kind, t, int(size), side) for t in range(counts[spec.numeric_target])
                 for size in sizes for side in sides]
    table = np.array(rows, dtype=np.int64)
    if np.any(table[:, 2] >= 5) or np.any(table[:, 2] < 0):
        raise ValueError(f"size indices must be in [0, 5), got buy_sizes={list(buy_sizes)}, "
                         f"sell_sizes={list(sell_sizes)}")
    return table


def canonical_actions(actions: np.ndarray) -> np.ndarray:
    """MultiDiscrete actions with the entries their kind ignores zeroed, shape (..., 4).

    A kind ignores the entries it does not read (`encoding.action.KIND_READS`): a wait ignores
    target, size and side; close_perp and join_group ignore size and side. Two actions with the
    same canonical form do the same thing in every state.
    """
    a = np.array(actions, dtype=np.int64)
    reads = encoding_action.KIND_READS[a[..., 0]]  # (..., 3): target, size, side
    a[..., 1:] = np.where(reads, a[..., 1:], 0)
    return a


_SIZED = tuple(int(k) for k in np.nonzero(encoding_action.KIND_READS[:, 1])[0])
"""Kinds that read the size bucket (buy_prediction, sell_prediction, open_perp); each has its own size head."""
_NEG = -1e8  # the logit of a masked-out outcome (sb3-contrib's value): probability 0, no NaN in the entropy


class _FactoredCategorical(CategoricalDistribution):
    """What to do, then how much: a categorical over (kind, target, side), and a size head per sized kind.

    Sampled and scored as MultiDiscrete rows `[kind, target, size, side]`: log p(action) = log p(kind,
    target, side) + log p(size | kind) (+ 0 for kinds without a size). `apply_masking` takes one
    bool per MultiDiscrete action (`mask_layout="joint"` of RLAIFSB3VecEnv) and masks both levels
    exactly: a choice is allowed iff one of its sizes is, and the size given the choice.
    """

    def __init__(self, table: np.ndarray, nvec: np.ndarray) -> None:
        nvec = np.asarray(nvec, dtype=np.int64)
        shape, n_sizes = tuple(int(n) for n in nvec), int(nvec[2])
        what = canonical_actions(table)
        sizes = what[:, 2].copy()
        what[:, 2] = 0
        choices, first, of_row = np.unique(what, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(first)  # the choices in the table's order
        choices, of_row = choices[order], np.argsort(order)[of_row.reshape(-1)]
        super().__init__(len(choices) + len(_SIZED) * n_sizes)
        self.nvec, self.n_choices, self.n_sizes = nvec, len(choices), n_sizes
        head = np.array([_SIZED.index(k) if k in _SIZED else -1 for k in choices[:, 0]])
        allowed = np.zeros((len(choices), n_sizes), dtype=bool)  # the sizes the table has for each choice
        allowed[of_row, sizes] = True
        # Every MultiDiscrete action -> its choice (-1 where its canonical form is not in the table).
        grid = np.stack(np.unravel_index(np.arange(int(np.prod(nvec))), shape), axis=1)
        canon = canonical_actions(grid)
        row_of = np.full(int(np.prod(nvec)), -1, dtype=np.int64)
        row_of[np.ravel_multi_index(tuple(canonical_actions(table).T), shape)] = of_row
        choice_of = row_of[np.ravel_multi_index(tuple(canon.T), shape)]
        # Where each (choice, size) sits in the joint mask (kinds without a size: size 0).
        z = np.where(head[:, None] >= 0, np.arange(n_sizes)[None, :], 0)
        joint = np.ravel_multi_index((choices[:, 0, None], choices[:, 1, None], z, choices[:, 3, None]), shape)
        self.choices = th.as_tensor(choices, dtype=th.long)
        self.head = th.as_tensor(head, dtype=th.long)
        self.allowed = th.as_tensor(allowed)
        self.choice_of = th.as_tensor(choice_of)
        self.joint = th.as_tensor(joint, dtype=th.long)
        self.strides = th.as_tensor(np.cumprod([1, *nvec[:0:-1].tolist()])[::-1].copy(), dtype=th.long)
        self._logits: th.Tensor | None = None
        self._masks: th.Tensor | None = None

    def _to(self, device: th.device) -> None:
        if self.choices.device != device:
            for name in ("choices", "head", "allowed", "choice_of", "joint", "strides"):
                setattr(self, name, getattr(self, name).to(device))

    def proba_distribution(self, action_logits: th.Tensor) -> _FactoredCategorical:
        self._to(action_logits.device)
        self._logits, self._masks = action_logits, None
        self._build_distribution()
        return self

    def apply_masking(self, masks) -> None:
        """Masks of the joint layout (B, prod(nvec)), or None to remove them."""
        if masks is None:
            self._masks = None
        else:
            m = th.as_tensor(masks, dtype=th.bool, device=self._logits.device).reshape(len(self._logits), -1)
            if m.shape[1] != int(np.prod(self.nvec)):
                raise ValueError(f"JointActionPolicy needs one mask entry per MultiDiscrete action "
                                 f"({int(np.prod(self.nvec))}: RLAIFSB3VecEnv(mask_layout='joint')), got {m.shape[1]}")
            self._masks = m[:, self.joint]  # (B, C, S)
        self._build_distribution()

    def _build_distribution(self) -> None:
        logits = self._logits
        b = len(logits)
        what = logits[:, :self.n_choices]
        sizes = logits[:, self.n_choices:].reshape(b, len(_SIZED), self.n_sizes)
        per_choice = sizes[:, self.head.clamp(min=0)]  # (B, C, S)
        per_choice = th.where(self.head[None, :, None] >= 0, per_choice, th.zeros_like(per_choice))
        ok = self.allowed[None].expand(b, -1, -1)
        if self._masks is not None:
            ok = ok & self._masks
        what = th.where(ok.any(dim=2), what, th.full_like(what, _NEG))
        self.distribution = th.distributions.Categorical(logits=what)
        self.size_logp = th.log_softmax(th.where(ok, per_choice, th.full_like(per_choice, _NEG)), dim=2)

    def _index(self, actions: th.Tensor) -> th.Tensor:
        flat = (actions.long().reshape(-1, len(self.strides)) * self.strides).sum(dim=1)
        return self.choice_of[flat]

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        a = actions.long().reshape(-1, len(self.strides))
        c = self._index(a)
        cc = c.clamp(min=0)
        z = th.where(self.head[cc] >= 0, a[:, 2], th.zeros_like(a[:, 2]))
        rows = th.arange(len(a), device=a.device)
        logp = self.distribution.log_prob(cc) + self.size_logp[rows, cc, z]
        return th.where(c >= 0, logp, th.full_like(logp, -th.inf))

    def entropy(self) -> th.Tensor:
        p_size = self.size_logp.exp()
        h_size = -(p_size * self.size_logp).sum(dim=2)  # (B, C)
        return self.distribution.entropy() + (self.distribution.probs * h_size).sum(dim=1)

    def _rows(self, c: th.Tensor, z: th.Tensor) -> th.Tensor:
        rows = self.choices[c].clone()
        rows[:, 2] = z
        return rows

    def sample(self) -> th.Tensor:
        c = self.distribution.sample()
        rows = th.arange(len(c), device=c.device)
        z = th.distributions.Categorical(logits=self.size_logp[rows, c]).sample()
        return self._rows(c, z)

    def mode(self) -> th.Tensor:
        c = th.argmax(self.distribution.probs, dim=1)
        rows = th.arange(len(c), device=c.device)
        return self._rows(c, th.argmax(self.size_logp[rows, c], dim=1))


class _JointTable:
    """What `JointActionPolicy` and `MaskableJointActionPolicy` share: the action table and the factored
    distribution over it, in place of the per-dimension MultiDiscrete heads."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule, *,
                 action_table: np.ndarray | Sequence[Sequence[int]] | None = None, **kwargs: Any) -> None:
        self.action_table = _check_table(action_space, action_table)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build(self, lr_schedule) -> None:
        self.action_dist = _FactoredCategorical(self.action_table, np.asarray(self.action_space.nvec))
        super()._build(lr_schedule)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["action_table"] = self.action_table.tolist()
        return data


class JointActionPolicy(_JointTable, ActorCriticPolicy):
    """An actor-critic MLP for the env's own `MultiDiscrete([K, T, 5, 2])` space: what to do, then how much.

    SB3's default policy for a MultiDiscrete space samples kind, target, size and side from four
    independent heads, so a "buy" is scored by the average of every market and side it happened
    to be paired with (mostly the wrong ones), and PPO learns to stop buying (docs/training.md).
    This policy keeps the env's space (the actions it sends and stores are `[kind, target, size,
    side]` rows) but factors them as the decision is made: one categorical over what to do, the
    distinct (kind, target, side) of `action_table` (buy YES in market 2, close perp 0, join group
    1, wait, ...), then the size from a head of that kind (buy, sell and open_perp each have one,
    shared across markets and sides). log p(action) = log p(kind, target, side) + log p(size | kind).

    Args:
        action_table: the actions (K, 4) it chooses among, distinct canonical rows (`canonical_actions`):
            `discrete_action_table(env.params)` gives every distinct action of the env's world (in the
            default world 117: 29 choices of what to do, 5 sizes for each buy, sell and open).
            None: every canonical action of the space, each target for each kind (the extra rows
            are perps and groups the world does not have, which it refuses).
        **kwargs: `ActorCriticPolicy` arguments (`net_arch`, `activation_fn`, ...).
    """



def _check_table(action_space: spaces.Space, action_table) -> np.ndarray:
    if not isinstance(action_space, spaces.MultiDiscrete):
        raise ValueError(f"JointActionPolicy is for the MultiDiscrete face, got {action_space}")
    nvec = np.asarray(action_space.nvec, dtype=np.int64)
    table = _every_action(nvec) if action_table is None else np.asarray(action_table, dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != len(nvec) or np.any(table < 0) or np.any(table >= nvec):
        raise ValueError(f"action_table must be rows of {len(nvec)} ints with 0 <= row[i] < {nvec.tolist()}, "
                         f"got shape {table.shape}")
    canon = canonical_actions(table)
    if len({tuple(r) for r in canon.tolist()}) != len(table) or not np.array_equal(canon, table):
        raise ValueError("action_table rows must be distinct canonical actions (see canonical_actions)")
    return table


if MaskableActorCriticPolicy is not None:

    class MaskableJointActionPolicy(_JointTable, MaskableActorCriticPolicy):
        """`JointActionPolicy` for sb3-contrib's `MaskablePPO`, with exact masks.

        Needs the env's joint mask layout, one entry per MultiDiscrete action
        (`RLAIFSB3VecEnv(mask_layout="joint")`) and `JointMaskRolloutBuffer` (MaskablePPO's own
        buffer stores the per-dimension layout): `masked_ppo` builds the three together.
        """

    class JointMaskRolloutBuffer(MaskableRolloutBuffer):
        """MaskablePPO's rollout buffer with one mask entry per MultiDiscrete action (the joint layout)."""

        def reset(self) -> None:
            super().reset()
            self.mask_dims = int(np.prod(self.action_space.nvec))
            self.action_masks = np.ones((self.buffer_size, self.n_envs, self.mask_dims), dtype=np.float32)


def __getattr__(name: str):
    if name in ("MaskableJointActionPolicy", "JointMaskRolloutBuffer"):
        raise DependencyNotInstalled(f"{name} needs sb3-contrib (MaskablePPO): {install_hint('sb3')}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _every_action(nvec: np.ndarray) -> np.ndarray:
    """Every distinct canonical action of a MultiDiscrete([K, T, 5, 2]) space, each target valid for each kind."""
    grid = np.stack(np.meshgrid(*[np.arange(int(n)) for n in nvec], indexing="ij"), axis=-1).reshape(-1, len(nvec))
    return np.unique(canonical_actions(grid), axis=0)


class RLAIFSB3VecEnv(VecEnv):
    """`RLAIF-v0` as an SB3 VecEnv over one batched core (no per-env Python objects, no processes).

    Args:
        num_envs: number of worlds.
        config: an `RLAIFEnvConfig`, a mapping or None; `overrides` are config fields.
        seed: seeds worlds `seed + i` at the first reset, as `make_vec_env(..., seed=seed)` does.
        action_mode: `"multidiscrete"` (the env's own `MultiDiscrete([K, T, 5, 2])`; train it with
            `JointActionPolicy`, not SB3's default MultiDiscrete policy, whose four independent
            heads learn nothing here) or `"discrete"` (`Discrete(K)` over the rows of `action_table`:
            the same actions as one joint choice).
        action_table: the rows of the discrete mode (default `discrete_action_table(params)`, every
            action); pass a subset, e.g. `discrete_action_table(params, buy_sizes=[3], sell_sizes=[4])`.
        mask_layout: the multidiscrete mode's `action_masks()`: `"dims"` (per-dimension masks, K + T +
            5 + 2 per world, sb3-contrib's MultiDiscrete layout) or `"joint"` (one exact entry per
            MultiDiscrete action, K x T x 5 x 2, for `MaskableJointActionPolicy`). The discrete mode's
            masks are always exact, one entry per table row.

    Infos are `DummyVecEnv`'s over `gym.make("RLAIF-v0")`, key for key and value for value (a test compares
    them): per world the single env's step keys (`reward_components`, `pnl_delta`, `equity`, `cash`,
    `feedback`, `tick`, `fill`), `TimeLimit.truncated` and, at an episode's end, `terminal_observation`;
    `reset_infos` hold what the single env's `reset` returns (`equity`, `cash`, `tick`), after `reset()` and,
    for a world that auto-reset, after that step. Like the single env's, no info carries an action mask:
    `action_masks()` computes them when asked. Wrap it in `VecMonitor` for `info["episode"]`. With an `archetype`, each
    world keeps its own behaviour tracker (the `behavior` component, as `make_vec_env` would pay it).
    """

    def __init__(self, num_envs: int = 8, config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *,
                 seed: int | None = None, action_mode: str = "multidiscrete", action_table: np.ndarray | None = None,
                 mask_layout: str = "dims", **overrides: Any) -> None:
        if mask_layout not in ("dims", "joint"):
            raise ValueError(f"mask_layout must be 'dims' or 'joint', got {mask_layout!r}")
        self.mask_layout = mask_layout
        self.config = RLAIFEnvConfig.from_any(config, **overrides)
        self.render_mode = None
        self.core = RLAIFCore(self.config, num_worlds=int(num_envs))
        self._behavior = BatchBehavior(self.core.archetype, int(num_envs)) if self.core.archetype else None
        self.params = self.core.params
        layout = self.core.layout
        if action_mode == "multidiscrete":
            self.action_table: np.ndarray | None = None
            action_space: spaces.Space = spaces.MultiDiscrete(self.core.nvec)
        elif action_mode == "discrete":
            table = discrete_action_table(self.params) if action_table is None else np.asarray(action_table, np.int64)
            if table.ndim != 2 or table.shape[1] != 4 or np.any(table < 0) or np.any(table >= self.core.nvec):
                raise ValueError(f"action_table must be rows of 4 ints with 0 <= row[i] < {self.core.nvec.tolist()}, "
                                 f"got shape {table.shape}")
            self.action_table = table
            action_space = spaces.Discrete(len(self.action_table))
        else:
            raise ValueError(f"action_mode must be 'multidiscrete' or 'discrete', got {action_mode!r}")
        self.action_mode = action_mode
        super().__init__(int(num_envs), spaces.Box(layout.low, layout.high, dtype=np.float32), action_space)
        self._rngs: list[np.random.Generator | None] = [None] * self.num_envs
        self._views: dict[int, RLAIFEnv] = {}  # single envs that env_method lends worlds to
        self._actions: np.ndarray | None = None
        self._masks: np.ndarray | None = None
        if seed is not None:
            self.seed(seed)

    # -- VecEnv API -------------------------------------------------------------------------

    def _keys(self, worlds: Sequence[int], seeds: Sequence[int | None]) -> np.ndarray:
        """Keys for new episodes of `worlds`, drawn like `RLAIFEnv.reset(seed=...)` would."""
        for i, s in zip(worlds, seeds, strict=True):
            if s is not None or self._rngs[i] is None:
                self._rngs[i] = seeding.np_random(s)[0]
        return np.concatenate([sim.draw_keys(self._rngs[i], 1) for i in worlds])

    def reset(self) -> np.ndarray:
        """Start a new episode in every world (seeds from `seed()`, then each world's generator).

        Options from `set_options` are checked as each `RLAIF-v0` sub-env of `DummyVecEnv` would check them:
        any non-empty one raises `ConfigError` (the env takes none; see `check_reset_options`).
        """
        for options in self._options:
            check_reset_options(options or None)
        obs = self.core.reset(self._keys(range(self.num_envs), self._seeds))
        if self._behavior is not None:
            self._behavior.reset()
        self._masks = None
        self.reset_infos = reset_infos(self.core.state, self.params)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions of the next step."""
        if self.action_table is not None:
            k = len(self.action_table)
            rows = integral_array(actions)
            if rows is None or rows.shape != (self.num_envs,) or np.any(rows < 0) or np.any(rows >= k):
                raise InvalidActionError(f"actions must be integers of shape ({self.num_envs},) with 0 <= a < {k} "
                                         f"(rows of action_table; action_mode='discrete'), got {actions!r}")
            self._actions = self.action_table[rows]
        else:  # what DummyVecEnv's sub-envs accept: integers, integral floats; a fraction is refused, not cut
            self._actions = check_numeric_actions(actions, self.core.nvec, self.num_envs)

    def step_wait(self):
        """Step every world; worlds whose episode ended are reset at once (SB3's convention)."""
        if self.core.state is None or self._actions is None:
            raise ResetNeeded("call reset() and step_async() before step_wait()")
        res = self._behavior.step(self.core, self._actions) if self._behavior is not None else \
            self.core.step(self._actions)
        self._actions = None
        out, state = res.outcome, self.core.state
        obs = res.observation
        done = res.terminated | res.truncated
        infos: list[dict[str, Any]] = []
        for i in range(self.num_envs):
            info = step_info(res.components, out, state, step_feedback(out, i), i)
            info["TimeLimit.truncated"] = bool(res.truncated[i] and not res.terminated[i])
            infos.append(info)
        if done.any():
            idx = np.nonzero(done)[0]
            fresh = self.core.fresh_worlds(self._keys(idx, [None] * len(idx)))
            state.put(idx, fresh)
            if self._behavior is not None:
                self._behavior.reset(idx)
            new_obs = self.core.observe()
            for i in idx:
                infos[i]["terminal_observation"] = obs[i]
            obs = np.where(done[:, None], new_obs, obs)
        self._masks = None  # computed when asked (`action_masks()`, as MaskablePPO asks), not on every step
        if done.any():  # as DummyVecEnv keeps each auto-reset's info (SB3's VecEnv contract)
            for i, info in zip(idx, reset_infos(state, self.params, idx), strict=True):
                self.reset_infos[i] = info
        return obs, res.reward.astype(np.float32), done, infos

    def action_masks(self) -> np.ndarray:
        """Which actions each world would accept now, bool (num_envs, mask size), one row per world.

        `action_mode="multidiscrete"`: per-dimension masks, K + T + 5 + 2 per world (kind, target,
        size, side), the layout sb3-contrib's `MaskablePPO` takes for a `MultiDiscrete` space;
        `"discrete"`: one entry per row of `action_table`, exact (True iff the world accepts that row).
        The masks are of the state the next action applies to (for a world that just reset, its new
        episode's first state), computed at the first call after a step or reset and kept until the next.
        """
        if self._masks is None:
            if self.core.state is None:
                raise ResetNeeded("call reset() before action_masks()")
            self._masks = _mask.action_masks(self.core.state, self.params, self.config.numeric_perp_leverage,
                                             self.action_table, self.mask_layout)
        return self._masks

    def close(self) -> None:
        """Nothing to release: the worlds are arrays."""

    def _indices(self, indices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        return [indices] if isinstance(indices, int) else list(indices)

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        """Attributes are shared by all worlds (config, params, render_mode, ...)."""
        return [getattr(self, attr_name) for _ in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        """Set a shared attribute (the worlds have no per-world Python objects)."""
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        """Call an `RLAIF-v0` method on worlds `indices`, as `DummyVecEnv` calls it on its sub-envs.

        Each world is lent to a single `RLAIFEnv` for the call (its state, generator and behaviour
        tracker), and what the call changed is written back, so `env_method("reset", seed=7, indices=2)`
        or `env_method("get_state")` act on world 2 as on `DummyVecEnv`'s sub-env 2. The world's
        history is not kept, so `render` draws the current tick only. `action_masks` reads the batch.
        """
        worlds = self._indices(indices)
        if method_name == "action_masks" and not method_args and not method_kwargs:
            return list(self.action_masks()[worlds])
        if not callable(getattr(RLAIFEnv, method_name, None)) or method_name.startswith("__"):
            raise AttributeError(f"RLAIF-v0 has no method {method_name!r} (env_method calls RLAIFEnv's methods: "
                                 "reset, step, get_state, set_state, fork, action_masks, render)")
        results = []
        for i in worlds:
            env = self._lend(i)
            try:
                results.append(getattr(env, method_name)(*method_args, **method_kwargs))
            finally:
                self._take_back(i, env)
        return results

    def _lend(self, world: int) -> RLAIFEnv:
        """A single env holding world `world` (state, generator, behaviour tracker); see `env_method`."""
        if self.core.state is None:  # DummyVecEnv's sub-envs exist before a reset; these worlds do not
            raise ResetNeeded("call reset() on the VecEnv before env_method(...): its worlds start there")
        env = self._views.get(world)
        if env is None:
            env = self._views[world] = RLAIFEnv(self.config)
        env._core.state = self.core.state.take(np.array([world]))
        if self._rngs[world] is not None:
            env.np_random = self._rngs[world]
        env._feedback, env._done, env._prices, env._equity = None, False, [], []
        if self._behavior is not None:
            env._behavior.trackers = [self._behavior.trackers[world]]
        return env

    def _take_back(self, world: int, env: RLAIFEnv) -> None:
        """Write what a call on the lent env changed back into world `world`."""
        self.core.state.put(np.array([world]), env._core.state)
        if env._np_random is not None:
            self._rngs[world] = env._np_random
        if self._behavior is not None:
            self._behavior.trackers[world] = env._behavior.trackers[0]
        self._masks = None

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        """The worlds are never wrapped."""
        return [False for _ in self._indices(indices)]


@dataclass
class _Episode:
    """Running sums of one world's episode."""

    components: dict[str, float] = field(default_factory=dict)
    pnl: float = 0.0
    reward: float = 0.0
    length: int = 0
    trades: int = 0
    failed: int = 0
    kinds: np.ndarray = field(default_factory=lambda: np.zeros(len(ACTION_KINDS)))
    start_equity: float | None = None
    peak: float = 0.0
    max_drawdown: float = 0.0
    pnl_steps: list[float] = field(default_factory=list)


class RLAIFMetricsCallback(BaseCallback):
    """Log each finished episode's reward components and trading metrics to the SB3 logger.

    Works with any VecEnv of `RLAIF-v0` (`make_vec_env`, `RLAIFSB3VecEnv`) and any algorithm that
    exposes `actions` to callbacks (PPO, A2C, DQN, ...). Every key is the mean over the episodes
    that ended since the last dump, under `rlaif/`:

    | key | meaning |
    |---|---|
    | `rlaif/episode_pnl` | final equity minus starting equity, USD |
    | `rlaif/episode_return`, `rlaif/episode_length` | sum of rewards, steps |
    | `rlaif/reward_<component>` | episode sum of each reward component (pnl, risk, ...) |
    | `rlaif/trades` | successful buy/sell/open/close actions per episode |
    | `rlaif/failed_action_rate` | share of steps whose action the world refused |
    | `rlaif/action_<kind>` | share of steps with each action kind |
    | `rlaif/max_drawdown` | largest fall of equity from its running peak, fraction of the peak |
    | `rlaif/sharpe` | mean / std of per-step pnl_delta x sqrt(steps) (0 when flat) |
    | `rlaif/win_rate` | share of steps with pnl_delta > 0 among steps with pnl_delta != 0 |
    | `rlaif/bankrupt` | share of episodes that ended in bankruptcy |
    | `rlaif/final_cash_fraction` | cash / equity at the end |
    """

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self._episodes: list[_Episode] = []
        self._table: np.ndarray | None = None
        self.finished = 0

    def _on_training_start(self) -> None:
        self._episodes = [_Episode() for _ in range(self.training_env.num_envs)]
        env = self.training_env
        while not hasattr(env, "action_table") and hasattr(env, "venv"):  # through VecMonitor etc.
            env = env.venv
        self._table = getattr(env, "action_table", None)

    def _on_step(self) -> bool:
        infos = self.locals.get("infos", [])
        dones = self.locals.get("dones", np.zeros(len(infos), dtype=bool))
        actions = self.locals.get("actions")
        if actions is not None:
            actions = np.asarray(actions).reshape(len(infos), -1)
            if actions.shape[1] == 1 and self._table is not None:
                actions = self._table[actions[:, 0]]
        for i, info in enumerate(infos):
            if "reward_components" not in info:
                continue
            ep = self._episodes[i]
            for name, value in info["reward_components"].items():
                ep.components[name] = ep.components.get(name, 0.0) + value
            pnl = info["pnl_delta"]
            if ep.start_equity is None:
                ep.start_equity = info["equity"] - pnl
                ep.peak = ep.start_equity
            ep.pnl += pnl
            ep.pnl_steps.append(pnl)
            ep.reward += float(self.locals["rewards"][i]) if "rewards" in self.locals else 0.0
            ep.length += 1
            ok = info["feedback"]["success"]
            ep.failed += not ok
            if actions is not None:
                kind = int(actions[i, 0])
                ep.kinds[kind] += 1
                ep.trades += ok and kind in _TRADE_KINDS
            ep.peak = max(ep.peak, info["equity"])
            ep.max_drawdown = max(ep.max_drawdown, (ep.peak - info["equity"]) / max(ep.peak, 1e-9))
            if dones[i]:
                self._log(ep, info)
                self._episodes[i] = _Episode()
        return True

    def _log(self, ep: _Episode, info: dict[str, Any]) -> None:
        rec = self.logger.record_mean
        rec("rlaif/episode_pnl", ep.pnl)
        rec("rlaif/episode_return", ep.reward)
        rec("rlaif/episode_length", ep.length)
        for name, total in sorted(ep.components.items()):
            rec(f"rlaif/reward_{name}", total)
        rec("rlaif/trades", ep.trades)
        rec("rlaif/failed_action_rate", ep.failed / ep.length)
        if ep.kinds.sum():
            for name, count in zip(ACTION_KINDS, ep.kinds / ep.kinds.sum(), strict=True):
                rec(f"rlaif/action_{name}", float(count))
        rec("rlaif/max_drawdown", ep.max_drawdown)
        steps = np.asarray(ep.pnl_steps)
        std = steps.std()
        rec("rlaif/sharpe", float(steps.mean() / std * np.sqrt(len(steps))) if std > 0 else 0.0)
        moved = steps[steps != 0]
        rec("rlaif/win_rate", float((moved > 0).mean()) if len(moved) else 0.0)
        rec("rlaif/bankrupt", float(not info.get("TimeLimit.truncated", False) and info["equity"] < 0.01))
        rec("rlaif/final_cash_fraction", info["cash"] / max(info["equity"], 1e-9))
        self.finished += 1


class SB3BatchPolicy:
    """A trained SB3 model as a batch policy for `rlaif_gym.envs.evaluate_policy`.

    Args:
        model: any SB3 algorithm trained on `RLAIF-v0` observations (MultiDiscrete actions, or Discrete
            ones from `RLAIFSB3VecEnv(action_mode="discrete")`), sb3-contrib's `MaskablePPO` included.
        deterministic: take the most likely action (the usual evaluation setting).
        action_table: the rows behind Discrete actions (default: the model's env's `action_table`).
        config: the world's config, for the action masks of a model whose `predict` takes
            `action_masks` (MaskablePPO); default: the model's env's.
    """

    def __init__(self, model: Any, deterministic: bool = True, action_table: np.ndarray | None = None,
                 config: RLAIFEnvConfig | Mapping[str, Any] | None = None) -> None:
        self.model, self.deterministic = model, deterministic
        self.table = None
        if isinstance(model.action_space, spaces.Discrete):
            if action_table is None:
                env = model.get_env()
                if env is None:
                    raise ValueError("a model with a Discrete action space needs `action_table` (or its env) to map "
                                     "its actions back to the MultiDiscrete face")
                action_table = env.get_attr("action_table")[0]
            self.table = np.asarray(action_table, dtype=np.int64)
            if len(self.table) != model.action_space.n:
                raise ValueError(f"action_table has {len(self.table)} rows but the model has {model.action_space.n} "
                                 "actions")
        self.masked = "action_masks" in inspect.signature(model.predict).parameters
        self.config = None
        if self.masked:
            if config is None:
                env = model.get_env()
                if env is None:
                    raise ValueError("a masked model (MaskablePPO) needs `config` (or its env) to compute its masks")
                config = env.get_attr("config")[0]
            self.config = RLAIFEnvConfig.from_any(config)
            self.params = world_params(self.config)
            # A joint-action policy takes one mask entry per action; SB3's own heads one per entry of each dimension.
            self.layout = "joint" if isinstance(getattr(model.policy, "action_dist", None), _FactoredCategorical) \
                else "dims"

    def act(self, obs: np.ndarray, state: sim.WorldState | None = None) -> np.ndarray:
        """Actions (B, 4) for observations (B, D).

        A masked model (MaskablePPO) also gets the action masks of `state`, which read only the
        account and the public prices; no other model reads the state.
        """
        kwargs = {}
        if self.masked:
            if state is None:
                raise ValueError("a masked model (MaskablePPO) needs the world state for its action masks")
            kwargs["action_masks"] = _mask.action_masks(state, self.params, self.config.numeric_perp_leverage,
                                                        self.table, self.layout)
        actions, _ = self.model.predict(obs, deterministic=self.deterministic, **kwargs)
        actions = np.asarray(actions, dtype=np.int64)
        return self.table[actions] if self.table is not None else actions


def evaluate_against_baselines(model: Any, seeds: Sequence[int], config: RLAIFEnvConfig | Mapping[str, Any] | None
                               = None, name: str = "PPO", agent_seed: int = 0, action_table: np.ndarray | None = None,
                               deterministic: bool = True) -> dict[str, EpisodeStats]:
    """One episode per held-out seed for the model and for Random, Passive and Informed agents.

    Every agent plays the same seeds (identical worlds), all seeds of an agent as one batch, each
    world exactly the episode `gym.make("RLAIF-v0", config).reset(seed=s)` gives.
    """
    cfg = RLAIFEnvConfig.from_any(config)
    core = RLAIFCore(cfg, num_worlds=len(seeds))
    agents = {name: SB3BatchPolicy(model, deterministic, action_table, cfg),
              "InformedAgent": InformedAgent(core, seed=agent_seed),
              "PassiveAgent": PassiveAgent(core, seed=agent_seed), "RandomAgent": RandomAgent(core, seed=agent_seed)}
    return {label: evaluate_policy(agent, list(seeds), cfg, core=core) for label, agent in agents.items()}


def comparison_table(results: Mapping[str, EpisodeStats], reference: str | None = None) -> str:
    """A Markdown table of mean episode PnL (USD) with a 95% CI, and the reference's margin over each row.

    The margin is reference mean PnL minus the row's mean PnL, with a 95% CI of the paired
    difference (the agents play the same seeds).
    """
    reference = reference or next(iter(results))
    ref = results[reference].final_pnl
    lines = ["| agent | mean PnL (USD) | std | 95% CI of mean | mean return | bankrupt | "
             f"{reference} margin (USD, paired 95% CI) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, stats in results.items():
        pnl = stats.final_pnl
        n = len(pnl)
        std = float(pnl.std(ddof=1)) if n > 1 else 0.0
        diff = ref - pnl
        half = 1.96 * diff.std(ddof=1) / np.sqrt(n) if n > 1 else 0.0
        margin = "-" if label == reference else f"{diff.mean():+,.1f} ± {half:,.1f}"
        lines.append(f"| {label} | {pnl.mean():,.1f} | {std:,.1f} | ± {1.96 * std / np.sqrt(max(n, 1)):,.1f} | "
                     f"{stats.episode_return.mean():.3f} | {int(stats.bankrupt.sum())} | {margin} |")
    return "\n".join(lines)
