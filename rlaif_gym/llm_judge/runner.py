"""Judging a stored run: the post-pass behind ``rlaif-gym judge`` and ``rlaif-gym rollout --judge llm``.

The world is never re-run. The trajectories are read from the run directory, judged with
`LLMJudge`, and the results are written next to the run, in ``RUN_DIR/judge/`` by default:

* ``scores.<mode>.jsonl``: one `TrajectoryJudgement` per line, in the run's order. It holds no
  wall-clock value, so a replay writes the same bytes.
* ``verdicts.<mode>.jsonl``: every call attempt (outcome, source, error, tokens, latency).
* ``health.<mode>.json``: the health metrics (`health.judge_health`).
* ``grpo.<mode>.jsonl``: the GRPO groups scored by the judge (`storage.to_grpo_groups` with
  ``judge_scores``). Zero-variance groups are dropped, and the health report counts them.

The tape defaults to ``RUN_DIR/judge/judge.sqlite``. The stored trajectories are never modified;
`apply_judge_scores` gives copies with the judge's result under ``judge_scores["llm_<mode>"]``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..llm import ChatClient
from ..rewards.archetypes import load_rubrics
from ..storage import JsonlStore, write_export
from ..storage._files import atomic_write_bytes
from ..storage.checks import load_checked
from ..trajectory import Trajectory
from .health import judge_health
from .judge import JudgeBatch, JudgeConfig, LLMJudge
from .tape import JudgeTape, TapeMode

__all__ = ["JudgeRunResult", "apply_judge_scores", "judge_run", "read_judge_scores", "with_mode"]


@dataclass
class JudgeRunResult:
    """What `judge_run` did: the batch, its health, and the files written."""

    batch: JudgeBatch
    health: dict[str, Any]
    files: dict[str, Path]
    trajectories: list[Trajectory]


def _jsonl(records: Iterable[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records).encode("utf-8")


def judge_run(run_dir: str | os.PathLike[str], *, client: ChatClient | None = None, model: str | None = None,
              config: JudgeConfig | None = None, tape: str | os.PathLike[str] | None = None,
              tape_mode: TapeMode | str = TapeMode.RECORD, rubrics_path: str | os.PathLike[str] | None = None,
              out_dir: str | os.PathLike[str] | None = None) -> JudgeRunResult:
    """Judge every trajectory of a run directory and write the results (see the module docstring).

    Args:
        run_dir: a directory written by the rollout collector (``trajectories-*.jsonl``).
        client: the judge's chat client (None only for replay).
        model: the judge model name (default: the client's; required for a replay without a client).
        config: the judge configuration (mode, concurrency, deadlines, budget, ...).
        tape: the tape file (default ``<out_dir>/judge.sqlite``).
        tape_mode: "record", "replay" or "rescore".
        rubrics_path: a rubric file to judge with instead of the packaged one (for example after an edit).
        out_dir: where to write (default ``<run_dir>/judge``).

    Raises:
        ConfigError: the directory holds no trajectories.
        MissingTapeError, JudgeBudgetExceeded: see `LLMJudge.score_async`.
    """
    run = Path(run_dir)
    store = JsonlStore(run)
    if not store.files():
        raise ConfigError(f"{run} holds no run (no trajectories-*.jsonl); pass the --out directory of a rollout")
    trajectories = load_checked(run)  # RecordError: NaN / infinite numbers, bad seeds, duplicate ids
    if not trajectories:
        raise ConfigError(f"no trajectories in {run}")
    config = config or JudgeConfig()
    out = Path(out_dir) if out_dir is not None else run / "judge"
    out.mkdir(parents=True, exist_ok=True)
    tape_path = Path(tape) if tape is not None else out / "judge.sqlite"
    with JudgeTape(tape_path) as judge_tape:
        judge = LLMJudge(client, config=config, tape=judge_tape, tape_mode=tape_mode,
                         rubrics=load_rubrics(rubrics_path) if rubrics_path is not None else None, model=model)
        batch = judge.score(trajectories)
    health = judge_health(batch, trajectories)
    health["tape"] = str(tape_path)
    mode = config.mode
    files = {
        "scores": out / f"scores.{mode}.jsonl",
        "verdicts": out / f"verdicts.{mode}.jsonl",
        "health": out / f"health.{mode}.json",
        "grpo": out / f"grpo.{mode}.jsonl",
    }
    atomic_write_bytes(files["scores"], _jsonl(j.to_dict() for j in batch.judgements.values()))
    atomic_write_bytes(files["verdicts"], _jsonl(v.to_dict() for v in batch.verdicts))
    health["grpo_groups"] = write_export("grpo", trajectories, files["grpo"], judge_scores=batch.scores(),
                                         drop_degenerate=True)
    atomic_write_bytes(files["health"], json.dumps(health, indent=2, allow_nan=False).encode("utf-8"))
    return JudgeRunResult(batch, health, files, trajectories)


def read_judge_scores(path: str | os.PathLike[str]) -> dict[str, float | None]:
    """trajectory id -> score from a ``scores.<mode>.jsonl`` file (None: missing)."""
    out: dict[str, float | None] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                out[record["trajectory_id"]] = record["score"]
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                raise ConfigError(f"{path}:{number} is not a judge score record ({exc}); pass a scores.<mode>.jsonl "
                                  "file written by rlaif-gym judge") from None
    return out


def apply_judge_scores(trajectories: Iterable[Trajectory], batch: JudgeBatch | Mapping[str, Any]) -> list[Trajectory]:
    """Copies of the trajectories with the judge's result in ``judge_scores["llm_<mode>"]``.

    Only ``judge_scores`` changes; steps, rewards and every other field are copied as they are.

    Args:
        trajectories: the judged trajectories.
        batch: a `JudgeBatch`, or a mapping of trajectory id -> `TrajectoryJudgement.to_dict()`.
    """
    if isinstance(batch, JudgeBatch):
        records = {tid: j.to_dict() for tid, j in batch.judgements.items()}
    else:
        records = dict(batch)
    out = []
    for t in trajectories:
        record = records.get(t.trajectory_id)
        if record is None:
            out.append(t.model_copy(deep=True))
            continue
        judge = {k: record[k] for k in ("score", "relative", "missing", "samples", "model", "template", "rubric_sha",
                                        "slice_sha", "archetype")}
        out.append(t.model_copy(deep=True, update={"judge_scores": {**t.judge_scores, f"llm_{record['mode']}": judge}}))
    return out


def with_mode(config: JudgeConfig | None, mode: str) -> JudgeConfig:
    """`config` with another scoring mode (a fresh default config when None)."""
    return replace(config or JudgeConfig(), mode=mode)
