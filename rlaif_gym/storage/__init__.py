"""Storage: trajectories to and from disk (JSONL store, Parquet) and the exports trainers read.

Imports the standard library, pydantic, `rlaif_gym.errors` and `rlaif_gym.trajectory`;
pyarrow only lazily, inside the Parquet functions, and SQLAlchemy only inside `SqlTrajectorySink`.
"""

from .exports import (
    EXPORT_KINDS,
    SecretLeakError,
    assert_no_secrets,
    policy_calls,
    prompt_messages,
    to_db_rows,
    to_dpo_pairs,
    to_grpo_groups,
    to_sft_records,
    write_export,
)
from .fanout import FanoutSink
from .jsonl import (
    MANIFEST_NAME,
    SET_ASIDE_NAME,
    CorruptLineError,
    JsonlStore,
    RepairReport,
    StorageError,
    TornLineWarning,
    TornTailError,
    read_jsonl,
    write_jsonl,
)
from .lock import LOCK_NAME, RunFolderBusyError, RunFolderLockWarning, hold_run_folder, holds_run_folder
from .parquet import PARQUET_SUMMARY_COLUMNS, read_parquet, write_parquet
from .sql import SqlTrajectorySink

__all__ = [
    "EXPORT_KINDS",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "PARQUET_SUMMARY_COLUMNS",
    "SET_ASIDE_NAME",
    "CorruptLineError",
    "FanoutSink",
    "JsonlStore",
    "RepairReport",
    "RunFolderBusyError",
    "RunFolderLockWarning",
    "SecretLeakError",
    "SqlTrajectorySink",
    "StorageError",
    "TornLineWarning",
    "TornTailError",
    "assert_no_secrets",
    "hold_run_folder",
    "holds_run_folder",
    "policy_calls",
    "prompt_messages",
    "read_jsonl",
    "read_parquet",
    "to_db_rows",
    "to_dpo_pairs",
    "to_grpo_groups",
    "to_sft_records",
    "write_export",
    "write_jsonl",
    "write_parquet",
]
