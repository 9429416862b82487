"""`RolloutCollector` + `OpenAIChatAgent` against a real local HTTP server that injects faults.

Every scenario runs a small collection (4-6 episodes, 2-3 envs in flight, 12 ticks) into a
`JsonlStore` and checks the invariants that must hold whatever the server does: every planned
trajectory is on disk exactly once; each is complete (12 steps, one full LLM call per step, reward
components, feedback) or failed with its failed call and error; `collect` never raises; the
summary adds up; and every recorded call matches what the server actually saw and sent (seed,
attempts, usage, logprobs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from fake_server import FakeOpenAIServer, Fault, call_key, episode_seeds, fake_logprobs, scripted_reply
from rollout_checks import check_run, read_store_strict

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.rollout import RolloutCollector, call_seed
from rlaif_gym.storage import JsonlStore
from rlaif_gym.trajectory import LLMCall, Trajectory

TICKS = 12
SEED = 20
MODEL = "fake"


def some_calls(share: int) -> Callable[[dict[str, Any]], bool]:
    """A deterministic selection of about 1/share of all calls (by the hash of the call)."""
    return lambda body: int(call_key(body)[:8], 16) % share == 0


def ticks_of(episodes: int, ticks: list[int], seed: int = SEED) -> Callable[[dict[str, Any]], bool]:
    """The calls of the given ticks, in every episode of a run (group_size 1) starting at `seed`."""
    seeds = frozenset().union(*(episode_seeds(seed + e, 0, range(TICKS)) for e in range(episodes)))
    wanted = frozenset().union(*(episode_seeds(seed + e, 0, ticks) for e in range(episodes)))
    assert wanted <= seeds
    return lambda body: body.get("seed") in wanted


def episode_from(episode: int, tick: int, seed: int = SEED) -> Callable[[dict[str, Any]], bool]:
    """The calls of one episode (group_size 1) from `tick` on."""
    wanted = episode_seeds(seed + episode, 0, range(tick, TICKS))
    return lambda body: body.get("seed") in wanted


def tid(episode: int, seed: int = SEED) -> str:
    return f"run-s{seed + episode}-m0"


@dataclass
class Scenario:
    name: str
    faults: list[Fault]
    episodes: int = 4
    num_envs: int = 2
    agent: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    """trajectory id -> the tick whose call fails for good."""
    failed_type: str | None = None
    """the `LLMCallError.type` of those failed calls."""
    retried: bool = False
    """some calls must have needed more than one attempt."""


SCENARIOS = [
    Scenario("no-fault", []),
    Scenario("latency", [Fault("latency", delay_s=0.03)]),
    Scenario("http500-twice-then-ok", [Fault("status", match=some_calls(4), times=2, status=500)],
             agent={"max_retries": 2}, retried=True),
    Scenario("http503-once-then-ok", [Fault("status", match=some_calls(3), times=1, status=503)], retried=True),
    Scenario("http429-once-then-ok", [Fault("status", match=some_calls(5), times=1, status=429)], retried=True),
    Scenario("http503-permanent-one-episode", [Fault("status", match=episode_from(1, 5), status=503)],
             agent={"max_retries": 2}, failed={tid(1): 5}, failed_type="InternalServerError"),
    # The retry's own answer must arrive within the timeout even on a loaded 2-core machine (0.5 s did not
    # once, with the reward-ranking run beside the suite), while the hang stays well past it.
    Scenario("hang-then-ok", [Fault("hang", match=ticks_of(4, [2, 9]), times=1, delay_s=6.0)],
             agent={"timeout": 2.0}, retried=True),
    Scenario("hang-permanent-one-episode", [Fault("hang", match=episode_from(2, 3), delay_s=1.5)],
             agent={"timeout": 0.5},
             failed={tid(2): 3}, failed_type="APITimeoutError"),
    Scenario("invalid-json-then-ok", [Fault("invalid_json", match=some_calls(4), times=1)], retried=True),
    Scenario("no-choices-then-ok", [Fault("no_choices", match=some_calls(4), times=1)], retried=True),
    Scenario("wrong-content-type-then-ok", [Fault("wrong_content_type", match=some_calls(4), times=1)],
             retried=True),
    Scenario("invalid-json-permanent-one-episode", [Fault("invalid_json", match=episode_from(0, 0))],
             failed={tid(0): 0}),
    Scenario("no-choices-permanent-one-episode", [Fault("no_choices", match=episode_from(3, 7))],
             failed={tid(3): 7}),
    Scenario("reject-logprobs", [Fault("reject_logprobs")]),
    Scenario("everything-at-once", [
        Fault("status", match=episode_from(4, 6), status=503),
        Fault("latency", match=some_calls(5), delay_s=0.02),
        Fault("status", match=some_calls(4), times=1, status=500),
        Fault("invalid_json", match=some_calls(7), times=1),
        Fault("wrong_content_type", match=some_calls(11), times=1),
        Fault("reject_logprobs"),
    ], episodes=6, num_envs=3, agent={"max_retries": 2}, failed={tid(4): 6}, retried=True),
]


def make_agent(server: FakeOpenAIServer, **overrides: Any) -> OpenAIChatAgent:
    # A generous timeout: the server shares this process (and the GIL) with the collector, so on a busy
    # machine a sound answer can take a while, and a spurious timeout would be an unplanned retry. Only
    # the hang scenarios set a short one (shorter than their hang).
    kwargs = {"timeout": 5.0, "max_retries": 1, "backoff": 0.01, **overrides}
    return OpenAIChatAgent(model=MODEL, base_url=server.base_url, api_key="sk-fake-test-key", **kwargs)


def body_of(call: LLMCall) -> dict[str, Any]:
    """The fields of the request body that identify the call (see `fake_server.call_key`)."""
    return {"model": MODEL, "messages": [{"role": "system", "content": call.system_prompt},
                                         {"role": "user", "content": call.user_prompt}], "seed": call.seed}


def check_calls_against_server(server: FakeOpenAIServer, trajs: list[Trajectory]) -> dict[str, int]:
    """Every recorded call (successful or failed) matches the server's view of it. Returns attempts per kind."""
    requests = server.chat_requests()
    by_key: dict[str, list] = {}
    for r in requests:
        by_key.setdefault(r.key, []).append(r)
    seen_keys = set()
    retried = Counter()
    for traj in trajs:
        calls = [(s.step_number, s.llm_calls[0]) for s in traj.steps] + \
            [(len(traj.steps), c) for c in traj.failed_calls]
        for tick, call in calls:
            where = f"trajectory {traj.trajectory_id} step {tick} (call {call.call_id})"
            expected_seed = call_seed(traj.seed, traj.group_index, tick)
            assert call.seed == expected_seed, f"{where}: recorded seed {call.seed} != call_seed {expected_seed}"
            assert call.call_id == f"{traj.trajectory_id}-t{tick}", f"{where}: call_id {call.call_id!r}"
            key = call_key(body_of(call))
            reqs = by_key.get(key)
            assert reqs, f"{where}: the server never received this call (seed {call.seed})"
            seen_keys.add(key)
            for r in reqs:
                assert r.body["seed"] == call.seed, f"{where}: request sent seed {r.body.get('seed')}"
                assert r.body["temperature"] == call.temperature, f"{where}: temperature differs"
                assert r.body["max_tokens"] == call.max_tokens, f"{where}: max_tokens differs"
            counted = [r for r in reqs if r.answer != "reject_logprobs"]
            refusals = [e["type"] for e in (call.model_extra or {}).get("attemptErrors", [])]
            assert call.attempts == len(counted) == len(refusals) + 1, (
                f"{where}: attempts {call.attempts} != {len(counted)} requests the server answered "
                f"({[r.answer for r in reqs]}); refusals {refusals}")
            assert call.latency_ms is not None and call.latency_ms > 0, f"{where}: latency_ms {call.latency_ms}"
            if call.attempts > 1:
                retried[traj.trajectory_id] += 1
            if call.error is not None:
                assert call.response == "", f"{where}: a failed call has a response"
                continue
            ok = [r for r in reqs if r.answer in ("ok", "latency", "duplicate")]
            # One successful answer, or one more per answer the client refused because its connection carried a
            # second, different answer (the server answered that attempt too).
            assert len(ok) == 1 + refusals.count("ExtraAnswerError"), \
                f"{where}: expected one successful answer, got {[r.answer for r in reqs]} (refusals {refusals})"
            answer = ok[-1]
            sent = answer.response["choices"][0]["message"]["content"]
            assert {r.response["choices"][0]["message"]["content"] for r in ok} == {sent}
            assert call.response == sent, f"{where}: recorded response differs from the server's"
            usage = answer.response["usage"]
            assert (call.prompt_tokens, call.completion_tokens, call.total_tokens) == (
                usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]), \
                f"{where}: token usage {call.prompt_tokens}/{call.completion_tokens}/{call.total_tokens} != {usage}"
            assert call.finish_reason == "stop", f"{where}: finish_reason {call.finish_reason!r}"
            if answer.body.get("logprobs"):
                assert call.completion_logprobs == fake_logprobs(sent), \
                    f"{where}: completion_logprobs not the server's ({str(call.completion_logprobs)[:80]})"
            else:
                assert call.completion_logprobs is None, f"{where}: logprobs recorded but none were returned"
            if answer.latency_fault:
                assert call.latency_ms >= 1000 * answer.latency_fault, \
                    f"{where}: latency_ms {call.latency_ms:.1f} < injected {1000 * answer.latency_fault} ms"
    stray = set(by_key) - seen_keys
    assert not stray, f"{len(stray)} calls reached the server but are in no trajectory"
    return retried


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_faults_never_lose_or_duplicate_trajectories(scenario: Scenario, fake_server: FakeOpenAIServer, tmp_path):
    fake_server.faults = scenario.faults
    agent = make_agent(fake_server, **scenario.agent)
    store = JsonlStore(tmp_path / "run")
    collector = RolloutCollector(agent, sink=store, env_config={"num_ticks": TICKS}, num_envs=scenario.num_envs)
    planned = [s.trajectory_id for s in collector.plan(scenario.episodes, SEED)]

    summary = collector.collect(scenario.episodes, SEED)  # must not raise, whatever the server does

    trajs = read_store_strict(store.directory)
    by_id = check_run(trajs, planned, TICKS, summary, expect_failed=scenario.failed)
    assert summary.skipped_existing == 0
    assert summary.planned == summary.completed + summary.failed, f"summary does not add up: {summary.to_dict()}"
    assert summary.failed == len(scenario.failed), f"summary.failed {summary.failed}: {summary.errors}"
    assert summary.steps == sum(len(t.steps) for t in trajs), "summary.steps != steps on disk"
    assert summary.failed_calls == sum(len(t.failed_calls) for t in trajs), "summary.failed_calls != on disk"
    assert summary.llm_calls == summary.steps + summary.failed_calls, f"summary.llm_calls {summary.llm_calls}"

    for failed_id, tick in scenario.failed.items():
        traj = by_id[failed_id]
        assert traj.final_status == "failed", f"trajectory {failed_id}: status {traj.final_status}"
        assert len(traj.steps) == tick, f"trajectory {failed_id}: {len(traj.steps)} steps, expected {tick}"
        assert len(traj.failed_calls) == 1, f"trajectory {failed_id}: failed_calls {traj.failed_calls}"
        call = traj.failed_calls[0]
        assert call.call_id == f"{failed_id}-t{tick}", f"trajectory {failed_id}: failed call is {call.call_id}"
        assert call.error is not None and call.error.retryable, f"trajectory {failed_id}: error {call.error}"
        assert call.attempts == 1 + agent.client.inner.max_retries, \
            f"trajectory {failed_id}: failed call made {call.attempts} attempts"
        if scenario.failed_type:
            assert call.error.type == scenario.failed_type, f"trajectory {failed_id}: error type {call.error.type}"
        assert any(f"tick {tick}" in e for e in traj.errors), f"trajectory {failed_id}: errors {traj.errors}"
        assert any(e.startswith(f"{failed_id}: ") for e in summary.errors), f"summary.errors {summary.errors}"
        assert call.user_prompt.strip() and call.system_prompt.strip(), f"trajectory {failed_id}: empty prompts"

    for fault in scenario.faults:
        assert fake_server.answered(fault.kind), f"{scenario.name}: the {fault.kind} fault never fired"
    retried = check_calls_against_server(fake_server, trajs)
    completed_retries = {k: v for k, v in retried.items() if k not in scenario.failed}
    if scenario.retried:
        assert completed_retries, f"{scenario.name}: no successful call needed a retry (faults did not fire?)"
    elif not scenario.failed:
        assert not retried, f"{scenario.name}: unexpected retries {dict(retried)}"

    if any(f.kind == "reject_logprobs" for f in scenario.faults):
        requests = fake_server.chat_requests()
        first = next((i for i, r in enumerate(requests) if r.answer == "reject_logprobs"), None)
        assert first is not None, "the server never rejected logprobs"
        # Once the client has seen the rejection it never asks for logprobs again. Counted in requests, not
        # seconds (a fast machine finishes the whole run within a fraction of a second of the rejection):
        # only calls already in flight when the rejection came back, and each one's next call, may still ask.
        late = requests[first + 1 + 2 * collector.max_concurrent_calls:]
        assert late, "no request came after the rejection (the run is too short to tell)"
        assert not any(r.body.get("logprobs") for r in late), "the client kept asking for logprobs after a rejection"
        if len(scenario.faults) == 1:  # every logprobs request is rejected: only calls already in flight ask again
            later = [r for r in requests[first + 1:] if r.body.get("logprobs")]
            assert len(later) <= collector.max_concurrent_calls - 1, \
                f"{len(later)} requests still asked for logprobs after the server rejected them"


# Answers a broken server or proxy may send with status 200. Each must be retried like any malformed
# response (the call recovers when the next attempt is sound) and, when it persists, end the episode
# as a failed *call* (recorded in `failed_calls`), never as an unrecorded crash of the episode.
MALFORMED_BODIES = {
    "invalid-json": (b'{"id": "x", "choices": [', "application/json"),
    "no-choices": (b'{"id": "x", "object": "chat.completion", "model": "fake"}', "application/json"),
    "empty-choices": (b'{"id": "x", "object": "chat.completion", "choices": []}', "application/json"),
    "json-array": (b"[1, 2, 3]", "application/json"),
    "json-null": (b"null", "application/json"),
    "empty-body": (b"", "application/json"),
    "html-labelled-json": (b"<html><body>Bad Gateway</body></html>", "application/json"),
    "html": (b"<html><body>Bad Gateway</body></html>", "text/html"),
    "plain-text": (b"upstream connect error", "text/plain"),
    "choices-not-a-list": (b'{"id": "x", "object": "chat.completion", "choices": "oops"}', "application/json"),
    "choice-is-null": (b'{"id": "x", "object": "chat.completion", "choices": [null]}', "application/json"),
    "logprob-entry-without-logprob": (
        b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop", '
        b'"message": {"role": "assistant", "content": "<think>x</think> {\\"type\\": \\"wait\\"}"}, '
        b'"logprobs": {"content": [{"token": "x", "bytes": [120], "top_logprobs": []}]}}]}', "application/json"),
    "content-not-a-string": (
        b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop", '
        b'"message": {"role": "assistant", "content": 42}}]}', "application/json"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_BODIES))
def test_malformed_200_bodies_are_retried_and_recorded(name: str, fake_server: FakeOpenAIServer, tmp_path):
    payload, content_type = MALFORMED_BODIES[name]
    ticks = 4
    transient = frozenset({call_seed(SEED, 0, 1)})  # episode 0, tick 1: once, then a sound answer
    permanent = episode_seeds(SEED + 1, 0, range(2, ticks))  # episode 1 from tick 2: every attempt
    fake_server.faults = [
        Fault("body", match=lambda b: b.get("seed") in transient, times=1, payload=payload, content_type=content_type),
        Fault("body", match=lambda b: b.get("seed") in permanent, payload=payload, content_type=content_type),
    ]
    store = JsonlStore(tmp_path / "run")
    collector = RolloutCollector(make_agent(fake_server), sink=store, env_config={"num_ticks": ticks}, num_envs=2)
    summary = collector.collect(2, SEED)

    trajs = {t.trajectory_id: t for t in read_store_strict(store.directory)}
    assert sorted(trajs) == [tid(0), tid(1)], f"{name}: stored {sorted(trajs)}"
    ok, bad = trajs[tid(0)], trajs[tid(1)]
    assert ok.final_status == "completed", f"{name}: trajectory {tid(0)} {ok.final_status}: {ok.errors}"
    assert [s.llm_calls[0].attempts for s in ok.steps] == [1, 2, 1, 1], \
        f"{name}: trajectory {tid(0)}: the malformed answer at step 1 was not retried"
    assert ok.steps[1].llm_calls[0].response == scripted_reply(body_of(ok.steps[1].llm_calls[0])), \
        f"{name}: trajectory {tid(0)} step 1: the recorded response is not the sound retry's"
    assert bad.final_status == "failed", f"{name}: trajectory {tid(1)} is {bad.final_status}"
    assert len(bad.steps) == 2, f"{name}: trajectory {tid(1)}: {len(bad.steps)} steps before the failure, expected 2"
    assert len(bad.failed_calls) == 1, \
        f"{name}: trajectory {tid(1)}: the failing call is not in failed_calls (errors: {bad.errors})"
    failed = bad.failed_calls[0]
    assert failed.call_id == f"{tid(1)}-t2" and failed.error is not None and failed.error.retryable, \
        f"{name}: trajectory {tid(1)}: failed call {failed.call_id} error {failed.error}"
    assert failed.attempts == 2, f"{name}: trajectory {tid(1)}: {failed.attempts} attempts, expected 1 + 1 retry"
    assert summary.completed == 1 and summary.failed == 1 and summary.failed_calls == 1, summary.to_dict()


def test_unreachable_server_fails_every_episode_without_raising(tmp_path):
    server = FakeOpenAIServer().start()
    base_url = server.base_url
    server.stop()  # nothing listens on that port any more: connection refused
    agent = OpenAIChatAgent(model=MODEL, base_url=base_url, api_key="k", timeout=0.5, max_retries=1, backoff=0.01)
    store = JsonlStore(tmp_path / "run")
    summary = RolloutCollector(agent, sink=store, env_config={"num_ticks": 3}, num_envs=2).collect(3, SEED)
    trajs = read_store_strict(store.directory)
    check_run(trajs, [tid(e) for e in range(3)], 3, summary, expect_failed=[tid(e) for e in range(3)])
    for t in trajs:
        assert t.steps == [], f"trajectory {t.trajectory_id}: steps recorded without a server"
        assert t.failed_calls[0].error.type == "APIConnectionError", \
            f"trajectory {t.trajectory_id}: error {t.failed_calls[0].error}"
        assert t.failed_calls[0].attempts == 2, f"trajectory {t.trajectory_id}: attempts {t.failed_calls[0].attempts}"
    assert summary.failed == 3 and summary.completed == 0


def test_one_agent_serves_several_collections(fake_server: FakeOpenAIServer, tmp_path):
    """An agent is reused across `collect` calls (each runs its own event loop): e.g. collect, then resume."""
    agent = make_agent(fake_server)
    for round_ in range(2):
        collector = RolloutCollector(agent, sink=JsonlStore(tmp_path / f"run{round_}"), env_config={"num_ticks": 3},
                                     num_envs=2)
        summary = collector.collect(2, SEED + 10 * round_)
        assert summary.failed == 0, f"collection {round_} with the same agent failed: {summary.errors}"
        check_run(read_store_strict(tmp_path / f"run{round_}"),
                  [tid(e, SEED + 10 * round_) for e in range(2)], 3, summary)


@pytest.mark.parametrize(("num_envs", "max_calls"), [(4, 2), (3, None)])
def test_calls_in_flight_are_bounded_and_concurrent(num_envs, max_calls, fake_server: FakeOpenAIServer, tmp_path):
    fake_server.faults = [Fault("latency", delay_s=0.08)]
    collector = RolloutCollector(make_agent(fake_server), sink=JsonlStore(tmp_path / "run"),
                                 env_config={"num_ticks": 4}, num_envs=num_envs, max_concurrent_calls=max_calls)
    summary = collector.collect(num_envs, SEED)
    assert summary.completed == num_envs, summary.errors
    limit = max_calls or num_envs
    assert fake_server.max_in_flight <= limit, f"{fake_server.max_in_flight} calls in flight, limit {limit}"
    assert fake_server.max_in_flight == limit, \
        f"at most {fake_server.max_in_flight} calls were ever in flight at once; expected {limit} (no concurrency?)"


ANSWER_FAULTS = {
    # T1: every kind of answer written twice, 0-3 ms apart: a 503, a 200 without choices, a real answer.
    "T1-any-answer-twice": ({}, [Fault("status", match=some_calls(5), times=1, status=503, twice=True, delay_s=0.003),
                                 Fault("no_choices", match=some_calls(7), times=1, twice=True, delay_s=0.003),
                                 Fault("duplicate", match=some_calls(3), delay_s=0.003)]),
    # T2: on every new connection, the last answer the server sent, written before the request is read.
    "T2-answer-before-the-request": ({"early_answers": True}, []),
    # T3: answers without ids (a greedy group's replies are the same bytes), one in three written twice.
    "T3-no-ids-repeats-and-copies": ({"unique_ids": False}, [Fault("duplicate", match=some_calls(3), delay_s=0.003)]),
    # T4: one in three sent again with another `created` stamp, as a re-sending proxy would.
    "T4-copy-differs-in-a-byte": ({}, [Fault("duplicate", match=some_calls(3), times=1, delay_s=0.003,
                                                          copy="created")]),
}


@pytest.mark.parametrize("case", sorted(ANSWER_FAULTS))
def test_no_stored_reply_is_another_prompts_answer_whatever_the_server_writes(case, tmp_path):
    """Issue 57, T1-T4, in a real collection (4 episodes x 20 ticks, groups of 2 with temperature 0, 4 in flight):
    every stored reply is the answer the server gave to that step's own request (`check_calls_against_server`),
    and every call the collector could not bind to one answer is recorded as failed, never played."""
    options, faults = ANSWER_FAULTS[case]
    ticks, episodes = 20, 4
    with FakeOpenAIServer(faults, **options) as server:
        agent = make_agent(server, max_retries=3, temperature=0.0)
        store = JsonlStore(tmp_path / "run")
        collector = RolloutCollector(agent, sink=store, env_config={"num_ticks": ticks}, num_envs=episodes,
                                     group_size=2)
        summary = collector.collect(episodes, SEED)
        trajs = read_store_strict(store.directory)
        check_calls_against_server(server, trajs)
    refused = Counter(e["type"] for t in trajs for s in t.steps for c in [*s.llm_calls, *t.failed_calls]
                      for e in (c.model_extra or {}).get("attemptErrors", []))
    if case.startswith("T2"):  # every connection after the first answers carries two: nothing can be taken
        assert summary.failed == episodes and summary.steps <= episodes, summary
        assert {t.failed_calls[0].error.type for t in trajs} == {"ExtraAnswerError"}
    else:
        assert summary.failed == 0 and summary.steps == ticks * episodes, summary.errors
    if case.startswith("T4"):
        assert refused["ExtraAnswerError"] >= 5, refused
    assert "ExtraAnswerError" not in refused or not case.startswith(("T1", "T3")), refused


def test_a_server_that_sends_every_third_answer_twice_never_gets_a_reply_stored_for_the_wrong_prompt(tmp_path):
    """Issue 37, K1, in a real collection: 8 episodes x 130 ticks (1,040 calls, 8 in flight) against a server
    that writes about a third of its answers twice, the copy 0-30 ms after the first. Every stored reply is
    the answer the server gave to that step's own prompt (`check_calls_against_server` compares each with the
    server's answer to the request carrying that prompt) and no episode fails. Each request has a connection of
    its own, which the server closes after the copy: the copy follows its own answer, byte for byte, and is taken
    as that answer, with nothing refused or sent again."""
    ticks, episodes = 130, 8
    with FakeOpenAIServer([Fault("duplicate", match=some_calls(3), delay_s=0.03)]) as server:
        agent = make_agent(server, max_retries=3)
        store = JsonlStore(tmp_path / "run")
        collector = RolloutCollector(agent, sink=store, env_config={"num_ticks": ticks}, num_envs=episodes)
        planned = [s.trajectory_id for s in collector.plan(episodes, SEED)]
        summary = collector.collect(episodes, SEED)
        trajs = read_store_strict(store.directory)
        check_run(trajs, planned, ticks, summary, expect_failed={})
        assert summary.failed == 0 and summary.steps == ticks * episodes, summary.errors
        check_calls_against_server(server, trajs)
        assert len(server.answered("duplicate")) >= 250
    refusals = Counter(e["type"] for t in trajs for s in t.steps for c in s.llm_calls
                       for e in (c.model_extra or {}).get("attemptErrors", []))
    assert refusals == Counter(), refusals
