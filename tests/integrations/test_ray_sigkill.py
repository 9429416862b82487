"""A multi-process (Ray) collection whose driver is SIGKILLed resumes, on either backend, losing and duplicating
nothing, and ends with the same trajectories as one process collecting them all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore

EPISODES, SEED, TICKS = 10, 5, 12
REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.rollout.ray_backend import RayBackend
from rlaif_gym.storage import JsonlStore
backend = RayBackend(num_workers=2, init_kwargs={"num_cpus": 2, "include_dashboard": False, "log_to_driver": False})
collector = RolloutCollector(ScriptedLLMAgent(latency_s=0.02), sink=JsonlStore(sys.argv[1]),
                             env_config={"num_ticks": TICKS}, num_envs=2, backend=backend)
collector.collect(episodes=EPISODES, seed=SEED)
""".replace("TICKS", str(TICKS)).replace("EPISODES", str(EPISODES)).replace("SEED", str(SEED))


def _collector(out: Path | None = None) -> RolloutCollector:
    return RolloutCollector(ScriptedLLMAgent(latency_s=0.02), sink=JsonlStore(out) if out else None,
                            env_config={"num_ticks": TICKS}, num_envs=2)


def _whole_lines(out: Path) -> list[dict]:
    """The stored trajectories whose lines are whole (a torn tail is not counted), from every part file."""
    return [json.loads(line) for path in sorted(out.glob("trajectories*.jsonl"))
            for line in path.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")]


def _content(data: dict) -> dict:
    """A stored trajectory without its wall-clock fields (episode duration, call latencies)."""
    data = dict(data)
    data.pop("durationMs", None)
    data["steps"] = [{**step, "llmCalls": [{k: v for k, v in call.items() if k != "latencyMs"}
                                           for call in step.get("llmCalls", [])]} for step in data["steps"]]
    return data


def test_a_sigkilled_ray_collection_resumes_without_loss_or_duplicates(tmp_path):
    out = tmp_path / "run"
    # The driver and the Ray instance it starts share a new session, so the kill takes them all down together.
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None and len(_whole_lines(out)) < 3:
            time.sleep(0.01)
        alive = proc.poll() is None
        if alive:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if not alive:
            err = proc.stderr.read().decode() if proc.stderr else ""
            assert proc.returncode == 0, f"the Ray collection failed on its own: {err[-2000:]}"
            pytest.skip("the Ray collection finished before it could be killed")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    survivors = [t["trajectoryId"] for t in _whole_lines(out)]
    assert len(survivors) == len(set(survivors)) >= 3, survivors

    summary = _collector(out).collect(EPISODES, SEED, resume=True)  # the rest, in this one process
    assert summary.skipped_existing == len(survivors) and summary.failed == 0, summary.to_dict()
    stored = _whole_lines(out)
    ids = [t["trajectoryId"] for t in stored]
    assert len(ids) == len(set(ids)) == EPISODES, ids

    reference = _collector()
    reference.collect(EPISODES, SEED)
    expected = {t.trajectory_id: _content(t.model_dump(mode="json", by_alias=True)) for t in reference.trajectories}
    assert {t["trajectoryId"]: _content(t) for t in stored} == expected
