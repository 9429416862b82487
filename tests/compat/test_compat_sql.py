"""The SQL sink writes the original `trajectories` table: the original Atropos query reads it back, writes are
transactional (SIGKILL mid-write leaves no partial row) and idempotent (`--resume` never duplicates a row).

Every test runs on SQLite and, when a server is available, on PostgreSQL: set RLAIF_TEST_POSTGRES_URL
(e.g. postgresql://postgres@127.0.0.1:5432/postgres; `.ci/run` starts a throwaway server with
`.ci/postgres.sh`). Each PostgreSQL test gets a fresh database of its own.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import uuid
from datetime import timedelta

import pytest

sa = pytest.importorskip("sqlalchemy", reason='the SQL sink needs the [sql] extra: pip install "rlaif-gym[sql]"')

from rlaif_gym.agents import ScriptedLLMAgent  # noqa: E402
from rlaif_gym.cli import main as cli_main  # noqa: E402
from rlaif_gym.rollout import RolloutCollector  # noqa: E402
from rlaif_gym.storage import FanoutSink, JsonlStore, SqlTrajectorySink  # noqa: E402
from rlaif_gym.storage.sql import normalize_database_url  # noqa: E402
from rlaif_gym.trajectory import Trajectory  # noqa: E402

PG_ENV = "RLAIF_TEST_POSTGRES_URL"
PG_SKIP = (f"no PostgreSQL server for the test: set {PG_ENV}=postgresql://user@127.0.0.1:5432/db "
           "(.ci/run starts one with .ci/postgres.sh)")

# The query the original Atropos env (babylon_env.py `_load_trajectories`;
# docs/babylon.md ("The original's Atropos env")) loads training data with, verbatim (asyncpg
# placeholders), with the isTrainingData filter its later versions apply.
ORIGINAL_LOAD_QUERY = """
    SELECT
        t."trajectoryId",
        t."agentId",
        t."windowId",
        t."scenarioId",
        t."stepsJson",
        t."finalPnL",
        t."episodeLength",
        t."totalReward",
        t."archetype",
        u.username as agent_name
    FROM trajectories t
    LEFT JOIN "User" u ON t."agentId" = u.id
    WHERE
        t."createdAt" > NOW() - $1::interval
        AND t."stepsJson" IS NOT NULL
        AND t."stepsJson"::text != 'null'
        AND t."stepsJson"::text != '[]'
        AND t."episodeLength" >= $2
        AND t."isTrainingData" = true
    ORDER BY t."windowId", t."scenarioId", t."createdAt"
"""
LOOKBACK_HOURS, MIN_ACTIONS, MIN_AGENTS_PER_WINDOW = 72, 3, 2


# --------------------------------------------------------------------------------------- backends


def _pg_admin_url() -> str | None:
    return os.environ.get(PG_ENV) or None


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty database: a SQLite file, or a new PostgreSQL database dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'trajectories.db'}"
        return
    admin = _pg_admin_url()
    if admin is None:
        pytest.skip(PG_SKIP)
    url, _ = normalize_database_url(admin)
    name = f"rlaif_test_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


def original_query(url: str, lookback_hours: int = LOOKBACK_HOURS, min_actions: int = MIN_ACTIONS) -> list[dict]:
    """Run ORIGINAL_LOAD_QUERY with the database's own driver (no SQLAlchemy in between)."""
    parsed, _ = normalize_database_url(url)
    if parsed.get_backend_name() == "postgresql":
        import psycopg
        from psycopg.rows import dict_row

        conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(conninfo, row_factory=dict_row) as conn:
            query = ORIGINAL_LOAD_QUERY.replace("$1", "%s").replace("$2", "%s")
            return conn.execute(query, (timedelta(hours=lookback_hours), min_actions)).fetchall()
    # SQLite spelling of the same query: its only PostgreSQL-isms are NOW() - interval and ::text casts.
    query = (ORIGINAL_LOAD_QUERY.replace("NOW() - $1::interval", "datetime('now', ?1)")
             .replace("::text", "").replace("$2", "?2"))
    with sqlite3.connect(parsed.database) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(query, (f"-{lookback_hours} hours", min_actions))]


def original_groups(rows: list[dict]) -> dict[str, list[dict]]:
    """The original loader's grouping and filters after the query (babylon_env.py `_load_trajectories`)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        steps = json.loads(row["stepsJson"] or "[]")
        if len(steps) < MIN_ACTIONS:
            continue
        groups.setdefault(f"{row['windowId']}_{row['scenarioId'] or 'default'}", []).append({
            "trajectory_id": row["trajectoryId"], "agent_name": row["agent_name"] or row["agentId"][:8],
            "archetype": row["archetype"] or "default", "steps": steps, "final_pnl": float(row["finalPnL"] or 0),
            "episode_length": row["episodeLength"] or len(steps), "total_reward": float(row["totalReward"] or 0),
        })
    return {k: v for k, v in groups.items() if len(v) >= MIN_AGENTS_PER_WINDOW}


def collect(episodes: int, max_ticks: int, run_name: str, group_size: int = 1, seed: int = 0) -> list[Trajectory]:
    collector = RolloutCollector(ScriptedLLMAgent(), num_envs=4, max_ticks=max_ticks, run_name=run_name,
                                 group_size=group_size)
    collector.collect(episodes, seed)
    return sorted(collector.trajectories, key=lambda t: t.trajectory_id)


def execute(url: str, statement: str, **params) -> None:
    engine = sa.create_engine(normalize_database_url(url)[0])
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)
    engine.dispose()


# ------------------------------------------------------------------------------------------ tests


def test_the_original_atropos_query_loads_what_the_sink_writes(db_url):
    train = collect(4, max_ticks=4, run_name="win", group_size=2)  # two groups of two on seeds 0 and 1
    short = collect(1, max_ticks=2, run_name="win", seed=7)  # fewer steps than min_actions
    old = collect(1, max_ticks=4, run_name="win", seed=8)  # written long before the lookback window
    excluded = collect(1, max_ticks=4, run_name="win", seed=9)  # flagged not training data
    with SqlTrajectorySink(db_url) as sink:
        for traj in train + short + old + excluded:
            sink.append(traj)
        assert sink.count() == 7
    execute(db_url, 'UPDATE trajectories SET "createdAt" = :t WHERE "trajectoryId" = :id',
            t=_hours_ago(db_url, 100), id=old[0].trajectory_id)
    execute(db_url, 'UPDATE trajectories SET "isTrainingData" = :f WHERE "trajectoryId" = :id',
            f=False, id=excluded[0].trajectory_id)

    rows = original_query(db_url)
    assert sorted(r["trajectoryId"] for r in rows) == [t.trajectory_id for t in train]
    by_id = {t.trajectory_id: t for t in train}
    for row in rows:
        traj = by_id[row["trajectoryId"]]
        assert row["agentId"] == traj.agent_id and row["windowId"] == "win" == traj.window_id
        assert row["scenarioId"] == traj.scenario_id and row["episodeLength"] == len(traj.steps) == 4
        assert row["finalPnL"] == pytest.approx(traj.final_pnl, abs=1e-9)
        assert row["totalReward"] == pytest.approx(traj.total_reward, abs=1e-9)
        assert json.loads(row["stepsJson"]) == traj.to_dict()["steps"]
        steps = json.loads(row["stepsJson"])
        assert "agentPnL" in steps[0]["environmentState"] and steps[0]["llmCalls"][0]["userPrompt"]
    groups = original_groups(rows)
    assert sorted(groups) == ["win_seed-0", "win_seed-1"]
    assert all(len(members) == 2 for members in groups.values())
    assert {m["agent_name"] for members in groups.values() for m in members} == {"scripted"}
    # The window and the minimum are real filters: a longer lookback admits the old row, a lower minimum the short one.
    longer = original_query(db_url, lookback_hours=101)
    assert {r["trajectoryId"] for r in longer} == set(by_id) | {old[0].trajectory_id}
    assert {r["trajectoryId"] for r in original_query(db_url, min_actions=2)} == set(by_id) | {short[0].trajectory_id}


def _hours_ago(url: str, hours: int):
    from datetime import datetime, timezone

    when = datetime.now(timezone.utc) - timedelta(hours=hours)
    return when.replace(tzinfo=None) if url.startswith("sqlite") else when


def test_rows_round_trip_and_writes_are_idempotent_on_the_trajectory_id(db_url):
    (first, second) = collect(2, max_ticks=3, run_name="idem")
    with SqlTrajectorySink(db_url) as sink:
        sink.append(first)
        created = _created_at(sink, first.trajectory_id)
        sink.append(first)
        sink.append(second)
        assert sink.count() == 2 and sink.completed_ids() == {first.trajectory_id, second.trajectory_id}
        changed = first.model_copy(update={"total_reward": 123.5})
        sink.append(changed)  # replace: the row follows the latest write, keeps its first write time
        assert sink.count() == 2
        assert _created_at(sink, first.trajectory_id) == created
        back = {t.trajectory_id: t for t in sink.read()}
    assert back[first.trajectory_id].total_reward == 123.5
    assert back[second.trajectory_id].to_dict()["steps"] == second.to_dict()["steps"]
    assert back[second.trajectory_id].final_pnl == pytest.approx(second.final_pnl)
    with SqlTrajectorySink(db_url, on_conflict="skip") as sink:
        sink.append(first)
        assert next(t for t in sink.read() if t.trajectory_id == first.trajectory_id).total_reward == 123.5


def _created_at(sink: SqlTrajectorySink, tid: str):
    with sink.engine.connect() as conn:
        return conn.execute(sa.select(sink.table.c.createdAt).where(sink.table.c.trajectoryId == tid)).scalar_one()


KILL_SCRIPT = """
import sys, time
from sqlalchemy import event
from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import FanoutSink, JsonlStore, SqlTrajectorySink

url, out, episodes, hang_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sql = SqlTrajectorySink(url)
inserts = 0

@event.listens_for(sql.engine, "after_cursor_execute")
def hang_inside_the_transaction(conn, cursor, statement, parameters, context, executemany):
    global inserts
    if statement.lstrip().upper().startswith("INSERT INTO TRAJECTORIES"):
        inserts += 1
        if inserts == hang_at:  # the row is written but its transaction is not committed
            print("INSIDE-TRANSACTION", flush=True)
            time.sleep(300)

collector = RolloutCollector(ScriptedLLMAgent(), sink=FanoutSink(JsonlStore(out), sql), num_envs=1, max_ticks=3,
                             run_name="kill")
collector.collect(episodes, seed=0)
print("FINISHED", flush=True)
"""


def test_sigkill_mid_write_leaves_no_partial_row_and_resume_does_not_duplicate(db_url, tmp_path):
    episodes, hang_at = 5, 3
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, db_url, str(out), str(episodes), str(hang_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        line = proc.stdout.readline()
        assert line.strip() == "INSIDE-TRANSACTION", f"child said {line!r}; stderr: {proc.stderr.read()}"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        watchdog.cancel()
        proc.stdout.close()
        proc.stderr.close()

    jsonl = {t.trajectory_id: t for t in JsonlStore(out).read()}
    assert len(jsonl) == hang_at  # the JSONL line of the third trajectory was written before its SQL row
    with SqlTrajectorySink(db_url) as sink:
        stored = {t.trajectory_id: t for t in sink.read()}
        assert sink.count() == len(stored) == hang_at - 1
    for tid, traj in stored.items():  # every row that exists is whole
        assert traj.to_dict()["steps"] == jsonl[tid].to_dict()["steps"]
        assert traj.episode_length == len(traj.steps) == 3
    assert set(jsonl) - set(stored) == {"kill-s2-m0"}  # the killed write left nothing

    # --resume: the missing row is filled in from the JSONL run, the rest are collected; nothing twice.
    sql = SqlTrajectorySink(db_url)
    summary = RolloutCollector(ScriptedLLMAgent(), sink=FanoutSink(JsonlStore(out), sql), num_envs=1, max_ticks=3,
                               run_name="kill").collect(episodes, seed=0, resume=True)
    assert summary.skipped_existing == hang_at and summary.completed == episodes - hang_at
    ids = sorted(sql.completed_ids())
    assert ids == sorted(f"kill-s{i}-m0" for i in range(episodes)) and sql.count() == episodes
    final = {t.trajectory_id: t for t in JsonlStore(out).read()}
    assert len(final) == episodes
    for traj in sql.read():
        assert traj.to_dict()["steps"] == final[traj.trajectory_id].to_dict()["steps"]
    sql.close()


def test_cli_db_option_with_resume_never_duplicates_rows(db_url, tmp_path, capsys):
    out = tmp_path / "cli-run"
    base = ["rollout", "--agent", "scripted", "--num-envs", "2", "--max-ticks", "3", "--seed", "0",
            "--out", str(out), "--db", db_url, "--no-progress"]

    def rows() -> list[str]:
        with SqlTrajectorySink(db_url) as sink:
            ids = [t.trajectory_id for t in sink.read()]
        assert len(ids) == len(set(ids))
        return sorted(ids)

    assert cli_main([*base, "--episodes", "2"]) == 0
    assert rows() == ["cli-run-s0-m0", "cli-run-s1-m0"]
    assert cli_main([*base, "--episodes", "4", "--resume"]) == 0
    assert rows() == [f"cli-run-s{i}-m0" for i in range(4)]
    assert cli_main([*base, "--episodes", "4", "--resume"]) == 0  # nothing left to do, nothing written twice
    assert rows() == [f"cli-run-s{i}-m0" for i in range(4)]
    execute(db_url, 'DELETE FROM trajectories WHERE "trajectoryId" = :id', id="cli-run-s3-m0")
    assert cli_main([*base, "--episodes", "4", "--resume"]) == 0  # a row lost from the database comes back
    assert rows() == [f"cli-run-s{i}-m0" for i in range(4)]
    assert len(list(JsonlStore(out).read())) == 4
    capsys.readouterr()


def test_bad_urls_and_missing_columns_are_clear_errors(tmp_path):
    from rlaif_gym.errors import ConfigError
    from rlaif_gym.storage import StorageError

    with pytest.raises(ConfigError, match="not a database URL"):
        SqlTrajectorySink("no url at all")
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute('CREATE TABLE trajectories (id TEXT PRIMARY KEY, "agentId" TEXT)')
    with pytest.raises(StorageError, match="trajectoryId"):
        SqlTrajectorySink(f"sqlite:///{db}")


def test_postgres_urls_use_psycopg3_and_keep_a_prisma_schema():
    url, schema = normalize_database_url("postgresql://user:secret@db.example:5432/babylon?schema=training")
    assert url.drivername == "postgresql+psycopg" and schema == "training" and "schema" not in url.query
    assert "secret" not in url.render_as_string(hide_password=True)
    assert normalize_database_url("postgresql+psycopg2://u@h/db")[0].drivername == "postgresql+psycopg2"


def test_prisma_schema_on_a_real_server(tmp_path):
    admin = _pg_admin_url()
    if admin is None:
        pytest.skip(PG_SKIP)
    schema = f"s_{uuid.uuid4().hex[:10]}"
    execute(admin, f'CREATE SCHEMA "{schema}"')
    try:
        (traj,) = collect(1, max_ticks=3, run_name="schema")
        with SqlTrajectorySink(f"{admin}?schema={schema}") as sink:
            sink.append(traj)
            assert sink.completed_ids() == {traj.trajectory_id}
        engine = sa.create_engine(normalize_database_url(admin)[0])
        with engine.connect() as conn:
            count = conn.execute(sa.text(f'SELECT COUNT(*) FROM "{schema}".trajectories')).scalar_one()
        engine.dispose()
        assert count == 1
    finally:
        execute(admin, f'DROP SCHEMA "{schema}" CASCADE')


def test_an_unreachable_server_is_a_clear_error_without_the_password():
    from rlaif_gym.storage import StorageError

    pytest.importorskip("psycopg", reason='PostgreSQL needs psycopg: pip install "rlaif-gym[sql]"')
    with pytest.raises(StorageError) as info:
        SqlTrajectorySink("postgresql://babylon:topsecret@127.0.0.1:1/babylon",
                          engine_options={"connect_args": {"connect_timeout": 5}})
    assert "127.0.0.1" in str(info.value) and "topsecret" not in str(info.value)
