"""Rendering: a text dashboard (`ansi`) and a numpy-drawn chart (`rgb_array`), no plotting library."""

from __future__ import annotations

import numpy as np

from .. import sim

__all__ = ["format_price", "render_ansi", "render_chart"]


def format_price(p: float) -> str:
    """A 0..1 price as cents with one decimal, e.g. 0.62 -> "62.0¢" (the original printed "1¢")."""
    return f"{100.0 * p:.1f}¢"


def _question(serial: int) -> str:
    return sim.QUESTIONS[serial % len(sim.QUESTIONS)]


def render_ansi(state: sim.WorldState, params: sim.WorldParams, b: int, feedback: dict | None) -> str:
    """A readable dashboard of world `b`: account, markets, perps, feeds and the last feedback."""
    price = sim.yes_price(state.pm_yes[b], state.pm_no[b])
    eq = float(sim.equity(state.take([b]))[0])
    t = int(state.tick[b])
    lines = [
        f"=== Babylon tick {t}/{params.num_ticks} ===",
        f"equity ${eq:,.2f}  cash ${state.cash[b]:,.2f}  realized ${state.realized_pnl[b]:,.2f}  "
        f"fees ${state.fees_paid[b]:,.2f}",
        "-- prediction markets --",
    ]
    for m in range(params.num_markets):
        serial = int(state.pm_serial[b, m])
        held = ""
        if state.hold_yes[b, m] > 0 or state.hold_no[b, m] > 0:
            held = f"  held YES {state.hold_yes[b, m]:.1f} / NO {state.hold_no[b, m]:.1f}"
        lines.append(
            f"market-{serial:<3d} YES {format_price(price[m]):>6} NO {format_price(1 - price[m]):>6}  "
            f"resolves in {int(state.pm_resolve_tick[b, m]) - t:>2d}h  {_question(serial)}{held}"
        )
    lines.append("-- perps --")
    for p in range(params.num_perps):
        chg = 100.0 * (state.perp_price[b, p] / state.perp_prev_price[b, p] - 1.0)
        pos = ""
        if state.pos_side[b, p] != 0:
            side = "LONG" if state.pos_side[b, p] > 0 else "SHORT"
            notional, entry, lev = state.pos_notional[b, p], state.pos_entry[b, p], state.pos_leverage[b, p]
            pos = f"  {side} ${notional:,.0f} @ {entry:,.2f} x{lev:g}"
        lines.append(
            f"{sim.PERP_TICKERS[p]:<6} ${state.perp_price[b, p]:>12,.2f} {chg:+6.2f}%  "
            f"funding {1e4 * state.perp_funding[b, p]:+.1f}bp{pos}"
        )
    lines.append("-- latest news --")
    count = int(state.news_count[b])
    for i in range(count - 1, max(count - 4, -1), -1):
        j = i % sim.FEED_LENGTH
        kind, target, signal = int(state.news_kind[b, j]), int(state.news_target[b, j]), int(state.news_signal[b, j])
        if kind == 0:
            src = sim.NEWS_SOURCES[int(state.news_source[b, j])][0]
            verdict = "likely" if signal > 0 else "unlikely"
            text = f"{src}: market-{int(state.news_serial[b, j])} looks {verdict}"
        else:
            what = "leak" if kind == 1 else "ANNOUNCEMENT"
            text = f"{what}: {sim.PERP_TICKERS[target]} {'up' if signal > 0 else 'down'}"
        lines.append(f"  [t{int(state.news_tick[b, j])}] {text}")
    joined = [sim.GROUP_NAMES[g][0] for g in range(params.num_groups) if state.joined[b, g]]
    lines.append(f"groups joined: {', '.join(joined) if joined else 'none'}")
    if feedback is not None:
        status = "ok" if feedback["success"] else f"FAILED: {feedback['error']}"
        lines.append(f"last action: {status}")
    return "\n".join(lines)


_COLOURS = np.array(
    [
        [31, 119, 180],
        [255, 127, 14],
        [44, 160, 44],
        [214, 39, 40],
        [148, 103, 189],
        [140, 86, 75],
        [227, 119, 194],
        [127, 127, 127],
    ],
    dtype=np.uint8,
)


def _draw_series(img: np.ndarray, top: int, height: int, values: np.ndarray, lo: float, hi: float, colour) -> None:
    """Draw one line series into rows [top, top+height) of `img`, scaled so lo..hi fills the panel."""
    width = img.shape[1]
    if len(values) == 1:
        values = np.repeat(values, 2)
    xs = np.linspace(0, width - 1, len(values))
    ys = np.interp(np.arange(width), xs, values)
    span = max(hi - lo, 1e-12)
    rows = top + height - 1 - np.clip((ys - lo) / span, 0.0, 1.0) * (height - 1)
    rows = rows.round().astype(np.int64)
    prev = np.concatenate([rows[:1], rows[:-1]])
    lo_r, hi_r = np.minimum(rows, prev), np.maximum(rows, prev)
    grid = np.arange(top, top + height)[:, None]
    mask = (grid >= lo_r[None, :]) & (grid <= hi_r[None, :])
    img[top : top + height][mask] = colour


def render_chart(prices: np.ndarray, equity: np.ndarray, width: int = 640, height: int = 400) -> np.ndarray:
    """An RGB chart: YES prices of every market slot (top panel) and equity (bottom panel).

    Args:
        prices: (T, M) YES price history.
        equity: (T,) equity history, USD.
    """
    img = np.full((height, width, 3), 255, dtype=np.uint8)
    top_h = int(height * 0.6)
    img[top_h - 1 : top_h + 1] = 200  # panel separator
    for level in (0.25, 0.5, 0.75):
        img[int(top_h - 1 - level * (top_h - 1))] = 235
    for m in range(prices.shape[1]):
        _draw_series(img, 0, top_h - 2, prices[:, m], 0.0, 1.0, _COLOURS[m % len(_COLOURS)])
    lo, hi = float(equity.min()), float(equity.max())
    pad = max(0.01 * abs(hi), 1.0)
    _draw_series(img, top_h + 2, height - top_h - 4, equity, lo - pad, hi + pad, np.array([20, 20, 20], np.uint8))
    return img
