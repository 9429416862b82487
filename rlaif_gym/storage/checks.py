"""Checks of stored trajectory records at the reading boundary (`report`, `export`, `judge`).

A record that parses as a `Trajectory` can still hold values that no reader can use: a NaN or an
infinite number (Python's `json` writes and reads them), a seed that no generator accepts, or an id
that another record of the run already has. `load_checked` finds them when the run is loaded and
raises one `RecordError` naming the file, the trajectory and the field, instead of a traceback
deep inside the metrics, the baselines or an export.

Standard library, `rlaif_gym.errors`, `rlaif_gym.trajectory` and this package.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import cast

from ..errors import RecordError
from ..trajectory import Trajectory, non_finite_numbers
from .jsonl import JsonlStore, _parse_lines

__all__ = ["MAX_SEED", "check_record", "check_unique_ids", "load_checked"]

MAX_SEED = 2**63 - 1
"""The largest env seed the readers accept (numpy's int64; `reset(seed=...)` needs >= 0)."""

_SKIP = frozenset({"completionLogprobs"})
"""Server-supplied numbers where -inf is a legitimate value (a token's log-probability): files written before
the LLM boundary checked logprobs may hold it (a new record never does: it would not be strict JSON)."""


def check_record(trajectory: Trajectory, source: str) -> Trajectory:
    """`trajectory` if every number in it is finite and its seed is usable; else `RecordError`.

    Raises:
        RecordError: the first bad field, as written in the file (camelCase, e.g. ``steps[2].reward``).
    """
    tid = trajectory.trajectory_id or "?"
    seed = trajectory.seed
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise RecordError(source, tid, "seed", f"expected an env seed in [0, 2**63 - 1], got {seed}",
                          "Seeds are written by the rollout collector; fix the seed in that record or remove the "
                          "record (the run cannot be replayed or compared with baselines otherwise)")
    for where, value in non_finite_numbers(trajectory.to_dict(), skip=_SKIP):
        raise RecordError(source, tid, where, f"expected a finite number, got {value!r}",
                          "The readers compute metrics and exports from it; fix or remove that record")
    return trajectory


def check_unique_ids(trajectories: Iterable[tuple[Trajectory, str]]) -> None:
    """Raise `RecordError` when two (trajectory, source) pairs share a trajectory id."""
    seen: dict[str, str] = {}
    for trajectory, source in trajectories:
        tid = trajectory.trajectory_id
        if tid in seen:
            raise RecordError(source, tid, "trajectoryId", f"expected ids unique within the run, but {tid!r} is "
                              f"also in {seen[tid]}", "Remove the duplicate record (after a run was copied into "
                              "another, or a file was concatenated twice); judge, report and export need one id "
                              "per trajectory")
        seen[tid] = source


def load_checked(directory: str | os.PathLike[str]) -> list[Trajectory]:
    """Every trajectory of a `JsonlStore` directory, each checked (`check_record`), ids unique.

    Raises:
        RecordError: a record with a NaN or infinite number, an out-of-range seed, or a duplicate id.
        CorruptLineError, SchemaVersionError: as `JsonlStore.read`.
    """
    pairs: list[tuple[Trajectory, str]] = []
    for path in JsonlStore(Path(directory)).files():
        source = str(path)
        for trajectory in _parse_lines(path, True):  # validate=True: Trajectory models
            pairs.append((check_record(cast(Trajectory, trajectory), source), source))
    check_unique_ids(pairs)
    return [t for t, _ in pairs]
