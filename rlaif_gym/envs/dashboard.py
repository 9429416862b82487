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
    eq = float(sim.equity(state.take([b]), params)[0])
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


# A 3x5 pixel font (rows top to bottom) for the chart's labels: no font file, no plotting library.
_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", "A": "010101111101101", "B": "110101110101110",
    "C": "011100100100011", "D": "110101101101110", "E": "111100110100111", "F": "111100110100100",
    "G": "011100101101011", "H": "101101111101101", "I": "111010010010111", "J": "001001001101010",
    "K": "101101110101101", "L": "100100100100111", "M": "101111111101101", "N": "110101101101101",
    "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011", "R": "110101110101101",
    "S": "011100010001110", "T": "111010010010010", "U": "101101101101111", "V": "101101101101010",
    "W": "101101111111101", "X": "101101010101101", "Y": "101101010010010", "Z": "111001010100111",
    " ": "000000000000000", ".": "000000000000010", ",": "000000000010100", "-": "000000111000000",
    "+": "000010111010000", "$": "011110010011110", "%": "101001010100101", ":": "000010000010000",
    "(": "001010010010001", ")": "100010010010100", "/": "001001010100100", "=": "000111000111000",
}


def _draw_text(img: np.ndarray, x: int, y: int, text: str, colour, scale: int = 2) -> int:
    """Draw `text` (upper-cased; unknown characters as spaces) with its top-left at (x, y); returns the end x."""
    for ch in text.upper():
        bits = _GLYPHS.get(ch, _GLYPHS[" "])
        for k, bit in enumerate(bits):
            if bit == "1":
                r, c = y + (k // 3) * scale, x + (k % 3) * scale
                img[max(r, 0): max(r + scale, 0), max(c, 0): max(c + scale, 0)] = colour
        x += 4 * scale
    return x


def _text_width(text: str, scale: int = 2) -> int:
    return 4 * scale * len(text)


def _money(v: float) -> str:
    return f"${v:,.0f}"


def render_chart(prices: np.ndarray, equity: np.ndarray, width: int = 640, height: int = 400) -> np.ndarray:
    """An RGB chart with axes, labels and a legend: YES prices of every market slot (top panel) and
    equity (bottom panel), against the tick.

    Args:
        prices: (T, M) YES price history.
        equity: (T,) equity history, USD.
    """
    ink, grid, axis = np.array([30, 30, 30], np.uint8), 232, np.array([120, 120, 120], np.uint8)
    img = np.full((height, width, 3), 255, dtype=np.uint8)
    left, right = 78, width - 10  # plot area columns; y labels go left of `left`
    title_h, gap, bottom_h = 16, 24, 26
    top0, top_h = title_h, int((height - bottom_h - gap - title_h) * 0.6)
    eq0, eq_h = top0 + top_h + gap, height - bottom_h - (top0 + top_h + gap)
    plot = img[:, left:right]
    # Top panel: prices on a fixed 0..1 axis with grid lines, a legend of the market slots.
    _draw_text(img, left, 2, "MARKET YES PRICE (0-1)", ink)
    for level in (0.0, 0.25, 0.5, 0.75, 1.0):
        row = int(top0 + (1.0 - level) * (top_h - 1))
        plot[row] = grid
        _draw_text(img, left - 6 - _text_width(f"{level:.2f}"), row - 5, f"{level:.2f}", ink)
    for m in range(prices.shape[1]):
        _draw_series(plot, top0, top_h, prices[:, m], 0.0, 1.0, _COLOURS[m % len(_COLOURS)])
    x = right - 4 - _text_width(" ".join(f"M{m}" for m in range(prices.shape[1]))) - 10 * prices.shape[1]
    for m in range(prices.shape[1]):  # legend: a colour swatch, then the slot's name
        colour = _COLOURS[m % len(_COLOURS)]
        img[4:12, x: x + 8] = colour
        x = _draw_text(img, x + 10, 2, f"M{m}", ink) + 8
    # Bottom panel: equity, scaled to its range, with its min and max labelled.
    lo, hi = (float(equity.min()), float(equity.max())) if len(equity) else (0.0, 1.0)
    pad = max(0.01 * abs(hi), 1.0)
    lo, hi = lo - pad, hi + pad
    _draw_text(img, left, eq0 - 18, "EQUITY (USD)", ink)
    for value, row in ((hi, eq0), (lo, eq0 + eq_h - 1), ((lo + hi) / 2, eq0 + (eq_h - 1) // 2)):
        plot[row] = grid
        label = _money(value)
        _draw_text(img, max(0, left - 6 - _text_width(label)), row - 5, label, ink)
    if len(equity):
        _draw_series(plot, eq0, eq_h, equity, lo, hi, ink)
    # Axes: a left edge for each panel and the tick axis under the equity panel.
    img[top0: top0 + top_h, left - 1] = axis
    img[eq0: eq0 + eq_h, left - 1] = axis
    img[eq0 + eq_h, left - 1: right] = axis
    ticks = max(len(equity), len(prices)) - 1
    for k in range(5):
        col = left + int(k * (right - left - 1) / 4)
        img[eq0 + eq_h: eq0 + eq_h + 4, col] = axis
        label = str(round(k * max(ticks, 0) / 4))
        _draw_text(img, min(col - _text_width(label) // 2, width - _text_width(label)), eq0 + eq_h + 6, label, ink)
    _draw_text(img, left + (right - left) // 2 - _text_width("TICK") // 2 - 60, height - 10, "TICK (SIMULATED HOUR)",
               ink, scale=1)
    return img
