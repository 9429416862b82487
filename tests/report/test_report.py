"""The report from small collected runs: valid PNGs, every trajectory and tick in the HTML, nothing unescaped."""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
import struct
from html import unescape
from pathlib import Path

import pytest
from report_runs import HOSTILE

from rlaif_gym.report import BUY_AND_HOLD, load_run, summary_rows
from rlaif_gym.report.plots import PLOTS
from rlaif_gym.report.tables import fmt_number


@pytest.fixture
def runs(analyzed):
    return analyzed


@pytest.fixture
def single(single_report):
    return single_report


def embedded_data(html: str) -> dict:
    """The viewer's data block: base64 of gzip of JSON."""
    m = re.search(r'<script type="application/gzip\+base64" id="rg-data">([A-Za-z0-9+/=]*)</script>', html)
    assert m, "the report has no embedded trajectory data"
    return json.loads(gzip.decompress(base64.b64decode(m.group(1))))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_every_plot_is_a_valid_png_of_real_size(single):
    assert set(single.plots) == set(PLOTS)
    for stem, path in single.plots.items():
        assert path == single.directory / f"{stem}.png"
        width, height = png_size(path)
        assert width >= 600 and height >= 300, f"{stem}: {width}x{height}"
        assert path.stat().st_size > 15_000, f"{stem}: only {path.stat().st_size} bytes: an empty plot?"
        image = pytest.importorskip("PIL.Image")
        with image.open(path) as im:
            im.verify()  # decodes the whole file: a truncated or corrupt PNG raises
        with image.open(path) as im:
            colours = im.convert("RGB").getcolors(maxcolors=100_000)
            assert colours is None or len(colours) > 50, f"{stem} has almost no content"


def test_html_holds_every_trajectory_and_tick(single, runs, scripted_run):
    html = single.html.read_text(encoding="utf-8")
    data = embedded_data(html)
    trajs = load_run(scripted_run)
    (run,) = data["runs"]
    assert [t["id"] for t in run["trajectories"]] == [t.trajectory_id for t in trajs]
    for t, rec in zip(run["trajectories"], trajs, strict=True):
        assert [s["i"] for s in t["steps"]] == [s.step_number for s in rec.steps]
        for s, step in zip(t["steps"], rec.steps, strict=True):
            assert s["p"] == step.observation.text  # the prompt
            assert s["rep"] == step.llm_calls[0].response  # the reply
            assert s["a"]["t"] == step.action.action_type and s["a"]["ok"] == step.action.success
            assert set(s["c"]) == set(step.reward_components)
            assert "fee" in s  # replayed ground truth per tick
        assert f'data-trajectory="{t["id"]}"' in html  # the episodes table too
    assert data["system"] and all(t["sys"] == 0 for t in run["trajectories"])  # stored once
    assert "Trajectory viewer" in html and "B − A" not in html


def test_html_is_self_contained_and_locked_down(single):
    html = single.html.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html), "the page loads something remote"
    csp = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1))
    assert "default-src 'none'" in csp and "img-src data:" in csp and "'unsafe-inline'" not in csp
    assert html.count('src="data:image/png;base64,') == len(PLOTS)
    assert len(html) < 3_000_000


def test_untrusted_text_is_escaped_or_packed(compare_report):
    html = compare_report.html.read_text(encoding="utf-8")
    # The run name and ids carry markup: the tables show them escaped.
    assert "evil&lt;b&gt;&#34;&amp;" in html or "evil&lt;b&gt;&quot;&amp;" in html
    assert 'evil<b>"&' not in html
    assert "<script>alert(1)" not in html and "onerror=" not in html
    # The hostile reply and the errors are all in the data block, intact.
    data = embedded_data(html)
    t0 = data["runs"][1]["trajectories"][0]
    assert HOSTILE in t0["steps"][0]["rep"]
    assert t0["status"] == "failed" and any("timed out" in e for e in t0["errors"])
    assert t0["failed"] and "timeout" in t0["failed"][0]["err"]
    assert [s["a"]["t"] for s in t0["steps"][:3]] == ["buy_prediction", "invalid", "buy_prediction"]
    assert t0["steps"][1]["fe"] and not t0["steps"][2]["a"]["ok"]


def test_metrics_json_has_every_episode(single, runs):
    d = json.loads(single.metrics.read_text())
    (run,) = d["runs"]
    assert run["name"] == "scripted" and len(run["episodes_detail"]) == len(runs[0].trajectories)
    assert run["trades"] == runs[0].metrics.trades and run["ledger_episodes"] == len(runs[0].trajectories)


def test_two_runs_side_by_side(runs, compare_report):
    files = compare_report
    html = files.html.read_text(encoding="utf-8")
    assert "B − A" in html and "scripted" in html
    data = embedded_data(html)
    assert [r["name"] for r in data["runs"]] == ["scripted", "hostile"]
    rows = {r.label: r for r in summary_rows(list(runs))}
    pnl = rows["mean final PnL (USD)"]
    a, b = runs[0].metrics.mean_pnl, runs[1].metrics.mean_pnl
    assert pnl.values == [fmt_number(a, "usd"), fmt_number(b, "usd")]
    assert pnl.delta.startswith(fmt_number(b - a, "usd"))
    if min(len(r.trajectories) for r in runs) >= 2:  # a difference of means comes with its 95% CI
        assert " (95% CI " in pnl.delta and " to " in pnl.delta, pnl.delta
    assert rows["closed trades"].values[0] == fmt_number(runs[0].metrics.trades, "int")
    for stem in PLOTS:
        assert png_size(files.plots[stem])[0] >= 600


def test_analysis_of_the_runs(runs):
    scripted, hostile = runs
    assert scripted.ledgers.keys() == {t.trajectory_id for t in scripted.trajectories}
    assert scripted.baselines is not None and BUY_AND_HOLD in scripted.baselines.curves
    assert scripted.baselines.ticks == 14 and list(scripted.baselines.seeds) == [0, 1, 2]
    assert hostile.metrics.statuses == {"failed": 2}
    assert hostile.metrics.calls.failed == 2
    assert hostile.metrics.format_valid_rate == pytest.approx(4 / 5)  # tick 1 of 5 has no action
    assert hostile.metrics.failed_actions == 2  # market-999 in each episode


def test_llm_judge_scores_beside_the_run_become_the_judge_score(scripted_run, tmp_path):
    from rlaif_gym.metrics import rank_correlation
    from rlaif_gym.report import analyze_run

    run = tmp_path / "run"
    (run / "judge").mkdir(parents=True)
    for f in scripted_run.iterdir():
        if f.is_file():
            (run / f.name).write_bytes(f.read_bytes())
    trajs = load_run(run)
    scores = [0.9, None, 0.1]  # the second verdict is missing: that episode is left out (issue 15, item 11)
    lines = [json.dumps({"trajectory_id": t.trajectory_id, "score": s}) for t, s in zip(trajs, scores, strict=True)]
    (run / "judge" / "scores.absolute.jsonl").write_text("\n".join(lines) + "\n")
    m = analyze_run(trajs, directory=run, replay_ledgers=False, baselines=False).metrics
    assert [e.judge_source for e in m.episodes_detail] == [
        "judge_scores.llm_absolute", "none", "judge_scores.llm_absolute"]
    assert math.isnan(m.episodes_detail[1].judge_score) and m.judge_scored == 2
    assert [m.episodes_detail[i].judge_score for i in (0, 2)] == [0.9, 0.1]
    judged = [e.judge_score for e in m.episodes_detail]
    assert m.judge_pnl_correlation == pytest.approx(rank_correlation(judged, [e.pnl for e in m.episodes_detail]),
                                                    nan_ok=True)


def test_the_same_run_gives_the_same_page(analyzed, single_report, tmp_path):
    from rlaif_gym.report.html import render_html

    again = render_html([analyzed[0]], single_report.plots, tmp_path / "again.html")
    assert again.read_bytes() == single_report.html.read_bytes()  # no timestamps, no random ids
