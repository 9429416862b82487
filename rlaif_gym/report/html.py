"""The report's single self-contained HTML page: summary tables, the plots and a trajectory viewer.

Safety. Trajectory text (prompts, replies, errors, even ids) is untrusted. The page is rendered by
jinja2 with autoescaping on, and the viewer builds its DOM from data with text nodes only. The
trajectories travel as gzip-compressed JSON in base64 inside a non-executable `<script>` data
block, so no trajectory byte reaches the HTML parser. A Content-Security-Policy allows nothing but
the page's own script and style (pinned by their sha256 hashes) and `data:` images: no network,
no injected script.

Size. Each tick's prompt is a few KB; gzip shrinks the repetitive prompts about tenfold and the
viewer renders one trajectory at a time, so 8 x 168-tick runs stay a few MB and open quickly.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import DependencyNotInstalled, install_hint
from ..metrics import TICKS_PER_YEAR, to_jsonable
from ..trajectory import LLMCall, Trajectory
from .analysis import RunReport
from .plots import PLOTS
from .tables import episode_rows, headline, summary_rows

__all__ = ["DEFINITIONS", "render_html", "viewer_data"]

DEFINITIONS = (
    f"Time: one tick is one simulated hour; ratios are annualised with {TICKS_PER_YEAR} ticks per year and a zero "
    "risk-free rate, from the simple per-tick equity changes r = e_t / e_(t-1) - 1 of the equity curve (equity "
    "before the first tick and after each). Sharpe = mean / sample std of r x sqrt(ticks per year). Sortino uses "
    "the downside deviation sqrt(mean(min(r, 0)^2)) instead. Calmar = mean r x ticks per year / max drawdown. "
    "Undefined "
    "ratios (no variance, no losing tick, no drawdown) show n/a and are left out of means.",
    "Max drawdown: the largest fall from the running peak, as a fraction of the peak; its duration is the longest "
    "stretch of ticks spent below the peak (unrecovered: to the end of the episode).",
    "A trade is a closed round trip: a prediction-market position (one market and side) from its first buy until a "
    "sell empties it or the market resolves, or a perp position from open to close or liquidation. Its PnL is cash "
    "out minus cash in, fees and funding included. Win rate: share of trades with PnL > 0; profit factor: gross "
    "profit / gross loss. Positions open at the end are not trades.",
    "Turnover: USD traded (buys, sell proceeds before fees, perp notional opened and closed) / mean equity.",
    "Fees, trades, resolutions and outcomes are not in the trajectory record: they come from replaying the recorded "
    "actions on the recorded seed and config, checked tick by tick against the recorded equity.",
    "Prediction accuracy and Brier score: over the markets that resolved while the agent held shares; the agent's "
    "forecast of YES is yes_shares / (yes_shares + no_shares). The market's Brier uses the last YES price before "
    "resolution, the true probability's uses the hidden p*.",
    "Format-valid: the reply parsed into one executable action; format-clean: valid and canonical (no format error).",
    "Buy-and-hold: the starting cash split equally over the perpetual futures, long at 1x from the first tick, "
    "without fees or funding. Baselines: the numeric baseline agents on the same seeds and config, for as many "
    "ticks as the longest episode.",
    "Judge score: the trajectory-level (LLM) judge's score when the run was judged, else the rule judge's "
    "reasoning component averaged over the episode; never a mix. In a judged run, episodes without a verdict are "
    "left out (the judge coverage row counts the scored ones).",
)
"""The conventions the page states (also in `rlaif_gym.metrics` and `rlaif_gym.report.baselines`)."""

_ROUND = 4
"""Decimals kept for floats in the viewer's data (USD to 1/100 cent, components to 1e-4)."""


def _jinja() -> Any:
    try:
        import jinja2
    except ImportError as exc:
        raise DependencyNotInstalled("the HTML report needs jinja2: " + install_hint("plots")) from exc
    return jinja2


def _template_text(name: str) -> str:
    return resources.files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, _ROUND)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def _call(c: LLMCall) -> dict[str, Any]:
    err = f"{c.error.type}: {c.error.message}" if c.error is not None else None
    return {"m": c.model, "lat": c.latency_ms, "pt": c.prompt_tokens, "ct": c.completion_tokens, "tt": c.total_tokens,
            "fin": c.finish_reason, "seed": c.seed, "att": c.attempts, "err": err}


def _trajectory(t: Trajectory, run: RunReport, index: int, system: dict[str, int]) -> dict[str, Any]:
    m = run.metrics.episodes_detail[index]
    ledger = run.ledgers.get(t.trajectory_id)
    first_tick = t.steps[0].environment_state.model_extra.get("tick", 0) if t.steps else 0
    by_step: dict[int, list] = {}
    if ledger is not None:
        for r in ledger.resolutions:
            by_step.setdefault(int(r.tick) - 1 - int(first_tick or 0), []).append(
                [r.market, r.outcome, r.truth, r.price, r.yes_shares, r.no_shares])
    sys_text = next((c.system_prompt for s in t.steps for c in s.llm_calls if c.system_prompt), "")
    steps = []
    for i, s in enumerate(t.steps):
        call = s.llm_calls[0] if s.llm_calls else None
        prompt = s.observation.text if s.observation is not None else (call.user_prompt if call else "")
        a = s.action
        step: dict[str, Any] = {
            "i": s.step_number, "eq": s.environment_state.agent_balance,
            "pd": s.feedback.pnl_delta if s.feedback is not None else 0.0, "r": s.reward, "c": s.reward_components,
            "a": {"t": a.action_type, "p": a.parameters, "ok": a.success, "e": a.error} if a is not None else None,
            "fe": s.format_errors, "j": s.judge, "p": prompt, "rep": call.response if call else "",
            "rs": a.reasoning if a is not None and a.reasoning else "", "calls": [_call(c) for c in s.llm_calls],
        }
        if call is not None and call.user_prompt and call.user_prompt != prompt:
            step["up"] = call.user_prompt
        if ledger is not None:
            step["fee"] = float(ledger.fees_usd[i])
            step["pay"] = float(ledger.payout_usd[i])
            if i in by_step:
                step["res"] = by_step[i]
        steps.append(step)
    trades = [[x.instrument, x.open_tick, x.close_tick, x.cost_usd, x.proceeds_usd, x.closed_by]
              for x in (ledger.trades if ledger is not None else ())]
    return {
        "id": t.trajectory_id, "seed": t.seed, "status": t.final_status, "agent": t.agent_id, "pnl": m.pnl,
        "pnl_ratio": m.pnl_ratio, "reward": m.total_reward, "judge": m.judge_score, "note": m.ledger_note,
        "errors": list(t.errors), "failed": [_call(c) for c in t.failed_calls], "trades": trades,
        "sys": system.setdefault(sys_text, len(system)), "steps": steps,
    }


def viewer_data(runs: Sequence[RunReport]) -> dict[str, Any]:
    """What the viewer reads: every run, trajectory and tick (system prompts stored once)."""
    system: dict[str, int] = {}
    out_runs = []
    for run in runs:
        weights: dict[str, float] = {}
        for t in run.trajectories:
            weights.update(t.reward_weights)
        out_runs.append({
            "name": run.name, "components": sorted(run.metrics.components), "weights": weights,
            "trajectories": [_trajectory(t, run, i, system) for i, t in enumerate(run.trajectories)],
        })
    return _round(to_jsonable({"runs": out_runs, "system": list(system)}))


def _pack(data: Mapping[str, Any]) -> str:
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def render_html(runs: Sequence[RunReport], plots: Mapping[str, Path], path: Path) -> Path:
    """Write the report page for `runs` with the given PNGs (stem -> file) embedded; returns `path`.

    Raises:
        DependencyNotInstalled: jinja2 is missing (the `[plots]` extra).
    """
    jinja2 = _jinja()
    from markupsafe import Markup  # a jinja2 dependency

    css, script = _template_text("report.css"), _template_text("viewer.js")
    if "</" in css or "</script" in script.lower():
        raise AssertionError("the report's own CSS/JS must not close their elements")  # a packaging bug, not input
    csp = (f"default-src 'none'; img-src data:; style-src '{_sha256(css)}'; script-src '{_sha256(script)}'; "
           "base-uri 'none'; form-action 'none'")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = env.from_string(_template_text("report.html.j2"))
    rows = summary_rows(runs)
    groups: list[tuple[str, list]] = []
    for row in rows:
        if not groups or groups[-1][0] != row.group:
            groups.append((row.group, []))
        groups[-1][1].append(row)
    notes = [f"{r.name}: {n}" for r in runs for n in (*r.metrics.ledger_notes, r.baseline_note) if n]
    plot_items = [{"caption": PLOTS.get(stem, stem), "file": p.name,
                   "data": base64.b64encode(Path(p).read_bytes()).decode("ascii")} for stem, p in plots.items()]
    # The equity plot leads the page, under the headline; the rest follow the summary table.
    lead = [item for item, stem in zip(plot_items, plots, strict=True) if stem == "equity"]
    rest = [item for item, stem in zip(plot_items, plots, strict=True) if stem != "equity"]
    page = template.render(
        csp=csp, version=__version__, title=" vs ".join(r.name for r in runs), css=Markup(css), script=Markup(script),
        runs=[{"name": r.name, "episodes": r.metrics.episodes, "ticks": r.metrics.ticks, "index": i,
               "directory": str(r.directory) if r.directory else "", "episode_rows": episode_rows(r.metrics)}
              for i, r in enumerate(runs)],
        groups=groups, notes=notes, lead_plots=lead, plots=rest, headlines=[headline(r) for r in runs],
        definitions=DEFINITIONS, data=_pack(viewer_data(runs)),
    )
    path.write_text(page, encoding="utf-8")
    return path
