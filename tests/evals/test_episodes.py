"""`rlaif-gym eval` on whole episodes (`rlaif_gym.evals.episodes`): the model plays every tick through the real
rollout collector, the baselines play the same seeds, and the scorecard pairs them episode by episode."""

from __future__ import annotations

import pytest
from fake_server import Fault

from rlaif_gym.agents import OpenAIChatAgent, ScriptedLLMAgent
from rlaif_gym.errors import ConfigError
from rlaif_gym.evals import EPISODE_METRICS, EpisodeSet, FailedCallsError, compare_runs, run_episode_eval, task_set
from rlaif_gym.storage import JsonlStore


def _rows(card):
    return {(r["policy"], r["metric"]): r for r in card["rows"]}


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    eset = task_set("episodes-v1/decision-world-a", points=4)
    return eset, run_episode_eval(ScriptedLLMAgent(temperature=0.0), eset, tmp_path_factory.mktemp("ep") / "a",
                                  command=["test"])


def test_the_scripted_models_episodes_are_the_teachers_and_the_ceiling_is_above_waiting(scripted):
    eset, result = scripted
    rows = {key: {k: v for k, v in row.items() if k != "policy"} for key, row in _rows(result.scorecard).items()}
    assert isinstance(eset, EpisodeSet) and result.scorecard["set"]["kind"] == "episodes"
    for m in EPISODE_METRICS:  # the collector's episodes and the baseline's own play agree, metric by metric
        assert rows[("model", m)] == rows[("teacher", m)] and rows[("model", m)]["n"] == 4
    assert rows[("wait", "pnl")]["mean"] == 0.0 and rows[("truth", "pnl")]["ci95_low"] > 0
    assert rows[("model", "format_valid")]["mean"] == 1.0
    paired = {(r["baseline"], r["metric"]): r for r in result.scorecard["paired"]}
    assert paired[("teacher", "pnl")]["mean"] == 0.0 and paired[("truth", "pnl")]["ci95_high"] < 0
    stored = list(JsonlStore(result.out / "episodes").read())
    assert sorted(t.seed for t in stored) == list(eset.seeds) and all(len(t.steps) == 48 for t in stored)


def test_an_episode_eval_resumes_reproduces_its_bytes_and_compares(scripted, tmp_path):
    eset, first = scripted
    again = run_episode_eval(ScriptedLLMAgent(temperature=0.0), eset, first.out, resume=True, command=["test"])
    assert again.scorecard == first.scorecard and again.scorecard["calls"]["calls"] == 4 * 48
    other = run_episode_eval(ScriptedLLMAgent(temperature=0.0), eset, tmp_path / "b", command=["test"])
    assert (other.out / "scorecard.json").read_bytes() == (first.out / "scorecard.json").read_bytes()
    diff = {r["metric"]: r for r in compare_runs(first.out, other.out)["b_minus_a"]}
    assert set(diff) == set(EPISODE_METRICS) and diff["pnl"]["mean"] == 0.0
    with pytest.raises(ConfigError, match="--resume"):
        run_episode_eval(ScriptedLLMAgent(temperature=0.0), eset, first.out, command=["test"])


def test_a_faulty_server_fails_episodes_that_are_never_scored_and_retry_failed_plays_them_again(fake_server, tmp_path):
    """A failed call ends its episode as failed: an outage, not the model's play. The eval refuses a scorecard with
    failed episodes, `allow_failed_calls` scores the model on the episodes it finished, and `--resume
    --retry-failed` plays the failed ones again once the server answers."""
    eset = task_set("episodes-v1/decision-world-a", points=3, overrides={"num_ticks": 12})
    fake_server.faults = [Fault("status", status=500, match=lambda body: body.get("seed", 0) % 9 == 0)]
    agent = OpenAIChatAgent("fake", fake_server.base_url, temperature=0.0, logprobs=False, timeout=3.0,
                            max_retries=1, backoff=0.0)
    out = tmp_path / "faulty"
    with pytest.raises(FailedCallsError, match=r"of 3 episodes failed.*--resume --retry-failed") as refused:
        run_episode_eval(agent, eset, out, command=["f"], preflight=False)
    assert not (out / "scorecard.json").exists()
    stored = list(JsonlStore(out / "episodes").read())
    failed = [t for t in stored if t.final_status == "failed"]
    assert len(stored) == 3 and refused.value.failed == len(failed) >= 1
    result = run_episode_eval(agent, eset, out, command=["f"], preflight=False, resume=True, allow_failed_calls=True)
    rows = _rows(result.scorecard)
    assert all(rows[("model", m)]["n"] == 3 - len(failed) for m in EPISODE_METRICS)  # the outage is not scored
    assert all(rows[("wait", m)]["n"] == 3 for m in EPISODE_METRICS)
    assert result.scorecard["calls"]["failed"] == len(failed) == result.scorecard["calls"]["unanswered_points"]
    assert rows[("model", "format_valid")]["mean"] == 1.0
    fake_server.faults = []
    again = run_episode_eval(agent, eset, out, command=["f"], preflight=False, resume=True, retry_failed=True)
    assert again.scorecard["calls"]["failed"] == 0 and all(_rows(again.scorecard)[("model", m)]["n"] == 3
                                                          for m in EPISODE_METRICS)
    assert len((out / "episodes" / "retried-failures.jsonl").read_text().splitlines()) == len(failed)


def test_an_unreachable_server_stops_an_episode_eval_before_it_plays(tmp_path):
    agent = OpenAIChatAgent("m", "http://127.0.0.1:9/v1", temperature=0.0, logprobs=False, timeout=2.0,
                            max_retries=0)
    eset = task_set("episodes-v1/decision-world-a", points=2, overrides={"num_ticks": 6})
    with pytest.raises(ConfigError, match=r"did not answer.*--base-url"):
        run_episode_eval(agent, eset, tmp_path / "down", command=["d"])
    assert not list(JsonlStore(tmp_path / "down" / "episodes").read())


def test_the_baselines_bets_are_format_valid_in_the_full_prompt_style_too():
    """The default world's full prompt style asks for a <think> block: a bare JSON bet would be a format error."""
    from rlaif_gym.evals.episodes import play_baseline

    eset = task_set("episodes-v1/default-a", points=2, overrides={"num_ticks": 48})
    assert eset.config.prompt_style == "full"
    for name in ("informed", "truth"):
        values, _ = play_baseline(name, eset)
        assert all(v["format_valid"] == 1.0 for v in values.values()), (name, values)
    assert any(v["pnl"] != 0.0 for v in play_baseline("truth", eset)[0].values())  # it did bet
