"""Everything a report shows about one run, computed once: metrics, replayed ledgers and baselines.

No plotting or HTML dependency here: the terminal table needs only this module.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError, RLAIFError
from ..metrics import EpisodeLedger, RunMetrics, equity_curve, run_metrics
from ..storage.checks import load_checked
from ..trajectory import Trajectory
from .baselines import BaselineCurves, baseline_curves
from .replay import ReplayError, replay_many

__all__ = ["RunReport", "analyze_run", "end_tick", "equity_matrix", "first_tick", "load_run"]


@dataclass
class RunReport:
    """One run, analysed.

    Attributes:
        name: the run's label in tables and legends.
        trajectories: the run's trajectories, in the order read.
        metrics: `rlaif_gym.metrics.RunMetrics` (with per-episode details).
        ledgers: trajectory id -> replayed ground truth (trajectories that could not be replayed are absent).
        notes: trajectory id -> why it has no ledger.
        baselines: baseline and buy-and-hold curves on the run's seeds, or None.
        baseline_note: why there are no baselines (empty when there are).
        directory: where the run was read from, if anywhere.
    """

    name: str
    trajectories: list[Trajectory]
    metrics: RunMetrics
    ledgers: dict[str, EpisodeLedger] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    baselines: BaselineCurves | None = None
    baseline_note: str = ""
    directory: Path | None = None

    @property
    def max_ticks(self) -> int:
        """The last world tick any episode reached (its length, for episodes that start at tick 0)."""
        return max((end_tick(t) for t in self.trajectories), default=0)


def load_run(directory: str | os.PathLike[str]) -> list[Trajectory]:
    """Every trajectory of a run directory written by `rlaif-gym rollout` (a `JsonlStore`).

    Raises:
        ConfigError: the directory does not exist or holds no trajectories.
        RecordError: a record holds a NaN or infinite number, an out-of-range seed, or a duplicate id.
    """
    path = Path(directory)
    if not path.is_dir() or not any(path.glob("*.jsonl")):
        raise ConfigError(f"{path} holds no run (no *.jsonl files); pass the --out directory of a rollout")
    trajs = load_checked(path)
    if not trajs:
        raise ConfigError(f"no trajectories in {path}")
    return trajs


def analyze_run(trajectories: Sequence[Trajectory], name: str = "run", *, directory: str | os.PathLike[str] | None
                = None, replay_ledgers: bool = True, baselines: bool = True) -> RunReport:
    """Replay each trajectory for its ledger, run the baselines on the run's seeds, and compute the metrics.

    A trajectory that cannot be replayed keeps its record-based metrics; the reason goes to
    `notes`. Baselines use the config most trajectories share and the seeds of those trajectories.
    When `directory` holds the LLM judge's scores (`rlaif-gym judge` writes RUN_DIR/judge/
    scores.<mode>.jsonl), they become the episodes' judge scores.
    """
    trajs = _with_judge_files(list(trajectories), directory)
    ledgers: dict[str, EpisodeLedger] = {}
    notes: dict[str, str] = {}
    if replay_ledgers:
        for tid, result in replay_many(trajs).items():
            if isinstance(result, ReplayError):
                notes[tid] = f"no replay: {result}"
            else:
                ledgers[tid] = result
    else:
        notes = {t.trajectory_id: "replay disabled" for t in trajs}
    report = RunReport(name, trajs, run_metrics(trajs, ledgers, notes, name=name), ledgers, notes,
                       directory=Path(directory) if directory is not None else None)
    if baselines:
        report.baselines, report.baseline_note = _baselines(trajs)
    else:
        report.baseline_note = "baselines disabled"
    return report


def _with_judge_files(trajs: list[Trajectory], directory: str | os.PathLike[str] | None) -> list[Trajectory]:
    """Copies of the trajectories with the scores `rlaif-gym judge` wrote beside the run (RUN_DIR/judge/
    scores.<mode>.jsonl) under `judge_scores["llm_<mode>"]`, where the trajectory does not hold that entry yet."""
    files = sorted((Path(directory) / "judge").glob("scores.*.jsonl")) if directory is not None else []
    if not files:
        return trajs
    from ..llm_judge import read_judge_scores

    extra: dict[str, dict[str, dict]] = {}
    for path in files:
        mode = path.name[len("scores."):-len(".jsonl")]
        for tid, score in read_judge_scores(path).items():
            extra.setdefault(tid, {})[f"llm_{mode}"] = {"score": score}
    out = []
    for t in trajs:
        add = {k: v for k, v in extra.get(t.trajectory_id, {}).items() if k not in t.judge_scores}
        out.append(t.model_copy(update={"judge_scores": {**t.judge_scores, **add}}) if add else t)
    return out


def _baselines(trajs: list[Trajectory]) -> tuple[BaselineCurves | None, str]:
    usable = [t for t in trajs if t.seed is not None and t.config]
    if not usable:
        return None, "no trajectory records a seed and config"
    counts = Counter(json.dumps(t.config, sort_keys=True) for t in usable)
    config_key, _ = counts.most_common(1)[0]
    same = [t for t in usable if json.dumps(t.config, sort_keys=True) == config_key]
    seeds = sorted({int(t.seed) for t in same})
    ticks = max(end_tick(t) for t in same)
    try:
        curves = baseline_curves(json.loads(config_key), seeds, ticks)
    except (RLAIFError, ValueError) as exc:
        return None, f"baselines could not run on the recorded config: {exc}"
    note = "" if len(same) == len(trajs) else f"baselines use the config of {len(same)} of {len(trajs)} trajectories"
    return curves, note


def first_tick(traj: Trajectory) -> int:
    """The world tick of the trajectory's first step (0, or the fork tick of a forked GRPO branch)."""
    if not traj.steps:
        return 0
    tick = (traj.steps[0].environment_state.model_extra or {}).get("tick")
    return int(tick) if isinstance(tick, (int, float)) else 0


def end_tick(traj: Trajectory) -> int:
    """The world tick after the trajectory's last step."""
    return first_tick(traj) + len(traj.steps)


def equity_matrix(trajs: Sequence[Trajectory], ticks: int) -> np.ndarray:
    """Equity (USD) of each trajectory at world ticks 0..ticks, shape (len(trajs), ticks + 1).

    NaN before a trajectory's first tick (a forked branch starts mid-episode); an episode that ended
    early (bankrupt, failed or cut by max_ticks) keeps its last equity.
    """
    out = np.full((len(trajs), ticks + 1), math.nan)
    for i, t in enumerate(trajs):
        e = equity_curve(t)
        start = min(first_tick(t), ticks)
        n = min(len(e), ticks + 1 - start)
        out[i, start : start + n] = e[:n]
        out[i, start + n :] = e[n - 1] if n else math.nan
    return out
