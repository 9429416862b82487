"""A run against a server that sends huge per-token lists and numbers out of range stays bounded and standard
(issue 57, rows N1 and N2).

N2 measured 7.6 MB answers of 1.9 M token ids each: a 36 MB JSONL line after 5 ticks, and a 168-tick episode
would have been a line of about 1.3 GB. Here a real loopback server answers every call with a little more than
`CALL_TOKENS` prompt token ids, completion token ids and logprobs, and with ``usage`` of 2**64 - 1 and a NaN
logprob on some ticks: every call keeps `CALL_TOKENS` of each list, each trajectory `TRAJECTORY_TOKENS` in all,
the cuts and drops are recorded, every line is strict JSON, the GRPO export gives no cut list to a trainer, and
`rlaif-gym report` draws its plots.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from fake_server import FakeOpenAIServer, episode_seeds
from rollout_checks import jsonl_lines, read_store_strict

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.cli import main
from rlaif_gym.llm.recording import CALL_TOKENS, TOKEN_LISTS, TRAJECTORY_TOKENS
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore, to_grpo_groups

pytest.importorskip("h11")

SENT = CALL_TOKENS + 232
"""Entries of each list the server sends per answer."""
TICKS = 12
"""Ticks per episode: enough calls of 3 x `CALL_TOKENS` entries to pass `TRAJECTORY_TOKENS`."""
SEED = 7
HUGE_USAGE_TICK = episode_seeds(SEED, 0, range(1, 2)) | episode_seeds(SEED, 1, range(1, 2))
NAN_TICK = episode_seeds(SEED, 0, range(2, 3)) | episode_seeds(SEED, 1, range(2, 3))


class HugeLists(FakeOpenAIServer):
    """Every answer carries `SENT` prompt ids, completion ids and logprobs; tick 1's usage is 2**64 - 1 and tick 2's
    logprobs hold a NaN (written as JSON's writer writes it, which Python's reader takes)."""

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().completion(body)
        choice = answer["choices"][0]
        choice["token_ids"] = [100_000 + i for i in range(SENT)]
        answer["prompt_token_ids"] = list(range(SENT))
        logprobs = [-0.001 * (i % 97) for i in range(SENT)]
        if body.get("seed") in NAN_TICK:
            logprobs[5] = math.nan
        choice["logprobs"] = {"content": [{"token": "t", "logprob": lp} for lp in logprobs]}
        if body.get("seed") in HUGE_USAGE_TICK:
            answer["usage"]["completion_tokens"] = 2**64 - 1
        return answer


def _strict(raw: bytes) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(raw, parse_constant=refuse)


def test_token_lists_are_bounded_per_call_and_per_trajectory_and_the_run_is_strict_json(tmp_path):
    run = tmp_path / "run"
    with HugeLists() as server:
        agent = OpenAIChatAgent(model="fake", base_url=server.base_url, api_key="sk-test", timeout=30.0, max_retries=0)
        summary = RolloutCollector(agent, sink=JsonlStore(run), env_config={"num_ticks": TICKS}, num_envs=2,
                                   group_size=2).collect(2, SEED)
    assert summary.completed == 2 and summary.failed == 0, summary.errors
    for name, number, raw in jsonl_lines(run):
        _strict(raw)  # RFC 8259: no NaN, no Infinity
        assert len(raw) < 32 << 20, f"{name}:{number} is {len(raw) / 2**20:.0f} MiB"
    trajs = read_store_strict(run)
    assert len(trajs) == 2
    for traj in trajs:
        calls = [c for s in traj.steps for c in s.llm_calls]
        assert len(calls) == TICKS
        stored = [sum(len(getattr(c, f) or []) for f in TOKEN_LISTS) for c in calls]
        assert sum(stored) == TRAJECTORY_TOKENS, stored
        full = TRAJECTORY_TOKENS // (3 * CALL_TOKENS)  # calls stored whole (each list cut at CALL_TOKENS)
        for i, call in enumerate(calls):
            extra = call.model_extra
            assert extra["tokenCuts"] == dict.fromkeys(TOKEN_LISTS, SENT), (i, extra.get("tokenCuts"))
            lists = [f for f in TOKEN_LISTS if getattr(call, f) is not None]
            if i < full:
                assert all(len(getattr(call, f)) == CALL_TOKENS for f in lists), i
            elif i > full:
                assert all(getattr(call, f) == [] for f in lists), i  # the trajectory's budget is spent
        assert calls[1].completion_tokens is None and calls[1].model_extra["valueDrops"] == {
            "completion_tokens": "out of range"}
        assert calls[2].completion_logprobs is None and calls[2].model_extra["valueDrops"] == {
            "completion_logprobs": "not finite"}
        assert calls[0].completion_token_ids[:3] == [100_000, 100_001, 100_002]  # a prefix, as sent
    # a cut list no longer matches its reply: the GRPO export gives a trainer none
    (group,), _ = to_grpo_groups(trajs)
    assert group["tokens"] == [None, None] and group["logprobs"] == [None, None]
    assert all(turn[f] is None for member in group["turns"] for turn in member for f in TOKEN_LISTS)
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    assert len(list((tmp_path / "report").glob("*.png"))) == 6
