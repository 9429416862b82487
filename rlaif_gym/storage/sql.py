"""`SqlTrajectorySink`: trajectories into the original Babylon `trajectories` table (SQLAlchemy Core).

The original wrote finished trajectories to a PostgreSQL table `trajectories` with quoted camelCase
columns (docs/babylon.md ("The original database layout")), and its Atropos env loads training data
from there with one query (rows created within the lookback window, a non-empty `stepsJson`, at
least `min_actions` steps, grouped by `"windowId"` and `"scenarioId"`). This sink writes that
layout, so the original pipeline reads rlaif_gym trajectories unchanged. The rows come from the `db`
export's row builder (`to_db_rows`), so the table and `rlaif-gym export --format db` never disagree.

* **URLs**: any SQLAlchemy URL. SQLite is the embedded default (`sqlite:///runs.db`, a file next to
  the run); PostgreSQL works through the same scheme (`postgresql://user:pass@host:5432/db`, the
  original's `DATABASE_URL` form, runs on psycopg 3; `postgresql+psycopg2://` and other explicit
  drivers are kept). A Prisma-style `?schema=name` is honoured as the table's schema. Passwords never
  appear in messages (`describe()` hides them).
* **Tables**: `trajectories` is created when missing (`stepsJson` as TEXT holding JSON, as the
  original wrote and read it; times as timestamps; a unique index on `"trajectoryId"`). The Atropos
  query LEFT JOINs `"User"` for agent names, so a minimal `"User"(id, username)` table is created when
  missing too (`create_user_table=False` skips it). An existing `trajectories` table is never altered:
  only the columns it has are written, and a missing required column is a clear error.
* **Transactions**: each trajectory is written in one transaction, committed before `append`
  returns; a process killed mid-write leaves no partial row (the database rolls the transaction back).
* **Idempotent on `"trajectoryId"`**: writing a trajectory whose id is already stored updates that
  row in place (`on_conflict="replace"`, the default: the table follows the latest write, as the JSONL
  run does after a `--resume`) or leaves it (`on_conflict="skip"`); never a second row. One writer per
  trajectory id at a time.
* `createdAt` is the wall-clock time of the first write (UTC; the Atropos loader's lookback window
  reads it), `updatedAt` that of the latest; `isTrainingData` is false for failed episodes.

SQLAlchemy is imported lazily (the `[sql]` extra); without it the constructor raises
`DependencyNotInstalled` naming the extra.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, Literal

from ..errors import ConfigError, DependencyNotInstalled, install_hint
from ..trajectory import Trajectory
from .exports import to_db_rows
from .jsonl import StorageError

__all__ = ["TABLE_NAME", "USER_TABLE_NAME", "SqlTrajectorySink", "normalize_database_url"]

TABLE_NAME = "trajectories"
"""The original's table name."""
USER_TABLE_NAME = "User"
"""The table the original Atropos loader LEFT JOINs for agent names."""

_REQUIRED_COLUMNS = ("id", "trajectoryId", "agentId", "stepsJson", "episodeLength", "createdAt")
_TIME_COLUMNS = ("startTime", "endTime")


def _sqlalchemy():
    try:
        import sqlalchemy
    except ImportError as exc:
        raise DependencyNotInstalled(
            "the SQL trajectory sink needs SQLAlchemy (and psycopg for PostgreSQL): " + install_hint("sql")
        ) from exc
    return sqlalchemy


def normalize_database_url(url: str) -> tuple[Any, str | None]:
    """Parse `url` into a SQLAlchemy URL (plain `postgresql://` / `postgres://` -> psycopg 3) and its schema.

    Returns:
        `(url, schema)`: `schema` is a Prisma-style `?schema=` query value (removed from the URL), or None.

    Raises:
        ConfigError: the URL does not parse.
    """
    sa = _sqlalchemy()
    try:
        parsed = sa.engine.make_url(url)
    except Exception as exc:  # ArgumentError, ValueError
        raise ConfigError(f"not a database URL: {exc}; expected e.g. sqlite:///runs.db or "
                          "postgresql://user:password@127.0.0.1:5432/babylon") from None
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    schema = parsed.query.get("schema")
    if schema is not None:
        parsed = parsed.difference_update_query(["schema"])
        schema = schema if isinstance(schema, str) else schema[0]
    return parsed, schema or None


def _tables(sa, schema: str | None):
    """The original `trajectories` table (and a minimal `"User"`), as SQLAlchemy Core tables."""
    metadata = sa.MetaData(schema=schema)
    text_id = sa.String(255)
    stamp = sa.DateTime(timezone=True)
    trajectories = sa.Table(
        TABLE_NAME, metadata,
        sa.Column("id", text_id, primary_key=True),
        sa.Column("trajectoryId", text_id, nullable=False),
        sa.Column("agentId", text_id, nullable=False),
        sa.Column("windowId", text_id),
        sa.Column("scenarioId", text_id),
        sa.Column("archetype", text_id),
        sa.Column("startTime", stamp),
        sa.Column("endTime", stamp),
        sa.Column("durationMs", sa.BigInteger, nullable=False, default=0),
        sa.Column("stepsJson", sa.Text),
        sa.Column("totalReward", sa.Float, nullable=False, default=0.0),
        sa.Column("finalPnL", sa.Float, nullable=False, default=0.0),
        sa.Column("finalBalance", sa.Float),
        sa.Column("tradesExecuted", sa.Integer, nullable=False, default=0),
        sa.Column("episodeLength", sa.Integer, nullable=False, default=0),
        sa.Column("finalStatus", sa.String(64), nullable=False, default="completed"),
        sa.Column("isTrainingData", sa.Boolean, nullable=False, default=True),
        sa.Column("createdAt", stamp, nullable=False),
        sa.Column("updatedAt", stamp, nullable=False),
        sa.Index("trajectories_trajectoryId_key", "trajectoryId", unique=True),
        sa.Index("trajectories_windowId_scenarioId_idx", "windowId", "scenarioId"),
        sa.Index("trajectories_createdAt_idx", "createdAt"),
    )
    users = sa.Table(USER_TABLE_NAME, metadata, sa.Column("id", text_id, primary_key=True),
                     sa.Column("username", text_id))
    return metadata, trajectories, users


def _timestamp(value: Any) -> datetime | None:
    """An ISO-8601 string (the row builder's form) as an aware UTC datetime; None stays None."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))  # 3.10's fromisoformat rejects "Z"
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _utc_naive_if_sqlite(value: datetime | None, sqlite: bool) -> datetime | None:
    # SQLite has no time zones: SQLAlchemy stores the wall-clock fields, so store UTC (datetime('now') is UTC).
    if value is None or not sqlite:
        return value
    return value.astimezone(timezone.utc).replace(tzinfo=None)


class SqlTrajectorySink:
    """A `TrajectorySink` writing the original `trajectories` table (see the module docstring).

    Args:
        url: a SQLAlchemy database URL, e.g. "sqlite:///runs.db" or "postgresql://user@127.0.0.1/babylon".
        create_tables: create `trajectories` (and `"User"`) when missing.
        create_user_table: also create the minimal `"User"` table the Atropos query joins.
        on_conflict: "replace" (update the stored row) or "skip" (keep it) for an id already stored.
        engine_options: extra keyword arguments for `sqlalchemy.create_engine`.

    Raises:
        DependencyNotInstalled: SQLAlchemy or the URL's driver is not installed.
        ConfigError: the URL does not parse, or `on_conflict` is unknown.
        StorageError: the database cannot be reached, or an existing table lacks a required column.
    """

    def __init__(self, url: str, *, create_tables: bool = True, create_user_table: bool = True,
                 on_conflict: Literal["replace", "skip"] = "replace",
                 engine_options: dict[str, Any] | None = None) -> None:
        if on_conflict not in ("replace", "skip"):
            raise ConfigError(f"on_conflict must be 'replace' or 'skip', got {on_conflict!r}")
        sa = self._sa = _sqlalchemy()
        self.url, self.schema = normalize_database_url(url)
        self.on_conflict = on_conflict
        try:
            self.engine = sa.create_engine(self.url, **(engine_options or {}))
        except (ImportError, sa.exc.NoSuchModuleError) as exc:
            raise DependencyNotInstalled(
                f"no database driver for {self.url.drivername} ({exc}); for PostgreSQL: {install_hint('sql')}"
            ) from exc
        self._sqlite = self.engine.dialect.name == "sqlite"
        metadata, self.table, self.users = _tables(sa, self.schema)
        try:
            with self.engine.begin() as conn:
                if create_tables:
                    wanted = [self.table] + ([self.users] if create_user_table else [])
                    metadata.create_all(conn, tables=wanted, checkfirst=True)
                elif not sa.inspect(conn).has_table(TABLE_NAME, schema=self.schema):
                    raise StorageError(f"{self.describe()} has no {TABLE_NAME!r} table and create_tables=False")
                present = {c["name"] for c in sa.inspect(conn).get_columns(TABLE_NAME, schema=self.schema)}
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"cannot open the trajectories table at {self.describe()}: "
                               f"{type(exc).__name__}: {exc.args[0] if exc.args else exc}") from exc
        missing = [c for c in _REQUIRED_COLUMNS if c not in present]
        if missing:
            raise StorageError(f"the existing {TABLE_NAME!r} table at {self.describe()} lacks the column(s) "
                               f"{', '.join(repr(c) for c in missing)} of the original layout; it is never altered, "
                               "so add them or point --db at another database")
        self.columns = frozenset(present & set(self.table.c.keys()))
        """The columns this sink writes (those the table has)."""

    def describe(self) -> str:
        """The URL with the password hidden (safe for logs and messages)."""
        return self.url.render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"SqlTrajectorySink({self.describe()!r})"

    # -- writing

    def append(self, trajectory: Trajectory) -> None:
        """Write one trajectory as one row in one transaction, committed before returning.

        Raises:
            TypeError: `trajectory` is not a `Trajectory`.
            StorageError: the database refused the write (nothing of it is stored).
        """
        if not isinstance(trajectory, Trajectory):
            raise TypeError(f"append takes a Trajectory, got {type(trajectory).__name__}")
        sa, table = self._sa, self.table
        (row,) = to_db_rows([trajectory])
        for name in _TIME_COLUMNS:
            row[name] = _utc_naive_if_sqlite(_timestamp(row.get(name)), self._sqlite)
        now = _utc_naive_if_sqlite(datetime.now(timezone.utc), self._sqlite)
        row["createdAt"] = row["updatedAt"] = now
        row = {k: v for k, v in row.items() if k in self.columns}
        key = table.c.trajectoryId == trajectory.trajectory_id
        try:
            with self.engine.begin() as conn:
                stored = conn.execute(sa.select(table.c.createdAt).where(key)).first()
                if stored is None:
                    conn.execute(table.insert().values(**row))
                elif self.on_conflict == "replace":
                    row.pop("createdAt")  # the row keeps its first write time (the loader's lookback window)
                    conn.execute(table.update().where(key).values(**row))
        except sa.exc.SQLAlchemyError as exc:
            raise StorageError(f"writing trajectory {trajectory.trajectory_id!r} to {self.describe()} failed (nothing "
                               f"was stored): {type(exc).__name__}: {exc.args[0] if exc.args else exc}") from exc

    # -- reading

    def completed_ids(self) -> set[str]:
        """Every stored `"trajectoryId"` (a resumed run skips them)."""
        with self.engine.connect() as conn:
            return {row[0] for row in conn.execute(self._sa.select(self.table.c.trajectoryId))}

    def failed_ids(self) -> set[str]:
        """The `"trajectoryId"` of every row whose `finalStatus` is "failed" (none if the table lacks it)."""
        if "finalStatus" not in self.columns:
            return set()
        table = self.table
        with self.engine.connect() as conn:
            query = self._sa.select(table.c.trajectoryId).where(table.c.finalStatus == "failed")
            return {row[0] for row in conn.execute(query)}

    def set_aside(self, ids: set[str]) -> int:
        """Delete the rows of `ids` (one transaction), so that a resumed run plays those episodes again.

        A database holds one row per trajectory: the replayed episode takes the row's place (with a
        `FanoutSink`, the JSONL primary keeps the old record in its set-aside file).
        """
        if not ids:
            return 0
        table = self.table
        with self.engine.begin() as conn:
            result = conn.execute(table.delete().where(table.c.trajectoryId.in_(sorted(ids))))
        return int(result.rowcount or 0)

    def count(self) -> int:
        """Rows in the table."""
        with self.engine.connect() as conn:
            return int(conn.execute(self._sa.select(self._sa.func.count()).select_from(self.table)).scalar_one())

    def read(self) -> Iterator[Trajectory]:
        """Every stored row as a `Trajectory` (through the schema's reader of the original row layout)."""
        sa = self._sa
        columns = [self.table.c[name] for name in sorted(self.columns)]
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(*columns).order_by(self.table.c.createdAt, self.table.c.trajectoryId))
            for row in rows.mappings():
                data = {k: v for k, v in row.items() if k not in ("createdAt", "updatedAt", "isTrainingData")}
                data["steps"] = json.loads(data.pop("stepsJson") or "[]")
                yield Trajectory.from_json(json.dumps(data, default=_iso))

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    def __enter__(self) -> SqlTrajectorySink:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
