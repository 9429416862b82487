"""One writer per run folder: an advisory lock file that `rollout` and `eval` hold while they write.

`hold_run_folder(directory, what)` takes an exclusive `flock` on `directory/.rlaif-gym.lock` for as long as the
`with` block runs, and writes who holds it into the file (pid, host, command line with URL credentials removed,
start time). A second writer, in another process or another thread, is refused at once with
`RunFolderBusyError`: one line naming the holder and the fix. The operating system releases the lock when
the holding process ends, however it ends (a SIGKILL too), so a killed run never leaves a stale lock: the file
stays behind, and only a live `flock` on it counts. The file is never deleted (a deleted and recreated lock file
would let two writers lock two different files of one name).

The same thread may take the lock of a folder it holds again (nested: `rlaif-gym rollout` holds it around
`--overwrite`, the collection and the judge pass, and `RolloutCollector` takes it again for its sink); it is
released when the outermost `with` ends.

Where `fcntl` does not exist (Windows) or the file system refuses `flock` (some network mounts), the run
goes on unlocked with a `RunFolderLockWarning`: keep one writer per folder by hand there (docs/cli.md, "One
writer per run folder").

Standard library and `rlaif_gym.errors` only.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import inspect
import json
import os
import shlex
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ..errors import RLAIFError

try:
    import fcntl
except ImportError:  # Windows: see the module docstring
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "RunFolderBusyError", "RunFolderLockWarning", "hold_run_folder", "holds_run_folder"]

_F = TypeVar("_F", bound=Callable[..., Any])

LOCK_NAME = ".rlaif-gym.lock"
"""The lock file's name inside a run folder."""

_MAX_HOLDER_BYTES = 4096
"""The most of a lock file that is read back (it is input: another process wrote it)."""
_MAX_COMMAND_CHARS = 300
_SETTLE_S = 1.0
"""How long a refused writer waits for the holder's details to appear (a holder writes them just after it
locks; a file that still names a dead process then is a killed holder's, overwritten by the new one)."""


class RunFolderBusyError(RLAIFError, RuntimeError):
    """Another process (or thread) is writing to the run folder.

    Attributes:
        directory: the run folder.
        holder: what the holder wrote into the lock file (`pid`, `host`, `command`, `what`, `since`), or None
            when it had not written it yet.
    """

    def __init__(self, directory: Path, holder: dict[str, Any] | None, same_process: bool = False) -> None:
        self.directory, self.holder = directory, holder
        if same_process:
            who = f"another thread of this process (pid {os.getpid()})"
        elif holder is None:
            who = "another process (it has not written its pid into the lock file yet)"
        else:
            host = holder.get("host")
            where = f" on {host}" if host and host != socket.gethostname() else ""
            who = (f"{holder.get('what') or 'another run'} in process {holder.get('pid')}{where} "
                   f"({holder.get('command') or 'command line unknown'}, since {holder.get('since') or '?'})")
        stop = f", stop it (kill {holder['pid']})" if holder and isinstance(holder.get("pid"), int) else ""
        super().__init__(
            f"{directory} is being written by {who}; one run folder takes one writer at a time (two would store "
            f"episodes twice or mix two runs' files). Wait for it to finish{stop} or choose another run folder "
            f"(--out); the lock is {directory / LOCK_NAME}, released when that process ends")


class RunFolderLockWarning(UserWarning):
    """The run folder could not be locked (no `fcntl`, or the file system refuses `flock`): it runs unlocked."""


_held: dict[tuple[int, int], int] = {}
"""The lock files this process holds, by (device, inode), and the thread holding each: flock conflicts between
two descriptors of one process too, so a nested `hold_run_folder` of the same thread reuses the held one."""
_held_guard = threading.Lock()


def _redacted(arg: str) -> str:
    """A command-line word without a URL's user:password, query and fragment (the lock file is readable)."""
    if "://" not in arg:
        return arg
    head, _, url = arg.partition("=") if arg.startswith("--") and "=" in arg else ("", "", arg)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        clean = urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        clean = "<url>"
    return f"{head}={clean}" if head else clean


def _command() -> str:
    """This process's command line as a person would type it (`rlaif-gym rollout ...`, `train.py ...`), bounded."""
    argv = list(sys.argv) or [""]
    name = os.path.basename(argv[0])
    if name == "__main__.py":  # python -m rlaif_gym ... (or -m rlaif_gym.cli)
        name = "rlaif-gym" if "rlaif_gym" in argv[0] else "python -m ..."
    elif name in ("", "-c"):
        name = "python -c ..." if name else "python"
    text = " ".join([name, *(shlex.quote(_redacted(a)) for a in argv[1:])])
    return text if len(text) <= _MAX_COMMAND_CHARS else text[:_MAX_COMMAND_CHARS - 3] + "..."


def _read_holder(path: Path) -> dict[str, Any] | None:
    """What the lock file says about its holder, or None (empty, unreadable, not ours)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_HOLDER_BYTES)
        data = json.loads(raw.decode("utf-8", "replace"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or type(data.get("pid")) is not int or data["pid"] <= 0:
        return None
    return {"pid": data["pid"], **{k: str(data.get(k, ""))[:_MAX_COMMAND_CHARS] for k in ("host", "command", "what",
                                                                                          "since")}}


def _alive(holder: dict[str, Any] | None) -> bool:
    """Whether the holder's details name a live process (on another host: assumed alive)."""
    if holder is None:
        return False
    if holder.get("host") and holder["host"] != socket.gethostname():
        return True
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def _unlocked(directory: Path, why: str) -> None:
    warnings.warn(f"{directory} is not locked against a second writer ({why}); run one rlaif-gym command per run "
                  "folder at a time (docs/cli.md, 'One writer per run folder')", RunFolderLockWarning, stacklevel=4)


@contextlib.contextmanager
def hold_run_folder(directory: str | os.PathLike[str], what: str = "an rlaif-gym run") -> Iterator[Path]:
    """Hold the run folder `directory` (created if missing) for the `with` block; yields the lock file's path.

    Args:
        directory: the run folder (`--out`).
        what: what holds it, for the message another writer gets (e.g. "a rollout", "an eval").

    Raises:
        RunFolderBusyError: another process or thread holds it (at once: nothing waits).
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    if fcntl is None:
        _unlocked(folder, "this platform has no fcntl.flock")
        yield path
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    key = (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
    me = threading.get_ident()
    with _held_guard:
        owner = _held.get(key)
    if owner is not None:
        os.close(fd)
        if owner != me:
            raise RunFolderBusyError(folder, None, same_process=True)
        yield path  # nested: the outer `with` releases it
        return
    try:
        locked = _lock(fd, folder, path)
    except BaseException:
        os.close(fd)
        raise
    if locked:
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": _command(), "what": what,
                  "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode("utf-8"), 0)
    with _held_guard:
        _held[key] = me
    try:
        yield path
    finally:
        with _held_guard:
            del _held[key]
        try:
            if locked:
                os.ftruncate(fd, 0)  # still held: nobody reads a finished holder's details
        finally:
            os.close(fd)  # releases the flock


def holds_run_folder(parameter: str, what: str) -> Callable[[_F], _F]:
    """A decorator: the function holds the run folder given as its argument `parameter` while it runs
    (`hold_run_folder`), e.g. `run_decision_eval`'s `out`."""

    def decorate(func: _F) -> _F:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with hold_run_folder(signature.bind(*args, **kwargs).arguments[parameter], what):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _lock(fd: int, folder: Path, path: Path) -> bool:
    """Take the flock (True), or go on unlocked where the file system refuses flock (False, with a warning).

    Raises:
        RunFolderBusyError: another process holds it.
    """
    deadline = time.monotonic() + _SETTLE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            holder = _read_holder(path)
            if _alive(holder) or time.monotonic() >= deadline:
                raise RunFolderBusyError(folder, holder) from None
            time.sleep(0.05)  # the holder has locked but not yet written its details: read again
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                _unlocked(folder, f"the file system refused flock: {exc.strerror}")
                return False
            raise
