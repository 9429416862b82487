"""`RLAIFEnv`: the numeric Gymnasium face of the Babylon world (`RLAIF-v0`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from .. import sim
from ..config import RLAIFEnvConfig
from ..encoding import decode_actions
from ..encoding import mask as _mask
from ..errors import ConfigError, InvalidActionError, ResetNeeded
from ..rewards.composite import RewardFunction
from .behavior import BatchBehavior
from .core import CoreStep, RLAIFCore, check_numeric_action, check_reset_options
from .dashboard import render_ansi, render_chart
from .glue import feedback_of, reset_infos, step_feedback, step_info
from .snapshot import EnvSnapshot, SnapshotReader, register_snapshot_class, tracker_dict

__all__ = ["EnvSnapshot", "RLAIFEnv"]  # EnvSnapshot lives in envs.snapshot; this path is kept for old imports

_INT64 = np.dtype(np.int64)  # numpy's builtin dtypes are singletons: `is` is the cheap test


@register_snapshot_class
class RLAIFEnv(gym.Env[np.ndarray, np.ndarray]):
    """A Babylon-style world of prediction markets, perpetual futures, NPC traders, news and a social feed.

    ## Description
    The agent starts with `starting_cash` (10,000 USD) in a world where `num_markets` binary
    questions trade on constant-product market makers, `num_perps` perpetual futures follow a seeded
    price process with hidden narratives, and NPCs of the original Babylon archetypes trade and post.
    Each question has a hidden true probability and an outcome drawn from it; news items, NPC posts
    and group-chat tips carry noisy signals about the outcome, informed NPCs push prices towards the
    truth, and markets resolve during the episode (winning shares pay 1 USD) and reopen with new
    questions. Perp narratives are leaked and rumoured before they move the price. An agent that reads
    the signals earns more than a random or passive one; see the baseline table in docs/training.md.

    ## Action Space
    `MultiDiscrete([K, T, 5, 2])` with K the numeric kinds and T = max(num_markets, num_perps, num_groups):

    | index | meaning | values |
    |---|---|---|
    | 0 | kind | `rlaif_gym.encoding.ACTION_KINDS[i]`: 0 wait, 1 buy_prediction, ... (docs/world.md lists them) |
    | 1 | target | market slot, perp index or group index |
    | 2 | size | buy / perp margin: 1, 2, 5, 10, 25 % of equity; sell: 10, 25, 50, 75, 100 % of the holding |
    | 3 | side | 0 YES or LONG, 1 NO or SHORT |

    Perps opened from the numeric face use `numeric_perp_leverage` (default 2x). A well-formed action
    the world refuses (insufficient cash, no position, ...) changes nothing and is reported in
    `info["feedback"]`; an action outside the space raises `InvalidActionError`.

    ## Observation Space
    A float32 `Box` of 9 features per market, 7 per perp, 1 per group and 5 for the account (65 by
    default), every one clipped into finite bounds:

    | feature | bounds | meaning |
    |---|---|---|
    | `market{i}.price` | [0, 1] | YES price |
    | `market{i}.price_change` | [-1, 1] | change over the last tick |
    | `market{i}.time_to_resolution` | [0, 1] | ticks left / market_duration_max |
    | `market{i}.yes_value`, `no_value` | [0, 10] | holdings at market / starting_cash |
    | `market{i}.news_signal`, `post_signal`, `group_signal` | [-1, 1] | decayed evidence, + = YES |
    | `market{i}.npc_flow` | [-1, 1] | NPC net YES buying last tick / liquidity |
    | `perp{j}.price_change`, `momentum`, `funding`, `news_signal` | [-1, 1] | price action, funding, leaks |
    | `perp{j}.position`, `unrealized` | [-10, 10] | own position and PnL / starting_cash |
    | `perp{j}.leverage` | [0, 1] | own leverage / max_leverage |
    | `group{g}.joined` | {0, 1} | membership |
    | `account.cash`, `equity` | [0, 20] | / starting_cash |
    | `account.time_left` | [0, 1] | 1 - tick / num_ticks |
    | `account.exposure` | [0, 20] | gross exposure / equity |
    | `account.realized_pnl` | [-10, 10] | / starting_cash |

    `env.unwrapped.layout.names` lists every feature in order. No feature depends on the hidden
    truth or on future draws (a test perturbs both).

    ## Rewards
    Computed over the whole transition (action, then the world's tick). The default
    (`reward_scheme="skill"`) makes the episode return rank traders:

    | component | value per step | coefficient |
    |---|---|---|
    | `pnl` | pnl_delta / starting_cash, minus 1 on the step that goes bankrupt (never clipped) | 1 |
    | `risk` | -0.1 x USD of exposure the action adds above 80% of equity, / starting_cash | 1 |

    reward = pnl + risk, so an episode's return is its PnL / starting cash (exactly: the pnl terms
    telescope) less the risk charged, and about -2 on bankruptcy. The text face adds `format`
    (0 for a clean reply, -1 for none) and `reasoning` (in [0, 1]), bounded to 0.125 and 0.075 per
    episode; an `archetype` adds `behavior`. `env.unwrapped.reward_function` applies the weights;
    `reward_scheme="original"` gives Babylon's clipped composite instead (docs/reward.md).

    ## Starting State
    Fresh markets with uninformative opening prices (30-70%), perps near their base prices, NPCs
    with archetype-dependent reputations, empty feeds, no positions. All drawn from `reset(seed=...)`.

    ## Episode End
    * Termination: bankruptcy, equity below one minimum fee (0.01 USD), reward -1.
    * Truncation: `num_ticks` ticks (168 by default); the env flags it itself, so the limit follows the
      config (the registry sets no `max_episode_steps`; pass one to `gym.make` to cut episodes shorter).

    ## Info
    `reward_components` (dict of floats), `pnl_delta`, `equity`, `cash` (USD), `feedback`
    (`{"success": bool, "error": str | None}`), `tick`, and `fill`: what the transition paid and
    moved (`shares`, `usd`, `fee`, `payout` in USD; `markets_resolved`, `positions_liquidated`). These
    keys are a public contract; the collector records `fill` in each step's `feedback`. `reset` returns
    `equity`, `cash` and `tick`.

    ## Arguments
    `RLAIFEnv(config=None, render_mode=None, **overrides)`: `config` is an `RLAIFEnvConfig`, a mapping
    or None; overrides are config fields (unknown names raise `ConfigError` with a suggestion).
    Render modes: `"ansi"` (text dashboard) and `"rgb_array"` (price and equity chart).

    ## State fork
    `env.unwrapped.get_state()` snapshots the episode (world, generator, bookkeeping) and
    `set_state(snapshot)` continues from it; `fork(k)` returns k new envs continuing from the current
    tick. Branches are bit-identical under identical actions and diverge under different ones; the
    original is untouched. This gives GRPO groups a shared mid-episode start state
    (`RolloutCollector.collect_forks`).

    ## Version History
    * v0: initial release.

    ## Example
    >>> import gymnasium as gym, rlaif_gym
    >>> env = gym.make("RLAIF-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape
    (65,)
    >>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    >>> sorted(info["reward_components"])
    ['pnl', 'risk']
    """

    _SNAPSHOT_FIELDS: ClassVar[tuple[str, ...]] = ("_feedback", "_done", "_prices", "_equity", "_behavior")
    _SNAPSHOT_ARRAYS: ClassVar[tuple[str, ...]] = ("prices",)
    """The arrays a snapshot's bytes carry beside the world's (`envs.snapshot`): the render history of YES prices."""
    """Per-episode attributes besides the world and the generator that `get_state` copies."""

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["ansi", "rgb_array"],
        "render_fps": 4,
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }
    _compiled_reset: ClassVar[bool | None] = None
    """reset's backend: None, the config's."""

    def __init__(
        self,
        config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.config = RLAIFEnvConfig.from_any(config, **overrides)
        self.render_mode = render_mode
        self._core = RLAIFCore(self.config, num_worlds=1)
        self.params = self._core.params
        self.layout = self._core.layout
        self.observation_space = spaces.Box(self.layout.low, self.layout.high, dtype=np.float32)
        self.action_space = spaces.MultiDiscrete(self._core.nvec)
        self._behavior = BatchBehavior(self._core.archetype, 1) if self._core.archetype else None
        self._feedback: dict[str, Any] | None = None
        self._done = False
        self._prices: list[np.ndarray] = []
        self._equity: list[float] = []

    # -- Gymnasium API ---------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new episode; the whole episode is a function of the seed and the actions.

        `options` must be None or empty (see `check_reset_options`): any other value raises `ConfigError`.
        """
        check_reset_options(options)
        super().reset(seed=seed)
        obs = self._core.reset(sim.draw_keys(self.np_random, 1), compiled=self._compiled_reset)[0]
        self._feedback, self._done = None, False
        self._prices, self._equity = [], []
        if self._behavior is not None:
            self._behavior.reset()
        self._record_history()
        state = self._core.state
        return obs, reset_infos(state, self.params)[0]

    def step(self, action):
        """Apply one action, advance the world one tick, and score the transition."""
        self._check_running()
        if self._core.fused is not None:  # None with an archetype (its behaviour term) or numpy
            return self._fused_step(action)
        act = self._validated(action)
        batch = decode_actions(act[None, :], self._core.state, self.params, self.config.numeric_perp_leverage)
        res = self._transition(batch)
        self._feedback = step_feedback(res.outcome)
        return (
            res.observation[0],
            float(res.reward[0]),
            bool(res.terminated[0]),
            bool(res.truncated[0]),
            self._info(res),
        )

    def _fused_step(self, action):
        """`step` as one compiled call (`envs.fused`): the same results, built straight from its rows."""
        if type(action) is np.ndarray and action.dtype is _INT64 and action.shape == (4,):
            acts = action.reshape(1, 4)  # the kernel checks the bounds
        else:
            acts = self._validated(action)[None, :]
        core = self._core
        try:
            obs, out_f, out_i, out_b = core.fused.step(core.state, acts, reuse=True)
        except InvalidActionError:
            self._validated(action)  # raises with the single env's message
            raise
        e_a, e_b, shares, usd, fee, _, equity, pnl_delta, _, _, payout, pnl, risk, reward = out_f[:, 0].tolist()
        error, resolved, liquidated = out_i[:, 0].tolist()
        success, _, bankrupt = out_b[:, 0].tolist()
        tick = int(core.state.tick[0])
        truncated = tick >= self.params.num_ticks and not bankrupt
        self._done = bankrupt or truncated
        self._feedback = feedback_of(success, error, e_a, e_b)
        self._record_history()
        info = {
            "reward_components": {"pnl": pnl, "risk": risk},
            "pnl_delta": pnl_delta, "equity": equity, "cash": float(core.state.cash[0]), "feedback": self._feedback,
            "tick": tick,
            "fill": {"shares": shares, "usd": usd, "fee": fee, "payout": payout, "markets_resolved": resolved,
                     "positions_liquidated": liquidated},
        }
        return obs[0], reward, bankrupt, truncated, info

    def action_masks(self) -> np.ndarray:
        """Per-dimension masks of the actions the world would accept now, bool (K + T + 5 + 2,).

        Reads only the account and the public prices (never the hidden truth). For sb3-contrib's
        `MaskablePPO` (through `make_vec_env`, it calls this method on each env); see "Action masks".
        """
        if not isinstance(self.action_space, spaces.MultiDiscrete):
            raise NotImplementedError("action_masks() masks the numeric face's MultiDiscrete actions; the text face "
                                      "takes any string")
        if self._core.state is None:
            raise ResetNeeded("call reset() before action_masks()")
        return _mask.action_masks(self._core.state, self.params, self.config.numeric_perp_leverage)[0]

    # -- shared by both faces ---------------------------------------------------------------

    def _check_running(self) -> None:
        if self._core.state is None:
            raise ResetNeeded("call reset() before step()")
        if self._done:
            raise ResetNeeded("the episode has ended (bankruptcy or num_ticks); call reset() to start a new one")

    def _transition(self, batch: sim.ActionBatch, judged: tuple[np.ndarray, np.ndarray] | None = None) -> CoreStep:
        """Run one tick with `batch` (and the judge's scores); adds behavior when an archetype is set."""
        post = self._behavior.hook(self._core, batch) if self._behavior is not None else None
        res = self._core.step_batch(batch, judged, post)
        self._done = bool(res.terminated[0] or res.truncated[0])
        self._record_history()
        return res

    def _info(self, res: CoreStep) -> dict[str, Any]:
        return step_info(res.components, res.outcome, self._core.state, self._feedback)

    def render(self):
        """`ansi`: a text dashboard; `rgb_array`: a chart of market prices and equity."""
        if self._core.state is None:
            raise ResetNeeded("call reset() before render()")
        if self.render_mode == "ansi":
            return render_ansi(self._core.state, self.params, 0, self._feedback)
        if self.render_mode == "rgb_array":
            return render_chart(np.array(self._prices), np.array(self._equity))
        return None

    # -- state fork ---------------------------------------------------------------------------

    def get_state(self) -> EnvSnapshot:
        """A snapshot of the episode now (world, generator, bookkeeping), for `set_state` or `fork`.

        The snapshot holds the hidden truth and the world key: it is for branching and analysis,
        never for a policy's input.
        """
        if self._core.state is None:
            raise ResetNeeded("call reset() before get_state()")
        return EnvSnapshot(
            env_class=type(self), config=self.config, world=self._core.get_state(),
            np_random=copy.deepcopy(self.np_random), np_random_seed=self._np_random_seed,
            fields=copy.deepcopy({name: getattr(self, name) for name in self._SNAPSHOT_FIELDS}),
        )

    def set_state(self, snapshot: EnvSnapshot) -> None:
        """Continue from `snapshot`: afterwards this env steps exactly as the env that made it would.

        Raises:
            ConfigError: the snapshot comes from an env of another class or with another config.
        """
        if not isinstance(snapshot, EnvSnapshot):
            raise TypeError(f"set_state expects an EnvSnapshot from get_state(), got {type(snapshot).__name__}")
        if snapshot.env_class is not type(self):
            raise ConfigError(f"this snapshot was taken from a {snapshot.env_class.__name__}; restore it into one "
                              f"(this env is a {type(self).__name__})")
        if snapshot.config != self.config:
            raise ConfigError("this snapshot was taken from an env with another config; build the env with "
                              "snapshot.config, or use fork(), which does")
        self._core.set_state(snapshot.world)
        self.np_random = copy.deepcopy(snapshot.np_random)
        self._np_random_seed = snapshot.np_random_seed
        for name, value in copy.deepcopy(snapshot.fields).items():
            setattr(self, name, value)

    @classmethod
    def _encode_snapshot_fields(cls, snapshot: EnvSnapshot) -> tuple[dict[str, Any], list[tuple[str, np.ndarray]]]:
        """This env's bookkeeping as plain JSON and arrays, for `EnvSnapshot.to_bytes` (`envs.snapshot`)."""
        f = snapshot.fields
        num_markets = snapshot.world.pm_yes.shape[1]
        prices = np.array(f["_prices"], dtype=np.float64).reshape(len(f["_prices"]), num_markets)
        behavior = f["_behavior"]
        header = {"feedback": f["_feedback"], "done": bool(f["_done"]),
                  "equity_history": [float(v) for v in f["_equity"]],
                  "behavior": None if behavior is None else [tracker_dict(t) for t in behavior.trackers]}
        return header, [("prices", prices)]

    @classmethod
    def _decode_snapshot_fields(cls, reader: SnapshotReader) -> dict[str, Any]:
        """This env's bookkeeping back from a snapshot's bytes, each field checked against the world: the render
        history (prices in [0, 1], equity within the world's money, one entry of each per tick), the done flag,
        the behaviour tracker and the feedback."""
        f, params, tick = reader.fields, reader.params, reader.tick
        prices = reader.arrays["prices"]
        if prices.ndim != 2 or prices.shape[0] > tick + 1 or prices.shape[1] != params.num_markets \
                or not ((prices >= 0) & (prices <= 1)).all():
            raise reader.fail(f"the price history must hold YES prices in [0, 1], of shape (n <= {tick + 1}, "
                              f"{params.num_markets}) at tick {tick}")
        equity = reader.floats(f.get("equity_history"), "fields.equity_history (USD)", len(prices), 0.0, reader.usd)
        if len(equity) != len(prices):
            raise reader.fail(f"the equity history has {len(equity)} entries and the price history {len(prices)}: "
                              "one of each is recorded per tick")
        done = f.get("done")
        if not isinstance(done, bool) or (tick >= params.num_ticks and not done):
            raise reader.fail(f"fields.done must be true or false (true at tick num_ticks = {params.num_ticks}), "
                              f"got {str(done)[:20]} at tick {tick}")
        behavior = f.get("behavior")
        if (behavior is None) != (reader.archetype is None):
            raise reader.fail(f"the behaviour trackers do not match the config's archetype ({reader.archetype!r})")
        batch = None
        if behavior is not None:
            if not isinstance(behavior, list) or len(behavior) != 1:
                raise reader.fail("fields.behavior must list one tracker")
            batch = BatchBehavior(reader.archetype, 1)
            batch.trackers = [reader.tracker(behavior[0])]
        return {"_feedback": reader.feedback(f.get("feedback")), "_done": done, "_prices": list(prices),
                "_equity": equity, "_behavior": batch}

    def fork(self, k: int) -> list[RLAIFEnv]:
        """`k` new envs of this class and config, each continuing this episode from the current tick.

        Branches are independent: under identical actions they give bit-identical observations,
        rewards and infos; under different actions they diverge; this env is not affected. The
        branches are bare envs (no `TimeLimit`; they truncate themselves at `num_ticks`).
        """
        if k < 1:
            raise ValueError(f"fork needs k >= 1 branches, got {k}")
        snapshot = self.get_state()
        branches = []
        for _ in range(k):
            env = type(self)(self.config, render_mode=self.render_mode)
            env.set_state(snapshot)
            branches.append(env)
        return branches

    # -- privileged access (analysis, the oracle baseline, the judge) -------------------------

    @property
    def state(self) -> sim.WorldState:
        """The full world state, ground truth included. Policies must not read it; see `observation`."""
        if self._core.state is None:
            raise ResetNeeded("call reset() before reading the state")
        return self._core.state

    @property
    def reward_weights(self) -> dict[str, float]:
        """Every component weight in effect (archetype row, risk = pnl, then config overrides)."""
        return dict(self._core.weights)

    @property
    def reward_function(self) -> RewardFunction:
        """The reward in effect: its scheme, weights, per-step coefficients and `trading_return`."""
        return self._core.reward_fn

    # -- helpers ------------------------------------------------------------------------------

    def _validated(self, action) -> np.ndarray:
        return check_numeric_action(action, self.action_space.nvec)

    def _record_history(self) -> None:
        if self.render_mode != "rgb_array":
            return
        state = self._core.state
        self._prices.append(sim.yes_price(state.pm_yes[0], state.pm_no[0]))
        self._equity.append(float(sim.equity(state, self.params)[0]))
