"""Trajectories on disk as JSON Lines: an append-only, crash-safe store and two single-file helpers.

The store is a directory of `trajectories-<part>.jsonl` files (one per writer process) plus a
`run.json` manifest. Each trajectory is one line written by a single `os.write` on an `O_APPEND`
descriptor and then fsynced, so a process killed at any moment leaves at most one torn line, and
only at the end of its own file. `repair()` cuts that line off; readers never skip anything
silently (a torn final line is announced with a `TornLineWarning`; any bad line before it raises
`CorruptLineError` naming the file and line number, and an unknown schema version raises
`SchemaVersionError` with the same location).

It imports the standard library, pydantic (through the schema),
`rlaif_gym.errors` and `rlaif_gym.trajectory` only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import RLAIFError
from ..trajectory import SCHEMA_VERSION, SchemaVersionError, Trajectory
from ._files import atomic_write_bytes, fsync_dir
from .lock import hold_run_folder

__all__ = [
    "MANIFEST_NAME",
    "SET_ASIDE_NAME",
    "CorruptLineError",
    "JsonlStore",
    "RepairReport",
    "StorageError",
    "TornLineWarning",
    "TornTailError",
    "read_jsonl",
    "write_jsonl",
]

MANIFEST_NAME = "run.json"
"""The run manifest's file name, beside the data files."""

SET_ASIDE_NAME = "retried-failures.jsonl"
"""Where `set_aside` keeps the records it takes out of the store (not a data file: readers skip it)."""

_FILE_PREFIX = "trajectories-"
_FILE_SUFFIX = ".jsonl"
_PART_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_CHUNK = 1 << 16
_ID_PREFIX = re.compile(rb'^\{"schemaVersion":(\d+),"trajectoryId":("(?:[^"\\]|\\.)*")')
"""The start of every line `Trajectory.to_json` writes: lets `completed_ids` skip the rest of the line."""


class StorageError(RLAIFError):
    """Base class of the storage errors."""


class CorruptLineError(StorageError, ValueError):
    """A complete line (one that is not the file's torn tail) is not a valid trajectory record.

    Attributes:
        path: the file holding the line.
        line_number: 1-based line number.
    """

    def __init__(self, path: str | os.PathLike[str], line_number: int, reason: str) -> None:
        self.path = str(path)
        self.line_number = line_number
        super().__init__(
            f"{self.path}:{line_number}: {reason}. Lines before the last are written whole and never torn, "
            "so this file was edited or damaged; fix or remove that line (repair() only cuts a torn last line)"
        )


class TornTailError(StorageError, RuntimeError):
    """`append` refused to write after a torn last line, which would bury it mid-file for good."""


class TornLineWarning(UserWarning):
    """A reader skipped a torn last line (a writer was killed mid-write); `repair()` removes it."""


@dataclass(frozen=True)
class RepairReport:
    """What `JsonlStore.repair` changed.

    Attributes:
        bytes_dropped: bytes cut off, all files together.
        lines_dropped: torn lines cut off (at most one per file).
        lines_completed: whole, valid last lines that only lacked their newline, which was added.
        files: bytes dropped per file path (only files that changed).
    """

    bytes_dropped: int = 0
    lines_dropped: int = 0
    lines_completed: int = 0
    files: dict[str, int] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------- helpers


def _is_json(raw: bytes) -> bool:
    """Whether a line parses at all: torn means unparseable (a non-object is corrupt, not torn).

    A line nested too deeply for the parser is not a torn write (no record is that deep): it is kept, and
    the readers report it as corrupt.
    """
    try:
        json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both are
        return False
    except RecursionError:
        return True
    return True


_TOO_DEEP = "nested deeper than the JSON reader handles (no trajectory record nests more than a few levels)"


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _schema_problem(exc: Exception) -> str:
    """One line for a record that is JSON but not a trajectory: the first bad field as written in the file
    (``steps[0].reward``), what it needs and what it holds, and how many other fields are bad."""
    if not isinstance(exc, ValidationError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.get("loc", ())).lstrip(".") or "record"
    more = f" (and {len(errors) - 1} more bad field{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"field {where}: {first.get('msg')}, got {_shown(first.get('input'))}{more}"


def _check_version(data: dict[str, Any], path: Path, line_number: int) -> None:
    version = data.get("schemaVersion", data.get("schema_version", SCHEMA_VERSION))
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path}:{line_number}: trajectory schema_version {version!r} is not supported by this reader "
            f"(expects {SCHEMA_VERSION}); upgrade rlaif-gym to read it, or re-export the file with the version "
            "that wrote it"
        )


def _lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (1-based line number, raw line with its newline if any, is_last) for every line of a file.

    A file ending with a newline has no empty line after it; a file whose last line lacks the
    newline yields that line too (the caller decides whether it is torn).
    """
    with path.open("rb") as handle:
        previous: bytes | None = None
        number = 0
        for raw in handle:
            if previous is not None:
                yield number, previous, False
            number += 1
            previous = raw
        if previous is not None:
            yield number, previous, True


def _parse_line(path: Path, number: int, raw: bytes, is_last: bool,
                validate: bool) -> Trajectory | dict[str, Any] | None:
    """The one reading policy shared by every reader (see the module docstring); None: a torn tail."""
    body = raw[:-1] if raw.endswith(b"\n") else raw
    try:
        data = json.loads(body)
    except RecursionError:
        raise CorruptLineError(path, number, f"not a trajectory record: {_TOO_DEEP}") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
        if is_last:
            warnings.warn(
                f"{path}:{number}: skipped a torn last line ({len(raw)} bytes, a writer was killed mid-write); "
                "JsonlStore.repair() removes it",
                TornLineWarning,
                stacklevel=4,
            )
            return None
        raise CorruptLineError(path, number, f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CorruptLineError(path, number, f"expected a JSON object, got {type(data).__name__}")
    _check_version(data, path, number)
    if not validate:
        return data
    try:
        return Trajectory.from_json(body)  # the schema's own reader: our layout, or the original's
    except RecursionError:  # a stepsJson nested too deeply
        raise CorruptLineError(path, number, f"not a valid trajectory record: {_TOO_DEEP}") from None
    except ValueError as exc:  # pydantic's ValidationError, or a stepsJson that is not JSON
        raise CorruptLineError(path, number, f"not a valid trajectory record: {_schema_problem(exc)}") from None


def _record_id(data: dict[str, Any], path: Path, number: int) -> str:
    value = data.get("trajectoryId", data.get("trajectory_id"))
    if not isinstance(value, str):
        raise CorruptLineError(path, number, "the record has no string trajectoryId")
    return value


def _parse_lines(path: Path, validate: bool) -> Iterator[Trajectory | dict[str, Any]]:
    for number, raw, is_last in _lines(path):
        value = _parse_line(path, number, raw, is_last, validate)
        if value is not None:
            yield value


def _find_last_newline(fd: int, end: int) -> int:
    """Offset of the last b"\\n" strictly before `end`, or -1; reads backwards in chunks."""
    position = end
    while position > 0:
        start = max(0, position - _CHUNK)
        chunk = os.pread(fd, position - start, start)
        index = chunk.rfind(b"\n")
        if index >= 0:
            return start + index
        position = start
    return -1


# ------------------------------------------------------------------------------------------- store


class JsonlStore:
    """An append-only directory of trajectories, one JSON line each, safe against a killed writer.

    Give each writer process its own `part`, so that no two processes append to one file. Several
    threads of one process may share a store: `append` and `repair` hold a lock.

    Args:
        directory: created if missing.
        part: this writer's file is `trajectories-<part>.jsonl` (letters, digits, `_`, `.`, `-`).
    """

    def __init__(self, directory: str | os.PathLike[str], part: str = "0") -> None:
        if not _PART_RE.match(part):
            raise ValueError(f"part must match {_PART_RE.pattern} (it names a file), got {part!r}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.part = part
        self.path = self.directory / f"{_FILE_PREFIX}{part}{_FILE_SUFFIX}"
        """The file this store appends to."""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JsonlStore({str(self.directory)!r}, part={self.part!r})"

    def hold(self, what: str = "an rlaif-gym run") -> contextlib.AbstractContextManager[Path]:
        """Hold the store's directory as its one writer for a `with` block (`storage.lock.hold_run_folder`):
        `RolloutCollector` holds it while it collects, so a second collection into the same directory (another
        `--resume` of one killed run, say) is refused at once instead of storing every missing episode twice.

        Raises:
            RunFolderBusyError: another process or thread holds it.
        """
        return hold_run_folder(self.directory, what)

    # -- writing

    def append(self, trajectory: Trajectory) -> None:
        """Write one trajectory as one line, durably, before returning.

        The line and its newline go out in a single `os.write` on an `O_APPEND` descriptor, then
        `os.fsync`: a crash leaves either the whole line or a torn tail that `repair()` removes.

        Raises:
            TypeError: `trajectory` is not a `Trajectory`.
            TornTailError: the file ends in a torn line (call `repair()` first; writing after it
                would turn it into a corrupt line in the middle of the file).
        """
        if not isinstance(trajectory, Trajectory):
            raise TypeError(f"append takes a Trajectory, got {type(trajectory).__name__}")
        data = (trajectory.to_json() + "\n").encode("utf-8")
        with self._lock:
            created = not self.path.exists()
            fd = os.open(self.path, os.O_APPEND | os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and not self._ends_with_newline(size):
                    raise TornTailError(
                        f"{self.path} ends in a torn line (a writer was killed mid-write); call repair() before "
                        "appending, so that the torn bytes are cut off instead of buried mid-file"
                    )
                written = os.write(fd, data)
                while written < len(data):  # a short write (disk nearly full): finish the line, never tear it
                    step = os.write(fd, data[written:])
                    if step == 0:
                        raise OSError(f"could not finish writing a line to {self.path}")
                    written += step
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.directory)

    def _ends_with_newline(self, size: int) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(size - 1)
            return handle.read(1) == b"\n"

    # -- recovery

    def repair(self) -> RepairReport:
        """Cut every file back to its last complete, valid line; never drop a complete valid line.

        Call it when a run starts or resumes, before appending, and never while another process
        is appending to the store.

        A torn last line is one that does not parse as JSON (a killed `os.write` leaves a prefix
        of the line, and no strict prefix of a JSON object is valid JSON); readers skip exactly
        the same line. A last line that parses but lacks only its newline is kept and completed. Lines before the
        last are not examined: a bad one there is corruption, which `read()` reports.

        Returns:
            What was dropped or completed, per file and in total.
        """
        dropped: dict[str, int] = {}
        lines_dropped = lines_completed = 0
        with self._lock:
            for path in self.files():
                with path.open("r+b") as handle:
                    fd = handle.fileno()
                    size = os.fstat(fd).st_size
                    if size == 0:
                        continue
                    if os.pread(fd, 1, size - 1) == b"\n":
                        start = _find_last_newline(fd, size - 1) + 1
                        if _is_json(os.pread(fd, size - 1 - start, start)):
                            continue
                    else:
                        start = _find_last_newline(fd, size) + 1
                        if _is_json(os.pread(fd, size - start, start)):
                            os.pwrite(fd, b"\n", size)  # the file is ours and not being appended to
                            os.fsync(fd)
                            lines_completed += 1
                            continue
                    os.ftruncate(fd, start)
                    os.fsync(fd)
                    dropped[str(path)] = size - start
                    lines_dropped += 1
        return RepairReport(sum(dropped.values()), lines_dropped, lines_completed, dropped)

    # -- reading

    def files(self) -> list[Path]:
        """Every data file of the store (all parts), in sorted name order."""
        return sorted(self.directory.glob(f"{_FILE_PREFIX}*{_FILE_SUFFIX}"))

    def read(self, validate: bool = True) -> Iterator[Trajectory | dict[str, Any]]:
        """Stream every stored trajectory: files in sorted name order, lines in file order.

        A torn last line of a file is skipped with a `TornLineWarning` (it is an unfinished write,
        not data); nothing else is ever skipped.

        Args:
            validate: True yields `Trajectory` models; False yields the raw JSON dicts (faster,
                for tools that need a few fields; the schema version is still checked).

        Raises:
            CorruptLineError: a line before the last is not valid JSON or not a trajectory.
            SchemaVersionError: a line has an unknown `schemaVersion` (file and line in the message).
        """
        for path in self.files():
            yield from _parse_lines(path, validate)

    def completed_ids(self) -> set[str]:
        """The ids of every stored trajectory, so that a resumed run writes none of them again.

        Fast for many thousands of long trajectories: a line before the last that is in the layout
        `append` writes (starts `{"schemaVersion":1,"trajectoryId":"...",` and ends with `}`) has
        only its id decoded; other lines, and every file's last line (which may be torn), are
        parsed whole with `json.loads`. No model validation is done: `read()` is the full check.
        A torn last line is skipped with a `TornLineWarning`.
        """
        ids: set[str] = set()
        for path in self.files():
            for number, raw, is_last in _lines(path):
                match = None if is_last else _ID_PREFIX.match(raw)
                if match and int(match[1]) == SCHEMA_VERSION and raw.endswith(b"}\n"):
                    ids.add(json.loads(match[2]))
                    continue
                data = _parse_line(path, number, raw, is_last, validate=False)
                if data is not None:
                    ids.add(_record_id(data, path, number))
        return ids

    def failed_ids(self) -> set[str]:
        """The ids of stored trajectories whose `finalStatus` is "failed" (what `--retry-failed` replays).

        Only lines that contain `"failed"` at all are parsed (without model validation).
        """
        ids: set[str] = set()
        for path in self.files():
            for number, raw, is_last in _lines(path):
                if b'"failed"' not in raw:
                    continue
                data = _parse_line(path, number, raw, is_last, validate=False)
                if isinstance(data, dict) and data.get("finalStatus", data.get("final_status")) == "failed":
                    ids.add(_record_id(data, path, number))
        return ids

    def set_aside(self, ids: Iterable[str]) -> int:
        """Take the records of `ids` out of the store, so that a resumed run plays those episodes again.

        Nothing is deleted: the lines are first appended (and fsynced) to `SET_ASIDE_NAME` beside the
        data files, then every data file that held one is rewritten without it, atomically (temp file
        and rename). A process killed in between leaves the line in both places; the next resume sets
        it aside again. Like `repair`, call it only while no other process appends to the store.

        Returns:
            The number of lines taken out.
        """
        wanted = set(ids)
        if not wanted:
            return 0
        moved = 0
        with self._lock:
            for path in self.files():
                keep: list[bytes] = []
                out: list[bytes] = []
                for number, raw, is_last in _lines(path):
                    match = None if is_last else _ID_PREFIX.match(raw)
                    if match:
                        record_id = json.loads(match[2])
                    else:
                        data = _parse_line(path, number, raw, is_last, validate=False)
                        record_id = None if data is None else _record_id(data, path, number)
                    if record_id in wanted:
                        out.append(raw if raw.endswith(b"\n") else raw + b"\n")
                    else:
                        keep.append(raw)  # byte for byte (a torn tail stays a tail for repair())
                if not out:
                    continue
                aside = self.directory / SET_ASIDE_NAME
                fd = os.open(aside, os.O_APPEND | os.O_CREAT | os.O_WRONLY, 0o644)
                try:
                    os.write(fd, b"".join(out))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                atomic_write_bytes(path, b"".join(keep))
                fsync_dir(self.directory)
                moved += len(out)
        return moved

    def __iter__(self) -> Iterator[Trajectory | dict[str, Any]]:
        return self.read()

    # -- manifest

    @property
    def manifest_path(self) -> Path:
        """Where the run manifest lives."""
        return self.directory / MANIFEST_NAME

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Store the run's plan and config atomically (temp file + `os.replace`), replacing any old one.

        A resumed run reads it back to check that it continues the same run.
        """
        if not isinstance(manifest, dict):
            raise TypeError(f"the manifest is a dict, got {type(manifest).__name__}")
        text = json.dumps(manifest, ensure_ascii=False, indent=2, sort_keys=True, allow_nan=False) + "\n"
        atomic_write_bytes(self.manifest_path, text.encode("utf-8"))

    def read_manifest(self) -> dict[str, Any] | None:
        """The stored manifest, or None when the run has none yet."""
        try:
            text = self.manifest_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise StorageError(f"{self.manifest_path} is not valid JSON ({type(exc).__name__}: {exc}); it is written "
                               "atomically, so it was edited by hand or damaged") from None
        if not isinstance(data, dict):
            raise StorageError(f"{self.manifest_path} holds a {type(data).__name__}, expected a JSON object")
        return data


# ------------------------------------------------------------------------------------ single files


def write_jsonl(path: str | os.PathLike[str], trajectories: Iterable[Trajectory]) -> int:
    """Write trajectories to one JSONL file atomically (readers see the old file or the whole new one).

    Returns:
        The number of trajectories written.
    """
    lines = []
    for trajectory in trajectories:
        if not isinstance(trajectory, Trajectory):
            raise TypeError(f"write_jsonl takes Trajectory objects, got {type(trajectory).__name__}")
        lines.append(trajectory.to_json() + "\n")
    atomic_write_bytes(Path(path), "".join(lines).encode("utf-8"))
    return len(lines)


def read_jsonl(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Read one JSONL file, in our layout or the original camelCase / database-row layout.

    Same policy as `JsonlStore.read`: a torn last line is skipped with a `TornLineWarning`, any
    other bad line raises `CorruptLineError` or `SchemaVersionError` with file and line number.
    """
    return [t for t in _parse_lines(Path(path), validate=True) if isinstance(t, Trajectory)]
