"""Ray-distributed collection: 2 local actors give the same trajectories as the local backend."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.rollout.ray_backend import RayBackend
from rlaif_gym.storage import JsonlStore

TICKS = 10


def _content(traj) -> dict:
    """A trajectory without its wall-clock fields (episode duration, call latencies)."""
    data = traj.model_dump(mode="json")
    data.pop("duration_ms")
    for step in data["steps"]:
        for call in step["llm_calls"]:
            call.pop("latency_ms")
    return data


def _collector(**kw) -> RolloutCollector:
    return RolloutCollector(ScriptedLLMAgent(temperature=0.8), env_config={"num_ticks": TICKS}, num_envs=3,
                            group_size=2, **kw)


def test_two_ray_workers_give_the_local_backends_trajectories(local_ray, tmp_path):
    local = _collector()
    local.collect(8, seed=11)
    store = JsonlStore(tmp_path / "ray")
    backend = RayBackend(num_workers=2)
    summary = _collector(sink=store, backend=backend).collect(8, seed=11)
    assert summary.planned == summary.completed == 8 and summary.failed == 0, summary.to_dict()
    assert summary.steps == 8 * TICKS
    remote = {t.trajectory_id: t for t in store.read()}
    expected = {t.trajectory_id: t for t in local.trajectories}
    assert sorted(remote) == sorted(expected)
    for tid, traj in expected.items():
        assert _content(remote[tid]) == _content(traj), f"{tid} differs between the Ray and local backends"
    # The two members of a group really differ (otherwise equality above would prove little).
    assert _content(expected["run-s11-m0"])["steps"] != _content(expected["run-s11-m1"])["steps"]
    assert not backend._started_ray  # it used the instance the process was connected to


def test_fork_groups_and_resume_run_on_ray_too(local_ray, tmp_path):
    local = _collector()
    local.collect_forks(2, seed=4, fork_tick=3)
    store = JsonlStore(tmp_path / "forks")
    collector = _collector(sink=store, backend=RayBackend(num_workers=2))
    assert collector.collect_forks(2, seed=4, fork_tick=3).completed == 4
    remote = {t.trajectory_id: _content(t) for t in store.read()}
    assert remote == {t.trajectory_id: _content(t) for t in local.trajectories}
    again = _collector(sink=JsonlStore(tmp_path / "forks"), backend=RayBackend(num_workers=2))
    assert again.collect_forks(2, seed=4, fork_tick=3, resume=True).skipped_existing == 4


def test_backend_is_validated():
    with pytest.raises(ConfigError, match="backend"):
        _collector(backend="spark")
    with pytest.raises(ConfigError, match="num_workers"):
        RayBackend(num_workers=0)


def test_rollout_command_with_ray_workers_writes_the_local_runs_trajectories(local_ray, tmp_path, capsys):
    from rlaif_gym.cli import main

    common = ["rollout", "--episodes", "4", "--num-envs", "2", "--seed", "5", "--no-progress", "--set",
              f"num_ticks={TICKS}"]
    assert main([*common, "--out", str(tmp_path / "run")]) == 0
    local = {t.trajectory_id: _content(t) for t in JsonlStore(tmp_path / "run").read()}
    (tmp_path / "run").rename(tmp_path / "local")
    assert main([*common, "--out", str(tmp_path / "run"), "--ray-workers", "2"]) == 0, capsys.readouterr().err
    remote = {t.trajectory_id: _content(t) for t in JsonlStore(tmp_path / "run").read()}
    assert len(local) == 4 and remote == local
    assert main([*common, "--out", str(tmp_path / "x"), "--ray-address", "auto"]) == 2
    assert "--ray-address needs --ray-workers" in capsys.readouterr().err
