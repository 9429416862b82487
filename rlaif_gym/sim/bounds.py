"""The rules' worst cases: how far each quantity of a world of `params` can have gone by tick t.

A state read from outside the process (a snapshot token, a dataset row) must be one the world could reach,
or its episode may leave float range a few ticks later (a holding of 1e308 shares sells for NaN). The state
validator (`sim.validate`) refuses any value beyond the bounds derived here, once, from the params and the
rules' own constants (`sim.constants`: draw ranges, decays and signal weights, `rng.NORMAL_MAX`). Each bound is
the worst case of every tick in a row (the largest perp move every tick at full leverage, every market slot
reopening every tick): far above what any episode reaches, so no real state is refused, and for any config
in common use far below where the rules' arithmetic could overflow in the rest of the episode.

Where a config's worst case itself leaves float range (hundreds of thousands of ticks at the largest
volatility), the bounds stop at `MAX_USD` and `MAX_LOG_PRICE`: beyond them the rules' own products (an
amount times an amount, a notional times a price ratio) could overflow.

Units: USD (a share pays at most 1 USD, so shares share the USD bound), ticks, natural-log price ratios.
"""

from __future__ import annotations

import math

import numpy as np

from .constants import (
    FUNDING_CAP,
    GROUP_WEIGHT,
    LEAK_WEIGHT,
    NARRATIVE_LEAD,
    NARRATIVE_MOVE,
    OPENING_PRICE,
    PERP_NEWS_DECAY,
    PERP_START_SPREAD,
    SIGNAL_DECAY,
    SOURCE_WEIGHT,
    TRUTH,
)
from .params import PERP_BASE_PRICES, WorldParams
from .rng import NORMAL_MAX

__all__ = [
    "FUNDING_CAP",
    "MAX_LOG_PRICE",
    "MAX_USD",
    "NARRATIVE_LEAD_MAX",
    "NARRATIVE_MOVE_MAX",
    "OPENING_PRICE_RANGE",
    "REPUTATION_MAX",
    "SIGNAL_MAX",
    "TRUTH_RANGE",
    "house_shares_max",
    "money",
    "perp_move",
    "perp_price_range",
    "pool_min",
    "pool_product_range",
    "reset_money",
]

MAX_USD = 1e120
"""The most USD (or shares) any bound allows: sums and products of two such amounts, times a leverage and a
price ratio within `MAX_LOG_PRICE`, stay far inside float range."""
MAX_LOG_PRICE = 100.0
"""The widest a perp's price may stray from its base price, as |log(price / base)| (a ratio of e^100)."""

FUNDING_CAP = FUNDING_CAP
"""The largest |funding rate| per interval (a fraction of notional)."""
TRUTH_RANGE = (TRUTH[0], TRUTH[0] + TRUTH[1])
"""The range of a market's hidden true probability p*."""
OPENING_PRICE_RANGE = (OPENING_PRICE[0], OPENING_PRICE[0] + OPENING_PRICE[1])
"""The range of a market's opening YES price p0."""
NARRATIVE_LEAD_MAX = NARRATIVE_LEAD[0] + NARRATIVE_LEAD[1] - 1
"""The most ticks between a narrative's start and its event."""
NARRATIVE_MOVE_MAX = NARRATIVE_MOVE[0] + NARRATIVE_MOVE[1]
"""The largest log-return of a narrative's event."""
REPUTATION_MAX = 100.0
"""Reputations (the agent's and the NPCs') are clipped into [0, 100]."""
SIGNAL_MAX = {
    "news_acc": float(np.abs(SOURCE_WEIGHT).max()) / (1.0 - SIGNAL_DECAY),
    "post_acc": 1.0 / (1.0 - SIGNAL_DECAY),
    "group_acc": float(np.abs(GROUP_WEIGHT).max()) / (1.0 - SIGNAL_DECAY),
    "perp_news_acc": abs(LEAK_WEIGHT) / (1.0 - PERP_NEWS_DECAY),
}
"""The largest |value| of each decayed evidence sum: at most one item of the largest weight a tick (a post's
weight is its author's credibility, at most 1), decayed every tick, adds up to weight / (1 - decay)."""


def perp_move(params: WorldParams) -> float:
    """The largest |log-return| of a perp in one tick: the drift, the largest normal step, a narrative's event."""
    sigma = params.perp_volatility
    return 0.5 * sigma * sigma + sigma * NORMAL_MAX + NARRATIVE_MOVE_MAX


def money(params: WorldParams, tick: np.ndarray) -> np.ndarray:
    """The most USD a world of `params` holds at `tick` in all its accounts together, shape of `tick`.

    The accounts are the agent's cash, margins and open perp gains, the NPCs' cash, the markets' collateral
    and the fees collected; only the house adds to them. By the rules the house pays in at most two things:
    a new market's collateral (under 2 x market_liquidity; at most every slot reopens, every tick) and the
    agent's perp gains. A tick's perp gains are at most the current notional of its positions (2 x
    max_leverage x the money behind them: a short grows to 1.9 x its entry notional before it is
    liquidated) times the largest move (`perp_move`) plus the funding cap. So the total grows at most by
    the seeds plus a factor g = 1 + 2 L (e^R - 1 + funding cap) a tick:
    money(t) <= (start + seeds x t) x g^t. Capped at `MAX_USD`.

    Args:
        params: the world.
        tick: ticks since reset (int array, each in [0, num_ticks]).
    """
    seeds = 2.0 * params.market_liquidity * params.num_markets
    start = params.starting_cash + params.num_npcs * params.npc_starting_cash + seeds
    growth = 1.0 + 2.0 * params.max_leverage * (math.expm1(perp_move(params)) + FUNDING_CAP)
    t = np.asarray(tick, dtype=np.float64)
    log_money = np.log(start + seeds * t) + t * math.log(growth)
    return np.exp(np.minimum(log_money, math.log(MAX_USD)))


def perp_price_range(params: WorldParams, tick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest price of each perp at `tick` (B,), as (low, high), each of shape (B, P), USD.

    A perp starts within `PERP_START_SPREAD` x NORMAL_MAX of its base price (in log) and moves at most
    `perp_move` a tick; its moving average and an entry price lie in the same range. Capped at
    `MAX_LOG_PRICE`.
    """
    t = np.asarray(tick, dtype=np.float64)[:, None]
    width = np.minimum(PERP_START_SPREAD * NORMAL_MAX + perp_move(params) * t, MAX_LOG_PRICE)
    base = np.log(np.array(PERP_BASE_PRICES[: params.num_perps]))[None, :]
    return np.exp(base - width), np.exp(base + width)


def pool_product_range(params: WorldParams) -> tuple[float, float]:
    """The range of a market's pool product yes x no (the CPMM's invariant k), shares squared, as (low, high).

    A market opens with pools 2 x market_liquidity x (1 - p0) and 2 x market_liquidity x p0 (`house_shares_max`), so
    k = 4 x market_liquidity^2 x p0 (1 - p0) with the opening price p0 in `OPENING_PRICE_RANGE`, and every trade keeps k
    (`sim.pricing`: it moves only by rounding).
    """
    low, high = OPENING_PRICE_RANGE
    p = min(low, 1.0 - high)  # p (1 - p) is smallest at the range's end nearest 0 or 1,
    q = min(max(0.5, low), high)  # and largest at its point nearest 1/2
    scale = 4.0 * params.market_liquidity**2
    return scale * p * (1.0 - p), scale * q * (1.0 - q)


def pool_min(params: WorldParams, most: np.ndarray) -> np.ndarray:
    """The smallest a market's pool can be when the other holds at most `most` shares, shares: the smallest
    pool product (`pool_product_range`) over `most`."""
    return pool_product_range(params)[0] / most


def reset_money(params: WorldParams) -> float:
    """The USD a world of `params` starts with in the accounts the money identity sums, USD: the agent's and the
    NPCs' starting cash (the house's seeds are its own payments: `house_cash` goes below 0 by them).

    The rules move money between the accounts and never make or destroy it, so at every tick
    cash + margins + NPC cash + collateral + fees collected + house cash = `reset_money` (`sim.validate`)."""
    return params.starting_cash + params.num_npcs * params.npc_starting_cash


def house_shares_max(params: WorldParams) -> float:
    """The most shares the house gets when it seeds a market (the two pools' difference at the opening price)."""
    low = OPENING_PRICE[0]
    return 2.0 * params.market_liquidity * max(1.0 - 2.0 * low, 2.0 * (low + OPENING_PRICE[1]) - 1.0)
