"""rlaif_gym.rollout.launch: what `rlaif-gym rollout` does, called from Python (docs/cli.md)."""

from __future__ import annotations

import pytest

from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.rollout.launch import (
    check_policy_options,
    check_run_options,
    collect_run,
    make_backend,
    make_policy,
    open_sink,
)
from rlaif_gym.storage import JsonlStore


@pytest.mark.parametrize(("options", "says"), [
    ({"episodes": 4, "resume": True, "overwrite": True}, "--overwrite and --resume"),
    ({"episodes": 5, "group_size": 2, "fork_tick": 3}, "multiple of --group-size (2)"),
    ({"episodes": 4, "ray_address": "auto"}, "--ray-address needs --ray-workers"),
])
def test_check_run_options_names_the_fix(options, says):
    with pytest.raises(ConfigError, match=r".*" + says.replace("(", r"\(").replace(")", r"\)")):
        check_run_options(**options)


def test_check_policy_options(monkeypatch):
    for var in ("OPENAI_BASE_URL", "RLAIF_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(var, raising=False)
    check_policy_options("scripted")
    with pytest.raises(ConfigError, match="--constrain applies to a model server"):
        check_policy_options("scripted", constrain="gbnf")
    with pytest.raises(ConfigError, match="needs --base-url"):
        check_policy_options("openai", model="m")
    with pytest.raises(ConfigError, match="needs --model"):
        check_policy_options("openai", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="unknown agent"):
        check_policy_options("gpt")


def test_open_sink_and_backend(tmp_path):
    store, sink = open_sink(tmp_path / "run")
    assert isinstance(store, JsonlStore) and sink is store
    assert make_backend(None) is None


class _Log:
    def __init__(self):
        self.seen, self.closed = 0, False

    def __call__(self, traj):
        self.seen += 1

    def close(self):
        self.closed = True


def test_collect_run_logs_closes_and_writes_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    out = tmp_path / "run"
    store, sink = open_sink(out)
    collector = RolloutCollector(make_policy("scripted"), sink=sink, env_config={"num_ticks": 4}, num_envs=2,
                                 run_name="run")
    log = _Log()
    summary = collect_run(collector, store, 2, seed=0, parquet=True, loggers=[log])
    assert summary.completed == 2 and log.seen == 2 and log.closed
    assert (out / "trajectories.parquet").is_file()
    # overwrite: the previous run is deleted first, so the same seeds are played again, not skipped
    again = collect_run(collector, store, 2, seed=0, overwrite=True)
    assert again.skipped_existing == 0 and again.completed == 2


def test_collect_run_closes_loggers_when_collection_fails(tmp_path):
    store, sink = open_sink(tmp_path / "run")
    collector = RolloutCollector(make_policy("scripted"), sink=sink, env_config={"num_ticks": 4}, run_name="run")
    log = _Log()
    with pytest.raises(ValueError):
        collect_run(collector, store, 2, seed=0, fork_tick=-1, group_size=1, loggers=[log])
    assert log.closed


def test_collect_run_keeps_the_callers_own_hook(tmp_path):
    """The loggers run after the collector's own `on_trajectory`, which is back in place afterwards."""
    store, sink = open_sink(tmp_path / "run")
    seen = []
    collector = RolloutCollector(make_policy("scripted"), sink=sink, env_config={"num_ticks": 3}, num_envs=2,
                                 run_name="run", on_trajectory=lambda traj: seen.append(traj.trajectory_id))
    hook = collector.on_trajectory
    log = _Log()
    collect_run(collector, store, 2, seed=0, loggers=[log])
    assert len(seen) == 2 and log.seen == 2
    assert collector.on_trajectory is hook
