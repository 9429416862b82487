"""Judge validation (`rlaif_gym.evals.judging`): the skill ladder is played by the real collector from each point's
state, and a judge's scores are measured against the PnL it made: a judge that reads the PnL scores 1, one that
reads it backwards scores 0, and an LLM judge on a real HTTP server is measured through its tape, so a re-run with
the server gone gives the same bytes."""

from __future__ import annotations

import json

import pytest
from judge_server import JudgeServer

from rlaif_gym.envs.decisions import WAIT_REPLY
from rlaif_gym.evals import decision_set
from rlaif_gym.evals.judging import (
    LADDER,
    judge_validation,
    ladder_replies,
    ladder_trajectories,
    rule_judge_scores,
    run_judge_validation,
)
from rlaif_gym.llm import OpenAIChatClient
from rlaif_gym.llm_judge import JudgeConfig, JudgeTape, LLMJudge


@pytest.fixture(scope="module")
def points():
    return decision_set(points=8).build()


@pytest.fixture(scope="module")
def ladder(points):
    replies = ladder_replies(points, ["not a reply at all"] * len(points))
    return replies, ladder_trajectories(points, replies)


def test_each_group_shares_its_points_state_and_differs_only_in_the_rungs_first_reply(points, ladder):
    replies, trajectories = ladder
    rungs = ["model", *LADDER]
    assert list(replies) == rungs and len(trajectories) == len(points) * len(rungs)
    firsts = set()
    for k, p in enumerate(points):
        group = trajectories[k * len(rungs):(k + 1) * len(rungs)]
        assert sorted(t.agent_id for t in group) == sorted(rungs) and len({t.group_id for t in group}) == 1
        firsts.add(group[0].agent_id)
        for t in group:
            calls = [s.llm_calls[0] for s in t.steps]
            assert len(t.steps) == p.resolution_horizon and t.steps[0].step_number == p.tick
            assert calls[0].user_prompt == p.prompt  # the member starts at the point's state
            assert calls[0].response == replies[t.agent_id][k]
            assert all(c.response == WAIT_REPLY for c in calls[1:])  # then waits until every market resolved
    assert len(firsts) > 1  # the rungs' order is drawn per group: no rung is always shown first


def test_the_ladders_ends_are_worth_what_they_should_be(ladder):
    _, trajectories = ladder
    report = judge_validation(trajectories, rule_judge_scores(trajectories), judge={"name": "rule"})
    gain = {r["rung"]: r["pnl_gain_over_wait_usd"] for r in report["rungs"]}
    assert gain["wait"]["mean"] == 0.0 and gain["truth"]["ci95_low"] > 0  # the oracle's bets pay
    assert gain["model"]["mean"] == 0.0  # an unparsable reply does nothing
    assert report["scored"] == report["trajectories"] == len(trajectories)


def test_a_judge_that_reads_the_pnl_scores_1_and_one_that_reads_it_backwards_scores_0(ladder):
    _, trajectories = ladder
    right = judge_validation(trajectories, {t.trajectory_id: t.final_pnl for t in trajectories}, judge={"name": "x"})
    wrong = judge_validation(trajectories, {t.trajectory_id: -t.final_pnl for t in trajectories}, judge={"name": "x"})
    flat = judge_validation(trajectories, {t.trajectory_id: 0.5 for t in trajectories}, judge={"name": "x"})
    assert right["within_groups"]["pairwise_accuracy"]["mean"] == 1.0 == right["overall"]["pairwise_accuracy"]["mean"]
    assert right["overall"]["spearman"]["mean"] == pytest.approx(1.0)
    assert right["rung_order_spearman"] == pytest.approx(1.0)
    assert wrong["within_groups"]["pairwise_accuracy"]["mean"] == 0.0
    assert wrong["overall"]["spearman"]["ci95_high"] < 0
    assert flat["within_groups"]["pairwise_accuracy"]["mean"] == 0.5  # a tie is half right, never a free point
    assert flat["overall"]["spearman"]["mean"] is None
    missing = judge_validation(trajectories, {trajectories[0].trajectory_id: 1.0}, judge={"name": "x"})
    assert missing["scored"] == 1 and missing["missing"] == len(trajectories) - 1  # a missing score is not a 0


def test_an_llm_judge_is_validated_through_its_tape_and_a_replay_gives_the_same_bytes(points, tmp_path):
    server = JudgeServer().start()
    try:
        with JudgeTape(tmp_path / "judge.sqlite") as tape:
            judge = LLMJudge(OpenAIChatClient("judge-model", server.base_url, timeout=5, max_retries=1),
                             config=JudgeConfig(mode="absolute"), tape=tape)
            first = run_judge_validation(points[:4], tmp_path / "a", judge=judge)
        asked = len(server.chat_requests())
    finally:
        server.stop()
    assert asked == first["trajectories"] == 4 * len(LADDER) and first["scored"] == asked
    assert first["judge"]["name"] == "llm" and first["judge"]["model"] == "judge-model"
    assert first["judge"]["verdicts"]["ok"] == asked and first["judge"]["verdicts"]["malformed"] == 0
    # the server is gone: the tape answers every call
    with JudgeTape(tmp_path / "judge.sqlite") as tape:
        replay = run_judge_validation(points[:4], tmp_path / "b", judge=LLMJudge(
            None, config=JudgeConfig(mode="absolute"), tape=tape, tape_mode="replay", model="judge-model"))
    assert replay == first
    a, b = (tmp_path / d / "validation.llm-absolute.json" for d in "ab")
    assert a.read_bytes() == b.read_bytes()
    assert json.loads((tmp_path / "b" / "health.absolute.json").read_text())["calls_from_network"] == 0
