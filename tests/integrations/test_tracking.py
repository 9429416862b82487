"""Collector metrics in TensorBoard and Weights & Biases (issue 16, item 10), through real writers and files.

TensorBoard event files are read back with TensorBoard's own EventAccumulator; the W&B run is offline
(`mode="offline"`), and its summary file on disk is read back. A logger that raises never fails an episode.
"""

from __future__ import annotations

import json
import math
import time

import pytest

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.cli import main
from rlaif_gym.integrations.tracking import TensorBoardLogger, WandbLogger, trajectory_metrics
from rlaif_gym.rollout import RolloutCollector

CONFIG = {"num_ticks": 6}


def _scalars(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_logger_writes_one_point_per_trajectory(tmp_path):
    with TensorBoardLogger(tmp_path / "tb") as log:
        collector = RolloutCollector(ScriptedLLMAgent(), env_config=CONFIG, num_envs=1, on_trajectory=log)
        summary = collector.collect(3, seed=4)
    assert summary.completed == 3 and not summary.errors
    scalars = _scalars(tmp_path / "tb")
    expected = [trajectory_metrics(t) for t in collector.trajectories]  # num_envs=1: in finishing order
    for tag in ("episode/return", "episode/pnl_usd", "episode/ticks", "llm/calls", "reward/pnl"):
        assert [s for s, _ in scalars[tag]] == [1, 2, 3], tag
        for (_, got), want in zip(scalars[tag], expected, strict=True):
            assert got == pytest.approx(want[tag], rel=1e-6, abs=1e-6), tag
    assert [v for _, v in scalars["episode/ticks"]] == [6.0, 6.0, 6.0]


def test_trajectory_metrics_are_numbers_only():
    collector = RolloutCollector(ScriptedLLMAgent(), env_config=CONFIG, num_envs=1)
    collector.collect(1, seed=0)
    metrics = trajectory_metrics(collector.trajectories[0])
    assert all(isinstance(v, float) for v in metrics.values())
    assert metrics["episode/return"] == pytest.approx(collector.trajectories[0].total_reward)
    assert not math.isnan(metrics["llm/latency_ms_mean"])


def _wandb_history(run_file):
    """The history rows of an offline W&B run file (a LevelDB-style log of protobuf `Record`s)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, pending, rows = run_file.read_bytes(), 7, 32768, b"", []  # 7: the ':W&B' file header
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                rows.append({"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item})
    return rows


def test_wandb_logger_offline_run_holds_the_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-logged-123")
    log = WandbLogger("rlaif-gym-test", name="offline", config={"episodes": 2}, mode="offline", dir=str(tmp_path))
    try:
        collector = RolloutCollector(ScriptedLLMAgent(), env_config=CONFIG, num_envs=1, on_trajectory=log)
        summary = collector.collect(2, seed=1)
    finally:
        log.close()
    assert summary.completed == 2 and not summary.errors
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((tmp_path / "wandb").iterdir())
    (run_file,) = runs[0].glob("run-*.wandb")
    deadline = time.monotonic() + 60  # W&B's service process writes the file; on a loaded machine it may lag finish()
    while len(history := _wandb_history(run_file)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [row["trajectories"] for row in history] == [1, 2]
    for row, traj in zip(history, collector.trajectories, strict=True):  # num_envs=1: in finishing order
        want = trajectory_metrics(traj)
        for tag in ("episode/return", "episode/pnl_usd", "episode/ticks", "reward/pnl"):
            assert row[tag] == pytest.approx(want[tag], rel=1e-9, abs=1e-9), tag
    for path in runs[0].rglob("*"):
        if path.is_file():
            assert b"sk-never-logged-123" not in path.read_bytes(), path


def test_a_failing_logger_is_reported_and_fails_no_episode(tmp_path):
    def broken(_traj):
        raise RuntimeError("the tracker is down")

    collector = RolloutCollector(ScriptedLLMAgent(), env_config=CONFIG, num_envs=2, on_trajectory=broken)
    summary = collector.collect(2, seed=0)
    assert summary.completed == 2 and summary.failed == 0
    assert len(collector.trajectories) == 2
    assert any("on_trajectory hook failed: RuntimeError: the tracker is down" in e for e in summary.errors)


def test_rollout_tensorboard_option(tmp_path, capsys):
    out, tb = tmp_path / "run", tmp_path / "tb"
    code = main(["rollout", "--episodes", "2", "--num-envs", "2", "--out", str(out), "--no-progress",
                 "--set", "num_ticks=4", "--tensorboard", str(tb)])
    assert code == 0, capsys.readouterr().err[-2000:]
    scalars = _scalars(tb)
    assert [s for s, _ in scalars["episode/return"]] == [1, 2]
