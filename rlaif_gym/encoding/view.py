"""`TickView`: the read-only, JSON-able snapshot of what the agent may see at one tick.

Both faces are built from it (the prompt text here, the numeric vector from the same public state
fields), and the rule judge checks a reply's claims against it. It is made only from public state:
never the hidden truth, the narrative schedule or the world key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..sim import (
    FEED_LENGTH,
    GROUP_NAMES,
    NEWS_SOURCES,
    NPC_NAMES,
    PERP_TICKERS,
    QUESTIONS,
    WorldParams,
    WorldState,
    equity,
    exposure,
    yes_price,
)

__all__ = ["FeedItem", "MarketView", "PerpView", "TickView", "build_view", "npc_name"]


def npc_name(k: int) -> str:
    """Display name of NPC `k`."""
    base = NPC_NAMES[k % len(NPC_NAMES)]
    return base if k < len(NPC_NAMES) else f"{base} {k // len(NPC_NAMES) + 1}"


@dataclass(frozen=True)
class FeedItem:
    """One news item, post or group tip.

    `direction` is +1 when it points to YES (or up for a perp), -1 for NO (or down). `subject` is a
    market id ("market-7") or a ticker.
    """

    tick: int
    kind: str  # "news", "leak", "announcement", "post", "tip"
    subject: str
    direction: int
    source: str  # news source, NPC name or group name
    source_detail: str = ""  # e.g. "reputation 72" for a post


@dataclass(frozen=True)
class MarketView:
    market_id: str
    slot: int
    question: str
    yes_price: float
    change: float  # YES price change over the last tick
    resolves_in: int  # ticks
    held_yes: float
    held_no: float
    cost_yes: float
    cost_no: float


@dataclass(frozen=True)
class PerpView:
    ticker: str
    index: int
    price: float
    change_pct: float  # over the last tick
    vs_average_pct: float  # price vs its moving average
    funding_bp: float  # per funding interval, basis points
    position_id: str | None
    side: str | None  # "LONG" / "SHORT"
    notional: float
    entry: float
    leverage: float
    unrealized: float
    liquidation_price: float


@dataclass(frozen=True)
class TickView:
    tick: int
    num_ticks: int
    cash: float
    equity: float
    realized_pnl: float
    fees_paid: float
    exposure_ratio: float
    markets: tuple[MarketView, ...]
    perps: tuple[PerpView, ...]
    news: tuple[FeedItem, ...]  # newest first
    posts: tuple[FeedItem, ...]
    tips: tuple[FeedItem, ...]  # only from joined groups
    groups: tuple[tuple[str, bool], ...]  # (name, joined)
    npcs: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        """A JSON-able dict (for trajectories)."""
        return asdict(self)

    def market(self, market_id: str) -> MarketView | None:
        """The market with this id, if it is open."""
        return next((m for m in self.markets if m.market_id == market_id), None)


def _ring(count: int):
    """Ring-buffer slots from newest to oldest."""
    return [i % FEED_LENGTH for i in range(count - 1, max(count - FEED_LENGTH, 0) - 1, -1)]


def build_view(state: WorldState, params: WorldParams, b: int) -> TickView:
    """The public view of world `b`."""
    t = int(state.tick[b])
    price = yes_price(state.pm_yes[b], state.pm_no[b])
    markets = tuple(
        MarketView(
            market_id=f"market-{int(state.pm_serial[b, m])}", slot=m,
            question=QUESTIONS[int(state.pm_serial[b, m]) % len(QUESTIONS)],
            yes_price=float(price[m]), change=float(price[m] - state.pm_last_price[b, m]),
            resolves_in=int(state.pm_resolve_tick[b, m]) - t,
            held_yes=float(state.hold_yes[b, m]), held_no=float(state.hold_no[b, m]),
            cost_yes=float(state.cost_yes[b, m]), cost_no=float(state.cost_no[b, m]),
        )
        for m in range(params.num_markets)
    )
    perps = []
    for p in range(params.num_perps):
        side = int(state.pos_side[b, p])
        entry, lev = float(state.pos_entry[b, p]), float(state.pos_leverage[b, p])
        price_p = float(state.perp_price[b, p])
        perps.append(PerpView(
            ticker=PERP_TICKERS[p], index=p, price=price_p,
            change_pct=100.0 * (price_p / float(state.perp_prev_price[b, p]) - 1.0),
            vs_average_pct=100.0 * (price_p / float(state.perp_ema[b, p]) - 1.0),
            funding_bp=1e4 * float(state.perp_funding[b, p]),
            position_id=f"pos-{int(state.pos_serial[b, p])}" if side else None,
            side=("LONG" if side > 0 else "SHORT") if side else None,
            notional=float(state.pos_notional[b, p]) if side else 0.0,
            entry=entry if side else 0.0, leverage=lev if side else 0.0,
            unrealized=side * (price_p / entry - 1.0) * float(state.pos_notional[b, p]) if side else 0.0,
            liquidation_price=entry * (1.0 - side * 0.9 / lev) if side else 0.0,
        ))
    news = []
    for j in _ring(int(state.news_count[b])):
        kind = int(state.news_kind[b, j])
        if kind == 0:
            news.append(FeedItem(int(state.news_tick[b, j]), "news", f"market-{int(state.news_serial[b, j])}",
                                 int(state.news_signal[b, j]), NEWS_SOURCES[int(state.news_source[b, j])][0]))
        else:
            news.append(FeedItem(int(state.news_tick[b, j]), "leak" if kind == 1 else "announcement",
                                 PERP_TICKERS[int(state.news_target[b, j])], int(state.news_signal[b, j]),
                                 "rumour mill" if kind == 1 else "exchange"))
    posts = [
        FeedItem(int(state.post_tick[b, j]), "post", f"market-{int(state.post_serial[b, j])}",
                 int(state.post_signal[b, j]), npc_name(int(state.post_author[b, j])),
                 f"reputation {float(state.npc_rep[b, int(state.post_author[b, j])]):.0f}")
        for j in _ring(int(state.post_count[b]))
    ]
    tips = [
        FeedItem(int(state.tip_tick[b, j]), "tip", f"market-{int(state.tip_serial[b, j])}",
                 int(state.tip_signal[b, j]), GROUP_NAMES[int(state.tip_group[b, j])][0])
        for j in _ring(int(state.tip_count[b]))
        if state.joined[b, int(state.tip_group[b, j])]
    ]
    eq = float(equity(state)[b])
    return TickView(
        tick=t, num_ticks=params.num_ticks, cash=float(state.cash[b]), equity=eq,
        realized_pnl=float(state.realized_pnl[b]), fees_paid=float(state.fees_paid[b]),
        exposure_ratio=float(exposure(state)[b]) / max(eq, 1e-9), markets=markets, perps=tuple(perps),
        news=tuple(news), posts=tuple(posts), tips=tuple(tips),
        groups=tuple((GROUP_NAMES[g][0], bool(state.joined[b, g])) for g in range(params.num_groups)),
        npcs=tuple(f"agent-{k} {npc_name(k)}" for k in range(params.num_npcs)),
    )


