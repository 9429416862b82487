"""Atomic file replacement: readers see the old file or the new one, never a mix."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_replace", "atomic_write_bytes", "fsync_dir"]


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in `directory` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_replace(path: str | os.PathLike[str], write: Callable[[str], None]) -> Path:
    """Have `write(tmp_path)` write a temp file beside `path`, fsync it, then rename it over `path`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace `path` with `data` atomically."""
    return atomic_replace(path, lambda tmp: Path(tmp).write_bytes(data))
