"""The numeric observation: a flat float32 vector with finite, documented bounds per feature.

Built only from the public part of the world state (never `GROUND_TRUTH_FIELDS`), at the current
tick. Money features are divided by the starting cash so the scale does not depend on it; signals
are squashed to [-1, 1]. Values are clipped into the declared bounds, so the vector is always
inside the observation space.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sim import WorldParams, WorldState, equity, exposure, yes_price

__all__ = ["FeatureLayout", "encode_observations", "feature_layout"]

# (name, low, high, meaning) per market, perp, group and for the account.
MARKET_FEATURES = (
    ("price", 0.0, 1.0, "YES price (probability); NO price is 1 - price"),
    ("price_change", -1.0, 1.0, "YES price change over the last tick"),
    ("time_to_resolution", 0.0, 1.0, "ticks to resolution / market_duration_max"),
    ("yes_value", 0.0, 10.0, "value of YES shares held / starting_cash"),
    ("no_value", 0.0, 10.0, "value of NO shares held / starting_cash"),
    ("news_signal", -1.0, 1.0, "recent news about this market, reliability-weighted, + means YES"),
    ("post_signal", -1.0, 1.0, "recent NPC posts, weighted by author reputation, + means YES"),
    ("group_signal", -1.0, 1.0, "tips from joined group chats, + means YES (0 until joined)"),
    ("npc_flow", -1.0, 1.0, "NPC net YES-minus-NO buying last tick / liquidity"),
)
PERP_FEATURES = (
    ("price_change", -1.0, 1.0, "last tick's log price change x 20"),
    ("momentum", -1.0, 1.0, "log(price / moving average) x 10"),
    ("funding", -1.0, 1.0, "funding rate per interval / 0.003"),
    ("news_signal", -1.0, 1.0, "leaks and rumours about this ticker, + means up"),
    ("position", -10.0, 10.0, "own position: side x current notional / starting_cash"),
    ("unrealized", -10.0, 10.0, "own unrealized PnL / starting_cash"),
    ("leverage", 0.0, 1.0, "own position's leverage / max_leverage"),
)
GROUP_FEATURES = (("joined", 0.0, 1.0, "1 if the agent is a member of this group chat"),)
ACCOUNT_FEATURES = (
    ("cash", 0.0, 20.0, "cash / starting_cash"),
    ("equity", 0.0, 20.0, "equity / starting_cash"),
    ("time_left", 0.0, 1.0, "1 - tick / num_ticks"),
    ("exposure", 0.0, 20.0, "gross exposure / equity"),
    ("realized_pnl", -10.0, 10.0, "realized PnL / starting_cash"),
)


@dataclass(frozen=True)
class FeatureLayout:
    """Names and bounds of every observation feature, e.g. "market0.price" or "account.cash"."""

    names: tuple[str, ...]
    low: np.ndarray
    high: np.ndarray
    descriptions: tuple[str, ...]

    def index(self, name: str) -> int:
        """Position of a feature by name."""
        return self.names.index(name)

    def slice(self, group: str, i: int) -> slice:
        """Slice of the features of e.g. ("market", 2)."""
        start = self.names.index(f"{group}{i}.{_FIRST[group]}")
        return slice(start, start + _SIZES[group])


_FIRST = {"market": MARKET_FEATURES[0][0], "perp": PERP_FEATURES[0][0], "group": GROUP_FEATURES[0][0]}
_SIZES = {"market": len(MARKET_FEATURES), "perp": len(PERP_FEATURES), "group": len(GROUP_FEATURES)}


def feature_layout(params: WorldParams) -> FeatureLayout:
    """The observation layout for these world parameters."""
    rows: list[tuple[str, float, float, str]] = []
    for prefix, count, feats in (("market", params.num_markets, MARKET_FEATURES),
                                 ("perp", params.num_perps, PERP_FEATURES),
                                 ("group", params.num_groups, GROUP_FEATURES)):
        for i in range(count):
            rows += [(f"{prefix}{i}.{n}", lo, hi, d) for n, lo, hi, d in feats]
    rows += [(f"account.{n}", lo, hi, d) for n, lo, hi, d in ACCOUNT_FEATURES]
    names, low, high, desc = zip(*rows, strict=True)
    return FeatureLayout(tuple(names), np.array(low, np.float32), np.array(high, np.float32), tuple(desc))


def _squash(x: np.ndarray) -> np.ndarray:
    return np.tanh(0.5 * x)


def encode_observations(state: WorldState, params: WorldParams, layout: FeatureLayout) -> np.ndarray:
    """Encode every world's public state, shape (B, n_features), float32, inside the bounds."""
    b, start = state.batch_size, params.starting_cash
    price = yes_price(state.pm_yes, state.pm_no)
    eq = equity(state, params)
    market = np.stack(
        [
            price,
            price - state.pm_last_price,
            (state.pm_resolve_tick - state.tick[:, None]) / params.market_duration_max,
            state.hold_yes * price / start,
            state.hold_no * (1.0 - price) / start,
            _squash(state.news_acc),
            _squash(state.post_acc),
            _squash((state.group_acc * state.joined[:, :, None]).sum(axis=1)),
            state.pm_npc_flow,
        ],
        axis=2,
    ).reshape(b, -1)
    open_ = state.pos_side != 0
    entry = np.where(open_, state.pos_entry, 1.0)
    current = state.pos_notional * state.perp_price / entry
    perp = np.stack(
        [
            20.0 * np.log(state.perp_price / state.perp_prev_price),
            10.0 * np.log(state.perp_price / state.perp_ema),
            state.perp_funding / 3e-3,
            _squash(state.perp_news_acc),
            state.pos_side * current / start,
            np.where(open_, state.pos_side * (state.perp_price / entry - 1.0) * state.pos_notional, 0.0) / start,
            state.pos_leverage / params.max_leverage,
        ],
        axis=2,
    ).reshape(b, -1)
    account = np.stack(
        [
            state.cash / start,
            eq / start,
            1.0 - state.tick / params.num_ticks,
            exposure(state) / np.maximum(eq, 1e-9),
            state.realized_pnl / start,
        ],
        axis=1,
    )
    obs = np.concatenate([market, perp, state.joined.astype(np.float64), account], axis=1)
    return np.clip(obs, layout.low, layout.high).astype(np.float32)
