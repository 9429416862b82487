"""`rlaif-gym report RUN_DIR [RUN_B]`: the terminal table, the files, and the hint without the [plots] extra."""

from __future__ import annotations

import shutil
import sys

import pytest

from rlaif_gym.cli import main
from rlaif_gym.report import analyze_run, load_run
from rlaif_gym.report.tables import fmt_number

pytest.importorskip("typer", reason='the CLI needs the [cli] extra: pip install "rlaif-gym[cli]"')


def test_report_prints_the_table_and_writes_the_files(scripted_run, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", str(scripted_run), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    metrics = analyze_run(load_run(scripted_run)).metrics
    for label in ("mean final PnL (USD)", "Spearman: return vs PnL",
                  "Sharpe", "win rate", "Brier score", "format-valid rate", "latency p95",
                  "buy-and-hold", "quality: valid"):
        assert label in text, f"the terminal table lacks {label!r}"
    assert fmt_number(metrics.mean_pnl, "usd") in text
    assert "report.html" in text
    # Each long step says what it does, then how long it took (a first run compiles kernels in it: minutes).
    for stage in ("reading ", "replaying the trajectories and playing the baselines on their seeds",
                  "drawing the plots and report.html"):
        assert stage in text and text.index(stage) < text.index("done in", text.index(stage)), stage
    for name in ("report.html", "metrics.json", "equity.png", "components.png", "component_distributions.png",
                 "reward_vs_pnl.png", "judge_vs_pnl.png", "latency.png"):
        assert (out / name).stat().st_size > 1000, name


def test_report_defaults_to_run_dir_report(scripted_run, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for f in scripted_run.iterdir():
        if f.is_file():
            (run / f.name).write_bytes(f.read_bytes())
    assert main(["report", str(run), "--no-baselines"]) == 0
    assert (run / "report" / "report.html").exists()
    assert "baselines disabled" in capsys.readouterr().out


def test_a_comparison_is_written_beside_the_runs_never_into_the_first(scripted_run, hostile_run, tmp_path, capsys):
    """`report A B` without --out: report-A-vs-B beside A, so A's own report is never replaced; a report it does
    replace (the same comparison again) is named on the terminal."""
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(scripted_run, a, ignore=shutil.ignore_patterns("report*"))
    shutil.copytree(hostile_run, b, ignore=shutil.ignore_patterns("report*"))
    assert main(["report", str(a), "--no-baselines"]) == 0
    own = (a / "report" / "report.html").read_bytes()
    assert main(["report", str(a), str(b), "--no-baselines"]) == 0
    side = tmp_path / "report-a-vs-b"
    assert "B: b" in (side / "report.html").read_text(encoding="utf-8")
    assert (a / "report" / "report.html").read_bytes() == own
    assert "replacing" not in capsys.readouterr().out
    assert main(["report", str(a), str(b), "--no-baselines"]) == 0
    assert f"replacing the report in {side}" in capsys.readouterr().out.replace("\n", "")


def test_report_compares_two_runs(scripted_run, hostile_run, tmp_path, capsys):
    assert main(["report", str(scripted_run), str(hostile_run), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "A: scripted" in text and "B: hostile" in text and "B - A" in text
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "A: scripted" in html and "B: hostile" in html


def test_without_the_plots_extra_the_table_still_prints_and_says_how(scripted_run, tmp_path, capsys, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg", "jinja2"):
        monkeypatch.setitem(sys.modules, name, None)  # importing them now raises ImportError
    assert main(["report", str(scripted_run), "--out", str(tmp_path / "rep"), "--no-baselines"]) == 0
    text = capsys.readouterr().out
    assert "mean final PnL (USD)" in text
    assert 'pip install -e ".[plots]"' in text
    assert not (tmp_path / "rep").exists()


def test_report_of_a_directory_without_a_run_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "holds no run" in capsys.readouterr().err


def test_trajectory_text_is_not_rich_markup(scripted_run, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for f in scripted_run.iterdir():
        if f.is_file():
            text = f.read_text()
            if f.suffix == ".jsonl":  # a status that rich would read as a closing tag (and raise)
                text = text.replace('"finalStatus":"completed"', '"finalStatus":"[/oops]"')
            (run / f.name).write_text(text)
    assert main(["report", str(run), "--no-plots", "--no-baselines"]) == 0
    assert "[/oops] 3" in capsys.readouterr().out
