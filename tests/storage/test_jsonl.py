"""The JSONL store: exact round trips, version checks, the original layout, torn-line repair, manifests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest

from rlaif_gym.storage import (
    SET_ASIDE_NAME,
    CorruptLineError,
    JsonlStore,
    TornLineWarning,
    TornTailError,
    read_jsonl,
    to_db_rows,
    write_jsonl,
)
from rlaif_gym.storage import jsonl as jsonl_module
from rlaif_gym.trajectory import SchemaVersionError, Trajectory

# A trajectory as the original Babylon exported it (docs/babylon.md ("The original's data model")):
# camelCase, `finalPnL` with a capital L, a list of positions where a count belongs, required
# temperature/maxTokens.
ORIGINAL = {
    "trajectoryId": "rollout-agent-7-1767225600000",
    "agentId": "agent-7",
    "id": "clx0abc",
    "windowId": "2026-01-01T00:00",
    "scenarioId": "scenario-3",
    "startTime": "2026-01-01T00:00:00Z",
    "endTime": "2026-01-01T02:00:00Z",
    "durationMs": 7200000,
    "steps": [
        {
            "stepNumber": 0,
            "timestamp": 1767225600000,
            "environmentState": {"agentBalance": 10000, "agentPnL": 0, "openPositions": 0},
            "providerAccesses": [],
            "llmCalls": [{
                "model": "gpt-4o-mini", "systemPrompt": "You are a trader.", "userPrompt": "ETH at $3,900. Act.",
                "response": "<decisions><decision ticker=\"ETH\" amount=\"100\"/></decisions>",
                "reasoning": "ETH momentum", "temperature": 0.7, "maxTokens": 2000, "purpose": "action",
            }],
            "action": {"actionType": "open_perp", "parameters": {"ticker": "ETH", "size": 100, "leverage": 2},
                       "success": True, "reasoning": "ETH momentum"},
            "reward": 0.42,
        },
        {
            "stepNumber": 1,
            "timestamp": 1767229200000,
            "environmentState": {"agentBalance": 9900.5, "agentPnL": -99.5,
                                 "openPositions": [{"ticker": "ETH", "size": 100}]},
            "llmCalls": [{
                "model": "gpt-4o-mini", "systemPrompt": "You are a trader.", "userPrompt": "ETH at $3,850. Act.",
                "response": "hold", "reasoning": None, "temperature": 0.7, "maxTokens": 2000, "purpose": "action",
            }],
            "action": {"actionType": "wait", "parameters": {}, "success": True, "reasoning": None},
            "reward": -0.1,
        },
    ],
    "totalReward": 0.32,
    "finalPnL": -123.45,
    "finalBalance": 9876.55,
    "tradesExecuted": 1,
    "episodeLength": 2,
    "finalStatus": "completed",
    "archetype": "degen",
}


def test_store_round_trip_is_exact(tmp_path, sample):
    store = JsonlStore(tmp_path / "run")
    for trajectory in sample:
        store.append(trajectory)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no torn-line warning on a clean store
        assert list(store.read()) == sample
    assert store.completed_ids() == {t.trajectory_id for t in sample}
    raw = list(store.read(validate=False))
    assert [d["trajectoryId"] for d in raw] == [t.trajectory_id for t in sample]
    assert raw[0]["finalPnL"] == -237.25 and raw[0]["steps"][0]["environmentState"]["agentPnL"] == 0.0
    assert len(store.path.read_bytes().splitlines()) == len(sample)


def test_single_file_round_trip_is_exact(tmp_path, sample):
    path = tmp_path / "out.jsonl"
    assert write_jsonl(path, sample) == len(sample)
    back = read_jsonl(path)
    assert back == sample
    assert back[0].custom_extra == {"note": "extra fields survive"}  # extra fields are kept, not dropped
    assert back[0].steps[0].llm_calls[0].error.type == "timeout"
    assert back[0].steps[0].llm_calls[1].completion_logprobs == [-0.25, -1.5, -0.0625]
    assert "市场" in path.read_text(encoding="utf-8")  # unicode is written as is, not \u-escaped


def test_unknown_schema_version_raises_with_location(tmp_path, rich):
    good = rich.to_json()
    bad = json.loads(good)
    bad["schemaVersion"] = 99
    store = JsonlStore(tmp_path)
    store.path.write_text(f"{good}\n{json.dumps(bad)}\n{good}\n", encoding="utf-8")
    with pytest.raises(SchemaVersionError, match=r"trajectories-0\.jsonl:2: trajectory schema_version 99 .*upgrade"):
        list(store.read())
    with pytest.raises(SchemaVersionError, match="schema_version 99"):
        store.completed_ids()
    with pytest.raises(SchemaVersionError, match=r":2: .*99"):
        read_jsonl(store.path)


def test_original_babylon_layout_loads_with_values_preserved(tmp_path):
    path = tmp_path / "babylon.jsonl"
    path.write_text(json.dumps(ORIGINAL) + "\n", encoding="utf-8")
    (trajectory,) = read_jsonl(path)
    assert trajectory.final_pnl == -123.45  # `finalPnL` must not load as 0 (defect 6)
    assert trajectory.final_balance == 9876.55 and trajectory.total_reward == 0.32
    assert trajectory.trajectory_id == ORIGINAL["trajectoryId"] and trajectory.agent_id == "agent-7"
    assert trajectory.scenario_id == "scenario-3" and trajectory.archetype == "degen"
    first, second = trajectory.steps
    assert first.environment_state.agent_balance == 10000 and second.environment_state.agent_pnl == -99.5
    assert second.environment_state.open_positions == 1  # the list of positions became a count
    llm = first.llm_calls[0]
    assert (llm.model, llm.system_prompt, llm.user_prompt, llm.temperature, llm.max_tokens, llm.purpose) == (
        "gpt-4o-mini", "You are a trader.", "ETH at $3,900. Act.", 0.7, 2000, "action")
    assert llm.reasoning == "ETH momentum" and llm.response.startswith("<decisions>")
    assert first.action.action_type == "open_perp" and first.action.parameters["leverage"] == 2
    assert first.action.success is True and first.reward == 0.42 and second.reward == -0.1
    # written back in our layout, the same values come out again
    assert Trajectory.from_json(trajectory.to_json()) == trajectory


def test_database_row_layout_loads(tmp_path, rich):
    """A line in the original DB row layout (`stepsJson` string) reads back through the store."""
    store = JsonlStore(tmp_path)
    (row,) = to_db_rows([rich])
    store.path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    (back,) = store.read()
    assert back.steps == rich.steps and back.final_pnl == rich.final_pnl


def test_torn_last_line_is_repaired(tmp_path, make_rich):
    store = JsonlStore(tmp_path)
    kept = [make_rich(f"t{i}") for i in range(3)]
    for trajectory in kept:
        store.append(trajectory)
    size = store.path.stat().st_size
    fourth = (make_rich("t3").to_json() + "\n").encode("utf-8")
    torn = fourth[: len(fourth) // 2]
    with store.path.open("ab") as handle:  # a writer killed in the middle of its os.write
        handle.write(torn)

    with pytest.raises(TornTailError, match="repair"):  # appending now would bury the torn bytes mid-file
        store.append(make_rich("t4"))
    with pytest.warns(TornLineWarning, match=r"trajectories-0\.jsonl:4: skipped a torn last line"):
        assert list(store.read()) == kept
    with pytest.warns(TornLineWarning):
        assert store.completed_ids() == {"t0", "t1", "t2"}

    report = store.repair()
    assert (report.bytes_dropped, report.lines_dropped, report.lines_completed) == (len(torn), 1, 0)
    assert report.files == {str(store.path): len(torn)}
    assert store.path.stat().st_size == size
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(store.read()) == kept
        assert store.completed_ids() == {"t0", "t1", "t2"}
    assert store.repair().bytes_dropped == 0  # idempotent

    store.append(make_rich("t3"))
    lines = store.path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4 and all(line.endswith(b"\n") for line in lines)
    assert [t.trajectory_id for t in store.read()] == ["t0", "t1", "t2", "t3"]


def test_repair_never_drops_a_complete_valid_line(tmp_path, make_rich):
    store = JsonlStore(tmp_path)
    store.append(make_rich("a"))
    whole = make_rich("b").to_json().encode("utf-8")
    with store.path.open("ab") as handle:  # killed after the line but before its newline
        handle.write(whole)
    report = store.repair()
    assert (report.bytes_dropped, report.lines_dropped, report.lines_completed) == (0, 0, 1)
    assert [t.trajectory_id for t in store.read()] == ["a", "b"]

    # a line that ends in a newline but is garbage (e.g. zero-filled blocks after a power loss) is torn
    with store.path.open("ab") as handle:
        handle.write(b"\x00\x00\x00\n")
    assert store.repair().bytes_dropped == 4
    assert [t.trajectory_id for t in store.read()] == ["a", "b"]

    # a schema-invalid but complete JSON line is data, not tearing: repair keeps it, read reports it
    with store.path.open("ab") as handle:
        handle.write(b'{"schemaVersion": 1, "note": "not a trajectory"}\n')
    assert store.repair().bytes_dropped == 0
    with pytest.raises(CorruptLineError, match=":3: not a valid trajectory record"):
        list(store.read())


def test_corrupt_middle_line_raises_with_file_and_line(tmp_path, make_rich):
    store = JsonlStore(tmp_path, part="w1")
    lines = [make_rich(f"t{i}").to_json() for i in range(3)]
    lines[1] = lines[1][:40]  # a line cut short in the middle of the file
    store.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorruptLineError, match=r"trajectories-w1\.jsonl:2: not valid JSON") as info:
        list(store.read())
    assert info.value.line_number == 2 and info.value.path == str(store.path)
    with pytest.raises(CorruptLineError, match=":2:"):
        store.completed_ids()
    assert store.repair().bytes_dropped == 0  # repair only cuts a torn tail; corruption stays visible


def test_manifest_is_written_atomically_and_read_back(tmp_path):
    store = JsonlStore(tmp_path)
    assert store.read_manifest() is None
    plan = {"env_id": "RLAIF-Text-v0", "seeds": [1, 2, 3], "group_size": 4, "note": "ünïcode"}
    store.write_manifest(plan)
    assert store.read_manifest() == plan
    store.write_manifest({**plan, "group_size": 8})
    assert store.read_manifest()["group_size"] == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temp file left behind
    assert store.files() == []  # the manifest is not a data file


def test_parts_are_read_in_sorted_file_order(tmp_path, make_rich):
    b, a = JsonlStore(tmp_path, part="b"), JsonlStore(tmp_path, part="a")
    b.append(make_rich("from-b"))
    a.append(make_rich("from-a1"))
    a.append(make_rich("from-a2"))
    assert [t.trajectory_id for t in b.read()] == ["from-a1", "from-a2", "from-b"]
    assert [p.name for p in a.files()] == ["trajectories-a.jsonl", "trajectories-b.jsonl"]


def test_concurrent_appends_from_threads_give_whole_lines(tmp_path, make_rich):
    store = JsonlStore(tmp_path)

    def work(k):
        for i in range(5):
            store.append(make_rich(f"th{k}-{i}"))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store.completed_ids()) == 20
    assert len(list(store.read())) == 20


def test_completed_ids_is_fast_for_thousands(tmp_path, make_rich, monkeypatch):
    store = JsonlStore(tmp_path)
    line = make_rich("x").to_json()
    with (store.directory / "trajectories-bulk.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(5000):
            handle.write(line.replace('"trajectoryId":"x"', f'"trajectoryId":"id-{i}"') + "\n")
    store.append(make_rich("last"))  # the last line of a file is always parsed whole
    whole_parses = []
    real_loads = json.loads

    def counting_loads(text, *args, **kwargs):
        whole_parses.append(len(text))
        return real_loads(text, *args, **kwargs)

    monkeypatch.setattr(jsonl_module.json, "loads", counting_loads)
    ids = store.completed_ids()
    assert len(ids) == 5001 and {"id-0", "id-4999", "last"} <= ids
    # Fast because it is the id, not the record, that is decoded: only each file's last line (which may
    # be torn) is parsed whole; every other json.loads call reads one short id string.
    long_parses = [n for n in whole_parses if n > 100]
    assert len(long_parses) == len(store.files()) == 2, f"{len(long_parses)} whole records parsed for 5001 ids"


def test_bad_arguments_are_refused(tmp_path, rich):
    with pytest.raises(ValueError, match="part must match"):
        JsonlStore(tmp_path, part="../escape")
    store = JsonlStore(tmp_path)
    with pytest.raises(TypeError, match="takes a Trajectory"):
        store.append(rich.to_dict())
    with pytest.raises(TypeError, match="manifest is a dict"):
        store.write_manifest([1, 2])
    assert not os.path.exists(store.path)


WRITER = """
import sys
from rlaif_gym.storage import JsonlStore
from rlaif_gym.trajectory import EnvironmentState, LLMCall, Trajectory, TrajectoryStep
store = JsonlStore(sys.argv[1])
big = "x" * (4 << 20)  # 4 MiB lines: the kill often lands inside an os.write
for i in range(10_000):
    call = LLMCall(model="m", user_prompt="state", response=big)
    step = TrajectoryStep(step_number=0, timestamp=0, environment_state=EnvironmentState(agent_balance=1.0),
                          llm_calls=[call])
    store.append(Trajectory(trajectory_id=f"k{i}", agent_id="a", steps=[step]))
"""


def test_a_writer_killed_with_sigkill_leaves_a_repairable_store(tmp_path, make_rich):
    """A real SIGKILL at a random moment: after repair() every remaining line is whole and valid."""
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
    path = tmp_path / "trajectories-0.jsonl"
    deadline = time.monotonic() + 60
    while (not path.exists() or path.stat().st_size < (12 << 20)) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    store = JsonlStore(tmp_path)
    report = store.repair()
    assert report.lines_dropped <= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids = [t.trajectory_id for t in store.read()]
        assert len(ids) >= 2 and ids == [f"k{i}" for i in range(len(ids))]
        assert store.completed_ids() == set(ids)
    store.append(make_rich("after-kill"))
    assert [t.trajectory_id for t in store.read()][-1] == "after-kill"


def test_set_aside_moves_exactly_the_named_records_and_leaves_every_other_byte(tmp_path, make_rich):
    """`failed_ids` finds the failed records (also in a second part and in a hand-written layout);
    `set_aside` moves them to `retried-failures.jsonl` and leaves every other line byte for byte."""
    a, b = JsonlStore(tmp_path, part="a"), JsonlStore(tmp_path, part="b")
    for i in range(5):
        status = "failed" if i in (1, 3) else "completed"
        a.append(make_rich(f"a{i}").model_copy(update={"final_status": status}))
    b.append(make_rich("b0"))
    # A line not in `append`'s layout (spaces, keys reordered), failed too; a post that merely says "failed".
    odd = json.loads(make_rich("b1").model_copy(update={"final_status": "failed"}).to_json())
    odd = {"trajectoryId": odd.pop("trajectoryId"), **odd}
    with b.path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(odd, indent=None, separators=(", ", ": ")) + "\n")
    b.append(make_rich("b2").model_copy(update={"errors": ['the word "failed" in a message']}))

    assert a.failed_ids() == b.failed_ids() == {"a1", "a3", "b1"}
    lines_before = {p.name: p.read_bytes().splitlines(keepends=True) for p in a.files()}
    assert a.set_aside({"a1", "b1", "not-stored"}) == 2
    assert a.completed_ids() == {"a0", "a2", "a3", "a4", "b0", "b2"}
    assert a.failed_ids() == {"a3"}
    after = {p.name: p.read_bytes().splitlines(keepends=True) for p in a.files()}
    assert after["trajectories-a.jsonl"] == [lines_before["trajectories-a.jsonl"][i] for i in (0, 2, 3, 4)]
    assert after["trajectories-b.jsonl"] == [lines_before["trajectories-b.jsonl"][i] for i in (0, 2)]
    aside = (tmp_path / SET_ASIDE_NAME).read_bytes().splitlines(keepends=True)
    assert aside == [lines_before["trajectories-a.jsonl"][1], lines_before["trajectories-b.jsonl"][1]]
    assert sorted(t.trajectory_id for t in a.read()) == ["a0", "a2", "a3", "a4", "b0", "b2"]  # not a data file
    assert a.set_aside(set()) == 0 and a.set_aside({"gone"}) == 0
    a.append(make_rich("a1"))  # the replay goes back in as a normal line
    assert "a1" in a.completed_ids() and "a1" not in a.failed_ids()
