"""Constrained decoding on the wire: what `OpenAIChatAgent(constrain=...)` and `rollout --constrain` send.

A real HTTP server on 127.0.0.1 (the fake OpenAI server) records every request body.
"""

from __future__ import annotations

import json

import pytest
from fake_server import Fault

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.cli import ConstrainMode, main
from rlaif_gym.encoding.grammar import CONSTRAIN_MODES, constraint_body, reply_gbnf, reply_json_schema
from rlaif_gym.encoding.reply import parse_reply
from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import RolloutCollector

TICKS = 3


def _collect(agent, episodes=1):
    collector = RolloutCollector(agent, num_envs=1, max_ticks=TICKS)
    summary = collector.collect(episodes, seed=0)
    assert summary.failed == 0, summary.errors
    return collector.trajectories


@pytest.mark.parametrize("mode", CONSTRAIN_MODES)
def test_every_request_carries_the_constraint(fake_server, mode):
    agent = OpenAIChatAgent("m", fake_server.base_url, constrain=mode, max_retries=0)
    trajs = _collect(agent)
    requests = fake_server.chat_requests()
    assert len(requests) == TICKS
    (key, value), = constraint_body(mode).items()
    for r in requests:
        assert r.body[key] == value, f"request without the {mode} constraint: {sorted(r.body)}"
    assert trajs[0].agent["constrain"] == mode
    system = requests[0].body["messages"][0]["content"]
    assert ('"reasoning"' in system) == (mode != "gbnf"), "the JSON modes must tell the model the JSON layout"


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
    assert fake_server.chat_requests()[0].body["guided_json"] == reply_json_schema()


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
    assert len(requests) == 2 and all(r.body["grammar"] == reply_gbnf() for r in requests)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["agent"]["constrain"] == "gbnf"
    code = main(["rollout", "--agent", "scripted", "--constrain", "gbnf", "--out", str(tmp_path / "x")])
    assert code == 2 and "--agent openai" in capsys.readouterr().err
