"""`rlaif-gym report`: see what a run did. Metrics, PNG plots and one self-contained HTML page.

    from rlaif_gym.report import analyze_run, load_run, write_report

    run = analyze_run(load_run("runs/demo"), name="demo", directory="runs/demo")
    files = write_report([run], "runs/demo/report")     # PNGs, report.html, metrics.json

`analyze_run` needs only the core dependencies (it replays the recorded actions for the ground
truth and plays the baseline agents on the same seeds); `write_report` needs the `[plots]` extra
(matplotlib and jinja2) and raises `DependencyNotInstalled` naming it otherwise.

It builds on the envs and the metrics; the CLI builds on it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..metrics import to_jsonable
from .analysis import RunReport, analyze_run, load_run
from .baselines import BASELINE_AGENTS, BUY_AND_HOLD, BaselineCurves, baseline_curves
from .replay import ReplayError, replay, replay_many
from .tables import Row, headline, summary_rows

__all__ = [
    "BASELINE_AGENTS",
    "BUY_AND_HOLD",
    "BaselineCurves",
    "ReplayError",
    "ReportFiles",
    "Row",
    "RunReport",
    "analyze_run",
    "baseline_curves",
    "headline",
    "load_run",
    "replay",
    "replay_many",
    "require_report_extra",
    "summary_rows",
    "write_report",
]


@dataclass(frozen=True)
class ReportFiles:
    """What `write_report` wrote.

    Attributes:
        directory: the output directory.
        plots: plot stem -> PNG path.
        html: the self-contained page.
        metrics: metrics.json (every run's metrics, per episode included; NaN -> null).
    """

    directory: Path
    plots: dict[str, Path]
    html: Path
    metrics: Path


def require_report_extra() -> None:
    """Raise `DependencyNotInstalled` (naming the `[plots]` extra) unless matplotlib and jinja2 import."""
    from .html import _jinja
    from .plots import require_matplotlib

    require_matplotlib()
    _jinja()


def write_report(runs: Sequence[RunReport], out_dir: str | os.PathLike[str]) -> ReportFiles:
    """Write the plots, report.html and metrics.json for one run, or several side by side, into `out_dir`.

    Raises:
        DependencyNotInstalled: matplotlib or jinja2 is missing: `install_hint("plots")`.
    """
    from .html import render_html
    from .plots import write_plots

    require_report_extra()  # checked before anything is written
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(runs, out)
    html = render_html(runs, plots, out / "report.html")
    metrics = out / "metrics.json"
    metrics.write_text(json.dumps({"runs": [to_jsonable(r.metrics.to_dict()) for r in runs]}, indent=1) + "\n",
                       encoding="utf-8")
    return ReportFiles(out, plots, html, metrics)
