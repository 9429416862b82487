"""Is a world state read from outside the process one the rules could have made?

A snapshot token or a dataset row carries a `WorldState` as plain arrays. Before any kernel reads it,
`check_state` checks every field: the dtype and shape `reset` gives for these params (the compiled kernels
index without bounds checks), finite floats, and the range the rules allow by the state's tick (`_RANGES`, or
the bounds declared with the field; one per field; a test puts an absurd value in each): indices within the
world's sizes, counters within what the ticks elapsed allow, prices and probabilities within theirs, and money
and shares within what the config's cash and liquidity can grow to (`sim.bounds`), every share backed by its
market's collateral. Then the laws the rules keep across fields (`_laws`), each field within its own range or
not: every share is half of a complete set (a market's YES shares, the pool's, the agent's, the NPCs' and the
house's, sum to its collateral, and so do its NO shares); a market's pools multiply to the product it opened
with (`sim.bounds.pool_product_range`, from the config's `market_liquidity`); the world's money sums to what the
config gave the agent and the NPCs (`sim.bounds.reset_money`: the rules move money, never make it); and the
money outside the house, open perp gains included, is within what it can reach by the tick (`sim.bounds.money`).
A state that passes steps to the end of its episode with finite numbers (for any config whose worst case stays
in float range, see `sim.bounds`; the config's own bounds, `sim.params`, keep the reward's worst case finite); one
the world could not reach is refused, naming the field, the bound and the value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from . import bounds
from .accounting import unrealized_pnl
from .params import NEWS_SOURCES, WorldParams
from .rules import reset
from .state import WorldState, field_specs

__all__ = ["check_state"]

_SLACK = 1e-9
"""Relative room a float bound leaves for rounding (a bound is a worst case; real values stay far inside)."""
_K_DRIFT = 1e-6
"""Relative room around the pools' product: each trade recomputes it from the pools, so it drifts by rounding
over a market's life (real episodes stay within 1e-12 of it)."""


@dataclass(frozen=True)
class _World:
    """What the ranges of one state are computed from. Arrays have the world dimension B first."""

    state: WorldState
    params: WorldParams
    tick: np.ndarray  # (B,) ticks elapsed, already checked to lie in [0, num_ticks]
    usd: np.ndarray  # (B,) the most USD (or shares) the world can hold by its tick (`bounds.money`)
    price_low: np.ndarray  # (B, P) the lowest price each perp can have reached, USD
    price_high: np.ndarray  # (B, P) the highest
    open: np.ndarray  # (B, P) bool: a perp position is open

    def serial_max(self) -> np.ndarray:
        """The largest market serial handed out, (B,)."""
        return self.state.next_serial - 1

    def market_news(self) -> np.ndarray:
        """(B, R) bool: the news slot is about a market (its target a market slot, its serial a market's)."""
        return self.state.news_kind == 0


class _Range(NamedTuple):
    """A field's allowed values, [low, high] (each a number, a per-world (B,) array or an array of the
    field's shape), and why (for the message)."""

    low: object
    high: object
    why: str


def _flat(w: _World, low, high, why: str) -> _Range:
    """[low, high] for an open position, exactly 0 for a flat one (closing zeroes the position's numbers)."""
    return _Range(np.where(w.open, low, 0), np.where(w.open, high, 0), why + "; 0 when flat")


def _usd(signed: bool = False, why: str = "USD") -> Callable[[_World], _Range]:
    return lambda w: _Range(-w.usd if signed else 0, w.usd, f"{why}, within what the world's money can reach by "
                                                             "its tick")


def _index(size: Callable[[WorldParams], int], what: str) -> Callable[[_World], _Range]:
    return lambda w: _Range(0, size(w.params) - 1, f"an index of {what}")


def _count(per_tick: Callable[[WorldParams], int], what: str, why: str = "") -> Callable[[_World], _Range]:
    return lambda w: _Range(0, per_tick(w.params) * w.tick, f"{what}: at most {per_tick(w.params)} a tick{why}")


def _sign(w: _World) -> _Range:
    return _Range(-1, 1, "a sign (+1 YES or up, -1 NO or down, 0 for an empty slot)")


def _feed_tick(w: _World) -> _Range:
    return _Range(-1, w.tick, "the tick of a feed item (-1: an empty slot)")


def _serial(w: _World) -> _Range:
    return _Range(0, w.serial_max(), "a market serial already handed out (next_serial - 1 at most)")


def _signal(name: str) -> Callable[[_World], _Range]:
    return lambda w: _Range(-bounds.SIGNAL_MAX[name], bounds.SIGNAL_MAX[name], "decayed evidence")


def _prices(w: _World) -> _Range:
    return _Range(w.price_low, w.price_high, "a perp price, within the largest moves since reset")


def _reputation(w: _World) -> _Range:
    return _Range(0, bounds.REPUTATION_MAX, "a reputation")


_RANGES: dict[str, Callable[[_World], _Range] | None] = {
    # --- clock and randomness (the tick is checked first: the other ranges depend on it)
    "tick": None,
    "key": None,  # any 64-bit key
    # --- prediction markets
    "pm_yes": lambda w: _Range(bounds.pool_min(w.params, w.usd), w.usd, "a CPMM pool, shares"),
    "pm_no": lambda w: _Range(bounds.pool_min(w.params, w.usd), w.usd, "a CPMM pool, shares"),
    "pm_collateral": _usd(why="a market's collateral, USD"),
    "pm_house_yes": lambda w: _Range(0, bounds.house_shares_max(w.params), "the house's seed shares"),
    "pm_house_no": lambda w: _Range(0, bounds.house_shares_max(w.params), "the house's seed shares"),
    "pm_truth": lambda w: _Range(*bounds.TRUTH_RANGE, "a hidden true probability"),
    "pm_outcome": lambda w: _Range(0, 1, "an outcome (1: YES wins)"),
    "pm_open_tick": lambda w: _Range(0, w.tick, "a past tick"),
    "pm_resolve_tick": lambda w: _Range(w.tick, w.state.pm_open_tick + w.params.market_duration_max,
                                        "a tick from now to the market's opening plus market_duration_max"),
    "pm_serial": _serial,
    "pm_last_price": lambda w: _Range(0, 1, "a YES price"),
    "pm_npc_flow": lambda w: _Range(-w.usd / w.params.market_liquidity, w.usd / w.params.market_liquidity,
                                    "the NPCs' net buying / market_liquidity"),
    "next_serial": lambda w: _Range(w.params.num_markets, w.params.num_markets * (1 + w.tick),
                                    "markets opened so far (each slot at most once a tick)"),
    # --- the agent's account
    "cash": _usd(),
    "hold_yes": _usd(why="shares"),
    "hold_no": _usd(why="shares"),
    "cost_yes": _usd(signed=True, why="a cost basis, USD"),
    "cost_no": _usd(signed=True, why="a cost basis, USD"),
    "realized_pnl": _usd(signed=True),
    "fees_paid": _usd(),
    # --- perpetual futures
    "perp_price": _prices,
    "perp_prev_price": _prices,
    "perp_ema": _prices,
    "perp_funding": lambda w: _Range(-bounds.FUNDING_CAP, bounds.FUNDING_CAP, "a funding rate (clipped)"),
    "pos_side": _sign,
    "pos_notional": lambda w: _flat(w, w.params.min_order, w.params.max_leverage * w.usd[:, None],
                                    "a position's notional: from min_order to max_leverage x the world's money"),
    "pos_entry": lambda w: _flat(w, w.price_low, w.price_high, "an entry price"),
    "pos_leverage": lambda w: _flat(w, 1.0, w.params.max_leverage, "a leverage from 1 to max_leverage"),
    "pos_margin": lambda w: _flat(w, -w.usd[:, None], w.usd[:, None],
                                  "a margin in USD (funding can take it below 0 while the position gains)"),
    "pos_serial": lambda w: _Range(0, np.maximum(w.state.next_pos_serial - 1, 0), "a position serial handed out"),
    "next_pos_serial": _count(lambda p: 1, "positions opened"),
    "narr_active": None,
    "narr_ticker": _index(lambda p: p.num_perps, "the perps"),
    "narr_sign": _sign,
    "narr_tick": lambda w: _Range(0, w.tick + bounds.NARRATIVE_LEAD_MAX, "a narrative's event tick"),
    "narr_mag": lambda w: _Range(0, bounds.NARRATIVE_MOVE_MAX, "a narrative's log-return size"),
    # --- NPCs
    "npc_cash": _usd(),
    "npc_yes": _usd(why="shares"),
    "npc_no": _usd(why="shares"),
    "npc_rep": _reputation,
    "npc_claims": lambda w: _Range(-w.tick, w.tick, "net claims (at most one post a tick)"),
    # --- information the agent can read
    "news_acc": _signal("news_acc"),
    "post_acc": _signal("post_acc"),
    "group_acc": _signal("group_acc"),
    "perp_news_acc": _signal("perp_news_acc"),
    # --- social
    "joined": None,
    "posts_created": _count(lambda p: 1, "posts"),
    "dms_sent": _count(lambda p: 1, "messages"),
    "followers": _count(lambda p: 1 + int(bounds.REPUTATION_MAX), "followers", " (a post adds 1 + reputation // 25)"),
    "reputation": _reputation,
    # --- feeds
    "news_count": _count(lambda p: 2, "news items", " (market news, and a narrative's leak or its event)"),
    "news_tick": _feed_tick,
    "news_kind": lambda w: _Range(0, 2, "a news kind (0 market, 1 leak, 2 announcement)"),
    "news_target": lambda w: _Range(0, np.where(w.market_news(), w.params.num_markets, w.params.num_perps) - 1,
                                    "a market slot (market news) or a perp index"),
    "news_serial": lambda w: _Range(0, np.where(w.market_news(), w.serial_max()[:, None], 0),
                                    "a market serial handed out (0 for perp news)"),
    "news_source": _index(lambda p: len(NEWS_SOURCES), "the news sources"),
    "news_signal": _sign,
    "post_count": _count(lambda p: 1, "posts"),
    "post_tick": _feed_tick,
    "post_author": _index(lambda p: p.num_npcs, "the NPCs"),
    "post_target": _index(lambda p: p.num_markets, "the market slots"),
    "post_serial": _serial,
    "post_signal": _sign,
    "tip_count": _count(lambda p: p.num_groups, "tips", " (one per group)"),
    "tip_tick": _feed_tick,
    "tip_group": _index(lambda p: p.num_groups, "the groups"),
    "tip_target": _index(lambda p: p.num_markets, "the market slots"),
    "tip_serial": _serial,
    "tip_signal": _sign,
    # --- accounting
    "house_cash": _usd(signed=True),
    "fees_collected": _usd(),
}
"""The allowed values (None: any value of its dtype) of every `WorldState` field whose range depends on the tick or
the config; a field with a constant range declares it with the field (`sim.state._array`'s bounds)."""
_DECLARED = {spec.name: spec.bounds for spec in field_specs() if spec.bounds is not None}
_unranged = [spec.name for spec in field_specs() if (spec.name in _RANGES) == (spec.name in _DECLARED)]
assert not _unranged, f"each WorldState field needs one range, in sim/state.py (constant) or here: {_unranged}"

_BACKED = ("pm_yes", "pm_no", "pm_house_yes", "pm_house_no", "hold_yes", "hold_no")
"""Share holdings of a market (the pool's, the house's, the agent's): each at most its collateral, as the NPCs'
together are (a share is a half of a complete set, and each set is 1 USD of collateral)."""


def _template(params: WorldParams) -> WorldState:
    return reset(params, np.zeros(1, dtype=np.uint64), compiled=False)


def _broadcast(bound, arr: np.ndarray) -> np.ndarray:
    """A bound as an array against the field `arr`: a per-world (B,) bound gets trailing axes."""
    bound = np.asarray(bound)
    if bound.ndim == 1 and arr.ndim > 1:
        bound = bound.reshape(-1, *([1] * (arr.ndim - 1)))
    return np.broadcast_to(bound, arr.shape)


def _shown(x) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _within(name: str, arr: np.ndarray, rng: _Range) -> None:
    low, high = _broadcast(rng.low, arr), _broadcast(rng.high, arr)
    if arr.dtype.kind == "f":
        low = low - _SLACK * np.abs(low)
        high = high + _SLACK * np.abs(high)
    bad = (arr < low) | (arr > high)
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        at = f" at {list(i[1:])}" if len(i) > 1 else ""
        raise ValueError(f"world field {name!r}{at} must lie in [{_shown(low[i].item())}, {_shown(high[i].item())}] "
                         f"({rng.why}), got {_shown(arr[i].item())}")


def check_state(state: WorldState, params: WorldParams, batch_size: int = 1) -> None:
    """Raise ValueError naming the first field that a world of `params` could not hold.

    Args:
        state: the state to check (its arrays are not modified).
        params: the world size and rules the state claims to belong to.
        batch_size: the number of worlds B it must hold.
    """
    template = _template(params)
    for f in fields(WorldState):
        value, want = getattr(state, f.name), getattr(template, f.name)
        shape = (batch_size, *want.shape[1:])
        if not isinstance(value, np.ndarray) or value.dtype != want.dtype or value.shape != shape:
            got = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
            raise ValueError(f"world field {f.name!r} must be a {want.dtype} array of shape {shape}, got {got}")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ValueError(f"world field {f.name!r} holds a NaN or an infinity")
    _within("tick", state.tick, _Range(0, params.num_ticks, "ticks elapsed, at most num_ticks"))
    low, high = bounds.perp_price_range(params, state.tick)
    world = _World(state, params, state.tick, bounds.money(params, state.tick), low, high, state.pos_side != 0)
    for name, rule in _RANGES.items():
        if rule is not None:
            _within(name, getattr(state, name), rule(world))
    for name, (low, high, why) in _DECLARED.items():
        _within(name, getattr(state, name), _Range(low, high, why))
    collateral = state.pm_collateral
    backed = _Range(0, collateral, "shares, each backed by 1 USD of the market's collateral")
    for name in _BACKED:
        _within(name, getattr(state, name), backed)
    for name in ("npc_yes", "npc_no"):
        _within(f"{name} (summed over NPCs)", getattr(state, name).sum(axis=1), backed)
    _laws(world)


def _equal(what: str, terms: list[np.ndarray], want, why: str) -> None:
    """Refuse a state whose `terms` do not sum to `want` (each (B,) or (B, M)), within rounding of their sizes."""
    total = sum(terms)
    size = sum(np.abs(t) for t in terms) + np.abs(want)
    bad = np.abs(total - want) > _SLACK * size
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        at = f" at {list(i[1:])}" if len(i) > 1 else ""
        raise ValueError(f"world fields {what}{at} must sum to {_shown(float(np.broadcast_to(want, bad.shape)[i]))} "
                         f"({why}), got {_shown(float(total[i]))}")


def _laws(w: _World) -> None:
    """What the rules keep across fields, each field within its own range or not: a state breaking one is no state
    the world reaches, and its episode may not play on (pools whose product is 0 price a share at 0 / 0; shares
    and money beyond what backs them grow past every bound)."""
    s, p = w.state, w.params
    for side in ("yes", "no"):
        _equal(f"pm_{side} + hold_{side} + npc_{side} (summed over NPCs) + pm_house_{side}",
               [getattr(s, f"pm_{side}"), getattr(s, f"hold_{side}"), getattr(s, f"npc_{side}").sum(axis=1),
                getattr(s, f"pm_house_{side}")], s.pm_collateral,
               f"pm_collateral: every {side.upper()} share is half of a complete set, 1 USD of the market's collateral")
    low, high = bounds.pool_product_range(p)
    _within("pm_yes x pm_no", s.pm_yes * s.pm_no,
            _Range(low * (1 - _K_DRIFT), high * (1 + _K_DRIFT),
                   f"the CPMM's invariant k: 4 x market_liquidity^2 x p0 (1 - p0) for an opening price p0 in "
                   f"{bounds.OPENING_PRICE_RANGE}, with market_liquidity = {p.market_liquidity:g}; trades keep it"))
    _equal("cash + pos_margin + npc_cash + pm_collateral + fees_collected + house_cash",
           [s.cash, s.pos_margin.sum(axis=1), s.npc_cash.sum(axis=1), s.pm_collateral.sum(axis=1), s.fees_collected,
            s.house_cash], bounds.reset_money(p),
           f"what the world started with: starting_cash + num_npcs x npc_starting_cash = {p.starting_cash:g} + "
           f"{p.num_npcs} x {p.npc_starting_cash:g}; the rules move money between these accounts, never make or "
           "destroy it")
    outside = (s.cash + (s.pos_margin + np.maximum(unrealized_pnl(s), 0.0)).sum(axis=1) + s.npc_cash.sum(axis=1)
               + s.pm_collateral.sum(axis=1) + s.fees_collected)
    _within("cash + pos_margin + open perp gains + npc_cash + pm_collateral + fees_collected", outside,
            _Range(0, w.usd, "the money outside the house, within what it can reach by the tick: sim.bounds.money"))
