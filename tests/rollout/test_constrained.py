"""Constrained decoding on the wire: what `OpenAIChatAgent(constrain=...)` and `rollout --constrain` send.

Each call carries the constraint built from the ids its own prompt shows (issue 18).

A real HTTP server on 127.0.0.1 (the fake OpenAI server) records every request body.
"""

from __future__ import annotations

import json
import re

import pytest
from fake_server import Fault

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.cli import ConstrainMode, main
from rlaif_gym.encoding.grammar import (
    CONSTRAIN_MODES,
    TickIds,
    constraint_body,
    reply_gbnf,
    reply_json_schema,
    tick_gbnf,
    tick_json_schema,
)
from rlaif_gym.encoding.reply import parse_reply
from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import RolloutCollector

TICKS = 3


def _collect(agent, episodes=1, num_envs=1):
    collector = RolloutCollector(agent, num_envs=num_envs, max_ticks=TICKS)
    summary = collector.collect(episodes, seed=0)
    assert summary.failed == 0, summary.errors
    return collector.trajectories


@pytest.mark.parametrize("mode", CONSTRAIN_MODES)
def test_every_request_carries_the_constraint(fake_server, mode):
    agent = OpenAIChatAgent("m", fake_server.base_url, constrain=mode, max_retries=0)
    trajs = _collect(agent)
    requests = fake_server.chat_requests()
    assert len(requests) == TICKS
    for r in requests:
        system, user = (m["content"] for m in r.body["messages"])
        ids = TickIds.from_prompt(user, system)
        assert ids is not None and ids.markets
        (key, value), = constraint_body(mode, agent.grammar_limits, ids).items()
        assert r.body[key] == value, f"request without this tick's {mode} constraint: {sorted(r.body)}"
        assert value != constraint_body(mode, agent.grammar_limits)[key], "the per-tick constraint names the ids"
    assert trajs[0].agent["constrain"] == mode and trajs[0].agent["constrain_per_tick"] is True
    system = requests[0].body["messages"][0]["content"]
    assert ('"reasoning"' in system) == (mode != "gbnf"), "the JSON modes must tell the model the JSON layout"


def _ids_in(grammar: str) -> set[str]:
    return set(re.findall(r'\\"(market-\d+|pos-\d+)\\"', grammar))


def test_concurrent_episodes_and_retries_each_send_their_own_ticks_grammar(fake_server):
    """Two episodes in flight (different worlds) and a retried call: every request carries the grammar of the
    prompt it sends, never the other episode's (the constraint is per call, not per agent)."""
    fake_server.faults = [Fault("status", status=503, times=1)]  # every call fails once, then is retried
    agent = OpenAIChatAgent("m", fake_server.base_url, constrain="gbnf", max_retries=2, backoff=0.01)
    trajs = _collect(agent, episodes=4, num_envs=2)
    requests = fake_server.chat_requests()
    assert len(requests) == 2 * 4 * TICKS
    for r in requests:
        system, user = (m["content"] for m in r.body["messages"])
        assert r.body["grammar"] == tick_gbnf(TickIds.from_prompt(user, system), agent.grammar_limits)
        assert _ids_in(r.body["grammar"]) == set(re.findall(r"^- (market-\d+) ", user, re.MULTILINE))
    assert len({r.body["grammar"] for r in requests}) > TICKS, "the episodes' worlds should differ"
    assert all(len(s.llm_calls) == 1 for t in trajs for s in t.steps)


def test_per_tick_off_sends_the_id_agnostic_constraint(fake_server):
    _collect(OpenAIChatAgent("m", fake_server.base_url, constrain="gbnf", per_tick=False, max_retries=0))
    assert {r.body["grammar"] for r in fake_server.chat_requests()} == {reply_gbnf()}


def test_no_constraint_sends_none(fake_server):
    _collect(OpenAIChatAgent("m", fake_server.base_url, max_retries=0))
    for r in fake_server.chat_requests():
        assert not {"grammar", "guided_json", "response_format"} & set(r.body)


def test_explicit_extra_body_wins_over_the_constraint(fake_server):
    _collect(OpenAIChatAgent("m", fake_server.base_url, constrain="gbnf", extra_body={"grammar": "root ::= \"x\""},
                             max_retries=0))
    assert {r.body["grammar"] for r in fake_server.chat_requests()} == {'root ::= "x"'}


def test_json_mode_reply_reaches_the_env_as_the_canonical_reply(fake_server):
    """The model's JSON object is recorded as sent, and the env scores its canonical rewrite."""
    reply = {"reasoning": "market-0 looks cheap </think> so I buy",
             "action": {"type": "buy_prediction", "market": "market-0", "outcome": "YES", "amount": 25}}
    completion = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": json.dumps(reply)}}],
                  "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}}
    fake_server.faults = [Fault("body", payload=json.dumps(completion).encode())]
    trajs = _collect(OpenAIChatAgent("m", fake_server.base_url, constrain="guided_json", max_retries=0))
    for step in trajs[0].steps:
        assert json.loads(step.llm_calls[0].response) == reply
        assert step.format_errors == [], step.format_errors
        assert step.action.action_type == "buy_prediction"
        assert step.action.parameters["market"] == "market-0"
        assert step.reward_components["format"] == 0.0  # clean canonical reply: no format penalty
    first = fake_server.chat_requests()[0].body
    system, user = (m["content"] for m in first["messages"])
    assert first["guided_json"] == tick_json_schema(TickIds.from_prompt(user, system))
    assert first["guided_json"] != reply_json_schema()


def test_gbnf_mode_replies_pass_through_unchanged(fake_server):
    trajs = _collect(OpenAIChatAgent("m", fake_server.base_url, constrain="gbnf", max_retries=0))
    for step in trajs[0].steps:
        assert parse_reply(step.llm_calls[0].response).ok
        assert step.format_errors == []


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown constrain mode"):
        OpenAIChatAgent("m", "http://127.0.0.1:9/v1", constrain="regex")


def test_cli_constrain_option(fake_server, tmp_path, capsys):
    assert {m.value for m in ConstrainMode} == set(CONSTRAIN_MODES)
    code = main(["rollout", "--agent", "openai", "--base-url", fake_server.base_url, "--model", "m",
                 "--episodes", "1", "--num-envs", "1", "--max-ticks", "2", "--out", str(tmp_path / "run"),
                 "--no-progress", "--constrain", "gbnf"])
    assert code == 0, capsys.readouterr().err[-2000:]
    requests = fake_server.chat_requests()
    assert len(requests) == 2
    for r in requests:
        system, user = (m["content"] for m in r.body["messages"])
        assert r.body["grammar"] == tick_gbnf(TickIds.from_prompt(user, system))
    assert json.loads((tmp_path / "run" / "run.json").read_text())["agent"]["constrain"] == "gbnf"
    code = main(["rollout", "--agent", "scripted", "--constrain", "gbnf", "--out", str(tmp_path / "x")])
    assert code == 2 and "--agent openai" in capsys.readouterr().err
