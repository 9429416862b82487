"""The state of a batch of worlds: numpy arrays with a leading world dimension B.

Ground truth (`pm_truth`, `pm_outcome`, the narrative fields and the world `key`, which fixes every
future draw) lives here next to the public state. Observation encoders must read only the fields in
`PUBLIC_FIELDS`; a test perturbs the others and checks that observations do not move.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields

import numpy as np

__all__ = ["FEED_LENGTH", "GROUND_TRUTH_FIELDS", "WorldState"]

FEED_LENGTH = 16
"""Ring-buffer length of each feed (news, posts, group tips) per world."""


@dataclass
class WorldState:
    """Every array has the world dimension first. M markets, P perps, K NPCs, G groups, R feed slots."""

    # --- clock and randomness
    tick: np.ndarray  # (B,) int64, ticks elapsed
    key: np.ndarray  # (B,) uint64, fixes every future random draw (ground truth)

    # --- prediction markets (CPMM pools, in shares)
    pm_yes: np.ndarray  # (B,M)
    pm_no: np.ndarray  # (B,M)
    pm_collateral: np.ndarray  # (B,M) USD locked in the market (= YES shares outstanding = NO shares)
    pm_house_yes: np.ndarray  # (B,M) shares the house got when seeding an uneven pool
    pm_house_no: np.ndarray  # (B,M)
    pm_truth: np.ndarray  # (B,M) hidden true probability p* (ground truth)
    pm_outcome: np.ndarray  # (B,M) int64, 1 if YES wins (ground truth, drawn at creation)
    pm_open_tick: np.ndarray  # (B,M) int64
    pm_resolve_tick: np.ndarray  # (B,M) int64
    pm_serial: np.ndarray  # (B,M) int64, market id number ("market-<serial>")
    pm_last_price: np.ndarray  # (B,M) YES price at the previous tick
    pm_npc_flow: np.ndarray  # (B,M) NPC net YES-minus-NO USD last tick / liquidity
    next_serial: np.ndarray  # (B,) int64

    # --- the agent's account
    cash: np.ndarray  # (B,) USD
    hold_yes: np.ndarray  # (B,M) shares
    hold_no: np.ndarray  # (B,M) shares
    cost_yes: np.ndarray  # (B,M) USD cost basis (fees included)
    cost_no: np.ndarray  # (B,M)
    realized_pnl: np.ndarray  # (B,) USD
    fees_paid: np.ndarray  # (B,) USD

    # --- perpetual futures
    perp_price: np.ndarray  # (B,P) USD
    perp_prev_price: np.ndarray  # (B,P)
    perp_ema: np.ndarray  # (B,P) 24-tick-ish exponential moving average of price
    perp_funding: np.ndarray  # (B,P) funding rate per interval (fraction of notional)
    pos_side: np.ndarray  # (B,P) int64: +1 long, -1 short, 0 flat
    pos_notional: np.ndarray  # (B,P) USD at entry
    pos_entry: np.ndarray  # (B,P) entry price
    pos_leverage: np.ndarray  # (B,P)
    pos_margin: np.ndarray  # (B,P) USD
    pos_serial: np.ndarray  # (B,P) int64 ("pos-<serial>")
    next_pos_serial: np.ndarray  # (B,) int64
    narr_active: np.ndarray  # (B,) bool (ground truth)
    narr_ticker: np.ndarray  # (B,) int64 (ground truth)
    narr_sign: np.ndarray  # (B,) float (ground truth)
    narr_tick: np.ndarray  # (B,) int64 event tick (ground truth)
    narr_mag: np.ndarray  # (B,) log-return size of the event (ground truth)

    # --- NPCs
    npc_cash: np.ndarray  # (B,K) USD
    npc_yes: np.ndarray  # (B,K,M) shares
    npc_no: np.ndarray  # (B,K,M)
    npc_rep: np.ndarray  # (B,K) reputation 0..100
    npc_claims: np.ndarray  # (B,K,M) net YES-minus-NO claims posted about the current market

    # --- information the agent can read (decayed, reliability-weighted signals)
    news_acc: np.ndarray  # (B,M)
    post_acc: np.ndarray  # (B,M)
    group_acc: np.ndarray  # (B,G,M) tips per group; visible only where joined
    perp_news_acc: np.ndarray  # (B,P)

    # --- social
    joined: np.ndarray  # (B,G) bool
    posts_created: np.ndarray  # (B,) int64
    dms_sent: np.ndarray  # (B,) int64
    followers: np.ndarray  # (B,) int64
    reputation: np.ndarray  # (B,) float

    # --- feeds (ring buffers of FEED_LENGTH, for the text face and the dashboard)
    news_count: np.ndarray  # (B,) int64
    news_tick: np.ndarray  # (B,R) int64
    news_kind: np.ndarray  # (B,R) int64: 0 market news, 1 perp leak, 2 perp announcement
    news_target: np.ndarray  # (B,R) int64 market slot or perp index
    news_serial: np.ndarray  # (B,R) int64 market serial (markets only)
    news_source: np.ndarray  # (B,R) int64 index into NEWS_SOURCES
    news_signal: np.ndarray  # (B,R) int64 +1 claims YES/up, -1 claims NO/down
    post_count: np.ndarray
    post_tick: np.ndarray
    post_author: np.ndarray
    post_target: np.ndarray
    post_serial: np.ndarray
    post_signal: np.ndarray
    tip_count: np.ndarray
    tip_tick: np.ndarray
    tip_group: np.ndarray
    tip_target: np.ndarray
    tip_serial: np.ndarray
    tip_signal: np.ndarray

    # --- accounting accounts that close the money identity
    house_cash: np.ndarray  # (B,) USD paid out by the house (market seeding, perp PnL), may be < 0
    fees_collected: np.ndarray  # (B,) USD of every fee, agent's and NPCs'

    # The compiled backend keeps the arrays as views of a few flat buffers (`sim.fast.packed`) and
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
