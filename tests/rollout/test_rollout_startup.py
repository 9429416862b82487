"""The start-up is not the collection: the kernels load (or compile, once per machine) before the clock starts.

A machine's first run compiles the world kernels for minutes; before this, that time sat inside the
collection's wall time, so `ticks / s` read 4.3 and the first progress line's ETA read four hours for a
run of seconds. Now `RolloutCollector` plays one warm-up tick (`rlaif_gym.envs.warm_up`) before the clock
of `wall_s`, `ticks_per_s` and the progress display starts, and reports it as `startup_s`.
"""

from __future__ import annotations

import time

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.cli import main
from rlaif_gym.envs import warm_up
from rlaif_gym.rollout import RolloutCollector, collector

SLOW_START_S = 0.5  # a stand-in for the compile: the real warm-up, then this much more


def _slow_warm_up(calls):
    def slow(config):
        calls.append(config)
        started = time.perf_counter()
        warm_up(config)
        time.sleep(SLOW_START_S)
        return time.perf_counter() - started

    return slow


def test_the_start_up_is_reported_apart_and_left_out_of_ticks_per_second(monkeypatch):
    calls = []
    monkeypatch.setattr(collector, "warm_up", _slow_warm_up(calls))
    run = RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 4}, num_envs=2)
    started = time.perf_counter()
    summary = run.collect(2, seed=0)
    total = time.perf_counter() - started
    assert summary.completed == 2 and summary.steps == 8
    assert calls == [run.config], "the warm-up plays the collector's own config, once"
    assert summary.startup_s >= SLOW_START_S
    # wall_s starts after the warm-up: the two add up to no more than the whole call.
    assert summary.wall_s + summary.startup_s <= total
    assert summary.ticks_per_s == summary.steps / summary.wall_s
    assert summary.to_dict()["startup_s"] == summary.startup_s


def test_a_resumed_run_with_nothing_left_does_not_warm_up(monkeypatch, tmp_path):
    from rlaif_gym.storage import JsonlStore

    calls = []
    monkeypatch.setattr(collector, "warm_up", _slow_warm_up(calls))
    RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(tmp_path), env_config={"num_ticks": 3}).collect(1)
    summary = RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(tmp_path), env_config={"num_ticks": 3}).collect(
        1, resume=True)
    assert summary.skipped_existing == 1 and len(calls) == 1 and summary.startup_s == 0.0


def test_the_rollout_command_prints_the_start_up_beside_the_wall_time(tmp_path, capsys):
    code = main(["rollout", "--agent", "scripted", "--episodes", "1", "--out", str(tmp_path / "run"),
                 "--no-progress", "--set", "num_ticks=3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "start-up before the first tick (s)" in out and "wall time (s)" in out
