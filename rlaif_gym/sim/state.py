"""The state of a batch of worlds: numpy arrays with a leading world dimension B.

Ground truth (`pm_truth`, `pm_outcome`, the narrative fields and the world `key`, which fixes every
future draw) lives here next to the public state. Observation encoders must read only the fields in
`PUBLIC_FIELDS`; a test perturbs the others and checks that observations do not move.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np

__all__ = ["FEED_LENGTH", "GROUND_TRUTH_FIELDS", "FieldSpec", "WorldState", "field_specs"]

FEED_LENGTH = 16
"""Ring-buffer length of each feed (news, posts, group tips) per world."""

_F, _I, _U, _B = np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64), np.dtype(np.bool_)


class FieldSpec(NamedTuple):
    """What a `WorldState` field holds: its dtype, its dimensions after the world dimension B (named
    M markets, P perps, K NPCs, G groups, R feed slots) and the value `WorldState.allocate` fills it with."""

    name: str
    dtype: np.dtype
    dims: tuple[str, ...]
    fill: float
    bounds: tuple[float, float, str] | None = None


def _array(dtype: np.dtype, *dims: str, fill: float = 0, bounds: tuple[float, float, str] | None = None) -> Any:
    """A `WorldState` field declaration: the one place its dtype, shape and initial value are written (the
    state allocates from it, and the kernels derive their packed layout and views from it).

    bounds: (low, high, why), the values the rules can give the field whatever the tick and the config, for a field
    whose range is a constant (`sim.validate.check_state` refuses a restored state outside it); a field whose range
    depends on the tick or the config has its entry in `sim.validate` instead."""
    return field(metadata={"dtype": dtype, "dims": dims, "fill": fill, "bounds": bounds})


@dataclass
class WorldState:
    """Every array has the world dimension first. M markets, P perps, K NPCs, G groups, R feed slots.

    Each field is declared once, with its dtype, dimensions and initial value (`_array`; read them with
    `field_specs`): `allocate`, reset and the kernels' packed layout all derive from it.
    """

    # --- clock and randomness
    tick: np.ndarray = _array(_I)  # ticks elapsed
    key: np.ndarray = _array(_U)  # fixes every future random draw (ground truth)

    # --- prediction markets (CPMM pools, in shares)
    pm_yes: np.ndarray = _array(_F, "M")
    pm_no: np.ndarray = _array(_F, "M")
    pm_collateral: np.ndarray = _array(_F, "M")  # USD locked in the market (= YES shares outstanding = NO shares)
    pm_house_yes: np.ndarray = _array(_F, "M")  # shares the house got when seeding an uneven pool
    pm_house_no: np.ndarray = _array(_F, "M")
    pm_truth: np.ndarray = _array(_F, "M")  # hidden true probability p* (ground truth)
    pm_outcome: np.ndarray = _array(_I, "M")  # 1 if YES wins (ground truth, drawn at creation)
    pm_open_tick: np.ndarray = _array(_I, "M")
    pm_resolve_tick: np.ndarray = _array(_I, "M")
    pm_serial: np.ndarray = _array(_I, "M")  # market id number ("market-<serial>")
    pm_last_price: np.ndarray = _array(_F, "M")  # YES price at the previous tick
    pm_npc_flow: np.ndarray = _array(_F, "M")  # NPC net YES-minus-NO USD last tick / liquidity
    next_serial: np.ndarray = _array(_I)

    # --- the agent's account
    cash: np.ndarray = _array(_F)  # USD
    hold_yes: np.ndarray = _array(_F, "M")  # shares
    hold_no: np.ndarray = _array(_F, "M")  # shares
    cost_yes: np.ndarray = _array(_F, "M")  # USD cost basis (fees included)
    cost_no: np.ndarray = _array(_F, "M")
    realized_pnl: np.ndarray = _array(_F)  # USD
    fees_paid: np.ndarray = _array(_F)  # USD

    # --- perpetual futures
    perp_price: np.ndarray = _array(_F, "P")  # USD
    perp_prev_price: np.ndarray = _array(_F, "P")
    perp_ema: np.ndarray = _array(_F, "P")  # 24-tick-ish exponential moving average of price
    perp_funding: np.ndarray = _array(_F, "P", fill=1e-4)  # funding rate per interval (fraction of notional)
    pos_side: np.ndarray = _array(_I, "P")  # +1 long, -1 short, 0 flat
    pos_notional: np.ndarray = _array(_F, "P")  # USD at entry
    pos_entry: np.ndarray = _array(_F, "P")  # entry price
    pos_leverage: np.ndarray = _array(_F, "P")
    pos_margin: np.ndarray = _array(_F, "P")  # USD
    pos_serial: np.ndarray = _array(_I, "P")  # ("pos-<serial>")
    next_pos_serial: np.ndarray = _array(_I)
    narr_active: np.ndarray = _array(_B)  # (ground truth)
    narr_ticker: np.ndarray = _array(_I)  # (ground truth)
    narr_sign: np.ndarray = _array(_F)  # (ground truth)
    narr_tick: np.ndarray = _array(_I)  # event tick (ground truth)
    narr_mag: np.ndarray = _array(_F)  # log-return size of the event (ground truth)

    # --- NPCs
    npc_cash: np.ndarray = _array(_F, "K")  # USD
    npc_yes: np.ndarray = _array(_F, "K", "M")  # shares
    npc_no: np.ndarray = _array(_F, "K", "M")
    npc_rep: np.ndarray = _array(_F, "K")  # reputation 0..100
    npc_claims: np.ndarray = _array(_F, "K", "M")  # net YES-minus-NO claims posted about the current market

    # --- information the agent can read (decayed, reliability-weighted signals)
    news_acc: np.ndarray = _array(_F, "M")
    post_acc: np.ndarray = _array(_F, "M")
    group_acc: np.ndarray = _array(_F, "G", "M")  # tips per group; visible only where joined
    perp_news_acc: np.ndarray = _array(_F, "P")

    # --- social
    joined: np.ndarray = _array(_B, "G")
    posts_created: np.ndarray = _array(_I)
    dms_sent: np.ndarray = _array(_I)
    followers: np.ndarray = _array(_I)
    reputation: np.ndarray = _array(_F, fill=50.0)

    # --- feeds (ring buffers of FEED_LENGTH, for the text face and the dashboard)
    news_count: np.ndarray = _array(_I)
    news_tick: np.ndarray = _array(_I, "R", fill=-1)
    news_kind: np.ndarray = _array(_I, "R")  # 0 market news, 1 perp leak, 2 perp announcement
    news_target: np.ndarray = _array(_I, "R")  # market slot or perp index
    news_serial: np.ndarray = _array(_I, "R")  # market serial (markets only)
    news_source: np.ndarray = _array(_I, "R")  # index into NEWS_SOURCES
    news_signal: np.ndarray = _array(_I, "R")  # +1 claims YES/up, -1 claims NO/down
    post_count: np.ndarray = _array(_I)
    post_tick: np.ndarray = _array(_I, "R", fill=-1)
    post_author: np.ndarray = _array(_I, "R")
    post_target: np.ndarray = _array(_I, "R")
    post_serial: np.ndarray = _array(_I, "R")
    post_signal: np.ndarray = _array(_I, "R")
    tip_count: np.ndarray = _array(_I)
    tip_tick: np.ndarray = _array(_I, "R", fill=-1)
    tip_group: np.ndarray = _array(_I, "R")
    tip_target: np.ndarray = _array(_I, "R")
    tip_serial: np.ndarray = _array(_I, "R")
    tip_signal: np.ndarray = _array(_I, "R")

    # --- accounting accounts that close the money identity
    house_cash: np.ndarray = _array(_F)  # USD paid out by the house (market seeding, perp PnL), may be < 0
    fees_collected: np.ndarray = _array(_F)  # USD of every fee, agent's and NPCs'

    # The compiled backend keeps the arrays as views of a few flat buffers (`sim.rules.packed`) and
    # caches those buffers in `_packed`. The cache is dropped whenever a field is rebound to another
    # array, and never copied or pickled (a copy's arrays are new, so its buffers must be too).

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, name, value)
        if name != "_packed":
            self.__dict__.pop("_packed", None)

    def __deepcopy__(self, memo) -> WorldState:
        return WorldState(**{f.name: copy.deepcopy(getattr(self, f.name), memo) for f in fields(self)})

    def __getstate__(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def allocate(cls, batch_size: int, sizes: Mapping[str, int]) -> WorldState:
        """A state of `batch_size` worlds with every field at its declared fill value.

        Args:
            sizes: the length of each named dimension ("M", "P", "K", "G"; "R" defaults to FEED_LENGTH).
        """
        sizes = {"R": FEED_LENGTH, **sizes}
        return cls(**{spec.name: np.full((batch_size, *(sizes[d] for d in spec.dims)), spec.fill, dtype=spec.dtype)
                      for spec in field_specs()})

    @property
    def batch_size(self) -> int:
        """Number of worlds B."""
        return int(self.tick.shape[0])

    def copy(self) -> WorldState:
        """A deep copy (forking a batch of worlds)."""
        return copy.deepcopy(self)

    def take(self, index) -> WorldState:
        """The sub-batch at `index` (an int array or slice), as copies."""
        return WorldState(**{f.name: np.array(getattr(self, f.name)[index]) for f in fields(self)})

    def put(self, index, other: WorldState) -> None:
        """Write the worlds of `other` into positions `index` of this batch (used by autoreset)."""
        for f in fields(self):
            getattr(self, f.name)[index] = getattr(other, f.name)


GROUND_TRUTH_FIELDS: tuple[str, ...] = (
    "key", "pm_truth", "pm_outcome", "narr_active", "narr_ticker", "narr_sign", "narr_tick", "narr_mag",
)
"""Fields no policy observation may depend on (the judge, the reward and analysis tools may)."""


def field_specs() -> tuple[FieldSpec, ...]:
    """Every `WorldState` field's `FieldSpec`, in declaration order."""
    return _FIELD_SPECS


_FIELD_SPECS = tuple(FieldSpec(f.name, *(f.metadata[k] for k in ("dtype", "dims", "fill", "bounds")))
                     for f in fields(WorldState))
