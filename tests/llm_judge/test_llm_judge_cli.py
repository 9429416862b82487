"""`rlaif-gym judge` and `rlaif-gym rollout --judge llm` against a real HTTP judge server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from judge_server import JudgeServer

from rlaif_gym.cli import main
from rlaif_gym.storage import JsonlStore


@pytest.fixture(autouse=True)
def _no_model_env(monkeypatch):
    for name in ("RLAIF_MODEL", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _row(text: str, name: str) -> str:
    """The value of a row of the printed judge-health table."""
    line = next(line for line in text.splitlines() if line.startswith(f"| {name} "))
    return line.strip("| ").split("|")[-1].strip()


def _scores(path):
    return {r["trajectory_id"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def test_rollout_with_the_llm_judge_judges_the_run_it_collected(tmp_path, capsys):
    out = tmp_path / "demo"
    with JudgeServer() as server:
        code = main(["rollout", "--agent", "scripted", "--episodes", "4", "--group-size", "2", "--seed", "3",
                     "--out", str(out), "--no-progress", "--set", "num_ticks=6", "--judge", "llm",
                     "--judge-mode", "listwise", "--judge-base-url", server.base_url, "--judge-model", "judge-m"])
        captured = capsys.readouterr()
        assert code == 0, captured.err[-2000:]
        assert len(server.chat_requests()) == 2  # one listwise call per group, after the collection
    trajs = list(JsonlStore(out).read())
    scores = _scores(out / "judge" / "scores.listwise.jsonl")
    assert sorted(scores) == sorted(t.trajectory_id for t in trajs)
    assert all(r["score"] is not None and r["mode"] == "listwise" and r["model"] == "judge-m" for r in scores.values())
    assert "rollout summary" in captured.out and "judge health" in captured.out
    assert (out / "judge" / "judge.sqlite").exists() and (out / "judge" / "grpo.listwise.jsonl").exists()


def test_rollout_with_the_llm_judge_and_no_judge_model_fails_before_collecting(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["rollout", "--agent", "scripted", "--episodes", "2", "--out", str(out), "--no-progress",
                 "--set", "num_ticks=4", "--judge", "llm"])
    assert code == 2 and "needs a model" in capsys.readouterr().err
    assert not list(out.glob("trajectories-*.jsonl"))


def test_judge_record_then_replay_with_the_server_stopped_then_export(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["rollout", "--agent", "scripted", "--episodes", "4", "--group-size", "2", "--out", str(run),
                 "--no-progress", "--set", "num_ticks=6"]) == 0
    capsys.readouterr()
    with JudgeServer() as server:
        code = main(["judge", str(run), "--mode", "pairwise", "--base-url", server.base_url, "--model", "judge-m",
                     "--max-concurrency", "2"])
        captured = capsys.readouterr()
        assert code == 0, captured.err[-2000:]
        asked = len(server.chat_requests())
        assert asked == 2 * 2 and server.max_in_flight <= 2  # one pair per group, both orders
    scores_path = run / "judge" / "scores.pairwise.jsonl"
    recorded = scores_path.read_bytes()
    assert _row(captured.out, "calls: network / tape") == f"{asked} / 0"

    code = main(["judge", str(run), "--mode", "pairwise", "--tape-mode", "replay", "--model", "judge-m"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert scores_path.read_bytes() == recorded
    assert _row(captured.out, "calls: network / tape") == f"0 / {asked}"

    assert main(["report", str(run), "--no-plots", "--no-baselines"]) == 0  # the report shows the judge's health
    assert _row(capsys.readouterr().out, "order-swap disagreement rate") == "0 (2 pairs)"

    target = tmp_path / "grpo.jsonl"
    assert main(["export", str(run), "--format", "grpo", "--output", str(target),
                 "--judge-scores", str(scores_path)]) == 0
    scores = {k: v["score"] for k, v in _scores(scores_path).items()}
    groups = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(groups) == 2
    for g in groups:
        assert g["scores"] == [scores[t] for t in g["trajectory_ids"]] and g["missing_trajectory_ids"] == []

    code = main(["judge", str(run), "--mode", "pairwise", "--tape-mode", "replay", "--model", "another-model"])
    assert code == 2 and "holds no verdict" in capsys.readouterr().err
    code = main(["judge", str(run), "--mode", "pairwise", "--tape-mode", "replay"])
    assert code == 2 and "--model" in capsys.readouterr().err
    assert main(["export", str(run), "--format", "sft", "--output", str(target), "--judge-scores",
                 str(scores_path)]) == 2
