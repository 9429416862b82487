"""An outage is never the model's score (issue 57, E1 and E6), through the real `rlaif-gym eval` and real HTTP servers
on 127.0.0.1.

* E1: the server goes away after 5 of 16 answers. The 11 failed calls are counted apart and never scored: the eval
  exits 1 with no scorecard (it exited 0 with them scored as empty replies, format-valid 0.31); `--resume` alone
  makes no call and refuses again; `--allow-failed-calls` scores the 5 answers; `--resume --retry-failed` with the
  server back makes exactly the 11 failed calls again and writes the scorecard an uninterrupted eval writes.
* E6: a server that accepts the connection and never answers stops the eval at its first call, in about one
  `--timeout` (it ran every call out: about 100 min at the defaults); so does a first call answered with an error.
"""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest
from fake_server import FakeOpenAIServer, Fault

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.cli import main
from rlaif_gym.errors import ConfigError
from rlaif_gym.evals import decision_set, run_decision_eval
from rlaif_gym.evals.runner import FIRST_CALL_GRACE_S, call_seed


def _model_row(card, metric):
    return next(r for r in card["rows"] if r["policy"] == "model" and r["metric"] == metric)


def test_an_outage_mid_eval_is_never_the_models_score_and_resume_retry_failed_makes_those_calls(tmp_path, capsys):
    server = FakeOpenAIServer().start()
    port, answered = server.port, itertools.count(1)

    def outage(body) -> bool:  # the 6th call finds the server going away: a 503, then a closed port
        n = next(answered)
        if n == 6:
            threading.Thread(target=server.stop, daemon=True).start()
        return n > 5

    server.faults = [Fault("status", status=503, match=outage)]
    out = tmp_path / "run"
    argv = ["eval", "--agent", "openai", "--base-url", server.base_url, "--model", "m", "--points", "16",
            "--timeout", "5", "--max-retries", "1", "--max-concurrent-calls", "1"]
    try:
        assert main([*argv, "--out", str(out)]) == 1
    finally:
        server.stop()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "11 of 16 calls failed" in err and "--resume --retry-failed" in err and "--allow-failed-calls" in err
    assert str(out / "replies.jsonl") in err
    assert not (out / "scorecard.json").exists() and not (out / "points.jsonl").exists()
    rows = [json.loads(line) for line in (out / "replies.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and sum(r["error"] is not None for r in rows) == 11  # every call kept, with its error

    back = FakeOpenAIServer(port=port).start()
    try:
        assert main([*argv, "--out", str(out), "--resume"]) == 1  # the failed calls stay failed without the flag
        assert "11 of 16 calls failed" in capsys.readouterr().err and not back.chat_requests()
        assert main([*argv, "--out", str(out), "--resume", "--allow-failed-calls"]) == 0
        card = json.loads((out / "scorecard.json").read_text())
        assert card["calls"]["failed"] == 11 and card["calls"]["unanswered_points"] == 11
        valid = _model_row(card, "format_valid")
        assert valid["n"] == 5 and valid["mean"] == 1.0  # the 5 answers; it was 0.31 with the outage scored
        assert all(r["n"] == 16 for r in card["rows"] if r["policy"] == "teacher")
        assert not back.chat_requests()

        assert main([*argv, "--out", str(out), "--resume", "--retry-failed"]) == 0
        assert len(back.chat_requests()) == 11  # exactly the failed calls, made again
        card = json.loads((out / "scorecard.json").read_text())
        valid = _model_row(card, "format_valid")
        assert card["calls"]["failed"] == 0 and valid["n"] == 16 and valid["mean"] == 1.0
        aside = [json.loads(line) for line in (out / "retried-failures.jsonl").read_text().splitlines()]
        assert len(aside) == 11 and all(r["error"] for r in aside)
        assert main([*argv, "--out", str(tmp_path / "clean")]) == 0  # the eval the outage interrupted
    finally:
        back.stop()
    assert (out / "scorecard.json").read_bytes() == (tmp_path / "clean" / "scorecard.json").read_bytes()
    assert main(["eval", "--retry-failed", "--out", str(tmp_path / "x")]) == 2
    assert "--resume --retry-failed" in capsys.readouterr().err


@pytest.mark.parametrize("task", [
    ["--task-set", "decisions-v1/held-out-a", "--points", "16"],
    ["--task-set", "episodes-v1/decision-world-a", "--points", "4", "--set", "num_ticks=4"],
], ids=["decision-points", "episodes"])
def test_a_server_that_never_answers_stops_the_eval_at_its_first_call(task, tmp_path, capsys):
    server = FakeOpenAIServer([Fault("hang", delay_s=600.0)]).start()
    try:
        started = time.perf_counter()
        code = main(["eval", "--agent", "openai", "--base-url", server.base_url, "--model", "m", *task,
                     "--timeout", "1", "--out", str(tmp_path / "run")])
        took = time.perf_counter() - started
        requests = len(server.chat_requests())
    finally:
        server.stop()
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert server.base_url in err and "sent no answer" in err and "--timeout" in err
    assert requests <= 4 and took < 1.0 + FIRST_CALL_GRACE_S + 10.0  # one call's attempts, then the error
    assert not (tmp_path / "run" / "scorecard.json").exists()


def test_the_first_call_is_bounded_by_the_timeout_even_when_its_retries_would_go_on(tmp_path):
    """30 retries of a 1 s timeout would take 31 s; the first call gets --timeout plus `FIRST_CALL_GRACE_S`."""
    server = FakeOpenAIServer([Fault("hang", delay_s=600.0)]).start()
    agent = OpenAIChatAgent("m", server.base_url, temperature=0.0, logprobs=False, timeout=1.0, max_retries=30,
                            backoff=0.0)
    try:
        started = time.perf_counter()
        with pytest.raises(ConfigError, match=rf"accepted the first call but sent no answer in "
                           rf"{1 + FIRST_CALL_GRACE_S:g} s.*--timeout"):
            run_decision_eval(agent, decision_set(points=1), tmp_path / "silent")
        took = time.perf_counter() - started
    finally:
        server.stop()
    assert took < 1.0 + FIRST_CALL_GRACE_S + 8.0
    assert (tmp_path / "silent" / "replies.jsonl").read_text() == ""  # nothing recorded: no --overwrite needed


def test_a_first_call_answered_with_an_error_stops_the_eval_naming_the_server(tmp_path, capsys):
    server = FakeOpenAIServer([Fault("status", status=404, message="The model `m` does not exist.")]).start()
    try:
        code = main(["eval", "--agent", "openai", "--base-url", server.base_url, "--model", "m", "--points", "8",
                     "--max-retries", "0", "--out", str(tmp_path / "run")])
        requests = len(server.chat_requests())
    finally:
        server.stop()
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert server.base_url in err and "first call" in err and "does not exist" in err and "--model" in err
    assert requests == 1


def test_allowed_failed_calls_leave_the_models_rung_out_of_a_judge_validation(fake_server, tmp_path, capsys):
    """A point without an answered call has no reply of the model's to judge: the ladder goes on without the model's
    rung (it played the failed call's empty reply before)."""
    points = decision_set(points=4).build()
    lost = call_seed(0, points[2], 0)
    fake_server.faults = [Fault("status", status=500, match=lambda body: body.get("seed") == lost)]
    out = tmp_path / "run"
    code = main(["eval", "--agent", "openai", "--base-url", fake_server.base_url, "--model", "m", "--points", "4",
                 "--max-retries", "0", "--allow-failed-calls", "--judge", "rule", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "leaves the model's rung out: no answered call at 1 of 4 points" in printed
    card = json.loads((out / "scorecard.json").read_text())
    assert card["calls"]["failed"] == 1 and _model_row(card, "format_valid")["n"] == 3
    assert "--allow-failed-calls" not in card["command"]  # the flag changes no score of a run without failures
    validation = json.loads((out / "judge" / "validation.rule.json").read_text())
    assert "model" not in validation["ladder"] and validation["groups"] == 4
