"""`TickView`: the read-only, JSON-able snapshot of what the agent may see at one tick.

Both faces are built from it (the prompt text here, the numeric vector from the same public state
fields), and the rule judge checks a reply's claims against it. It is made only from public state:
never the hidden truth, the narrative schedule or the world key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache

from ..sim import (
    FEED_LENGTH,
    GROUP_NAMES,
    NEWS_SOURCES,
    PERP_TICKERS,
    QUESTIONS,
    WorldParams,
    WorldState,
    equity,
    npc_name,
)

__all__ = ["FeedItem", "MarketView", "PerpView", "TickView", "build_view", "mirror_view", "npc_name",
           "pairwise_sum"]


@dataclass(slots=True)
class FeedItem:
    """One news item, post or group tip (treat as read-only; not frozen, which costs 4x to build).

    `direction` is +1 when it points to YES (or up for a perp), -1 for NO (or down). `subject` is a
    market id ("market-7") or a ticker.
    """

    tick: int
    kind: str  # "news", "leak", "announcement", "post", "tip"
    subject: str
    direction: int
    source: str  # news source, NPC name or group name
    source_detail: str = ""  # e.g. "reputation 72" for a post


@dataclass(slots=True)
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


@dataclass(slots=True)
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


_SIDED_KINDS = ("news", "post", "tip")  # feed items that name a prediction market's side (the others: a perp's move)


def mirror_view(view: TickView) -> TickView:
    """The view of the same tick in the YES/NO mirror of the world: every prediction market's sides swapped.

    Each YES price p becomes 1 - p and its last hour's change changes sign; YES and NO holdings (and their
    costs) trade places; every news item, post and tip about a market points to the other side. Perps, cash
    and equity are unchanged (held shares are worth the same at the mirrored price). The world's rules are
    symmetric under this map (the hidden p* and the opening price are drawn symmetric about 1/2, every source
    reports the outcome's side at its own reliability, NPCs trade on the gap to their belief either way, and the
    CPMM prices both sides alike; only the order of a tick's NPC trades alternates by tick), so a mirrored
    state is as likely as the state itself, and buying one side there earns what buying the other earns here:
    a training point's mirror is a second point whose better side is the other one (the TRL example's
    `--mirror-share`, docs/trl.md). Applying it twice gives the view back.
    """
    markets = tuple(replace(m, yes_price=1.0 - m.yes_price, change=0.0 - m.change,  # 0.0 - 0.0 is +0.0, not -0.0
                            held_yes=m.held_no, held_no=m.held_yes, cost_yes=m.cost_no, cost_no=m.cost_yes)
                    for m in view.markets)

    def flipped(items: tuple[FeedItem, ...]) -> tuple[FeedItem, ...]:
        return tuple(replace(i, direction=-i.direction) if i.kind in _SIDED_KINDS else i for i in items)

    return replace(view, markets=markets, news=flipped(view.news), posts=flipped(view.posts),
                   tips=flipped(view.tips))


def _ring(count: int) -> range:
    """Ring-buffer slots from newest to oldest (as `i % FEED_LENGTH` for i = count-1 down)."""
    return range(count - 1, max(count - FEED_LENGTH, 0) - 1, -1)


@lru_cache(maxsize=32)
def _static_names(num_npcs: int, num_groups: int) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """NPC display names, their "agent-k name" labels and the group names (fixed per world size)."""
    names = tuple(npc_name(k) for k in range(num_npcs))
    return names, tuple(f"agent-{k} {n}" for k, n in enumerate(names)), tuple(g[0] for g in GROUP_NAMES[:num_groups])


def pairwise_sum(values: list[float]) -> float:
    """numpy's sum of `values` bit for bit (its pairwise order on a contiguous axis, as `sim.rules` has it):
    for the few values of one world's row, summing in Python costs less than a numpy call."""
    n = len(values)
    if n < 8:
        res = 0.0
        for v in values:
            res += v
        return res
    r = values[:8]
    stop = n - n % 8
    for i in range(8, stop, 8):
        for k in range(8):
            r[k] += values[i + k]
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for i in range(stop, n):
        res += values[i]
    return 0.0 + res


def build_view(state: WorldState, params: WorldParams, b: int, equity_now: float | None = None) -> TickView:
    """The public view of world `b`.

    Args:
        state, params, b: the world.
        equity_now: `sim.equity(state, params)[b]` when the caller has it (a step's `equity_after`), which
            saves a numpy reduction per tick; None computes it.

    Each state array's row `b` is read once into a Python list: indexing numpy scalars one by one
    costs about ten times more, and this runs once per text-env tick. The exposure is summed from those
    lists in numpy's order, so it equals `sim.exposure` bit for bit.
    """
    s = state
    t = int(s.tick[b])
    ty, tn = s.pm_yes[b].tolist(), s.pm_no[b].tolist()
    price = [n / (y + n) for y, n in zip(ty, tn, strict=True)]  # sim.yes_price
    serial, last, resolve = s.pm_serial[b].tolist(), s.pm_last_price[b].tolist(), s.pm_resolve_tick[b].tolist()
    hy, hn, cy, cn = s.hold_yes[b].tolist(), s.hold_no[b].tolist(), s.cost_yes[b].tolist(), s.cost_no[b].tolist()
    nq = len(QUESTIONS)
    markets = tuple([
        MarketView(f"market-{serial[m]}", m, QUESTIONS[serial[m] % nq], price[m], price[m] - last[m], resolve[m] - t,
                   hy[m], hn[m], cy[m], cn[m])
        for m in range(params.num_markets)
    ])
    shares = pairwise_sum([hy[m] * price[m] + hn[m] * (1.0 - price[m]) for m in range(params.num_markets)])
    perps = []
    notionals = []
    pside, pentry, plev, pnot, pserial = (s.pos_side[b].tolist(), s.pos_entry[b].tolist(), s.pos_leverage[b].tolist(),
                                          s.pos_notional[b].tolist(), s.pos_serial[b].tolist())
    pprice, pprev, pema, pfund = (s.perp_price[b].tolist(), s.perp_prev_price[b].tolist(), s.perp_ema[b].tolist(),
                                  s.perp_funding[b].tolist())
    for p in range(params.num_perps):
        side, price_p = int(pside[p]), pprice[p]
        change, vs_average = 100.0 * (price_p / pprev[p] - 1.0), 100.0 * (price_p / pema[p] - 1.0)
        funding = 1e4 * pfund[p]
        if side:
            entry, lev, notional = pentry[p], plev[p], pnot[p]
            notionals.append(abs(side) * notional * price_p / entry)  # sim.exposure's perp term
            perps.append(PerpView(PERP_TICKERS[p], p, price_p, change, vs_average, funding, f"pos-{pserial[p]}",
                                  "LONG" if side > 0 else "SHORT", notional, entry, lev,
                                  side * (price_p / entry - 1.0) * notional, entry * (1.0 - side * 0.9 / lev)))
        else:
            notionals.append(0.0 * pnot[p] * price_p)  # 0, or NaN where the numpy form gives NaN
            perps.append(PerpView(PERP_TICKERS[p], p, price_p, change, vs_average, funding, None, None, 0.0, 0.0, 0.0,
                                  0.0, 0.0))
    names, labels, groups = _static_names(params.num_npcs, params.num_groups)
    news = []
    n_kind, n_tick, n_serial, n_signal, n_source, n_target = (
        s.news_kind[b].tolist(), s.news_tick[b].tolist(), s.news_serial[b].tolist(), s.news_signal[b].tolist(),
        s.news_source[b].tolist(), s.news_target[b].tolist())
    for i in _ring(int(s.news_count[b])):
        j = i % FEED_LENGTH
        kind = n_kind[j]
        if kind == 0:
            news.append(FeedItem(n_tick[j], "news", f"market-{n_serial[j]}", n_signal[j],
                                 NEWS_SOURCES[n_source[j]][0]))
        else:
            news.append(FeedItem(n_tick[j], "leak" if kind == 1 else "announcement", PERP_TICKERS[n_target[j]],
                                 n_signal[j], "rumour mill" if kind == 1 else "exchange"))
    p_tick, p_serial, p_signal, p_author = (s.post_tick[b].tolist(), s.post_serial[b].tolist(),
                                            s.post_signal[b].tolist(), s.post_author[b].tolist())
    rep = s.npc_rep[b].tolist()
    posts = []
    for i in _ring(int(s.post_count[b])):
        j = i % FEED_LENGTH
        author = p_author[j]
        posts.append(FeedItem(p_tick[j], "post", f"market-{p_serial[j]}", p_signal[j], names[author],
                              f"reputation {rep[author]:.0f}"))
    joined = s.joined[b].tolist()
    t_tick, t_serial, t_signal, t_group = (s.tip_tick[b].tolist(), s.tip_serial[b].tolist(), s.tip_signal[b].tolist(),
                                           s.tip_group[b].tolist())
    tips = []
    for i in _ring(int(s.tip_count[b])):
        j = i % FEED_LENGTH
        if joined[t_group[j]]:
            tips.append(FeedItem(t_tick[j], "tip", f"market-{t_serial[j]}", t_signal[j], GROUP_NAMES[t_group[j]][0]))
    eq = float(equity(state, params)[b]) if equity_now is None else float(equity_now)
    exposure_now = shares + pairwise_sum(notionals)
    return TickView(
        tick=t, num_ticks=params.num_ticks, cash=float(s.cash[b]), equity=eq,
        realized_pnl=float(s.realized_pnl[b]), fees_paid=float(s.fees_paid[b]),
        exposure_ratio=exposure_now / max(eq, 1e-9), markets=markets, perps=tuple(perps),
        news=tuple(news), posts=tuple(posts), tips=tuple(tips),
        groups=tuple((name, bool(joined[g])) for g, name in enumerate(groups)),
        npcs=labels,
    )
