"""The summary table shared by the terminal (rich) and the HTML page: one row per metric, one column per run.

With two runs a third column holds the difference B - A for numeric rows; for the means over episodes
(PnL, PnL %, episode reward, judge score) it comes with a 95% confidence interval (Welch's t), so
runs of different sizes compare honestly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..metrics import TICKS_PER_YEAR, RunMetrics
from .analysis import RunReport
from .baselines import BASELINE_AGENTS, BUY_AND_HOLD

__all__ = ["Row", "diff_ci", "fmt_number", "headline", "mean_ci", "summary_rows"]


@dataclass(frozen=True)
class Row:
    """One metric across runs.

    Attributes:
        group: the section it belongs to ("Outcome", "Risk", ...).
        label: what it is, with its unit.
        values: one formatted value per run ("n/a" when undefined).
        delta: B - A, formatted, for two runs and a numeric metric; otherwise "".
    """

    group: str
    label: str
    values: list[str]
    delta: str = ""


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then the normal 1.96 is within 2%).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _t975(df: float) -> float:
    if not df >= 1:
        return math.nan
    return _T975[int(df) - 1] if df < 31 else 1.96


def _finite_values(values: Sequence[float | None]) -> np.ndarray:
    arr = np.array([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def mean_ci(values: Sequence[float | None]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite values and its 95% t-interval (NaN bounds below 2 values)."""
    v = _finite_values(values)
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan
    half = _t975(len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return mean, mean - half, mean + half


def diff_ci(a: Sequence[float | None], b: Sequence[float | None]) -> tuple[float, float, float]:
    """(mean(b) - mean(a), low, high): Welch's 95% interval for a difference of means of two samples."""
    va, vb = _finite_values(a), _finite_values(b)
    if len(va) == 0 or len(vb) == 0:
        return math.nan, math.nan, math.nan
    d = float(vb.mean() - va.mean())
    if len(va) < 2 or len(vb) < 2:
        return d, math.nan, math.nan
    sa, sb = float(va.var(ddof=1)) / len(va), float(vb.var(ddof=1)) / len(vb)
    se = math.sqrt(sa + sb)
    if se == 0:
        return d, d, d
    df = (sa + sb) ** 2 / (sa ** 2 / (len(va) - 1) + sb ** 2 / (len(vb) - 1))
    half = _t975(df) * se
    return d, d - half, d + half


def fmt_number(value: float | int | str | None, kind: str = "num") -> str:
    """Format a metric by kind: "usd" (+1,234.56), "money" (1,234.56), "pct" (12.3%), "dpct" (+1.2 pp),
    "ratio" (1.23), "int", "ms" or "num"; NaN and None give "n/a", infinities "∞"."""
    if value is None or isinstance(value, str):
        return "n/a" if value is None else value
    v = float(value)
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if kind == "usd":
        return f"{v:+,.2f}"
    if kind in ("money", "ms", "ratio"):
        return f"{v:,.2f}"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "dpct":
        return f"{100 * v:+.1f} pp"
    if kind == "int":
        return f"{round(v):,}"
    return f"{v:,.3f}"


_Getter = Callable[[RunReport], "float | int | str | None"]


def _m(attr: str) -> _Getter:
    return lambda r: getattr(r.metrics, attr)


def _pred(attr: str) -> _Getter:
    return lambda r: getattr(r.metrics.predictions, attr) if r.metrics.predictions is not None else None


def _calls(attr: str) -> _Getter:
    return lambda r: getattr(r.metrics.calls, attr)


def _executed_rate(r: RunReport) -> float | None:
    """Share of ticks whose action the world carried out (a wait counts): format-valid ticks less the
    refused ones (`failed_actions`: an unknown id, too little cash, ...). A format-valid reply need not
    be executable; this rate says how many were."""
    m = r.metrics
    if not m.ticks or not math.isfinite(m.format_valid_rate):
        return None
    return (m.format_valid_rate * m.ticks - m.failed_actions) / m.ticks


def _baseline(name: str) -> _Getter:
    def get(r: RunReport) -> float | None:
        if r.baselines is None:
            return None
        return float(np.mean(r.baselines.final_pnl(name)))

    return get


def _specs(runs: Sequence[RunReport]) -> list[tuple[str, str, _Getter, str]]:
    """(group, label, getter, kind) of every row; kind "text" rows get no delta."""
    specs: list[tuple[str, str, _Getter, str]] = [
        ("Outcome", "episodes", _m("episodes"), "int"),
        ("Outcome", "status", lambda r: ", ".join(f"{k} {v}" for k, v in r.metrics.statuses.items()), "text"),
        ("Outcome", "ticks (all episodes)", _m("ticks"), "int"),
        ("Outcome", "mean episode length (ticks)", _m("mean_ticks"), "ratio"),
        ("Outcome", "mean final PnL (USD)", _m("mean_pnl"), "usd"),
        ("Outcome", "median final PnL (USD)", _m("median_pnl"), "usd"),
        ("Outcome", "std of final PnL (USD)", _m("std_pnl"), "money"),
        ("Outcome", "mean PnL % of starting cash", _m("mean_pnl_ratio"), "pct"),
        ("Outcome", "mean return (sum of rewards per episode)", _m("mean_total_reward"), "num"),
        ("Outcome", "Spearman: return vs PnL", _m("reward_pnl_correlation"), "num"),
        ("Risk", f"Sharpe (annualised, {TICKS_PER_YEAR} ticks/yr)", _m("sharpe"), "ratio"),
        ("Risk", "Sortino (annualised)", _m("sortino"), "ratio"),
        ("Risk", "Calmar (annualised mean per-tick equity change / max DD)", _m("calmar"), "ratio"),
        ("Risk", "mean max drawdown", _m("mean_max_drawdown"), "pct"),
        ("Risk", "worst max drawdown", _m("worst_max_drawdown"), "pct"),
        ("Risk", "mean longest drawdown (ticks)", _m("mean_drawdown_ticks"), "ratio"),
        ("Trading (replayed)", "episodes replayed", _m("ledger_episodes"), "int"),
        ("Trading (replayed)", "closed trades", _m("trades"), "int"),
        ("Trading (replayed)", "win rate (closed trades)", _m("win_rate"), "pct"),
        ("Trading (replayed)", "profit factor (gross profit / gross loss)", _m("profit_factor"), "ratio"),
        ("Trading (replayed)", "positions open at the end", _m("open_at_end"), "int"),
        ("Trading (replayed)", "mean fees paid per episode (USD)", _m("mean_fees"), "money"),
        ("Trading (replayed)", "mean turnover (USD traded / mean equity)", _m("mean_turnover"), "ratio"),
        ("Forecasting (ground truth)", "resolved markets held", _pred("count"), "int"),
        ("Forecasting (ground truth)", "prediction accuracy", _pred("accuracy"), "pct"),
        ("Forecasting (ground truth)", "Brier score, agent's positions", _pred("brier"), "num"),
        ("Forecasting (ground truth)", "Brier score, market price", _pred("market_brier"), "num"),
        ("Forecasting (ground truth)", "Brier score, true probability", _pred("truth_brier"), "num"),
        ("LLM", "format-valid rate (the reply parsed into one action)", _m("format_valid_rate"), "pct"),
        ("LLM", "executed rate (the world carried the action out)", _executed_rate, "pct"),
        ("LLM", "format-clean rate (canonical reply)", _m("format_clean_rate"), "pct"),
        ("LLM", "failed actions (refused by the world)", _m("failed_actions"), "int"),
        ("LLM", "LLM calls", _calls("calls"), "int"),
        ("LLM", "failed calls", _calls("failed"), "int"),
        ("LLM", "latency mean (ms)", _calls("latency_mean_ms"), "ms"),
        ("LLM", "latency p50 (ms)", _calls("latency_p50_ms"), "ms"),
        ("LLM", "latency p95 (ms)", _calls("latency_p95_ms"), "ms"),
        ("LLM", "prompt tokens per call", _calls("prompt_tokens_mean"), "ratio"),
        ("LLM", "completion tokens per call", _calls("completion_tokens_mean"), "ratio"),
        ("Judge", "mean judge score", _m("judge_score"), "num"),
        ("Judge", "judge score source", _m("judge_source"), "text"),
        ("Judge", "judge coverage (episodes scored / all)",
         lambda r: f"{r.metrics.judge_scored} / {r.metrics.episodes}", "text"),
        ("Judge", "rank correlation judge score vs PnL (Spearman)", _m("judge_pnl_correlation"), "num"),
    ]
    names = sorted({c for r in runs for c in r.metrics.components})
    for c in names:
        def get(r: RunReport, c: str = c) -> float | None:
            s = r.metrics.components.get(c)
            return s.mean if s is not None else None

        weights = {r.metrics.components[c].weight for r in runs if c in r.metrics.components}
        w = next(iter(weights)) if len(weights) == 1 else None
        label = f"mean {c} component" + (f" (weight {w:g})" if w is not None else "")
        specs.append(("Reward components (raw, per tick)", label, get, "num"))
    group = "Baselines, same seeds and ticks: mean final PnL (USD)"
    specs.append((group, "this agent", _m("mean_pnl"), "usd"))
    specs.append((group, BUY_AND_HOLD + " (equal-weight perps, 1x)", _baseline(BUY_AND_HOLD), "usd"))
    for name in BASELINE_AGENTS:
        label = f"{name} agent" + (" (reads the hidden truth)" if name == "oracle" else "")
        specs.append((group, label, _baseline(name), "usd"))
    return specs


# Rows that are means over episodes: the per-episode value behind each, for confidence intervals.
_PER_EPISODE = {
    "mean final PnL (USD)": "pnl",
    "mean PnL % of starting cash": "pnl_ratio",
    "mean return (sum of rewards per episode)": "total_reward",
    "mean judge score": "judge_score",
}


def _per_episode(run: RunReport, attr: str) -> list[float | None]:
    return [getattr(m, attr) for m in run.metrics.episodes_detail]


def _fmt_delta(d: float, kind: str) -> str:
    return {"pct": fmt_number(d, "dpct"), "usd": fmt_number(d, "usd"), "money": fmt_number(d, "usd")}.get(
        kind, f"{d:+,.3f}")


def summary_rows(runs: Sequence[RunReport]) -> list[Row]:
    """Every summary row for `runs` (one value per run; the B - A delta when there are two).

    For the means over episodes (`_PER_EPISODE`), the delta is Welch's difference of means with its 95%
    confidence interval, "+12.30 (95% CI -4.10 to +28.70)", whatever the two runs' sizes.
    """
    rows = []
    for group, label, get, kind in _specs(runs):
        raw = [get(r) for r in runs]
        values = [str(v) if kind == "text" else fmt_number(v, kind) for v in raw]
        delta = ""
        if len(runs) == 2 and kind != "text" and all(_finite(v) for v in raw):
            attr = _PER_EPISODE.get(label)
            if attr is not None:
                _, lo, hi = diff_ci(_per_episode(runs[0], attr), _per_episode(runs[1], attr))
                delta = _fmt_delta(float(raw[1]) - float(raw[0]), kind)
                if math.isfinite(lo):
                    delta += f" (95% CI {_fmt_delta(lo, kind)} to {_fmt_delta(hi, kind)})"
            else:
                delta = _fmt_delta(float(raw[1]) - float(raw[0]), kind)
        rows.append(Row(group, label, values, delta))
    return rows


def headline(run: RunReport) -> str:
    """One line a reader sees first: episodes and outcome, mean PnL with its 95% CI, the return, validity."""
    m = run.metrics
    pnl, lo, hi = mean_ci(_per_episode(run, "pnl"))
    ci = f" (95% CI {fmt_number(lo, 'usd')} to {fmt_number(hi, 'usd')})" if math.isfinite(lo) else ""
    statuses = ", ".join(f"{v} {k}" for k, v in m.statuses.items())
    parts = [f"{m.episodes} episodes ({statuses})", f"mean PnL {fmt_number(pnl, 'usd')} USD{ci}",
             f"mean return {fmt_number(m.mean_total_reward)}",
             f"Spearman return vs PnL {fmt_number(m.reward_pnl_correlation)}",
             f"format-valid {fmt_number(m.format_valid_rate, 'pct')}",
             f"executed {fmt_number(_executed_rate(run), 'pct')}"]
    return f"{run.name}: " + " · ".join(parts)


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def episode_rows(metrics: RunMetrics) -> list[dict[str, str]]:
    """One row per trajectory for the per-episode table (formatted strings)."""
    out = []
    for m in metrics.episodes_detail:
        out.append({
            "id": m.trajectory_id, "seed": "" if m.seed is None else str(m.seed), "status": m.status,
            "ticks": str(m.ticks), "pnl": fmt_number(m.pnl, "usd"), "pnl_pct": fmt_number(m.pnl_ratio, "pct"),
            "sharpe": fmt_number(m.sharpe, "ratio"), "max_dd": fmt_number(m.max_drawdown, "pct"),
            "trades": fmt_number(m.trades, "int"), "win_rate": fmt_number(m.win_rate, "pct"),
            "fees": fmt_number(m.fees, "money"), "valid": fmt_number(m.format_valid_rate, "pct"),
            "judge": fmt_number(m.judge_score, "num"), "note": m.ledger_note,
        })
    return out
