"""Parquet storage: an exact round trip, queryable summary columns, zstd, and the missing-pyarrow error."""

from __future__ import annotations

import builtins
import json
import re

import pytest

from rlaif_gym.errors import DependencyNotInstalled, install_hint
from rlaif_gym.storage import PARQUET_SUMMARY_COLUMNS, read_parquet, write_parquet
from rlaif_gym.trajectory import SchemaVersionError


def test_round_trip_is_exact(tmp_path, sample):
    pytest.importorskip("pyarrow")
    path = write_parquet(tmp_path / "sub" / "run.parquet", sample)
    back = read_parquet(path)
    assert back == sample
    assert back[0].custom_extra == {"note": "extra fields survive"}
    assert back[0].steps[0].llm_calls[1].completion_token_ids == [101, 7, 2048]
    assert [p.name for p in path.parent.iterdir()] == ["run.parquet"]  # no temp file left behind


def test_summary_columns_are_queryable_and_compressed_with_zstd(tmp_path, sample):
    pq = pytest.importorskip("pyarrow.parquet")
    path = write_parquet(tmp_path / "run.parquet", sample)
    table = pq.read_table(path)
    assert table.column_names == [name for name, _ in PARQUET_SUMMARY_COLUMNS] + ["record"]
    assert table.column("trajectory_id").to_pylist() == [t.trajectory_id for t in sample]
    assert table.column("final_pnl").to_pylist() == [t.final_pnl for t in sample]
    assert table.column("group_id").to_pylist() == [t.group_id for t in sample]
    assert table.column("seed").to_pylist()[0] == 123 and table.column("final_balance").to_pylist()[-1] is None
    assert table.column("schema_version").to_pylist() == [1] * len(sample)
    metadata = pq.ParquetFile(path).metadata
    assert {metadata.row_group(0).column(i).compression for i in range(metadata.num_columns)} == {"ZSTD"}


def test_empty_file_round_trips(tmp_path):
    pytest.importorskip("pyarrow")
    assert read_parquet(write_parquet(tmp_path / "empty.parquet", [])) == []


def test_unknown_schema_version_raises(tmp_path, rich):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    record = json.loads(rich.to_json())
    record["schemaVersion"] = 99
    path = tmp_path / "future.parquet"
    pq.write_table(pa.table({"record": [rich.to_json(), json.dumps(record)]}), path)
    with pytest.raises(SchemaVersionError, match=r"future\.parquet, row 1: trajectory schema_version 99"):
        read_parquet(path)


def test_a_foreign_parquet_file_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), path)
    with pytest.raises(ValueError, match="no 'record' column"):
        read_parquet(path)


def test_missing_pyarrow_names_the_extra(tmp_path, rich, monkeypatch):
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(DependencyNotInstalled, match=re.escape(install_hint("parquet"))):
        write_parquet(tmp_path / "x.parquet", [rich])
    with pytest.raises(DependencyNotInstalled, match="parquet"):
        read_parquet(tmp_path / "x.parquet")
