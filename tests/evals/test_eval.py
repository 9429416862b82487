"""`rlaif_gym.evals`: the scorecard's rows and paired intervals, reproducibility, resume, compare and failures.

Each test runs real evals (the env plays every reply; a real HTTP server on 127.0.0.1 where a server is needed) and
checks a property that the feature's absence would break."""

from __future__ import annotations

import json
import math
import shutil
import statistics

import numpy as np
import pytest
from fake_server import Fault

from rlaif_gym.agents import LLMAgent, OpenAIChatAgent, ScriptedLLMAgent
from rlaif_gym.envs.decisions import WAIT_REPLY
from rlaif_gym.errors import ConfigError
from rlaif_gym.evals import METRICS, compare_runs, decision_set, run_decision_eval
from rlaif_gym.evals.runner import FailedCallsError, call_seed
from rlaif_gym.llm import SamplingParams
from rlaif_gym.llm.scripted import offline_completion


def _rows(card):
    return {(r["policy"], r["metric"]): r for r in card["rows"]}


def _pairs(card):
    return {(r["baseline"], r["metric"]): r for r in card["paired"]}


def _values(out, policy):
    rows = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines()]
    return {r["point"]: r for r in rows if r["policy"] == policy}


class WaitClient:
    """A model that always waits (a policy with no skill, for `compare`)."""

    model = "always-wait"

    async def complete(self, messages, params):
        return offline_completion(WAIT_REPLY, messages, self.model)

    def describe(self):
        return {"kind": "test", "model": self.model}


class CountingAgent(ScriptedLLMAgent):
    """The scripted agent, counting its calls."""

    calls = 0

    async def act(self, *args, **kwargs):
        type(self).calls += 1
        return await super().act(*args, **kwargs)


def test_the_scripted_model_scores_as_the_teacher_baseline_on_the_same_states(scripted_eval):
    card = scripted_eval.scorecard
    assert card["set"]["name"] == "decisions-v1/held-out-a" and card["set"]["points"] == 200
    assert card["set"]["first_seed"] == 1_000_000 and card["set"]["digest"].startswith("sha256:")
    rows = _rows(card)
    assert {p for p, _ in rows} == {"model", "wait", "teacher", "informed", "truth"}
    for m in METRICS:
        assert {**rows[("model", m)], "policy": "teacher"} == rows[("teacher", m)]
    model, teacher = _values(scripted_eval.out, "model"), _values(scripted_eval.out, "teacher")
    assert [model[p]["gain_over_wait"] for p in model] == [teacher[p]["gain_over_wait"] for p in teacher]
    same = _pairs(card)[("teacher", "gain_over_wait")]
    assert same["mean"] == same["ci95_low"] == same["ci95_high"] == 0.0 and same["n"] == 200


def test_the_truth_informed_ceiling_is_above_waiting_and_above_the_teacher(scripted_eval):
    rows = _rows(scripted_eval.scorecard)
    assert rows[("wait", "gain_over_wait")]["mean"] == 0.0  # every gain is measured against the wait
    truth, teacher = rows[("truth", "gain_over_wait")], rows[("teacher", "gain_over_wait")]
    assert truth["ci95_low"] > 0 and truth["mean"] > teacher["mean"] > 0
    assert rows[("truth", "right_minus_wrong")]["mean"] > 0.9  # it bets the resolved side wherever it bets
    assert _pairs(scripted_eval.scorecard)[("truth", "gain_over_wait")]["ci95_high"] < 0  # model - ceiling


def test_paired_intervals_are_taken_point_by_point(scripted_eval):
    model, informed = _values(scripted_eval.out, "model"), _values(scripted_eval.out, "informed")
    diffs = [model[p]["gain_over_wait"] - informed[p]["gain_over_wait"] for p in model]
    pair = _pairs(scripted_eval.scorecard)[("informed", "gain_over_wait")]
    half = 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs))
    assert pair["n"] == 200
    assert pair["mean"] == pytest.approx(statistics.fmean(diffs), abs=1e-12)
    assert pair["ci95_high"] - pair["mean"] == pytest.approx(half, rel=1e-9)
    rows = _rows(scripted_eval.scorecard)
    unpaired = math.hypot(*(rows[(p, "gain_over_wait")]["ci95_high"] - rows[(p, "gain_over_wait")]["mean"]
                            for p in ("model", "informed")))
    assert half != pytest.approx(unpaired, rel=1e-3)  # the same states: not two independent samples


def test_the_same_eval_writes_the_same_scorecard_bytes(tmp_path):
    dset = decision_set(points=20)
    for name in ("a", "b"):
        run_decision_eval(ScriptedLLMAgent(temperature=0.0), dset, tmp_path / name, command=["same"])
    assert (tmp_path / "a" / "scorecard.json").read_bytes() == (tmp_path / "b" / "scorecard.json").read_bytes()
    assert (tmp_path / "a" / "points.jsonl").read_bytes() == (tmp_path / "b" / "points.jsonl").read_bytes()
    assert json.loads((tmp_path / "a" / "timing.json").read_text())["wall_s"] > 0  # the timings live apart
    assert "wall_s" not in (tmp_path / "a" / "scorecard.json").read_text()


def test_an_interrupted_eval_resumes_calling_only_what_is_missing(tmp_path):
    dset = decision_set(points=20)
    whole = run_decision_eval(ScriptedLLMAgent(temperature=0.0), dset, tmp_path / "whole", command=["x"])
    part = tmp_path / "part"
    part.mkdir()
    shutil.copy(whole.out / "eval.json", part / "eval.json")
    lines = (whole.out / "replies.jsonl").read_text().splitlines(keepends=True)
    (part / "replies.jsonl").write_text("".join(lines[:7]) + lines[7][:40])  # killed while writing line 8
    with pytest.raises(ConfigError, match="--resume"):
        run_decision_eval(ScriptedLLMAgent(temperature=0.0), dset, part, command=["x"])
    with pytest.raises(ConfigError, match="samples"):
        run_decision_eval(ScriptedLLMAgent(temperature=0.0), dset, part, samples=2, resume=True, command=["x"])
    CountingAgent.calls = 0
    run_decision_eval(CountingAgent(temperature=0.0), dset, part, resume=True, command=["x"])
    assert CountingAgent.calls == 13
    assert (part / "scorecard.json").read_bytes() == (whole.out / "scorecard.json").read_bytes()


def test_compare_pairs_two_runs_on_the_states_they_share(tmp_path, scripted_eval):
    again = run_decision_eval(ScriptedLLMAgent(temperature=0.0), decision_set(), tmp_path / "again", command=["y"])
    same = {r["metric"]: r for r in compare_runs(scripted_eval.out, again.out)["b_minus_a"]}
    assert same["gain_over_wait"]["ci95_low"] <= 0.0 <= same["gain_over_wait"]["ci95_high"]
    waiting = run_decision_eval(LLMAgent(WaitClient(), SamplingParams(temperature=0.0)), decision_set(),
                                tmp_path / "wait", command=["z"])
    result = compare_runs(waiting.out, scripted_eval.out)
    gain = next(r for r in result["b_minus_a"] if r["metric"] == "gain_over_wait")
    assert result["points"] == 200 and gain["ci95_low"] > 0  # the teacher beats waiting, paired
    other = run_decision_eval(ScriptedLLMAgent(temperature=0.0), decision_set("decisions-v1/held-out-b", points=5),
                              tmp_path / "other", command=["w"])
    with pytest.raises(ConfigError, match="different states"):
        compare_runs(scripted_eval.out, other.out)
    (other.out / "scorecard.json").write_text('{"set": ')  # a torn file: a typed error naming the fix
    with pytest.raises(ConfigError, match="--overwrite"):
        compare_runs(scripted_eval.out, other.out)


def test_a_faulty_server_counts_failures_apart_and_loses_no_point(fake_server, tmp_path):
    """Failed calls are recorded with their errors, never scored as the model's replies: the eval refuses to write a
    scorecard with them, and `allow_failed_calls` scores the model on the calls it answered."""
    dset = decision_set(points=30)
    points = dset.build()
    seeds = [call_seed(0, p, 0) for p in points]
    first = seeds[0]  # the first call, made alone, must be answered (`first_call`)
    fake_server.faults = [
        Fault("status", status=500, match=lambda body: body.get("seed") % 5 == 0 and body.get("seed") != first),
        Fault("invalid_json", match=lambda body: body.get("seed") % 5 == 1 and body.get("seed") != first),
        Fault("status", status=503, times=1, match=lambda body: body.get("seed") % 5 == 2),  # retried, then fine
        Fault("hang", delay_s=8.0, match=lambda body: body.get("seed") % 5 == 3 and body.get("seed") != first),
    ]
    agent = OpenAIChatAgent("fake", fake_server.base_url, temperature=0.0, logprobs=False, timeout=3.0,
                            max_retries=1, backoff=0.0)
    failing = sum(s % 5 in (0, 1, 3) for s in seeds[1:])
    with pytest.raises(FailedCallsError, match=rf"{failing} of 30 calls failed.*--resume --retry-failed.*"
                       "--allow-failed-calls") as refused:
        run_decision_eval(agent, dset, tmp_path / "faulty", command=["f"])
    assert refused.value.failed == failing > 0 and not (tmp_path / "faulty" / "scorecard.json").exists()
    asked = len(fake_server.chat_requests())
    result = run_decision_eval(agent, dset, tmp_path / "faulty", command=["f"], resume=True, allow_failed_calls=True)
    assert len(fake_server.chat_requests()) == asked  # nothing called again
    transient = sum(s % 5 == 2 for s in seeds)
    calls = result.scorecard["calls"]
    assert calls["calls"] == 30 and calls["failed"] == failing and calls["unanswered_points"] == failing
    assert calls["retried_attempts"] >= failing + transient  # one retry each (max_retries=1); a slow machine may add
    rows = _rows(result.scorecard)
    assert all(rows[("model", m)]["n"] == 30 - failing for m in METRICS)  # the outage is no point of the model's
    assert all(rows[("teacher", m)]["n"] == 30 for m in METRICS)
    assert rows[("model", "format_valid")]["mean"] == 1.0  # every answer the server gave was well-formed
    assert f"{failing} failed, an outage left out of the model's score" in result.markdown
    replies = [json.loads(line) for line in (result.out / "replies.jsonl").read_text().splitlines()]
    failed = [r for r in replies if r["error"] is not None]
    assert len(failed) == failing and all(r["reply"] == "" and r["call"]["error"] for r in failed)
    assert {r["error_type"] for r in failed} >= {"APITimeoutError"}
    np.testing.assert_array_equal(sorted(r["point"] for r in replies), range(30))  # every call recorded


def test_an_unreachable_server_stops_the_eval_before_it_records_anything(tmp_path):
    agent = OpenAIChatAgent("m", "http://127.0.0.1:9/v1", temperature=0.0, logprobs=False, timeout=2.0,
                            max_retries=0)
    with pytest.raises(ConfigError, match=r"did not answer.*--base-url"):
        run_decision_eval(agent, decision_set(points=3), tmp_path / "down", command=["d"])
    assert (tmp_path / "down" / "replies.jsonl").read_text() == ""
    # Nothing was recorded, so the fixed command needs no --overwrite.
    fixed = run_decision_eval(ScriptedLLMAgent(temperature=0.0), decision_set(points=3), tmp_path / "down")
    assert fixed.scorecard["calls"]["calls"] == 3


def test_bad_sets_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"unknown set .decisions-v9/x..*held-out-a"):
        decision_set("decisions-v9/x")
    with pytest.raises(ConfigError, match=r"training range.*--allow-train-seeds"):
        decision_set(seeds=5, points=3)
    assert decision_set(seeds=5, points=3, allow_train_seeds=True).first_seed == 5
    with pytest.raises(ConfigError):
        decision_set(overrides={"num_markets": -1})


def test_the_api_key_reaches_the_server_and_no_file_of_the_eval(fake_server, tmp_path, monkeypatch):
    """The key goes out as the Bearer token and nowhere else: a server that echoes it in its error messages (some
    gateways do) leaves it in no file of the run folder."""
    secret = "sk-eval-" + "7" * 40
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    fake_server.faults = [Fault("status", status=401, message="Incorrect API key provided: {authorization}",
                                match=lambda body: body.get("seed") % 2 == 0)]
    agent = OpenAIChatAgent("fake", fake_server.base_url, temperature=0.0, logprobs=False, max_retries=0)
    result = run_decision_eval(agent, decision_set(points=8), tmp_path / "keyed", command=["k"], preflight=False,
                               allow_failed_calls=True)
    assert result.scorecard["calls"]["failed"] > 0  # the echoing errors were recorded
    sent = {r.headers.get("authorization") or r.headers.get("Authorization") for r in fake_server.chat_requests()}
    assert sent == {f"Bearer {secret}"}
    for path in result.out.iterdir():
        assert secret not in path.read_text() and secret[8:30] not in path.read_text(), path.name


def test_several_samples_per_point_count_once_in_every_interval(tmp_path):
    """--samples 3 at a temperature: three seeded calls per point, each point's metric their mean, n = points."""
    dset = decision_set(points=10)
    result = run_decision_eval(ScriptedLLMAgent(temperature=1.0), dset, tmp_path / "s3", samples=3, command=["s"])
    replies = [json.loads(line) for line in (result.out / "replies.jsonl").read_text().splitlines()]
    assert sorted((r["point"], r["sample"]) for r in replies) == [(p, k) for p in range(10) for k in range(3)]
    assert len({r["call"]["seed"] for r in replies}) == 30  # every call its own sampling seed
    rows = _rows(result.scorecard)
    assert all(rows[(p, m)]["n"] == 10 for p in ("model", "teacher") for m in METRICS)
    again = run_decision_eval(ScriptedLLMAgent(temperature=1.0), dset, tmp_path / "s3b", samples=3, command=["s"])
    assert (again.out / "scorecard.json").read_bytes() == (result.out / "scorecard.json").read_bytes()
