"""The report never fills missing LLM verdicts with the rule judge's score (issue 15, item 11).

A run judged by an LLM reports the LLM judge's score over the episodes it scored, says how many that
is, and leaves the others out (of the mean, the correlation with PnL, the per-episode table).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlaif_gym.cli import main
from rlaif_gym.metrics import rank_correlation
from rlaif_gym.report import analyze_run, load_run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("coverage") / "run"
    assert main(["rollout", "--episodes", "5", "--num-envs", "5", "--seed", "4", "--out", str(out),
                 "--no-progress", "--set", "num_ticks=6"]) == 0
    return out


def _judge(run: Path, scores: list[float | None]) -> list[str]:
    trajs = load_run(run)
    (run / "judge").mkdir(exist_ok=True)
    lines = [json.dumps({"trajectory_id": t.trajectory_id, "score": s}) for t, s in zip(trajs, scores, strict=True)]
    (run / "judge" / "scores.absolute.jsonl").write_text("\n".join(lines) + "\n")
    return [t.trajectory_id for t in trajs]


SCORES = [0.9, None, 0.1, None, 0.5]  # two verdicts missing (the judge failed on them)


def test_missing_llm_verdicts_are_left_out_not_filled_with_the_rule_judge(run):
    _judge(run, SCORES)
    m = analyze_run(load_run(run), directory=run, replay_ledgers=False, baselines=False).metrics
    assert m.judge_score == pytest.approx((0.9 + 0.1 + 0.5) / 3)
    assert m.judge_source == "judge_scores.llm_absolute"
    assert (m.judge_scored, m.episodes) == (3, 5)
    detail = m.episodes_detail
    assert [e.judge_score for e in detail if not math.isnan(e.judge_score)] == [0.9, 0.1, 0.5]
    assert [e.judge_source for e in detail] == ["judge_scores.llm_absolute", "none", "judge_scores.llm_absolute",
                                                "none", "judge_scores.llm_absolute"]
    pnl = [e.pnl for i, e in enumerate(detail) if SCORES[i] is not None]
    assert m.judge_pnl_correlation == pytest.approx(rank_correlation([0.9, 0.1, 0.5], pnl), nan_ok=True)


def test_the_report_shows_the_llm_judge_coverage(run, capsys):
    _judge(run, SCORES)
    assert main(["report", str(run), "--no-plots", "--no-baselines"]) == 0
    out = capsys.readouterr().out
    assert "judge coverage" in out and "3 / 5" in out, out[-2500:]
    assert "rule judge" not in out.split("judge coverage")[0].split("Judge")[-1], out[-2500:]


def test_an_unjudged_run_keeps_the_rule_judge_and_says_so(run, capsys):
    judge_dir = run / "judge"
    for f in judge_dir.glob("*"):
        f.unlink()
    m = analyze_run(load_run(run), directory=run, replay_ledgers=False, baselines=False).metrics
    assert m.judge_source == "rule judge: mean reasoning component"
    assert m.judge_scored == 5
