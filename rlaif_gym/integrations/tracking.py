"""Collector metrics in TensorBoard or Weights & Biases, one point per finished trajectory.

    from rlaif_gym.integrations.tracking import TensorBoardLogger
    with TensorBoardLogger("runs/tb") as log:
        RolloutCollector(agent, sink=store, on_trajectory=log).collect(64)
    # tensorboard --logdir runs/tb

Both loggers are `on_trajectory` hooks of `RolloutCollector` (and `rlaif-gym rollout --tensorboard
DIR` / `--wandb-project NAME`). Each trajectory becomes one step (1, 2, ... in the order they finish)
with the scalars of `trajectory_metrics`: the return, PnL, ticks, status, LLM calls and latency, the
quality score, and every reward component summed over the episode. Nothing secret is logged: no
prompt, reply or key, only numbers.

TensorBoard needs the `[tracking]` extra (tensorboardX, which writes event files without TensorFlow
or torch); Weights & Biases needs `wandb` (`[wandb]` extra). `WANDB_MODE=offline` keeps a W&B run on
disk (sync it later with `wandb sync`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from ..errors import DependencyNotInstalled, install_hint
from ..trajectory import Trajectory

__all__ = ["TensorBoardLogger", "WandbLogger", "metric_loggers", "trajectory_metrics"]


def trajectory_metrics(traj: Trajectory) -> dict[str, float]:
    """The numbers logged for one trajectory (tag -> value); all finite or NaN, none from the text."""
    calls = [c for s in traj.steps for c in s.llm_calls]
    latencies = [c.latency_ms for c in calls if c.latency_ms is not None]
    out = {
        "episode/return": float(traj.total_reward),
        "episode/pnl_usd": float(traj.final_pnl),
        "episode/ticks": float(len(traj.steps)),
        "episode/failed": float(traj.final_status == "failed"),
        "episode/bankrupt": float(traj.final_status == "bankrupt"),
        "episode/trades": float(traj.trades_executed),
        "episode/quality_score": float(traj.quality.get("quality_score", math.nan)) if traj.quality else math.nan,
        "llm/calls": float(len(calls) + len(traj.failed_calls)),
        "llm/failed_calls": float(len(traj.failed_calls)),
        "llm/latency_ms_mean": sum(latencies) / len(latencies) if latencies else math.nan,
    }
    components: dict[str, float] = {}
    for step in traj.steps:
        for name, value in step.reward_components.items():
            components[name] = components.get(name, 0.0) + float(value)
    out.update({f"reward/{name}": value for name, value in sorted(components.items())})
    return out


class _Logger:
    """Counts trajectories and hands each one's metrics to `_write`; a context manager that closes itself."""

    def __init__(self) -> None:
        self.step = 0

    def __call__(self, traj: Trajectory) -> None:
        self.step += 1
        self._write(trajectory_metrics(traj), self.step)

    def _write(self, metrics: Mapping[str, float], step: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Flush and close the output."""

    def __enter__(self) -> _Logger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TensorBoardLogger(_Logger):
    """Write `trajectory_metrics` of each trajectory as TensorBoard scalars under `logdir`.

    Args:
        logdir: the event-file directory (`tensorboard --logdir` it).
        flush_secs: how often pending points reach the disk, seconds.
    """

    def __init__(self, logdir: str | os.PathLike[str], *, flush_secs: int = 10) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as exc:
            raise DependencyNotInstalled("TensorBoard logging needs tensorboardX: " + install_hint("tracking")) \
                from exc
        super().__init__()
        self.logdir = os.fspath(logdir)
        self._writer = SummaryWriter(logdir=self.logdir, flush_secs=flush_secs)

    def _write(self, metrics: Mapping[str, float], step: int) -> None:
        for tag, value in metrics.items():
            if not math.isnan(value):
                self._writer.add_scalar(tag, value, step)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


class WandbLogger(_Logger):
    """Log `trajectory_metrics` of each trajectory to a Weights & Biases run.

    Args:
        project: the W&B project.
        name: the run's name (default: W&B's).
        config: what to record as the run's config (e.g. the collector's `manifest`); never a key.
        **init: more `wandb.init` arguments (`mode="offline"`, `dir=...`, `entity=...`).
    """

    def __init__(self, project: str, *, name: str | None = None, config: Mapping[str, Any] | None = None,
                 **init: Any) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise DependencyNotInstalled("W&B logging needs wandb: " + install_hint("wandb")) from exc
        super().__init__()
        self.run = wandb.init(project=project, name=name, config=dict(config or {}), **init)

    def _write(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log({**{k: v for k, v in metrics.items() if not math.isnan(v)}, "trajectories": step}, step=step)

    def close(self) -> None:
        self.run.finish()


def metric_loggers(tensorboard: str | os.PathLike[str] | None = None, wandb_project: str | None = None, *,
                   run_name: str = "run", config: Mapping[str, Any] | None = None) -> list[_Logger]:
    """The loggers `rlaif-gym rollout --tensorboard DIR --wandb-project NAME` attaches: none, one or both.

    Built before collecting, so that a missing extra (`[tracking]`, `[wandb]`) fails with
    DependencyNotInstalled before any episode runs. `run_name` names the W&B run and `config` (the run
    manifest) is stored with it. Hand them to `rollout.launch.collect_run`, which closes them.
    """
    loggers: list[_Logger] = []
    if tensorboard is not None:
        loggers.append(TensorBoardLogger(tensorboard))
    if wandb_project is not None:
        loggers.append(WandbLogger(wandb_project, name=run_name, config=config))
    return loggers
