"""Judge tapes: every judge call, content-addressed and stored in SQLite (standard library `sqlite3`).

Key. ``sha256`` of the canonical JSON of the call's *key material*. This is everything that decides
the verdict: tape format, scoring mode, template name and template sha256, judge model, sampling
parameters (temperature, max_tokens, top_p, seed), the sha256 of the rubric text, the sha256 of
each trajectory slice the judge saw (in order) with the trajectory ids, the repeat and attempt
numbers, and the sha256 of the rendered messages. Change any of these (a rubric edit, another
model, a new template version) and the key changes, so an old verdict can never be replayed for a
new question.

Each row keeps the key material, the outcome (``ok``, ``malformed``: an answer that is not a valid
verdict, ``error``: the call failed after the client's retries, ``deadline``: the call ran out of
time), the raw response, the error and the full `LLMCall` record (prompts, usage, latency; never
an API key, which the LLM layer does not record). Rubric texts are kept once each, by hash, for
provenance.

Each row also keeps a digest: sha256 of the canonical JSON of every other column. A row is read back
checked like input: its digest, its key (the sha256 of its material), its outcome and its record. A
verdict rewritten in the file, a row moved to another key, a column changed, a table altered or a
file that is not SQLite raises `TapeFormatError` (`TapeIntegrityError` for a changed row), one line
naming the file and the fix, never a replay of what the judge did not say. The digest catches edits
and corruption, not a forger who recomputes it: a tape is as trustworthy as whoever could write it.

Modes (`TapeMode`):

* ``record``: always ask the judge, and store (overwrite) the answer.
* ``replay``: never ask; every answer comes from the tape, so scores are reproduced exactly. A
  strict replay raises `MissingTapeError` for a call that the tape lacks; a lenient one marks it
  missing.
* ``rescore``: reuse the stored answers (``ok`` and ``malformed``), and ask only for the calls that
  the tape lacks or that failed (``error``, ``deadline``). After a rubric change, this re-judges
  stored trajectories without re-running the world, and only the calls whose rubric changed reach the
  server. The same mode resumes an interrupted batch.

Each answer is committed as it arrives (WAL journal), so a killed batch keeps its verdicts.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import RLAIFError
from ..trajectory import LLMCall
from .prompts import canonical_json

__all__ = ["OUTCOMES", "TAPE_FORMAT", "JudgeTape", "TapeEntry", "TapeFormatError", "TapeIntegrityError", "TapeMode",
           "row_digest", "tape_key"]

TAPE_FORMAT = 2
"""Bumped when the key material or the table layout changes (2: each row's digest)."""

OUTCOMES = ("ok", "malformed", "error", "deadline")
"""What a taped call can have ended in."""

_REUSABLE = frozenset({"ok", "malformed"})


class TapeMode(str, Enum):
    """How the judge uses its tape (see the module docstring)."""

    RECORD = "record"
    REPLAY = "replay"
    RESCORE = "rescore"


def tape_key(material: dict[str, Any]) -> str:
    """The content address of one judge call: sha256 of the canonical JSON of its key material."""
    return hashlib.sha256(canonical_json({"tape_format": TAPE_FORMAT, **material}).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TapeEntry:
    """One stored judge call."""

    key: str
    outcome: str
    response: str | None
    error: str | None
    call: LLMCall | None
    material: dict[str, Any]

    @property
    def reusable(self) -> bool:
        """True for answers the judge gave (a verdict or a malformed one), False for failed calls."""
        return self.outcome in _REUSABLE


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    mode TEXT NOT NULL,
    template TEXT NOT NULL,
    model TEXT NOT NULL,
    rubric_sha TEXT NOT NULL,
    trajectory_ids TEXT NOT NULL,
    material TEXT NOT NULL,
    outcome TEXT NOT NULL,
    response TEXT,
    error TEXT,
    call TEXT,
    recorded_at REAL NOT NULL,
    digest TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rubrics (sha TEXT PRIMARY KEY, text TEXT NOT NULL);
"""


class TapeFormatError(RLAIFError, ValueError):
    """The tape file was written by another tape format, is not a judge tape, or cannot be read as one (a table
    altered, SQLite's own error); the message names the file and the fix."""


class TapeIntegrityError(TapeFormatError):
    """A row of the tape is not as it was written: its digest, its key or a column does not check out (see the
    module docstring). Nothing of it is replayed.

    Attributes:
        path: the tape file.
        key: the row's key (as stored).
    """

    def __init__(self, path: str, key: str, problem: str) -> None:
        self.path, self.key = path, key
        super().__init__(f"judge tape {path}: the verdict row {str(key)[:16]}... {problem}, so it was changed after "
                         f"it was written and is not replayed. {_FIX}")


_FIX = ("Judge again: --tape-mode record (or --judge-tape-mode record) asks the judge anew and rewrites the tape, "
        "rlaif-gym eval --overwrite starts the eval's folder over, or pass another --tape file")

_COLUMNS = ("key", "mode", "template", "model", "rubric_sha", "trajectory_ids", "material", "outcome", "response",
            "error", "call", "recorded_at")
"""The columns a row's digest covers, in its order (every column but the digest)."""


def row_digest(row: tuple[Any, ...]) -> str:
    """sha256 of the canonical JSON of a row's columns (`_COLUMNS`, in that order)."""
    return hashlib.sha256(canonical_json(list(row)).encode("utf-8")).hexdigest()


class JudgeTape:
    """A judge tape in one SQLite file (``":memory:"`` for a throwaway one).

    Safe to share between the tasks of one event loop and between threads (one lock per tape).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = None  # type: ignore[assignment]
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            has_meta = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
            row = self._db.execute("SELECT value FROM meta WHERE name = 'tape_format'").fetchone() if has_meta else None
            if row is not None and row[0] != str(TAPE_FORMAT):
                raise TapeFormatError(f"judge tape {self.path} has format {row[0]}, this rlaif-gym reads and writes "
                                      f"format {TAPE_FORMAT}; use a new tape file (rlaif-gym eval --overwrite starts "
                                      "the eval's judge/ over), or the rlaif-gym version that wrote it")
            self._db.executescript(_SCHEMA)
            if row is None:
                with self._db:
                    self._db.execute("INSERT INTO meta VALUES ('tape_format', ?)", (str(TAPE_FORMAT),))
            self._db.execute(f"SELECT {', '.join(_COLUMNS)}, digest FROM calls LIMIT 0")  # every column is there
            self._db.execute("SELECT sha, text FROM rubrics LIMIT 0")
        except sqlite3.Error as exc:
            self.close()
            raise TapeFormatError(f"{self.path} is not a judge tape of format {TAPE_FORMAT} (SQLite said: {exc}); "
                                  f"{_FIX}") from None
        except TapeFormatError:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"JudgeTape({self.path!r})"

    def __enter__(self) -> JudgeTape:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database (idempotent)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None  # type: ignore[assignment]

    def _query(self, sql: str, args: tuple[Any, ...] = (), *, write: bool = False) -> list[tuple[Any, ...]]:
        """Run one statement under the lock (committed when `write`); SQLite's errors (a table altered, a file
        replaced or locked for long) become a one-line `TapeFormatError` naming the file."""
        try:
            with self._lock:
                if self._db is None:
                    raise TapeFormatError(f"judge tape {self.path} is closed; open it again (JudgeTape(path))")
                if write:
                    with self._db:
                        return self._db.execute(sql, args).fetchall()
                return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise TapeFormatError(f"judge tape {self.path} cannot be read or written (SQLite said: {exc}); {_FIX}"
                                  ) from None

    def __len__(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM calls")[0][0])

    def keys(self) -> list[str]:
        """Every stored key, sorted."""
        return [r[0] for r in self._query("SELECT key FROM calls ORDER BY key")]

    def get(self, key: str) -> TapeEntry | None:
        """The stored call with this key, or None; checked against its digest, its key and the outcomes.

        Raises:
            TapeIntegrityError: the row is not as it was written.
        """
        rows = self._query(f"SELECT {', '.join(_COLUMNS)}, digest FROM calls WHERE key = ?", (key,))
        if not rows:
            return None
        return self._entry(rows[0])

    def _entry(self, row: tuple[Any, ...]) -> TapeEntry:
        """A row (`_COLUMNS` then the digest) as a checked `TapeEntry`."""
        values, digest = row[:-1], row[-1]
        key = values[0]
        if digest != row_digest(values):
            raise TapeIntegrityError(self.path, key, "does not match its digest")
        try:
            material = json.loads(values[6])
        except (TypeError, ValueError, RecursionError):
            raise TapeIntegrityError(self.path, key, "holds key material that is not JSON") from None
        if not isinstance(material, dict) or tape_key(material) != key:
            raise TapeIntegrityError(self.path, key, "is filed under a key that its material does not hash to")
        outcome, response, error, call_json = values[7:11]
        if outcome not in OUTCOMES or not all(v is None or isinstance(v, str) for v in (response, error, call_json)):
            raise TapeIntegrityError(self.path, key, f"holds the outcome {str(outcome)[:40]!r} or columns of the "
                                     "wrong type")
        try:
            call = LLMCall.model_validate_json(call_json) if call_json else None
        except ValueError:  # pydantic's ValidationError is a ValueError
            raise TapeIntegrityError(self.path, key, "holds a call record that is not one") from None
        return TapeEntry(key, outcome, response, error, call, material)

    def put(self, key: str, material: dict[str, Any], outcome: str, *, response: str | None, error: str | None,
            call: LLMCall | None) -> None:
        """Store (or overwrite) one call, with its digest, and commit."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; expected one of {OUTCOMES}")
        row = (key, material["mode"], material["template"], material["model"], material["rubric_sha"],
               json.dumps(material["trajectory_ids"]), canonical_json(material), outcome, response, error,
               call.model_dump_json(by_alias=True) if call is not None else None, time.time())
        self._query("INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", (*row, row_digest(row)),
                    write=True)

    def put_rubric(self, sha: str, text: str) -> None:
        """Keep a rubric text by its hash (provenance: which rubric a key's `rubric_sha` names)."""
        self._query("INSERT OR IGNORE INTO rubrics VALUES (?, ?)", (sha, text), write=True)

    def rubric(self, sha: str) -> str | None:
        """A stored rubric text by hash."""
        rows = self._query("SELECT text FROM rubrics WHERE sha = ?", (sha,))
        return rows[0][0] if rows else None

    def entries(self) -> list[TapeEntry]:
        """Every stored call, by key (each checked as `get` checks it)."""
        rows = self._query(f"SELECT {', '.join(_COLUMNS)}, digest FROM calls ORDER BY key")
        return [self._entry(row) for row in rows]
