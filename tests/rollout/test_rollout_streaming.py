"""Issue 15 item 2: the scripted agent (whose calls never await) streams trajectories to disk as they finish.

An episode that never yields must not stop the writer: a subprocess whose episode 40 blocks forever
(a stand-in for a long run killed at any moment) must already have its finished episodes on disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rollout_checks import check_run, jsonl_lines, read_store_strict

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore

REPO = Path(__file__).resolve().parents[2]
EPISODES, TICKS, GATE = 60, 5, 40

SCRIPT = """
import sys, time
from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore

class Gated(ScriptedLLMAgent):
    async def act(self, system_prompt, prompt, *, seed=None, call_id=""):
        if call_id.startswith("run-s" + sys.argv[2] + "-"):
            time.sleep(600)  # a long episode that never awaits: the loop is blocked until SIGKILL
        return await super().act(system_prompt, prompt, seed=seed, call_id=call_id)

RolloutCollector(Gated(), sink=JsonlStore(sys.argv[1]), env_config={"num_ticks": TICKS}, num_envs=8,
                 run_name="run").collect(EPISODES, seed=0)
""".replace("TICKS", str(TICKS)).replace("EPISODES", str(EPISODES))


def test_finished_episodes_are_on_disk_while_a_never_awaiting_episode_plays(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), str(GATE)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and len(jsonl_lines(out)) < GATE - 8:
            time.sleep(0.05)
        assert proc.poll() is None, f"the collecting process ended on its own: {proc.stderr.read().decode()[-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    ids = [json.loads(raw)["trajectoryId"] for _, _, raw in jsonl_lines(out) if raw.endswith(b"\n")]
    assert len(ids) >= GATE - 8, (f"only {len(ids)} trajectories on disk while episode {GATE} played; at least "
                                  f"{GATE - 8} had finished (num_envs=8)")
    assert len(set(ids)) == len(ids), "duplicated trajectories on disk"

    collector = RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(out), env_config={"num_ticks": TICKS},
                                 num_envs=8, run_name="run")
    summary = collector.collect(EPISODES, seed=0, resume=True)
    assert summary.skipped_existing == len(ids), summary.to_dict()
    check_run(read_store_strict(out), [s.trajectory_id for s in collector.plan(EPISODES, 0)], TICKS)


def test_episode_tasks_and_live_envs_never_exceed_num_envs(tmp_path):
    import asyncio

    import gymnasium as gym

    seen = {"live": 0, "max_live": 0, "max_tasks": 0}

    class Counting(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            seen["live"] += 1
            seen["max_live"] = max(seen["max_live"], seen["live"])
            seen["max_tasks"] = max(seen["max_tasks"], len(asyncio.all_tasks()))

        def close(self):
            seen["live"] -= 1
            super().close()

    env_id = "CountingText-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=lambda **kw: Counting(gym.make("RLAIF-Text-v0", **kw)))
    num_envs = 3
    collector = RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(tmp_path / "run"), env_id=env_id,
                                 env_config={"num_ticks": 3}, num_envs=num_envs)
    summary = collector.collect(30, seed=0)
    assert summary.completed == 30, summary.to_dict()
    assert seen["max_live"] <= num_envs, f"{seen['max_live']} envs alive at once, num_envs={num_envs}"
    # the main task, the runner and at most num_envs episode workers
    assert seen["max_tasks"] <= num_envs + 2, f"{seen['max_tasks']} asyncio tasks alive, num_envs={num_envs}"
