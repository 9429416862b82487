"""`FanoutSink`: one trajectory stream into several sinks (e.g. the JSONL run and a SQL database).

The first sink is the primary: it holds the run manifest and decides what a resumed run has
already done. On resume (`completed_ids`), every other sink is first backfilled from the primary
with the trajectories it lacks (a run killed between the primary's write and another sink's), so
no sink misses a trajectory and no episode is run twice. Each trajectory goes to the primary first:
a trajectory that only some other sink holds is not done, and its rerun replaces it there (the SQL
sink is idempotent on the trajectory id).

Standard library and the schema only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..trajectory import Trajectory

__all__ = ["FanoutSink"]


class FanoutSink:
    """Write each trajectory to `primary`, then to each of `others` (see the module docstring).

    Args:
        primary: owns the manifest and the resume set (e.g. `JsonlStore`); needs `read()` for backfill.
        others: further sinks (e.g. `SqlTrajectorySink`); those with `completed_ids()` are backfilled.
    """

    def __init__(self, primary: Any, *others: Any) -> None:
        self.primary = primary
        self.others = list(others)

    def __repr__(self) -> str:
        return f"FanoutSink({self.primary!r}, {', '.join(repr(s) for s in self.others)})"

    def append(self, trajectory: Trajectory) -> None:
        """Write `trajectory` to every sink, the primary first; a sink's error propagates."""
        self.primary.append(trajectory)
        for sink in self.others:
            sink.append(trajectory)

    # -- what RolloutCollector uses for manifests and resume

    def hold(self, what: str = "an rlaif-gym run") -> contextlib.AbstractContextManager[Any]:
        """The primary's one-writer lock (`JsonlStore.hold`); nothing where the primary has none."""
        hold = getattr(self.primary, "hold", None)
        return hold(what) if hold is not None else contextlib.nullcontext()

    def read_manifest(self) -> dict[str, Any] | None:
        """The primary's run manifest (None when it keeps none)."""
        read = getattr(self.primary, "read_manifest", None)
        return read() if read is not None else None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Store the run manifest in the primary (when it keeps one)."""
        write = getattr(self.primary, "write_manifest", None)
        if write is not None:
            write(manifest)

    def repair(self) -> Any:
        """Repair every sink that can be repaired (a torn JSONL line); returns the primary's report."""
        for sink in self.others:
            if hasattr(sink, "repair"):
                sink.repair()
        return self.primary.repair() if hasattr(self.primary, "repair") else None

    def completed_ids(self) -> set[str]:
        """The primary's ids, after copying to every other sink the trajectories it lacks."""
        done = set(self.primary.completed_ids())
        for sink in self.others:
            if not hasattr(sink, "completed_ids"):
                continue
            missing = done - set(sink.completed_ids())
            if missing:
                for trajectory in self.primary.read():
                    if trajectory.trajectory_id in missing:
                        sink.append(trajectory)
        return done

    def failed_ids(self) -> set[str]:
        """The primary's failed trajectories (the ones `--retry-failed` plays again)."""
        return set(self.primary.failed_ids())

    def set_aside(self, ids: set[str]) -> int:
        """Take `ids` out of the primary only: in the other sinks the replayed trajectory replaces them."""
        return self.primary.set_aside(ids)

    def read(self) -> Iterator[Trajectory]:
        """The primary's trajectories."""
        return self.primary.read()
