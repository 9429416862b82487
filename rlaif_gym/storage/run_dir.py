"""`clear_run`: delete what a rollout run wrote in a directory, and nothing else (`rollout --overwrite`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..errors import ConfigError
from .lock import LOCK_NAME

__all__ = ["clear_run"]

_MANIFEST_KEYS = ("run_name", "episodes", "seed", "group_size", "env_id", "config", "agent")
_RUN_FILES = ("run.json", "retried-failures.jsonl", "trajectories.parquet")
_RUN_GLOBS = ("trajectories-*.jsonl", ".run.json.*.tmp", ".trajectories-*.jsonl.*.tmp")


def clear_run(directory: str | Path) -> list[Path]:
    """Delete the run files of `directory` after checking that its run.json is an rlaif-gym manifest.

    Only `run.json`, `trajectories-*.jsonl`, `retried-failures.jsonl`, `trajectories.parquet` and
    their temp files go; anything else (sources, `.git`, other files) stays. Returns what was deleted.

    Raises:
        ConfigError: the directory is not empty and has no run.json, its run.json is not ours, or its
            judge/ is a symbolic link (refused before anything is deleted).
    """
    out = Path(directory)
    if not out.exists():
        return []
    manifest = out / "run.json"
    if not manifest.exists():
        if any(p.name != LOCK_NAME for p in out.iterdir()):  # the lock file is the run folder's own
            raise ConfigError(f"{out} is not an rlaif-gym run directory (no run.json); refusing to delete anything "
                              "in it. Choose an empty or new --out directory")
        return []
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (ValueError, OSError, RecursionError) as exc:
        raise ConfigError(f"{manifest} is not an rlaif-gym run manifest (not JSON: {exc}); refusing to delete "
                          "anything. Choose another --out directory") from exc
    missing = [k for k in _MANIFEST_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        raise ConfigError(f"{manifest} is not an rlaif-gym run manifest (expected the keys {list(_MANIFEST_KEYS)}, "
                          f"missing {missing}); refusing to delete anything. Choose another --out directory")
    judge = out / "judge"  # the LLM judge's post-pass over this run (`rollout --judge llm`)
    if judge.is_symlink():  # checked before anything is deleted: the link would lead out of the run directory
        raise ConfigError(f"{judge} is a symbolic link to {os.readlink(judge)}; --overwrite deletes the run's judge/ "
                          "directory and follows no link "
                          "out of the run directory, so nothing was deleted. Remove or move it (e.g. rm "
                          f"{judge}), then run again")
    deleted = [out / name for name in _RUN_FILES if (out / name).is_file()]
    deleted += [p for pattern in _RUN_GLOBS for p in out.glob(pattern) if p.is_file()]
    for path in sorted(set(deleted), key=lambda p: p.name != "run.json"):  # run.json last
        if path.name != "run.json":
            path.unlink()
    manifest.unlink()
    if judge.is_dir():
        shutil.rmtree(judge)
        deleted.append(judge)
    return deleted
