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

__all__ = ["OUTCOMES", "TAPE_FORMAT", "JudgeTape", "TapeEntry", "TapeFormatError", "TapeMode", "tape_key"]

TAPE_FORMAT = 1
"""Bumped when the key material or the table layout changes."""

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
    recorded_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS rubrics (sha TEXT PRIMARY KEY, text TEXT NOT NULL);
"""


class TapeFormatError(RLAIFError, ValueError):
    """The tape file was written by another tape format (or is not a judge tape)."""


class JudgeTape:
    """A judge tape in one SQLite file (``":memory:"`` for a throwaway one).

    Safe to share between the tasks of one event loop and between threads (one lock per tape).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE name = 'tape_format'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise TapeFormatError(f"{self.path} is not a judge tape (SQLite said: {exc}); pass another --tape "
                                  "path") from exc
        if row is None:
            with self._db:
                self._db.execute("INSERT INTO meta VALUES ('tape_format', ?)", (str(TAPE_FORMAT),))
        elif row[0] != str(TAPE_FORMAT):
            raise TapeFormatError(f"judge tape {self.path} has format {row[0]}, this rlaif-gym writes format "
                                  f"{TAPE_FORMAT}; use a new tape file, or the rlaif-gym version that wrote it")

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

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def keys(self) -> list[str]:
        """Every stored key, sorted."""
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT key FROM calls ORDER BY key")]

    def get(self, key: str) -> TapeEntry | None:
        """The stored call with this key, or None."""
        with self._lock:
            row = self._db.execute("SELECT key, outcome, response, error, call, material FROM calls WHERE key = ?",
                                   (key,)).fetchone()
        if row is None:
            return None
        call = LLMCall.model_validate_json(row[4]) if row[4] else None
        return TapeEntry(row[0], row[1], row[2], row[3], call, json.loads(row[5]))

    def put(self, key: str, material: dict[str, Any], outcome: str, *, response: str | None, error: str | None,
            call: LLMCall | None) -> None:
        """Store (or overwrite) one call and commit."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; expected one of {OUTCOMES}")
        row = (key, material["mode"], material["template"], material["model"], material["rubric_sha"],
               json.dumps(material["trajectory_ids"]), canonical_json(material), outcome, response, error,
               call.model_dump_json(by_alias=True) if call is not None else None, time.time())
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", row)

    def put_rubric(self, sha: str, text: str) -> None:
        """Keep a rubric text by its hash (provenance: which rubric a key's `rubric_sha` names)."""
        with self._lock, self._db:
            self._db.execute("INSERT OR IGNORE INTO rubrics VALUES (?, ?)", (sha, text))

    def rubric(self, sha: str) -> str | None:
        """A stored rubric text by hash."""
        with self._lock:
            row = self._db.execute("SELECT text FROM rubrics WHERE sha = ?", (sha,)).fetchone()
        return row[0] if row else None

    def entries(self) -> list[TapeEntry]:
        """Every stored call, by key."""
        return [e for e in (self.get(k) for k in self.keys()) if e is not None]
