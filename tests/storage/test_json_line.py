"""`to_json` writes exactly what ``json.dumps(to_dict(), ensure_ascii=False, separators=(",", ":"))`` writes.

It takes pydantic's one-pass serialiser where that gives the same text and the plain path where it may
not (floats below 1e-4, text pydantic will not encode). Checked on awkward floats and strings, and on
the trajectories of a real collection, which are then read back through the schema.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore
from rlaif_gym.trajectory import (
    EnvironmentState,
    LLMCall,
    NonFiniteNumberError,
    Observation,
    StorageRepairWarning,
    Trajectory,
    TrajectoryStep,
)


def plain(record) -> str:
    return json.dumps(record.to_dict(), ensure_ascii=False, separators=(",", ":"))


def awkward_floats(n: int = 20_000) -> list[float]:
    """Every finite magnitude from subnormal to huge, random bit patterns, and the values the formats disagree on
    (JSON has no NaN or infinity: see the test of those below)."""
    rng = np.random.default_rng(0)
    values = [0.0, -0.0, 1e-4, 9.999e-5, 1e-5, 1.5e-7, 5e-324, 1e16, 1e22, 1.7976931348623157e308, 0.1, 1 / 3]
    values += (rng.random(n) * 10.0 ** rng.integers(-330, 308, n) * rng.choice([-1, 1], n)).tolist()
    values += [struct.unpack("d", struct.pack("Q", int(b)))[0] for b in rng.integers(0, 2**63, n, dtype=np.uint64)]
    return [v for v in values if math.isfinite(v)]


def test_floats_of_every_magnitude_are_written_as_python_writes_them():
    values = awkward_floats()
    for i in range(0, len(values), 500):
        chunk = values[i:i + 500]
        record = Observation(numeric=chunk, text="")
        assert record.to_json() == plain(record), f"floats {i}..{i + 500}"
        extra = EnvironmentState(agent_balance=1.0, cash=chunk[0], tick=i, spread={"x": chunk[1:5]})  # extra keys
        assert extra.to_json() == plain(extra)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_nan_or_an_infinity_is_never_written_the_error_names_the_field(value, tmp_path):
    """Issue 57 row N1: the JSONL is strict JSON (RFC 8259 has no NaN or Infinity); a record holding one is refused
    whole, naming where, and nothing reaches the file."""
    step = TrajectoryStep(step_number=0, timestamp=0, environment_state=EnvironmentState(agent_balance=1.0),
                          llm_calls=[LLMCall(model="m", temperature=0.5, completion_logprobs=[-0.5, value])])
    traj = Trajectory(trajectory_id="t-1", agent_id="a", steps=[step])
    with pytest.raises(NonFiniteNumberError, match=r"trajectory 't-1': field steps\[0\]\.llmCalls\[0\]"
                                                   r"\.completionLogprobs\[1\] is -?(nan|inf)") as info:
        JsonlStore(tmp_path / "run").append(traj)
    assert info.value.field == "steps[0].llmCalls[0].completionLogprobs[1]"
    assert b"".join(p.read_bytes() for p in (tmp_path / "run").glob("trajectories-*.jsonl")) == b""
    with pytest.raises(NonFiniteNumberError, match=r"Observation: field numeric\[2\]"):
        Observation(numeric=[1.0, 2.0, value]).to_json()
    # text that reads "NaN" or "Infinity" is no number: written, and as json.dumps writes it
    record = LLMCall(model="NaN", response="Infinity and -Infinity", completion_logprobs=[-1e-7])
    assert record.to_json() == plain(record)


@pytest.mark.parametrize("text", [
    "plain", "", "".join(map(chr, range(0x80))), "é ¢ 😀 \u2028 \u2029 \x7f",
    "looks like floats: 0.00001 :1e-5 [2e-7", "quote \" backslash \\ slash /",
])
def test_strings_are_escaped_as_python_escapes_them(text):
    record = LLMCall(model="m", user_prompt=text, response=text, completion_logprobs=[-0.5, -1e-6])
    assert record.to_json() == plain(record)


def test_a_lone_surrogate_is_written_as_u_fffd_and_counted_never_as_text_utf8_cannot_store():
    record = LLMCall(model="m", user_prompt="a\ud800b", response="c\udfffd")
    with pytest.warns(StorageRepairWarning, match="2 code point"):
        line = record.to_json()
    line.encode("utf-8")  # a store can write it
    want = {**record.to_dict(), "userPrompt": "a\ufffdb", "response": "c\ufffdd", "storageRepairs": 2}
    assert json.loads(line) == want


def test_the_trajectories_of_a_collection_are_written_byte_for_byte_as_before_and_read_back():
    collector = RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 12}, num_envs=2, group_size=2)
    summary = collector.collect(4, seed=3)
    assert summary.completed == 4 and summary.steps == 48
    for traj in collector.trajectories:
        line = traj.to_json()
        assert line == plain(traj), traj.trajectory_id
        again = Trajectory.from_json(line)  # validated by the schema on load
        assert again == traj and again.to_json() == line
        step = traj.steps[5]
        assert isinstance(step, TrajectoryStep) and step.to_json() == plain(step)
