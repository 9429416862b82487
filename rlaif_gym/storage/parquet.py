"""Trajectories as a zstd-compressed Parquet file that reads back exactly and can be queried by column.

Layout: one row per trajectory. Scalar columns copy the top-level summary fields (ids, group,
seed, totals, status, provenance) so that tools such as DuckDB, pandas or `pyarrow.dataset` can
filter and aggregate without parsing anything; the `record` column holds the full
`Trajectory.to_json()` line, and only that column is used to rebuild the model. This was chosen
over a fully nested Parquet schema because the round trip is then exact by construction (the
same JSON the JSONL store writes, including extra fields and the schema version), while the
nested steps and LLM calls, whose keys vary, would need a schema that every change must follow.

pyarrow is optional: it is imported inside the functions, and a missing install raises
`DependencyNotInstalled` naming the `parquet` extra.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import DependencyNotInstalled, install_hint
from ..trajectory import SCHEMA_VERSION, SchemaVersionError, Trajectory
from ._files import atomic_replace

__all__ = ["PARQUET_SUMMARY_COLUMNS", "read_parquet", "write_parquet"]

PARQUET_SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("schema_version", "int32"),
    ("trajectory_id", "string"),
    ("agent_id", "string"),
    ("id", "string"),
    ("env_id", "string"),
    ("window_id", "string"),
    ("scenario_id", "string"),
    ("episode_id", "string"),
    ("group_id", "string"),
    ("group_index", "int64"),
    ("seed", "int64"),
    ("archetype", "string"),
    ("final_status", "string"),
    ("episode_length", "int64"),
    ("total_reward", "float64"),
    ("final_pnl", "float64"),
    ("final_balance", "float64"),
    ("trades_executed", "int64"),
    ("duration_ms", "int64"),
    ("package_version", "string"),
)
"""The queryable scalar columns (snake_case field name, Arrow type), before the `record` column."""

RECORD_COLUMN = "record"


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise DependencyNotInstalled(
            "Parquet storage needs pyarrow, which is not installed; install it with: " + install_hint("parquet")
        ) from exc
    return pa, pq


def write_parquet(path: str | os.PathLike[str], trajectories: Iterable[Trajectory]) -> Path:
    """Write trajectories to one Parquet file (zstd), atomically: temp file, then `os.replace`.

    Returns:
        The path written.

    Raises:
        DependencyNotInstalled: pyarrow is missing (`install_hint("parquet")`).
    """
    pa, pq = _pyarrow()
    rows = list(trajectories)
    for trajectory in rows:
        if not isinstance(trajectory, Trajectory):
            raise TypeError(f"write_parquet takes Trajectory objects, got {type(trajectory).__name__}")
    columns: dict[str, Any] = {
        name: pa.array([getattr(t, name) for t in rows], type=getattr(pa, kind)())
        for name, kind in PARQUET_SUMMARY_COLUMNS
    }
    # large_string: a run of long trajectories can pass the 2 GiB offset limit of `string`.
    columns[RECORD_COLUMN] = pa.array([t.to_json() for t in rows], type=pa.large_string())
    table = pa.table(columns).replace_schema_metadata({"rlaif_gym.schema_version": str(SCHEMA_VERSION),
                                                       "rlaif_gym.layout": "summary columns + record JSON"})
    target = atomic_replace(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
    return target


def read_parquet(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Read a file written by `write_parquet` back into models equal to the ones written.

    Only the `record` column is read; the summary columns are for queries.

    Raises:
        DependencyNotInstalled: pyarrow is missing.
        SchemaVersionError: a record has an unknown schema version (the row is named).
        ValueError: the file has no `record` column (it was not written by `write_parquet`).
    """
    _, pq = _pyarrow()
    names = pq.read_schema(path).names
    if RECORD_COLUMN not in names:
        raise ValueError(f"{path} has no {RECORD_COLUMN!r} column (columns: {names}); it was not written by "
                         "rlaif_gym.storage.write_parquet")
    records = pq.read_table(path, columns=[RECORD_COLUMN]).column(RECORD_COLUMN).to_pylist()
    out = []
    for row, record in enumerate(records):
        try:
            out.append(Trajectory.from_json(record))
        except SchemaVersionError as exc:
            raise SchemaVersionError(f"{path}, row {row}: {exc}") from exc
    return out
