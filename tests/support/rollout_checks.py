"""Checks shared by the rollout integration tests: every stored line whole, every planned id once.

A plain module (not conftest) so that `from rollout_checks import ...` names this file whatever
other test directories pytest was given (each directory's conftest is imported as `conftest`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rlaif_gym.trajectory import Trajectory

REWARD_KEYS = ("format", "reasoning", "pnl", "risk")


def jsonl_lines(directory: Path) -> list[tuple[str, int, bytes]]:
    """(file name, 1-based line number, raw line) for every line of every *.jsonl data file."""
    out = []
    for path in sorted(directory.glob("trajectories-*.jsonl")):
        for number, raw in enumerate(path.read_bytes().splitlines(keepends=True), 1):
            out.append((path.name, number, raw))
    return out


def read_store_strict(directory: Path) -> list[Trajectory]:
    """Every line of the store, which must all be whole, newline-terminated, valid trajectories."""
    trajs = []
    for name, number, raw in jsonl_lines(directory):
        assert raw.endswith(b"\n"), f"{name}:{number}: torn line (no newline): {raw[:80]!r}..."
        try:
            trajs.append(Trajectory.from_json(raw))
        except ValueError as exc:
            raise AssertionError(f"{name}:{number}: not a valid trajectory line: {exc}") from exc
    return trajs


def check_step(traj: Trajectory, step, ticks: int) -> None:
    where = f"trajectory {traj.trajectory_id} step {step.step_number}"
    assert len(step.llm_calls) == 1, f"{where}: expected exactly one LLM call, got {len(step.llm_calls)}"
    call = step.llm_calls[0]
    assert call.system_prompt.strip(), f"{where}: empty system prompt"
    assert call.user_prompt.strip(), f"{where}: empty user prompt"
    assert call.response.strip(), f"{where}: empty response"
    assert call.error is None, f"{where}: a successful step's call carries an error: {call.error}"
    missing = [k for k in REWARD_KEYS if k not in step.reward_components]
    assert not missing, f"{where}: reward components {missing} missing from {sorted(step.reward_components)}"
    assert step.feedback is not None, f"{where}: no feedback"
    assert isinstance(step.feedback.pnl_delta, float), f"{where}: feedback.pnl_delta is {step.feedback.pnl_delta!r}"
    assert step.action is not None, f"{where}: no action"


def check_run(trajs: Iterable[Trajectory], planned_ids: Iterable[str], ticks: int, summary=None,
              expect_failed: Iterable[str] = ()) -> dict[str, Trajectory]:
    """The invariants every collection must satisfy, fault or not (see the module docstring)."""
    trajs = list(trajs)
    planned = sorted(planned_ids)
    ids = [t.trajectory_id for t in trajs]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    assert not dups, f"trajectories stored more than once: {dups}"
    assert sorted(ids) == planned, f"stored ids {sorted(ids)} != planned ids {planned}"
    by_id = {t.trajectory_id: t for t in trajs}
    expect_failed = set(expect_failed)
    for tid, traj in sorted(by_id.items()):
        if traj.final_status == "failed":
            assert tid in expect_failed, f"trajectory {tid} failed unexpectedly: {traj.errors}"
            assert traj.errors, f"trajectory {tid}: failed without errors"
            assert traj.failed_calls, f"trajectory {tid}: failed without a failed call"
            assert traj.episode_length == len(traj.steps), \
                f"trajectory {tid}: episode_length {traj.episode_length} != {len(traj.steps)} steps"
            for fc in traj.failed_calls:
                assert fc.error is not None, f"trajectory {tid}: failed call {fc.call_id} has no error"
        else:
            assert tid not in expect_failed, f"trajectory {tid} was expected to fail but is {traj.final_status}"
            assert traj.final_status == "completed", f"trajectory {tid}: status {traj.final_status}"
            assert traj.episode_length == ticks, f"trajectory {tid}: episode_length {traj.episode_length} != {ticks}"
            assert len(traj.steps) == ticks, f"trajectory {tid}: {len(traj.steps)} steps != {ticks}"
            assert not traj.errors, f"trajectory {tid}: completed with errors {traj.errors}"
            assert not traj.failed_calls, f"trajectory {tid}: completed with failed calls"
        for i, step in enumerate(traj.steps):
            assert step.step_number == i, f"trajectory {tid}: step {i} is numbered {step.step_number}"
            check_step(traj, step, ticks)
    if summary is not None:
        assert summary.planned == len(planned), f"summary.planned {summary.planned} != {len(planned)}"
        assert summary.planned == summary.completed + summary.failed + summary.skipped_existing, \
            f"summary does not add up: {json.dumps(summary.to_dict(), default=str)[:500]}"
        n_failed = sum(t.final_status == "failed" for t in trajs)
        assert summary.failed == n_failed, f"summary.failed {summary.failed} != {n_failed} failed on disk"
    return by_id
