"""A collecting process killed with SIGKILL (several times) resumes without losing or duplicating anything."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rollout_checks import check_run, jsonl_lines, read_store_strict

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore

EPISODES, SEED, TICKS = 12, 3, 20
REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore
out, resume = sys.argv[1], sys.argv[2] == "resume"
collector = RolloutCollector(ScriptedLLMAgent(latency_s=0.005), sink=JsonlStore(out), env_config={"num_ticks": 20},
                             num_envs=2)
summary = collector.collect(episodes=12, seed=3, resume=resume)
print(json.dumps(summary.to_dict()), flush=True)
"""


def make_collector(out: Path, seed_ticks: int = TICKS) -> RolloutCollector:
    return RolloutCollector(ScriptedLLMAgent(latency_s=0.005), sink=JsonlStore(out),
                            env_config={"num_ticks": seed_ticks}, num_envs=2)


def whole_ids(out: Path) -> list[str]:
    """Ids of the whole (newline-terminated, parseable) lines; a torn tail is not counted."""
    ids = []
    for name, number, raw in jsonl_lines(out):
        if raw.endswith(b"\n"):
            try:
                ids.append(json.loads(raw)["trajectoryId"])
            except ValueError as exc:
                raise AssertionError(f"{name}:{number}: a whole line that does not parse: {exc}") from exc
    return ids


def run_and_kill(out: Path, resume: bool, at_least: int, extra_s: float, timeout_s: float = 60.0) -> bool:
    """Start the collecting process, wait for `at_least` whole lines (+ `extra_s`), SIGKILL it.

    Returns whether the process was still running when killed.
    """
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), "resume" if resume else "fresh"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            if len(whole_ids(out)) >= at_least:
                break
            time.sleep(0.005)
        else:
            if proc.poll() is None:
                pytest.fail(f"the collecting process wrote fewer than {at_least} lines in {timeout_s}s")
        time.sleep(extra_s)
        alive = proc.poll() is None
        if alive:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if not alive:
            _, err = proc.communicate()
            assert proc.returncode == 0, f"the collecting process failed on its own: {err.decode()[-2000:]}"
        else:
            assert proc.returncode == -signal.SIGKILL, f"the process ended with {proc.returncode}, not SIGKILL"
        return alive
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "run"
    rng = random.Random(1234)
    planned = [s.trajectory_id for s in make_collector(tmp_path / "plan-only").plan(EPISODES, SEED)]
    kills = 0
    # Kill a fresh run, then the resumed run, each at a random-ish moment after a few more whole lines.
    for round_, at_least in enumerate((3, 6, 9)):
        alive = run_and_kill(out, resume=round_ > 0, at_least=at_least, extra_s=rng.uniform(0.0, 0.08))
        kills += alive
        ids = whole_ids(out)
        print(f"kill round {round_}: killed={alive}, {len(ids)} whole lines survive")
        dups = sorted({i for i in ids if ids.count(i) > 1})
        assert not dups, f"kill round {round_}: duplicated trajectories on disk: {dups}"
        assert set(ids) <= set(planned), f"kill round {round_}: unplanned ids {sorted(set(ids) - set(planned))}"
        if not alive:
            break
    assert kills >= 1, "the collecting process finished before it could be killed even once"

    survivors = set(whole_ids(out))
    if survivors == set(planned):  # the last process finished: nothing left to resume
        pytest.skip("every process finished before its kill; nothing to resume")

    # Simulate the worst kill (mid-write): a torn prefix of a line at the end of the file.
    data_file = JsonlStore(out).path
    torn = data_file.read_bytes().splitlines(keepends=True)[0][:157]
    with data_file.open("ab") as handle:
        handle.write(torn)

    collector = make_collector(out)
    summary = collector.collect(EPISODES, SEED, resume=True)
    assert summary.skipped_existing == len(survivors), \
        f"resume skipped {summary.skipped_existing}, but {len(survivors)} trajectories survived the kills"
    assert summary.completed + summary.failed == EPISODES - len(survivors), summary.to_dict()
    assert summary.planned == summary.completed + summary.failed + summary.skipped_existing == EPISODES

    trajs = read_store_strict(out)  # every line whole and valid: the torn tail was cut off
    check_run(trajs, planned, TICKS)
    lines = jsonl_lines(out)
    assert len(lines) == EPISODES, f"{len(lines)} lines on disk for {EPISODES} trajectories"
    manifest = JsonlStore(out).read_manifest()
    assert manifest is not None and manifest["seed"] == SEED and manifest["episodes"] == EPISODES, manifest

    # A second resume has nothing left to do.
    again = make_collector(out).collect(EPISODES, SEED, resume=True)
    assert (again.skipped_existing, again.completed, again.failed) == (EPISODES, 0, 0), again.to_dict()
    assert len(jsonl_lines(out)) == EPISODES


def test_resume_refuses_another_run_and_fresh_refuses_a_used_directory(tmp_path):
    out = tmp_path / "run"
    first = RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(out), env_config={"num_ticks": 3}, num_envs=2)
    first.collect(2, SEED)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def same_settings(**changes):
        kwargs = {"env_config": {"num_ticks": 3}, "num_envs": 2, **changes}
        return RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(out), **kwargs)

    with pytest.raises(ConfigError, match="seed"):
        same_settings().collect(2, SEED + 1, resume=True)
    with pytest.raises(ConfigError, match="config"):
        same_settings(env_config={"num_ticks": 4}).collect(2, SEED, resume=True)
    with pytest.raises(ConfigError, match="group_size"):
        same_settings(group_size=2).collect(2, SEED, resume=True)
    with pytest.raises(ConfigError, match="max_ticks"):
        same_settings(max_ticks=2).collect(2, SEED, resume=True)
    with pytest.raises(ConfigError, match="resume"):
        same_settings().collect(2, SEED)  # a fresh run into a directory that holds one
    with pytest.raises(ConfigError):
        same_settings().collect(2, SEED + 1)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before, "a refused collection changed the run directory"

    # The same settings resume fine (nothing to do).
    summary = same_settings().collect(2, SEED, resume=True)
    assert (summary.skipped_existing, summary.completed) == (2, 0), summary.to_dict()
