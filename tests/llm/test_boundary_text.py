"""Text from a server that UTF-8 cannot hold (a lone surrogate) is made storable where it enters, and a
trajectory that cannot be stored fails alone: the run goes on and `--resume` completes it (issue 15, item 1).

The server is a real loopback HTTP server (`fake_server.FakeOpenAIServer`) whose answers carry lone
surrogates, written as the JSON escape ``\\ud800`` that a buggy server really sends; the store is a
real `JsonlStore` on disk.
"""

from __future__ import annotations

import base64
import errno
import json
import warnings
from typing import Any

from fake_server import FakeOpenAIServer, Fault, episode_seeds
from rollout_checks import check_run, read_store_strict

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.llm import OpenAIChatClient
from rlaif_gym.llm_judge import JudgeConfig, judge_run
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore
from rlaif_gym.trajectory import StorageRepairWarning, Trajectory

TICKS = 3
SEED = 40
LONE = "\ud800"


class SurrogateServer(FakeOpenAIServer):
    """Answers like `FakeOpenAIServer`, with lone surrogates in the reply, the reasoning and the action
    JSON of the calls whose seed is in `dirty` (the action is a post whose content holds the escape
    ``\\ud800`` as text, which the reply parser decodes)."""

    def __init__(self, dirty: frozenset[int], faults: list[Fault] | None = None) -> None:
        super().__init__(faults)
        self.dirty = dirty

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().completion(body)
        if body.get("seed") in self.dirty:
            message = answer["choices"][0]["message"]
            think = message["content"].partition("</think>")[0]
            action = json.dumps({"type": "create_post", "content": f"gm {LONE}"})  # the text \\ud800 in the reply
            message["content"] = f"{think} {LONE}broken{LONE}</think>\n{action}"
            message["reasoning_content"] = f"thinking {LONE} hard"
            answer["choices"][0]["logprobs"] = None
        return answer


def _agent(server: FakeOpenAIServer) -> OpenAIChatAgent:
    return OpenAIChatAgent(model="fake", base_url=server.base_url, api_key="sk-test", timeout=5.0, max_retries=1,
                           backoff=0.01)


def test_a_lone_surrogate_in_replies_reasoning_and_errors_is_stored_as_u_fffd(tmp_path):
    dirty = episode_seeds(SEED + 1, 0, range(TICKS))
    failing = episode_seeds(SEED + 2, 0, [1])
    with SurrogateServer(dirty, faults=[
        Fault("status", match=lambda b: b.get("seed") in failing, status=400,
              message=f"bad request {LONE} from the gateway"),
    ]) as server:
        run = tmp_path / "run"
        summary = RolloutCollector(_agent(server), sink=JsonlStore(run), env_config={"num_ticks": TICKS},
                                   num_envs=3).collect(3, SEED)
        assert len(server.answered("ok")) >= TICKS, "the dirty replies were never sent"
    trajs = read_store_strict(run)  # every line is valid UTF-8 JSON
    by_id = check_run(trajs, [f"run-s{SEED + e}-m0" for e in range(3)], TICKS, summary,
                      expect_failed=[f"run-s{SEED + 2}-m0"])
    assert summary.failed == 1, summary.errors
    dirty_calls = [c for s in by_id[f"run-s{SEED + 1}-m0"].steps for c in s.llm_calls]
    assert len(dirty_calls) == TICKS
    for call in dirty_calls:
        assert "\ufffdbroken\ufffd" in call.response, call.response
        assert call.reasoning == "thinking \ufffd hard"
        extra = call.model_extra or {}
        assert extra.get("textRepairs") == {"response": 2, "reasoning": 1}, extra
    steps = by_id[f"run-s{SEED + 1}-m0"].steps
    posts = [s.action.parameters for s in steps if s.action and s.action.action_type == "create_post"]
    assert posts and all(p.get("content") == "gm \ufffd" for p in posts), posts
    failed = by_id[f"run-s{SEED + 2}-m0"]
    message = failed.failed_calls[0].error.message
    assert "bad request \ufffd from the gateway" in message, message
    assert any("\ufffd" in e for e in failed.errors), failed.errors
    assert any("\ufffd" in e for e in summary.errors), summary.errors
    for line in run.glob("trajectories-*.jsonl"):
        line.read_bytes().decode("utf-8")


class _FlakyDisk(JsonlStore):
    """A real `JsonlStore` whose disk refuses one trajectory (ENOSPC), as a full disk would."""

    def __init__(self, directory, refuse: str) -> None:
        super().__init__(directory)
        self.refuse = refuse

    def append(self, trajectory) -> None:
        if trajectory.trajectory_id == self.refuse:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().append(trajectory)


def test_a_trajectory_that_cannot_be_stored_fails_alone_and_resume_completes_the_run(tmp_path):
    run = tmp_path / "run"
    victim = f"run-s{SEED + 1}-m0"
    ids = [f"run-s{SEED + e}-m0" for e in range(4)]
    with FakeOpenAIServer() as server:
        summary = RolloutCollector(_agent(server), sink=_FlakyDisk(run, victim), env_config={"num_ticks": TICKS},
                                   num_envs=2).collect(4, SEED)
        assert summary.failed == 1 and summary.completed == 3, summary.to_dict()
        assert any(e.startswith(f"{victim}: ") and "No space left" in e for e in summary.errors), summary.errors
        stored = {t.trajectory_id for t in read_store_strict(run)}
        assert stored == set(ids) - {victim}, stored
        resumed = RolloutCollector(_agent(server), sink=JsonlStore(run), env_config={"num_ticks": TICKS},
                                   num_envs=2).collect(4, SEED, resume=True)
    assert resumed.skipped_existing == 3 and resumed.completed == 1, resumed.to_dict()
    check_run(read_store_strict(run), ids, TICKS)


# -- issue 25 rows 1-2: every field of a 200 reply is boundary text, not only the reply and its reasoning

KEY = "sk-echoed-Lq9Vz3Wn7Rt2Yp5Ks8Dm"


class EchoingGateway(FakeOpenAIServer):
    """A gateway that echoes the caller's key (plain and in base64) in the `model` and `finish_reason` fields
    of every 200 reply, puts lone surrogates there too, and sends token ids and
    counts of the wrong type."""

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().completion(body)
        b64 = base64.urlsafe_b64encode(KEY.encode()).decode()
        answer["model"] = f"gateway/{KEY}/{LONE}/{b64}" + "m" * 5000
        answer["choices"][0]["finish_reason"] = f"stop {KEY} {LONE}"
        answer["choices"][0]["token_ids"] = ["not", "ints"]
        answer["usage"]["completion_tokens"] = "many"
        return answer


def test_a_key_or_a_surrogate_in_model_or_finish_reason_is_masked_repaired_and_kept(tmp_path):
    run = tmp_path / "run"
    with EchoingGateway() as server:
        agent = OpenAIChatAgent(model="fake", base_url=server.base_url, api_key=KEY, timeout=5.0, max_retries=0)
        summary = RolloutCollector(agent, sink=JsonlStore(run), env_config={"num_ticks": TICKS},
                                   num_envs=3).collect(3, SEED)
        # the judge tape of the same run, from the same gateway (its answers are no verdicts: each call is taped
        # as "malformed", with its record)
        judged = tmp_path / "judged"
        judge_run(run, client=OpenAIChatClient("judge", server.base_url, api_key=KEY, timeout=5.0, max_retries=0),
                  out_dir=judged, config=JudgeConfig(failure_budget=1.0))
    assert summary.completed == 3 and summary.failed == 0, summary.errors  # 3 of 3 episodes stored
    trajs = read_store_strict(run)
    assert len(trajs) == 3
    for t in trajs:
        for call in (c for s in t.steps for c in s.llm_calls):
            assert KEY not in call.model and KEY not in (call.finish_reason or ""), "the echoed key was stored"
            assert call.model.startswith("gateway/***/\ufffd/"), call.model[:80]
            assert len(call.model) <= 256
            assert call.finish_reason == "stop *** \ufffd"
            assert call.completion_token_ids is None and call.completion_tokens is None
            assert (call.model_extra or {}).get("textRepairs") == {"model": 1, "finish_reason": 1}
    raw = b"".join(p.read_bytes() for p in [*run.rglob("*"), *judged.rglob("*")] if p.is_file())
    for form in (KEY, KEY[8:], base64.urlsafe_b64encode(KEY.encode()).decode()):
        assert form.encode() not in raw, "a form of the key reached a file of the run or the judge tape"


def test_a_record_with_a_lone_surrogate_still_stores_as_valid_utf8_and_says_so(tmp_path):
    traj = Trajectory(trajectory_id="t-1", agent_id=f"agent {LONE}", errors=[f"boom {LONE}{LONE}"])
    store = JsonlStore(tmp_path / "run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.append(traj)
    assert any(issubclass(w.category, StorageRepairWarning) for w in caught), [str(w.message) for w in caught]
    (line,) = (tmp_path / "run").glob("trajectories-*.jsonl")
    data = json.loads(line.read_bytes().decode("utf-8"))  # strict UTF-8
    assert data["agentId"] == "agent \ufffd" and data["errors"] == ["boom \ufffd\ufffd"]
    assert data["storageRepairs"] == 3
    (back,) = list(JsonlStore(tmp_path / "run").read())
    assert back.trajectory_id == "t-1"
