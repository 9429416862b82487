"""The report's PNG plots (matplotlib, the `[plots]` extra), drawn off-screen.

Figures are built with matplotlib's object API on the Agg canvas (`matplotlib.figure.Figure`,
never `pyplot`), so making a report neither needs a display nor switches the backend of a
notebook or script that imported rlaif_gym.

Every plot survives every number a stored record can hold (a run written before the LLM boundary checked
numbers, by another tool or by hand: token counts of 2**64 - 1 or 401 digits, floats up to 1.8e308, all
equal or spanning every decade): a value beyond `PLOT_LIMIT` is left off, and the plot says how many were;
histogram bins are computed here, never by numpy from the data's range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DependencyNotInstalled, install_hint
from ..metrics import call_latencies, rank_correlation
from .analysis import RunReport, equity_matrix, first_tick
from .baselines import BUY_AND_HOLD

__all__ = ["PLOTS", "require_matplotlib", "write_plots"]

PLOTS = {
    "equity": "equity curves against buy-and-hold and the baselines",
    "components": "reward components over ticks",
    "component_distributions": "distributions of the reward components",
    "reward_vs_pnl": "episode reward against final PnL",
    "judge_vs_pnl": "judge score against final PnL",
    "latency": "latency and tokens per LLM call",
}
"""File stem -> what the plot shows (the PNG is `<stem>.png`)."""

_RUN_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")
_BASELINE_STYLE = {
    BUY_AND_HOLD: {"color": "black", "linestyle": "--"},
    "informed": {"color": "#2ca02c", "linestyle": "-."},
    "passive": {"color": "#7f7f7f", "linestyle": ":"},
    "random": {"color": "#d62728", "linestyle": ":"},
}
"""Baselines drawn on the equity plot. The oracle (it reads the hidden truth) would flatten every
other line, so it appears in the summary table only."""
_SIZE = (9.0, 4.6)
_DPI = 100
PLOT_LIMIT = 1e15
"""The largest magnitude a plot draws (and, on a log axis, 1 / PLOT_LIMIT the smallest); a value beyond it is
left off and counted in the plot's labels. No run produces one (money is bounded at 1e12 USD, token counts at
2**31 - 1), and within it the bins and ticks matplotlib and numpy compute never overflow or collapse."""
_LIMIT_TEXT = f"{PLOT_LIMIT:.0e}".replace("e+", "e")
_BINS = 30


def _as_float(value: Any) -> float:
    """`value` as a float; an int too large for one is infinite (left off, like any value beyond `PLOT_LIMIT`)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _on_scale(values: Sequence[Any] | np.ndarray, positive: bool = False) -> tuple[np.ndarray, int]:
    """(the values a plot draws, as floats: finite, within `PLOT_LIMIT`, and for a log axis positive and at
    least 1 / PLOT_LIMIT; how many of `values` are left off)."""
    v = np.fromiter((_as_float(x) for x in values), dtype=np.float64, count=len(values))
    keep = _drawable(v, positive)
    return v[keep], int(len(v) - keep.sum())


def _drawable(v: np.ndarray, positive: bool = False) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        keep = np.isfinite(v) & (np.abs(v) <= PLOT_LIMIT)
        return keep & (v >= 1.0 / PLOT_LIMIT) if positive else keep


def _masked(m: np.ndarray) -> tuple[np.ndarray, int]:
    """`m` with every value beyond `PLOT_LIMIT` made NaN (not drawn), and how many were (NaN already: none)."""
    off = ~_drawable(m) & ~np.isnan(m)
    return np.where(off, np.nan, m), int(off.sum())


def _off(count: int) -> str:
    """What a label's parenthesis adds when `count` values were left off."""
    return f"; {count} beyond ±{_LIMIT_TEXT} not drawn" if count else ""


def _with_off(label: str, count: int) -> str:
    """`label`, saying how many values were left off when any were."""
    return f"{label} ({count} beyond ±{_LIMIT_TEXT} not drawn)" if count else label


def _bins(values: np.ndarray, count: int = _BINS) -> np.ndarray:
    """`count` equal bins over on-scale `values` (see `_on_scale`); values closer together than a millionth of
    their magnitude (or one value) get bins of that width around them, so that no two edges are equal."""
    lo, hi = float(values.min()), float(values.max())
    scale = max(1.0, abs(lo), abs(hi))
    if hi - lo < 1e-6 * scale:
        pad = max(0.5, 1e-6 * scale)
        lo, hi = lo - pad, hi + pad
    return np.linspace(lo, hi, count + 1)


def require_matplotlib() -> Any:
    """matplotlib's `Figure` class, or `DependencyNotInstalled` naming the extra."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise DependencyNotInstalled(
            "the report plots need matplotlib: " + install_hint("plots")
        ) from exc
    return Figure


def _figure(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = _SIZE):
    figure_cls = require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = figure_cls(figsize=size, dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _save(fig, path: Path) -> Path:
    # No timestamp or version in the metadata: the same run gives the same bytes.
    fig.savefig(path, format="png", dpi=_DPI, metadata={"Software": None})
    return path


def _color(i: int) -> str:
    return _RUN_COLORS[i % len(_RUN_COLORS)]


def plot_equity(runs: Sequence[RunReport], path: Path) -> Path:
    """Each run's equity per episode (thin) and mean (thick), the baselines' mean on the same seeds."""
    fig, axes = _figure()
    ax = axes[0, 0]
    drawn: list[dict[str, np.ndarray]] = []
    for i, run in enumerate(runs):
        ticks = max(run.max_ticks, run.baselines.ticks if run.baselines is not None else 0)
        curves, off = _masked(equity_matrix(run.trajectories, ticks))
        x = np.arange(ticks + 1)
        for c in curves:
            ax.plot(x, c, color=_color(i), alpha=0.18, linewidth=0.8)
        ax.plot(x, _nanmean_rows(curves), color=_color(i), linewidth=2.4,
                label=f"{run.name} (mean of {len(curves)}{_off(off)})")
        if run.baselines is None:
            continue
        if any(all(np.array_equal(d[k], run.baselines.curves[k]) for k in _BASELINE_STYLE) for d in drawn):
            continue  # the same seeds and config as a run already drawn
        drawn.append(run.baselines.curves)
        suffix = f" ({run.name} seeds)" if len(runs) > 1 else ""
        bx = np.arange(run.baselines.ticks + 1)
        for name, style in _BASELINE_STYLE.items():
            if name in run.baselines.curves:
                ax.plot(bx, run.baselines.curves[name].mean(axis=0), linewidth=1.6, label=name + suffix, **style)
    ax.set_xlabel("tick (simulated hour)")
    ax.set_ylabel("equity (USD)")
    ax.set_title("Equity: agent vs buy-and-hold and baseline agents (same seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)


def _component_matrix(run: RunReport, name: str) -> np.ndarray:
    """(episodes, max_ticks) of a component, NaN where an episode has no such tick."""
    out = np.full((len(run.trajectories), max(run.max_ticks, 1)), np.nan)
    for i, t in enumerate(run.trajectories):
        start = first_tick(t)
        for j, s in enumerate(t.steps):
            if name in s.reward_components:
                out[i, start + j] = s.reward_components[name]
    return out


def _reward_matrix(run: RunReport) -> np.ndarray:
    out = np.full((len(run.trajectories), max(run.max_ticks, 1)), np.nan)
    for i, t in enumerate(run.trajectories):
        start = first_tick(t)
        out[i, start : start + len(t.steps)] = [s.reward for s in t.steps]
    return out


def _nanmean_rows(m: np.ndarray) -> np.ndarray:
    counts = np.isfinite(m).sum(axis=0)
    sums = np.nansum(m, axis=0)
    return np.divide(sums, counts, out=np.full(m.shape[1], np.nan), where=counts > 0)


def _pairs(xs: Sequence[Any], ys: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, int]:
    """(x, y) of the points whose both coordinates a plot draws, and how many points are left off (NaN ones, an
    unscored episode, are no points and not counted)."""
    x = np.fromiter((_as_float(v) for v in xs), dtype=np.float64, count=len(xs))
    y = np.fromiter((_as_float(v) for v in ys), dtype=np.float64, count=len(ys))
    keep = _drawable(x) & _drawable(y)
    off = int((~keep & ~np.isnan(x) & ~np.isnan(y)).sum())
    return x[keep], y[keep], off


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    if window <= 1:
        return y
    ok = np.isfinite(y)
    kernel = np.ones(window)
    num = np.convolve(np.where(ok, y, 0.0), kernel, mode="same")
    den = np.convolve(ok.astype(float), kernel, mode="same")
    return np.divide(num, den, out=np.full_like(y, np.nan), where=den > 0)


def _component_names(runs: Sequence[RunReport]) -> list[str]:
    return sorted({c for r in runs for c in r.metrics.components})


def plot_components(runs: Sequence[RunReport], path: Path) -> Path:
    """Mean of each raw reward component per tick over the episodes, and the total reward."""
    fig, axes = _figure()
    ax = axes[0, 0]
    names = _component_names(runs)
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
    styles = ("-", "--", ":", "-.")
    window = 8 if max((r.max_ticks for r in runs), default=0) >= 48 else 1
    for i, run in enumerate(runs):
        ls = styles[i % len(styles)]
        prefix = f"{run.name}: " if len(runs) > 1 else ""
        for k, name in enumerate(names):
            m, off = _masked(_component_matrix(run, name))
            y = _smooth(_nanmean_rows(m), window)
            ax.plot(np.arange(len(y)), y, color=palette[k % len(palette)], linestyle=ls, linewidth=1.4,
                    label=_with_off(prefix + name, off))
        m, off = _masked(_reward_matrix(run))
        y = _smooth(_nanmean_rows(m), window)
        ax.plot(np.arange(len(y)), y, color="black", linestyle=ls, linewidth=2.0,
                label=_with_off(prefix + "reward (weighted)", off))
    ax.set_xlabel("tick (simulated hour)")
    ax.set_ylabel("raw component value (mean over episodes)")
    smooth = f", {window}-tick moving average" if window > 1 else ""
    ax.set_title(f"Reward components over ticks{smooth}")
    ax.grid(alpha=0.3)
    # Beside the axes, never over the lines (the constrained layout makes room for it).
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return _save(fig, path)


def plot_component_distributions(runs: Sequence[RunReport], path: Path) -> Path:
    """A histogram of each component's per-tick values, one panel per component, runs overlaid.

    Each run's histogram shows the fraction of its ticks per bin (it sums to 1), so runs of different
    sizes compare directly.
    """
    names = _component_names(runs) or ["(none)"]
    ncols = min(len(names), 3)
    nrows = math.ceil(len(names) / ncols)
    fig, axes = _figure(ncols, nrows, (_SIZE[0], 2.6 * nrows + 0.6))
    for k, name in enumerate(names):
        ax = axes[k // ncols, k % ncols]
        matrices = [_component_matrix(r, name).ravel() for r in runs]
        drawn = [_on_scale(m[~np.isnan(m)]) for m in matrices]
        values = [v for v, _ in drawn]
        finite = np.concatenate(values) if values else np.zeros(0)
        bins = _bins(finite) if len(finite) else np.linspace(0.0, 1.0, _BINS + 1)
        for i, (run, (v, off)) in enumerate(zip(runs, drawn, strict=True)):
            if len(v):
                ax.hist(v, bins=bins, weights=np.full(len(v), 1.0 / len(v)), histtype="step", linewidth=1.6,
                        color=_color(i), label=f"{run.name} ({len(v)} ticks{_off(off)})")
        ax.set_title(_with_off(name, sum(o for _, o in drawn)), fontsize=10)
        ax.set_ylabel("fraction of ticks", fontsize=8)
        ax.grid(alpha=0.3)
        if len(runs) > 1:
            ax.legend(fontsize=7)
    for k in range(len(names), nrows * ncols):
        axes[k // ncols, k % ncols].set_visible(False)
    fig.suptitle("Distribution of the raw reward components (fraction of each run's ticks)")
    return _save(fig, path)


def plot_reward_vs_pnl(runs: Sequence[RunReport], path: Path) -> Path:
    """One point per episode: its reward (sum over ticks) against its final PnL, with Spearman's rank correlation.

    With the default reward the points lie near a rising line (the trading part is PnL / starting
    cash); a cloud, or a falling line, means the return and the money disagree.
    """
    fig, axes = _figure()
    ax = axes[0, 0]
    for i, run in enumerate(runs):
        eps = run.metrics.episodes_detail
        x, y, off = _pairs([m.pnl for m in eps], [m.total_reward for m in eps])
        rho = rank_correlation([m.pnl for m in eps], [m.total_reward for m in eps])
        rho_text = "n/a" if math.isnan(rho) else f"{rho:+.2f}"
        ax.scatter(x, y, color=_color(i), s=36, alpha=0.8, label=f"{run.name} (Spearman ρ {rho_text}{_off(off)})")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.axvline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("final PnL (USD)")
    ax.set_ylabel("episode return (sum of rewards)")
    ax.set_title("Does the return (reward sum) agree with the money? One point per episode")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_judge_vs_pnl(runs: Sequence[RunReport], path: Path) -> Path:
    """One point per episode: its judge score against its final PnL, with Spearman's rank correlation."""
    fig, axes = _figure()
    ax = axes[0, 0]
    sources = set()
    for i, run in enumerate(runs):
        eps = run.metrics.episodes_detail
        sources |= {m.judge_source for m in eps if m.judge_source != "none"}  # unscored episodes: no point
        x, y, off = _pairs([m.judge_score for m in eps], [m.pnl for m in eps])
        rho = rank_correlation([m.judge_score for m in eps], [m.pnl for m in eps])
        rho_text = "n/a" if math.isnan(rho) else f"{rho:+.2f}"
        ax.scatter(x, y, color=_color(i), s=36, alpha=0.8, label=f"{run.name} (Spearman ρ {rho_text}; scored "
                   f"{run.metrics.judge_scored} / {run.metrics.episodes}{_off(off)})")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("judge score (" + "; ".join(sorted(sources)) + ")")
    ax.set_ylabel("final PnL (USD)")
    ax.set_title("Judge score against realised PnL, one point per episode")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_latency(runs: Sequence[RunReport], path: Path) -> Path:
    """Histograms of call latency (ms, log-spaced bins when it spans decades) and completion tokens per call."""
    fig, axes = _figure(2, 1)
    lat = [_on_scale(call_latencies(r.trajectories), positive=True) for r in runs]
    pos = np.concatenate([v for v, _ in lat]) if lat else np.zeros(0)
    ax = axes[0, 0]
    if len(pos):
        lo, hi = float(pos.min()), float(pos.max())
        log = hi / lo > 100
        bins = np.geomspace(lo, hi * 1.0001, _BINS + 1) if log else np.linspace(0.0, hi * 1.0001, _BINS + 1)
        for i, (run, (v, off)) in enumerate(zip(runs, lat, strict=True)):
            if len(v):
                ax.hist(v, bins=bins, histtype="step", linewidth=1.6, color=_color(i),
                        label=f"{run.name} (p50 {np.percentile(v, 50):,.1f}, p95 {np.percentile(v, 95):,.1f} ms"
                              f"{_off(off)})")
        if log:
            ax.set_xscale("log")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no latency recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("latency per call (ms)")
    ax.set_ylabel("calls")
    ax.set_title("LLM call latency")
    ax.grid(alpha=0.3)
    ax = axes[0, 1]
    any_tokens = False
    for i, run in enumerate(runs):
        tokens, off = _on_scale([c.completion_tokens for t in run.trajectories for s in t.steps for c in s.llm_calls
                                 if c.completion_tokens is not None])
        if len(tokens):
            any_tokens = True
            ax.hist(tokens, bins=_bins(tokens), histtype="step", linewidth=1.6, color=_color(i),
                    label=f"{run.name} (mean {tokens.mean():,.0f}{_off(off)})")
    if any_tokens:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no token usage recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("completion tokens per call")
    ax.set_ylabel("calls")
    ax.set_title("Tokens per call")
    ax.grid(alpha=0.3)
    return _save(fig, path)


_PLOTTERS = {
    "equity": plot_equity,
    "components": plot_components,
    "component_distributions": plot_component_distributions,
    "reward_vs_pnl": plot_reward_vs_pnl,
    "judge_vs_pnl": plot_judge_vs_pnl,
    "latency": plot_latency,
}


def write_plots(runs: Sequence[RunReport], out_dir: Path) -> dict[str, Path]:
    """Draw every plot of `PLOTS` for `runs` into `out_dir`; returns stem -> PNG path.

    Raises:
        DependencyNotInstalled: matplotlib is missing (the `[plots]` extra).
    """
    require_matplotlib()
    out_dir.mkdir(parents=True, exist_ok=True)
    return {stem: _PLOTTERS[stem](runs, out_dir / f"{stem}.png") for stem in PLOTS}
