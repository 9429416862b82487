"""The open sessions of one server (`SessionPool`): each with its own `RLAIFOpenEnv`, capped and expiring."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from ...errors import ConfigError
from .env import RLAIFOpenEnv
from .errors import ServerAtCapacityError, UnknownSessionError

DEFAULT_MAX_SESSIONS = 64
"""Sessions open at once, unless `rlaif-gym serve --max-sessions` says otherwise."""
DEFAULT_SESSION_TIMEOUT_S = 120.0
"""Seconds without a request after which a session is closed (`rlaif-gym serve --session-timeout`)."""


@dataclass
class _Session:
    id: str
    env: RLAIFOpenEnv
    transport: str  # "ws" (ends with its connection) or "http" (ends on close or expiry)
    last_used: float
    client: str | None = None  # the client's address (host), for the per-client cap
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionPool:
    """The open sessions of one server, at most `max_sessions`, each with its own `RLAIFOpenEnv`.

    HTTP sessions idle for more than `timeout_s` are closed at the next request that opens or looks
    up a session; a WebSocket session ends with its connection (the server closes a connection idle
    that long itself). A session belongs to one transport: an HTTP route never drives a WebSocket's
    session.

    Args:
        factory: builds the environment of a new session.
        max_sessions: the cap.
        timeout_s: idle seconds before a session is closed (None: never).
        clock: the time source of expiry (monotonic seconds; tests pass a fake one).
        max_per_client: sessions one client address may hold at once (None: up to `max_sessions`),
            so that one client cannot take every slot.
    """

    def __init__(self, factory: Callable[[], RLAIFOpenEnv], max_sessions: int, timeout_s: float | None,
                 clock: Callable[[], float] = time.monotonic, max_per_client: int | None = None) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ConfigError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigError(f"session timeout must be > 0 seconds (or None: never), got {timeout_s}")
        if max_per_client is not None and (isinstance(max_per_client, bool) or not isinstance(max_per_client, int)
                                           or max_per_client < 1):
            raise ConfigError(f"max_sessions_per_client must be an integer >= 1 or None, got {max_per_client!r}")
        self.factory, self.max_sessions, self.timeout_s, self.clock = factory, max_sessions, timeout_s, clock
        self.max_per_client = max_per_client
        self._sessions: dict[str, _Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, transport: str, client: str | None = None) -> _Session:
        """A new session of `client` (its address), or `ServerAtCapacityError` when `max_sessions` are open
        or `client` holds `max_per_client` of them."""
        self.reap()
        expiry = f"wait for an idle one to expire ({self.timeout_s:g} s), " if self.timeout_s else ""
        if len(self._sessions) >= self.max_sessions:
            n = len(self._sessions)
            raise ServerAtCapacityError(
                f"the server is at capacity: {n} of {self.max_sessions} sessions are open (max_sessions = "
                f"{self.max_sessions}). Close sessions you no longer use (the client's close(), or POST /close), "
                f"{expiry}or restart the server with more: rlaif-gym serve --max-sessions {2 * self.max_sessions}",
                n, self.max_sessions)
        if self.max_per_client is not None and client is not None:
            mine = sum(1 for s in self._sessions.values() if s.client == client)
            if mine >= self.max_per_client:
                raise ServerAtCapacityError(
                    f"this client ({client}) holds {mine} of the {self.max_per_client} sessions one client may have "
                    f"open (max_sessions_per_client; {len(self._sessions)} of {self.max_sessions} are open in all). "
                    f"Close sessions you no longer use (the client's close(), or POST /close), {expiry}or restart "
                    f"the server with more: rlaif-gym serve --max-sessions-per-client {2 * self.max_per_client}",
                    len(self._sessions), self.max_sessions)
        session = _Session(uuid.uuid4().hex, self.factory(), transport, self.clock(), client)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: object, transport: str = "http") -> _Session:
        """The open `transport` session `session_id` (its idle clock restarts), or `UnknownSessionError`."""
        self.reap()
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is not None and session.transport != transport:
            raise UnknownSessionError(f"session {session_id!r} is a {session.transport} session; it is driven only "
                                      f"over its own {'WebSocket' if session.transport == 'ws' else 'HTTP'} "
                                      "connection. Open an HTTP session with POST /reset (without a session_id)")
        if session is None:
            expiry = f", expired after {self.timeout_s:g} s without a request" if self.timeout_s else ""
            raise UnknownSessionError(f"no open session {session_id!r}: it was closed{expiry}, or never opened. "
                                      "Open one with POST /reset (without a session_id)")
        session.last_used = self.clock()
        return session

    def close(self, session_id: str) -> bool:
        """Close a session; False when it was not open."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        session.env.close()
        return True

    def close_all(self) -> None:
        """Close every session (server shutdown)."""
        for session_id in list(self._sessions):
            self.close(session_id)

    def reap(self) -> list[str]:
        """Close the HTTP sessions idle for more than `timeout_s`; returns their ids."""
        if self.timeout_s is None:
            return []
        now = self.clock()
        stale = [s.id for s in self._sessions.values()
                 if s.transport == "http" and now - s.last_used > self.timeout_s]
        for session_id in stale:
            self.close(session_id)
        return stale

    def status(self) -> dict[str, Any]:
        """Capacity in numbers: active, max and free sessions, the per-client cap and the idle timeout."""
        n = len(self._sessions)
        return {"active_sessions": n, "max_sessions": self.max_sessions, "available": self.max_sessions - n,
                "max_sessions_per_client": self.max_per_client, "session_timeout_s": self.timeout_s}


async def _call(session: _Session, fn: Callable[[], Any],
                client_left: Callable[[], Awaitable[object]] | None = None) -> Any:
    """`fn()` (a call into the session's env) on a worker thread, one call at a time per session.

    A thread cannot be stopped from outside, so the env stops itself: when `client_left()` completes (the
    client closed its connection) or this request is cancelled, the env's `cancel` event is set, and a
    decision search stops at its next tick (`SearchCancelled`). The session stays locked until the thread is
    done, so the next request never meets an env still in use.
    """
    async with session.lock:  # one request at a time per session; the env runs off the event loop
        cancel = session.env.cancel
        cancel.clear()
        work = asyncio.ensure_future(run_in_threadpool(fn))
        watch = asyncio.ensure_future(client_left()) if client_left is not None else None
        try:
            if watch is not None:
                await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
                if not work.done():  # the client left: nobody waits for the answer
                    cancel.set()
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            cancel.set()
            with contextlib.suppress(Exception):
                await asyncio.shield(work)  # hold the lock until the env is free
            raise
        finally:
            if watch is not None:
                watch.cancel()
