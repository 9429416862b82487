"""`rlaif-gym report`, `judge` and `export`: the commands that read a stored run (docs/cli.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from ..errors import ConfigError, DependencyNotInstalled, NothingToWriteError
from ._common import (
    ExportFormat,
    JudgeMode,
    TapeModeOption,
    _at_least,
    _console,
    _judge_client,
    _mib,
    _number,
    _outside,
    _print_judge,
    _printable,
    _stage,
    _why_empty,
)

__all__ = ["export", "judge", "report"]


def _report_target(directory: Path, compare: Path | None, out: Path | None) -> Path:
    """Where `report` writes: --out, else DIRECTORY/report, else (two runs) report-A-vs-B beside the first."""
    if out is not None:
        return out
    if compare is None:
        return directory / "report"
    # beside the runs: a comparison is neither run's own report, so it never replaces A's
    a, b = directory.resolve(), compare.resolve()
    return a.parent / f"report-{a.name}-vs-{b.name}"


def _report_table(runs):
    """The summary table of `report`: a column per run (and B - A for two), then the quality rows."""
    from rich.table import Table

    from ..report import summary_rows
    from ..rollout import summarize_quality

    table = Table(title="rlaif-gym report")
    table.add_column("metric")
    for r in runs:
        table.add_column(_outside(r.name), justify="right")
    if len(runs) == 2:
        table.add_column("B - A", justify="right")
    group = None
    for row in summary_rows(runs):
        if row.group != group:
            group = row.group
            table.add_section()
            table.add_row(f"[bold]{group}[/bold]", *([""] * (len(runs) + (len(runs) == 2))))
        # Labels and values may carry trajectory text (statuses, component names): never rich markup.
        table.add_row(_outside(row.label), *map(_outside, row.values), *([row.delta] if len(runs) == 2 else []))
    qualities = [summarize_quality([t.quality for t in r.trajectories]) for r in runs]
    table.add_section()
    quality_title = "[bold]Quality (the original's rules, docs/babylon.md)[/bold]"
    table.add_row(quality_title, *([""] * (len(runs) + (len(runs) == 2))))
    extra = [""] if len(runs) == 2 else []
    table.add_row("quality: valid", *(f"{q['valid']} / {q['trajectories']}" for q in qualities), *extra)
    table.add_row("quality: mean score", *(f"{q['mean_quality']:.3f}" for q in qualities), *extra)
    kinds = sorted({kind for q in qualities for kind, _ in q["top_issues"]})
    for kind in kinds:
        counts = [dict(q["top_issues"]).get(kind, 0) for q in qualities]
        table.add_row(_outside(f"issue: {kind}"), *(str(c) for c in counts), *extra)
    return table


def report(
    directory: Path = typer.Argument(..., help="a run directory written by rollout, or an eval's folder"),
    compare: Path = typer.Argument(None, metavar="RUN_B", help="a second run to put side by side with the "
                                   "first (e.g. before and after training)"),
    out: Path = typer.Option(None, file_okay=False, help="where to write the plots, report.html and metrics.json "
                             "(default: DIRECTORY/report; for two runs, report-A-vs-B beside the first)"),
    baselines: bool = typer.Option(True, help="play the numeric baseline agents and buy-and-hold on the "
                                   "run's seeds"),
    plots: bool = typer.Option(True, help="write the PNG plots and report.html (needs the plots extra)"),
):
    """Metrics of a run (or two side by side): a summary table here, PNG plots and one HTML page on disk. An eval's
    folder (rlaif-gym eval --out) gets its scorecard page instead: the intervals' plot and the tables."""
    from ..report import analyze_run, headline, load_run, require_report_extra, write_report

    console = _console()
    if (directory / "scorecard.json").is_file() and compare is None:
        from ..report.scorecard import write_scorecard_report

        console.print(_outside((directory / "scorecard.md").read_text(encoding="utf-8")), highlight=False,
                      soft_wrap=True)
        if not plots:
            return
        files = write_scorecard_report(directory, out)
        console.print(_outside(f"wrote {files.plot.name} and {files.html.name} to {files.html.parent} (open "
                               f"{files.html})"), highlight=False, soft_wrap=True)
        return
    dirs = [directory] if compare is None else [directory, compare]
    names = [d.resolve().name or str(d) for d in dirs]
    if len(dirs) == 2:
        names = [f"A: {names[0]}", f"B: {names[1]}"]
    with _stage(console, f"reading {' and '.join(str(d) for d in dirs)}"):
        loaded = [load_run(d) for d in dirs]
    target = _report_target(directory, compare, out)
    if plots and (target / "report.html").exists():
        console.print(_outside(f"replacing the report in {target}"), highlight=False, soft_wrap=True)
    plots_missing = None
    if plots:
        try:
            require_report_extra()
        except DependencyNotInstalled as exc:  # the table still prints; the end says how to get the rest
            plots_missing = exc
        else:  # an --out that cannot be written fails now, not after the analysis and the table
            target.mkdir(parents=True, exist_ok=True)
    what = "replaying the trajectories" + (" and playing the baselines on their seeds" if baselines else "")
    with _stage(console, f"{what} ({sum(map(len, loaded))} trajectories)"):
        runs = [analyze_run(trajs, name=n, directory=d, baselines=baselines)
                for trajs, d, n in zip(loaded, dirs, names, strict=True)]
    for d, r in zip(dirs, runs, strict=True):
        console.print(_outside(f"{r.name}: {d} ({len(r.trajectories)} trajectories)"), highlight=False,
                      soft_wrap=True)
    for r in runs:  # the headline first: what a reader wants before the 60 rows below
        console.print(f"[bold]{_outside(headline(r))}[/bold]", highlight=False, soft_wrap=True)
    console.print(_report_table(runs))
    for health in sorted(p for d in dirs for p in (d / "judge").glob("health.*.json")):  # rlaif-gym judge's
        from ..llm_judge import format_health

        console.print(_printable(f"{health}:\n{format_health(json.loads(health.read_text()))}"), highlight=False,
                      markup=False, soft_wrap=True)
    for r in runs:
        for note in (*r.metrics.ledger_notes, r.baseline_note):
            if note:
                console.print(f"[yellow]note[/yellow] {_outside(r.name)}: {_outside(note)}", highlight=False,
                              soft_wrap=True)
    if not plots:
        return
    if plots_missing is not None:
        console.print(f"[yellow]no plots or report.html[/yellow]: {_outside(str(plots_missing))}", highlight=False,
                      soft_wrap=True)
        return
    with _stage(console, f"drawing the plots and report.html in {target}"):
        files = write_report(runs, target)
    console.print(_outside(f"wrote {len(files.plots)} plots, {files.html.name} and {files.metrics.name} to "
                         f"{files.directory} (open {files.html})"), highlight=False, soft_wrap=True)


def judge(
    directory: Path = typer.Argument(..., help="a run directory written by rollout"),
    mode: JudgeMode = typer.Option(JudgeMode.absolute, help="absolute (one trajectory), listwise (a group, "
                                   "RULER-style) or pairwise (both orders, Bradley-Terry)"),
    tape: Path = typer.Option(None, help="judge tape, SQLite (default: RUN_DIR/judge/judge.sqlite)"),
    tape_mode: TapeModeOption = typer.Option(TapeModeOption.record, help="record: ask and store; replay: "
                                             "only the tape (exact, no server); rescore: ask only what the "
                                             "tape lacks (after a rubric change)"),
    base_url: str = typer.Option(None, help="judge server URL (default: $OPENAI_BASE_URL)"),
    model: str = typer.Option(None, help="judge model (default: $RLAIF_MODEL); replay needs it too"),
    rubrics: Path = typer.Option(None, exists=True, dir_okay=False,
                                 help="rubric file to judge with (default: the packaged rubrics.json)"),
    archetype: str = typer.Option(None, help="judge every trajectory as this archetype"),
    max_concurrency: int = typer.Option(4, callback=_at_least(1), help="judge calls in flight"),
    timeout: float = typer.Option(60.0, callback=_number(0.0, above=True), help="seconds per judge call attempt"),
    max_retries: int = typer.Option(3, callback=_at_least(0), help="retries for transient judge failures"),
    max_response_mb: float = typer.Option(8.0, callback=_number(0.0, 4096.0, above=True),
                                          help="the largest answer read from the judge server, in MiB; a larger "
                                          "one is a failed, retried attempt"),
    call_deadline: float = typer.Option(180.0, callback=_number(0.0, above=True),
                                        help="seconds one verdict may take, retries included"),
    failure_budget: float = typer.Option(0.25, callback=_number(0.0, 1.0),
                                         help="fraction of verdicts (0 to 1) that may fail before the batch stops"),
    repeats: int = typer.Option(1, callback=_at_least(1),
                                help="absolute mode: verdicts per trajectory (their spread is reported)"),
    max_tokens: int = typer.Option(512, callback=_at_least(1), help="max completion tokens per verdict"),
    strict: bool = typer.Option(True, help="replay: fail on a call that is not on the tape"),
    out: Path = typer.Option(None, file_okay=False, help="output directory (default: RUN_DIR/judge)"),
):
    """Judge a stored run with an LLM, never re-running the world: scores, health, GRPO groups in RUN_DIR/judge."""
    import os

    from ..llm_judge import JudgeConfig, judge_run

    console = _console()
    config = JudgeConfig(mode=mode.value, max_concurrency=max_concurrency, call_deadline_s=call_deadline,
                         failure_budget=failure_budget, repeats=repeats, max_tokens=max_tokens,
                         archetype=archetype, strict_replay=strict)
    if tape_mode is TapeModeOption.replay and base_url is None:
        client = None
        model = model or os.environ.get("RLAIF_MODEL") or os.environ.get("OPENAI_MODEL")
        if not model:
            raise ConfigError("replay needs the judge model the tape was recorded with: pass --model")
    else:
        client = _judge_client(base_url, model, timeout, max_retries, _mib(max_response_mb))
    _print_judge(console, judge_run(directory, client=client, model=model, config=config, tape=tape,
                                    tape_mode=tape_mode.value, rubrics_path=rubrics, out_dir=out))


def export(
    directory: Path = typer.Argument(..., help="a run directory written by rollout"),
    format: ExportFormat = typer.Option(..., "--format", help="sft, dpo, grpo, db (original rows) or parquet"),
    output: Path = typer.Option(..., dir_okay=False, help="file to write"),
    judge_scores: Path = typer.Option(None, exists=True, dir_okay=False,
                                      help="grpo: score groups with this scores.<mode>.jsonl of "
                                      "rlaif-gym judge (unscored trajectories are left out, never 0)"),
):
    """Export trajectories to the formats trainers read."""
    from ..report import load_run
    from ..storage import EXPORT_KINDS, write_export, write_parquet

    console = _console()
    trajs = load_run(directory)
    if judge_scores is not None and format is not ExportFormat.grpo:
        raise ConfigError("--judge-scores applies to --format grpo only")
    if format is ExportFormat.parquet:
        write_parquet(output, trajs)
        written = len(trajs)
    else:
        options: dict[str, Any] = {}
        if judge_scores is not None:
            from ..llm_judge import read_judge_scores

            options["judge_scores"] = read_judge_scores(judge_scores)
        if not EXPORT_KINDS[format.value](trajs, **options):  # say so, and leave `output` as it was
            raise NothingToWriteError(f"{format.value} export of the {len(trajs)} trajectories in {directory}: "
                                      f"nothing to write, so {output} was not written: "
                                      f"{_why_empty(format.value, trajs, judge_scores is not None)}")
        written = write_export(format.value, trajs, output, **options)
    unit = {"sft": "records", "dpo": "pairs", "grpo": "groups", "db": "rows", "parquet": "rows"}[format.value]
    console.print(_outside(f"wrote {written} {format.value} {unit} from {len(trajs)} trajectories to {output}"),
                  highlight=False, soft_wrap=True)
