"""Is a world state read from outside the process one the engine could have made?

A snapshot token or a dataset row carries a `WorldState` as plain arrays. Before any kernel reads
it, `check_state` checks what the engine relies on: every field has the dtype and shape `reset`
gives for these params (the compiled kernels index without bounds checks), every float is finite,
every index (a perp, an NPC, a group, a news source) is in range, counts are not negative and
pools are positive. It does not prove the state is reachable; it proves stepping it is safe.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from .engine import reset
from .params import NEWS_SOURCES, WorldParams
from .state import WorldState

__all__ = ["check_state"]

_NONNEGATIVE = ("next_serial", "next_pos_serial", "posts_created", "dms_sent", "followers", "news_count",
                "post_count", "tip_count", "hold_yes", "hold_no", "pm_collateral", "npc_yes", "npc_no",
                "pos_notional", "pos_margin", "pos_leverage", "fees_paid", "fees_collected", "pm_open_tick",
                "pm_resolve_tick", "pm_serial", "pos_serial", "narr_tick", "narr_mag")
_POSITIVE = ("pm_yes", "pm_no", "perp_price", "perp_prev_price", "perp_ema")
_SIGNS = ("pos_side", "news_signal", "post_signal", "tip_signal")
_FEED_TICKS = ("news_tick", "post_tick", "tip_tick")


def _template(params: WorldParams) -> WorldState:
    return reset(params, np.zeros(1, dtype=np.uint64))


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

    def within(name: str, low: float, high: float, values: np.ndarray | None = None) -> None:
        arr = getattr(state, name) if values is None else values
        if arr.size and (arr.min() < low or arr.max() > high):
            raise ValueError(f"world field {name!r} must lie in [{low}, {high}], got values in "
                             f"[{arr.min()}, {arr.max()}]")

    for name in _NONNEGATIVE:
        within(name, 0, np.inf)
    for name in _POSITIVE:
        arr = getattr(state, name)
        if arr.size and arr.min() <= 0:
            raise ValueError(f"world field {name!r} must be positive, got {arr.min()}")
    for name in _SIGNS:
        within(name, -1, 1)
    for name in _FEED_TICKS:
        within(name, -1, np.inf)
    within("tick", 0, params.num_ticks)
    within("pm_outcome", 0, 1)
    within("pm_truth", 0, 1)
    within("npc_rep", 0, 100)
    within("narr_ticker", 0, params.num_perps - 1)
    within("news_kind", 0, 2)
    within("news_source", 0, len(NEWS_SOURCES) - 1)
    market_news = state.news_kind == 0
    within("news_target", 0, params.num_markets - 1, state.news_target[market_news])
    within("news_target", 0, params.num_perps - 1, state.news_target[~market_news])
    within("post_author", 0, params.num_npcs - 1)
    within("post_target", 0, params.num_markets - 1)
    within("tip_group", 0, params.num_groups - 1)
    within("tip_target", 0, params.num_markets - 1)
    open_positions = state.pos_side != 0
    for name in ("pos_entry", "pos_leverage"):
        arr = getattr(state, name)[open_positions]
        if arr.size and arr.min() <= 0:
            raise ValueError(f"world field {name!r} must be positive for an open position, got {arr.min()}")
