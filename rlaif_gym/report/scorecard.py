"""The report page of an eval (`rlaif-gym report EVAL_DIR`): the scorecard's intervals as a plot, its tables, and
the judge validations beside them, in one self-contained HTML page.

The plot is a forest plot: per metric, each policy's mean with its 95 % interval (top row), and the model's paired
difference from each baseline (bottom row; an interval clear of the zero line is a difference the set resolves).
Like the rest of the report, it needs the `[plots]` extra (matplotlib and jinja2).

Reads the files `rlaif_gym.evals` writes; never re-plays the world.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import ConfigError
from .html import _jinja, _sha256, _template_text
from .plots import _figure, _save

__all__ = ["ScorecardReport", "plot_scorecard", "write_scorecard_report"]


@dataclass(frozen=True)
class ScorecardReport:
    """What `write_scorecard_report` wrote: the plot and the page."""

    plot: Path
    html: Path


def _err(row: Mapping[str, Any]) -> tuple[float, float]:
    """(below, above) the mean to the interval's ends; 0 where it is undefined."""
    if row["mean"] is None or row["ci95_low"] is None or row["ci95_high"] is None:
        return 0.0, 0.0
    return row["mean"] - row["ci95_low"], row["ci95_high"] - row["mean"]


def plot_scorecard(card: Mapping[str, Any], path: Path) -> Path:
    """The forest plot of `card` (a scorecard.json) to `path`: per metric, each policy's mean and 95 % interval, and
    below it the model's paired differences from the baselines."""
    metrics = list(dict.fromkeys(r["metric"] for r in card["rows"]))
    policies = list(dict.fromkeys(r["policy"] for r in card["rows"]))
    baselines = list(dict.fromkeys(r["baseline"] for r in card["paired"]))
    rows = {(r["policy"], r["metric"]): r for r in card["rows"]}
    pairs = {(r["baseline"], r["metric"]): r for r in card["paired"]}
    fig, axes = _figure(ncols=len(metrics), nrows=2, size=(3.2 * len(metrics), 5.2))
    for j, metric in enumerate(metrics):
        for i, (names, table, ax, title) in enumerate((
                (policies, {p: rows[(p, metric)] for p in policies}, axes[0][j], metric),
                (baselines, {b: pairs[(b, metric)] for b in baselines}, axes[1][j], "model minus, paired")
        )):
            ys = list(range(len(names)))[::-1]
            means = [table[n]["mean"] if table[n]["mean"] is not None else math.nan for n in names]
            errs = [[_err(table[n])[0] for n in names], [_err(table[n])[1] for n in names]]
            ax.errorbar(means, ys, xerr=errs, fmt="o", color="#1f77b4" if i == 0 else "#d62728", capsize=3)
            ax.set_yticks(ys, names if j == 0 else [""] * len(names))
            ax.axvline(0.0, color="#7f7f7f", linewidth=0.8, linestyle=":")
            ax.set_title(title, fontsize=9)
            ax.tick_params(labelsize=8)
    return _save(fig, path)


def _markdown_sections(text: str, title: str) -> dict[str, Any]:
    """A Markdown file of ours (tables and lines) as the template's section: tables split into cells, other
    non-empty lines kept as text (the template escapes every cell)."""
    tables, lines, current = [], [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = {"head": cells, "rows": []}
                tables.append(current)
            elif not all(set(c) <= set("-:") for c in cells):
                current["rows"].append(cells)
        else:
            current = None
            if line.strip():
                lines.append(line.replace("**", "").replace("`", ""))
    return {"title": title, "tables": tables, "lines": lines}


def write_scorecard_report(eval_dir: str | Path, out_dir: str | Path | None = None) -> ScorecardReport:
    """Write `scorecard.png` and `report.html` for the eval in `eval_dir` into `out_dir` (default
    `eval_dir/report`): the plot, the scorecard's tables and every judge validation found in `eval_dir/judge`.

    Raises:
        ConfigError: `eval_dir` holds no finished eval.
        DependencyNotInstalled: matplotlib or jinja2 is missing (the `[plots]` extra).
    """
    from markupsafe import Markup  # a jinja2 dependency

    eval_dir = Path(eval_dir)
    card_path = eval_dir / "scorecard.json"
    if not card_path.is_file() or not (eval_dir / "scorecard.md").is_file():
        raise ConfigError(f"{eval_dir} holds no finished eval (scorecard.json, scorecard.md); run rlaif-gym eval "
                          f"--out {eval_dir} first")
    jinja2 = _jinja()
    card = json.loads(card_path.read_text(encoding="utf-8"))
    out = Path(out_dir) if out_dir is not None else eval_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    plot = plot_scorecard(card, out / "scorecard.png")
    sections = [_markdown_sections((eval_dir / "scorecard.md").read_text(encoding="utf-8"), "Scorecard")]
    for md in sorted((eval_dir / "judge").glob("validation.*.md")):
        sections.append(_markdown_sections(md.read_text(encoding="utf-8"), f"Judge validation: {md.stem[11:]}"))
    css = _template_text("report.css")
    csp = f"default-src 'none'; img-src data:; style-src '{_sha256(css)}'; base-uri 'none'; form-action 'none'"
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    s = card["set"]
    model = card["model"].get("model") or card["model"].get("name")
    page = env.from_string(_template_text("scorecard.html.j2")).render(
        csp=csp, css=Markup(css), version=__version__, title=f"{model} on {s['name']}",
        subtitle=f"{s['points']} {s.get('kind', 'decision points')} from seed {s['first_seed']:,}; set digest "
                 f"{s['digest'][:19]}; command: {' '.join(card.get('command', []))}.",
        plot={"caption": "each policy's mean and 95 % interval per metric (top); the model minus each baseline, "
                         "paired (bottom)", "file": plot.name,
              "data": base64.b64encode(plot.read_bytes()).decode("ascii")},
        sections=sections)
    html = out / "report.html"
    html.write_text(page, encoding="utf-8")
    return ScorecardReport(plot, html)
