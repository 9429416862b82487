"""Stable-Baselines3 integration: a native VecEnv, a metrics callback and a baseline comparison.

* `RLAIFSB3VecEnv`: N worlds of `RLAIF-v0` stepped as one numpy batch on the env core, with SB3's
  own autoreset convention (the step that ends an episode returns the next episode's first
  observation, the last one goes to `info["terminal_observation"]`). World i is exactly the episode
  `DummyVecEnv` sub-env i runs (same seeds, same later resets; a test checks it), only faster: one
  batched world step instead of N.
* `RLAIFMetricsCallback`: logs every reward component and the trading metrics of each finished
  episode to the SB3 logger (so to stdout, CSV and TensorBoard, whichever formats are configured).
* `evaluate_against_baselines` / `comparison_table`: mean episode PnL of a trained model on
  held-out seeds next to `RandomAgent`, `PassiveAgent` and `InformedAgent`, as a Markdown table.

Needs the `[sb3]` extra (stable-baselines3; TensorBoard output also needs `tensorboard`, which the
extra installs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from .. import sim
from ..agents import InformedAgent, PassiveAgent, RandomAgent
from ..config import RLAIFEnvConfig
from ..envs import EpisodeStats, RLAIFCore, evaluate_policy
from ..envs.behavior import BatchBehavior
from ..errors import DependencyNotInstalled, InvalidActionError

try:
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled(
        'rlaif_gym.integrations.sb3 needs stable-baselines3: pip install "rlaif-gym[sb3]" '
        "(install torch first from constraints.txt to get the CPU build)"
    ) from exc

__all__ = [
    "ACTION_KINDS",
    "COMPACT_ACTIONS",
    "EASY_CONFIG",
    "RLAIFMetricsCallback",
    "RLAIFSB3VecEnv",
    "SB3BatchPolicy",
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

ACTION_KINDS = ("wait", "buy_prediction", "sell_prediction", "open_perp", "close_perp", "join_group")
"""Names of the numeric face's action kinds (index 0 of a MultiDiscrete action)."""
_TRADE_KINDS = (1, 2, 3, 4)


def discrete_action_table(params: sim.WorldParams, *, buy_sizes: Sequence[int] = range(5),
                          sell_sizes: Sequence[int] = range(5), perps: bool = True, groups: bool = True) -> np.ndarray:
    """Distinct executable numeric actions as rows of [kind, target, size, side], shape (K, 4).

    Row 0 is wait; then buy (per market x `buy_sizes` x side), sell (per market x `sell_sizes` x
    side), open (per perp x `buy_sizes` x side) and close (per perp) when `perps`, and join (per
    group) when `groups`. With the defaults (117 rows in the default world) `Discrete(K)` over these
    rows offers exactly the MultiDiscrete face's actions, without its duplicates (a wait with any
    target) and as one joint choice. Size indices index `BUY_FRACTIONS` / `SELL_FRACTIONS`.
    """
    rows = [(0, 0, 0, 0)]
    for kind, targets, sizes in ((1, params.num_markets, buy_sizes), (2, params.num_markets, sell_sizes),
                                 (3, params.num_perps if perps else 0, buy_sizes),
                                 (4, params.num_perps if perps else 0, None),
                                 (5, params.num_groups if groups else 0, None)):
        for t in range(targets):
            if sizes is None:
                rows.append((kind, t, 0, 0))
            else:
                rows += [(kind, t, int(size), side) for size in sizes for side in (0, 1)]
    table = np.array(rows, dtype=np.int64)
    if np.any(table[:, 2] >= 5) or np.any(table[:, 2] < 0):
        raise ValueError(f"size indices must be in [0, 5), got buy_sizes={list(buy_sizes)}, "
                         f"sell_sizes={list(sell_sizes)}")
    return table


class RLAIFSB3VecEnv(VecEnv):
    """`RLAIF-v0` as an SB3 VecEnv over one batched core (no per-env Python objects, no processes).

    Args:
        num_envs: number of worlds.
        config: an `RLAIFEnvConfig`, a mapping or None; `overrides` are config fields.
        seed: seeds worlds `seed + i` at the first reset, as `make_vec_env(..., seed=seed)` does.
        action_mode: `"multidiscrete"` (the env's own `MultiDiscrete([6, T, 5, 2])`) or `"discrete"`
            (`Discrete(K)` over the rows of `action_table`: the same actions as one joint choice; a
            categorical policy learns "buy YES in the market whose news says YES" much faster with
            it, because the four MultiDiscrete heads are sampled independently of each other).
        action_table: the rows of the discrete mode (default `discrete_action_table(params)`, every
            action); pass a subset, e.g. `discrete_action_table(params, buy_sizes=[3], sell_sizes=[4])`.

    Info per world: the single env's keys (`reward_components`, `pnl_delta`, `equity`, `cash`,
    `feedback`, `tick`), plus `TimeLimit.truncated` and, at an episode's end,
    `terminal_observation`. Wrap it in `VecMonitor` for `info["episode"]`. With an `archetype`, each
    world keeps its own behaviour tracker (the `behavior` component, as `make_vec_env` would pay it).
    """

    def __init__(self, num_envs: int = 8, config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *,
                 seed: int | None = None, action_mode: str = "multidiscrete", action_table: np.ndarray | None = None,
                 **overrides: Any) -> None:
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
        self._actions: np.ndarray | None = None
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
        """Start a new episode in every world (seeds from `seed()`, then each world's generator)."""
        obs = self.core.reset(self._keys(range(self.num_envs), self._seeds))
        if self._behavior is not None:
            self._behavior.reset()
        state = self.core.state
        equity = sim.equity(state)
        self.reset_infos = [{"equity": float(equity[i]), "cash": float(state.cash[i]), "tick": 0}
                            for i in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions of the next step."""
        acts = np.asarray(actions)
        if self.action_table is not None:
            k = len(self.action_table)
            if acts.shape != (self.num_envs,) or np.any(acts < 0) or np.any(acts >= k):
                raise InvalidActionError(f"actions must have shape ({self.num_envs},) with 0 <= a < {k} "
                                         f"(action_mode='discrete'), got shape {acts.shape}")
            acts = self.action_table[acts.astype(np.int64)]
        elif acts.shape != (self.num_envs, 4) or np.any(acts < 0) or np.any(acts >= self.core.nvec):
            raise InvalidActionError(f"actions must have shape ({self.num_envs}, 4) with 0 <= a[:, i] < "
                                     f"{self.core.nvec.tolist()}, got shape {acts.shape}")
        self._actions = acts.astype(np.int64)

    def step_wait(self):
        """Step every world; worlds whose episode ended are reset at once (SB3's convention)."""
        if self.core.state is None or self._actions is None:
            raise RuntimeError("call reset() and step_async() before step_wait()")
        res = self._behavior.step(self.core, self._actions) if self._behavior is not None else \
            self.core.step(self._actions)
        self._actions = None
        out, state = res.outcome, self.core.state
        obs = res.observation
        done = res.terminated | res.truncated
        infos: list[dict[str, Any]] = []
        for i in range(self.num_envs):
            ok = bool(out.success[i])
            infos.append({
                "reward_components": {name: float(v[i]) for name, v in res.components.items()},
                "pnl_delta": float(out.pnl_delta[i]),
                "equity": float(out.equity_after[i]),
                "cash": float(state.cash[i]),
                "feedback": {"success": ok,
                             "error": None if ok else sim.error_message(out.error[i], out.error_a[i], out.error_b[i])},
                "tick": int(state.tick[i]),
                "TimeLimit.truncated": bool(res.truncated[i] and not res.terminated[i]),
            })
        if done.any():
            idx = np.nonzero(done)[0]
            fresh = sim.reset(self.params, self._keys(idx, [None] * len(idx)))
            state.put(idx, fresh)
            if self._behavior is not None:
                self._behavior.reset(idx)
            new_obs = self.core.observe()
            for i in idx:
                infos[i]["terminal_observation"] = obs[i]
            obs = np.where(done[:, None], new_obs, obs)
        return obs, res.reward.astype(np.float32), done, infos

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
        """Not supported: there are no per-world env objects; use a single `RLAIF-v0` env."""
        raise NotImplementedError(f"RLAIFSB3VecEnv has no per-world env objects to call {method_name!r} on; "
                                  "use make_vec_env('RLAIF-v0') for env methods")

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
            ones from `RLAIFSB3VecEnv(action_mode="discrete")`).
        deterministic: take the most likely action (the usual evaluation setting).
        action_table: the rows behind Discrete actions (default: the model's env's `action_table`).
    """

    def __init__(self, model: Any, deterministic: bool = True, action_table: np.ndarray | None = None) -> None:
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

    def act(self, obs: np.ndarray, state: sim.WorldState | None = None) -> np.ndarray:
        """Actions (B, 4) for observations (B, D); the world state is never read."""
        actions, _ = self.model.predict(obs, deterministic=self.deterministic)
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
    agents = {name: SB3BatchPolicy(model, deterministic, action_table),
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
