"""Reference policies that bound what an RL or LLM agent should reach on `RLAIF-v0`.

* `RandomAgent`: uniform actions; pays fees and slippage, so it loses money.
* `PassiveAgent`: always waits; its PnL is exactly 0.
* `InformedAgent`: a hand-written heuristic that reads only the observation (news, posts, tips,
  NPC flow, perp leaks) and trades when the evidence disagrees with the price.
* `OracleAgent`: reads the hidden truth (outcomes, narratives) to give an upper bound. Only
  analysis code may do this; a policy never can.

All agents act on a batch: `act(obs)` takes (B, D) or (D,) observations and returns (B, 4) or (4,)
integer actions for `MultiDiscrete([K, T, 5, 2])`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..encoding import BUY_FRACTIONS
from ..encoding.observation import ACCOUNT_FEATURES, MARKET_FEATURES, PERP_FEATURES
from ..sim import WorldState, yes_price

__all__ = ["BaselineAgent", "InformedAgent", "OracleAgent", "PassiveAgent", "RandomAgent"]

WAIT, BUY, SELL, OPEN, CLOSE, JOIN = range(6)
_MF = {name: i for i, (name, *_) in enumerate(MARKET_FEATURES)}
_PF = {name: i for i, (name, *_) in enumerate(PERP_FEATURES)}
_AF = {name: i for i, (name, *_) in enumerate(ACCOUNT_FEATURES)}


class BaselineAgent:
    """Base class: reads the env's layout so it can slice observations by feature.

    Args:
        env: an `RLAIFEnv` (wrapped or not) or an `RLAIFCore`; only its `params` and action sizes are
            read.
    """

    needs_ground_truth = False

    def __init__(self, env: Any, seed: int | None = None) -> None:
        base = getattr(env, "unwrapped", env)
        self.params = base.params
        self.nvec = np.asarray(getattr(base, "nvec", None) if hasattr(base, "nvec") else base.action_space.nvec)
        p = self.params
        self._m, self._p, self._g = p.num_markets, p.num_perps, p.num_groups
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, state: WorldState | None = None) -> np.ndarray:
        """Actions for a batch (or one) observation; `state` is read only by the oracle."""
        single = np.ndim(obs) == 1
        batch = np.atleast_2d(obs)
        actions = self._act(batch, state)
        return actions[0] if single else actions

    def _act(self, obs: np.ndarray, state: WorldState | None) -> np.ndarray:
        raise NotImplementedError

    def _split(self, obs: np.ndarray):
        m, p, g = self._m, self._p, self._g
        nm, npf = len(MARKET_FEATURES), len(PERP_FEATURES)
        markets = obs[:, : m * nm].reshape(-1, m, nm)
        perps = obs[:, m * nm : m * nm + p * npf].reshape(-1, p, npf)
        groups = obs[:, m * nm + p * npf : m * nm + p * npf + g]
        account = obs[:, m * nm + p * npf + g :]
        return markets, perps, groups, account

    @staticmethod
    def _bucket_for(cash_frac: np.ndarray, wanted: int) -> np.ndarray:
        """The largest size bucket <= wanted whose fraction of equity the cash can pay (-1 if none)."""
        fits = BUY_FRACTIONS[None, : wanted + 1] <= (cash_frac[:, None] - 0.002)
        return np.where(fits.any(axis=1), fits.shape[1] - 1 - np.argmax(fits[:, ::-1], axis=1), -1)


class _Chooser:
    """Fills a batch of actions by priority: the first rule that applies to a world wins."""

    def __init__(self, actions: np.ndarray) -> None:
        self.actions = actions
        self.todo = np.ones(len(actions), dtype=bool)

    def __call__(self, mask, kind, target, bucket, side) -> None:
        pick = self.todo & mask
        row = np.stack(np.broadcast_arrays(np.full(len(self.actions), kind), target, bucket, side), axis=1)
        self.actions[pick] = row[pick]
        self.todo &= ~pick


class RandomAgent(BaselineAgent):
    """Uniformly random actions from a seeded generator."""

    def _act(self, obs, state):
        return self.rng.integers(0, self.nvec, size=(len(obs), len(self.nvec)))


class PassiveAgent(BaselineAgent):
    """Always waits."""

    def _act(self, obs, state):
        return np.zeros((len(obs), len(self.nvec)), dtype=np.int64)


class InformedAgent(BaselineAgent):
    """Trades on the evidence in the observation only.

    Per tick it does the first that applies: join a group chat it is not in (tips are the most
    reliable signal); cut a perp position whose rumour has faded or that lost 2%; open a perp on a
    strong leak; exit a market position the evidence has turned against; buy the side of the market
    where the evidence-implied probability beats the price by the widest margin.
    """

    edge = 0.12
    """Minimum gap between evidence-implied probability and price before buying."""

    def _act(self, obs, state):
        markets, perps, groups, account = self._split(obs)
        b = len(obs)
        act = np.zeros((b, 4), dtype=np.int64)

        choose = _Chooser(act)

        # 1. Join group chats.
        not_joined = groups < 0.5
        choose(not_joined.any(axis=1), JOIN, np.argmax(not_joined, axis=1), 0, 0)

        # 2. Close perps whose rumour faded or that lost more than 2% of starting cash.
        news = perps[:, :, _PF["news_signal"]]
        pos = perps[:, :, _PF["position"]]
        close = (pos != 0) & ((np.abs(news) < 0.15) | (perps[:, :, _PF["unrealized"]] < -0.02) | (news * pos < -0.3))
        choose(close.any(axis=1), CLOSE, np.argmax(close, axis=1), 0, 0)

        # 3. Open perps on strong leaks.
        cash_frac = account[:, _AF["cash"]] / np.maximum(account[:, _AF["equity"]], 1e-9)
        strong = (pos == 0) & (np.abs(news) > 0.5)
        target = np.argmax(np.where(strong, np.abs(news), -1.0), axis=1)
        bucket = self._bucket_for(cash_frac, 3)
        choose(
            strong.any(axis=1) & (bucket >= 0),
            OPEN,
            target,
            np.maximum(bucket, 0),
            (news[np.arange(b), target] < 0).astype(np.int64),
        )

        # 4. Market evidence -> implied probability.
        evidence = (
            markets[:, :, _MF["news_signal"]]
            + 0.8 * markets[:, :, _MF["post_signal"]]
            + 1.5 * markets[:, :, _MF["group_signal"]]
            + 2.0 * markets[:, :, _MF["npc_flow"]]
        )
        implied = 0.5 + 0.5 * np.tanh(1.2 * evidence)
        price = markets[:, :, _MF["price"]]
        yes_val, no_val = markets[:, :, _MF["yes_value"]], markets[:, :, _MF["no_value"]]
        # Exit positions the evidence now contradicts.
        exit_yes = (yes_val > 0) & (implied < price - self.edge)
        exit_no = (no_val > 0) & (implied > price + self.edge)
        exits = exit_yes | exit_no
        m = np.argmax(exits, axis=1)
        choose(exits.any(axis=1), SELL, m, 4, (~exit_yes[np.arange(b), m]).astype(np.int64))

        # 5. Buy where the implied probability beats the price; cap each market at 12% of equity.
        gap = implied - price
        room = np.where(gap > 0, yes_val, no_val) < 0.12 * account[:, _AF["equity"], None]
        ok = (np.abs(gap) > self.edge) & room & (markets[:, :, _MF["time_to_resolution"]] > 0)
        m = np.argmax(np.where(ok, np.abs(gap), -1.0), axis=1)
        size = np.where(np.abs(gap[np.arange(b), m]) > 0.25, 3, 2)
        bucket = np.minimum(self._bucket_for(cash_frac, 3), size)
        choose(
            ok.any(axis=1) & (bucket >= 0), BUY, m, np.maximum(bucket, 0), (gap[np.arange(b), m] < 0).astype(np.int64)
        )
        return act


class OracleAgent(BaselineAgent):
    """Reads the hidden outcomes and perp narratives: an upper bound, not a policy."""

    needs_ground_truth = True

    def _act(self, obs, state):
        if state is None:
            raise ValueError("OracleAgent needs the world state: call act(obs, env.unwrapped.state)")
        account = self._split(obs)[3]
        b = len(obs)
        rows = np.arange(b)
        act = np.zeros((b, 4), dtype=np.int64)
        cash_frac = account[:, _AF["cash"]] / np.maximum(account[:, _AF["equity"]], 1e-9)

        choose = _Chooser(act)

        # Close any perp once its narrative has fired (or if it is on the wrong side of one).
        narr_t = state.narr_ticker
        open_pos = state.pos_side != 0
        wrong = open_pos & ~(state.narr_active[:, None] & (np.arange(self._p)[None, :] == narr_t[:, None]))
        choose(wrong.any(axis=1), CLOSE, np.argmax(wrong, axis=1), 0, 0)
        # Open just before a narrative's event, in its direction.
        soon = state.narr_active & (state.narr_tick - state.tick <= 2) & (state.pos_side[rows, narr_t] == 0)
        bucket = self._bucket_for(cash_frac, 4)
        choose(soon & (bucket >= 0), OPEN, narr_t, np.maximum(bucket, 0), (state.narr_sign < 0).astype(np.int64))
        # Buy the side that will win wherever it is cheap.
        price = yes_price(state.pm_yes, state.pm_no)
        winner_price = np.where(state.pm_outcome == 1, price, 1.0 - price)
        m = np.argmin(winner_price, axis=1)
        cheap = winner_price[rows, m] < 0.97
        choose(cheap & (bucket >= 0), BUY, m, np.maximum(bucket, 0), (state.pm_outcome[rows, m] == 0).astype(np.int64))
        return act
