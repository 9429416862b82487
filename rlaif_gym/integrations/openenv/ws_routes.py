"""The server's WebSocket at ``/ws``: OpenEnv's session protocol, plus ``snapshot`` and ``restore``.

One connection is one session, driven by ``{"type": ..., "data": {...}}`` messages; every message
gets an answer, and a bad one leaves the session usable (docs/openenv.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, WebSocket
from openenv.core.env_server.types import (
    WSCloseMessage,
    WSErrorCode,
    WSErrorResponse,
    WSObservationResponse,
    WSResetMessage,
    WSStateMessage,
    WSStateResponse,
    WSStepMessage,
)
from starlette.websockets import WebSocketDisconnect

from ...errors import ConfigError
from .errors import _TOO_DEEP, ServerAtCapacityError, _error_payload
from .sessions import SessionPool, _call, _Session
from .wire import WSRestoreMessage, WSSnapshotMessage, _action, _result

_REFUSED_WAIT_S = 10.0
"""How long a WebSocket refused for capacity waits for its first message, to answer it with the error."""


def add_websocket_route(app: FastAPI, pool: SessionPool) -> None:
    """Add ``/ws`` to `app`: each connection a session of `pool` (refused with the capacity error when full)."""

    @app.websocket("/ws")
    async def websocket_endpoint(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            session = pool.open("ws", websocket.client.host if websocket.client is not None else None)
        except ServerAtCapacityError as exc:
            await _refuse(websocket, exc)
            return
        try:
            await _serve_session(websocket, session, pool)
        except WebSocketDisconnect:
            pass
        finally:
            pool.close(session.id)
            await _close_quietly(websocket)


async def _close_quietly(websocket: WebSocket, code: int = 1000, reason: str = "") -> None:
    """Close a WebSocket that the client may already have closed."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await websocket.close(code=code, reason=reason)


async def _refuse(websocket: WebSocket, exc: ServerAtCapacityError) -> None:
    """Answer the refused client's first message with the capacity error, then close (1013: try again later).

    Waiting for a message first makes the error the reply to the client's first request, so every
    OpenEnv client shows it; an error sent before that can be lost when the close frame wins the race.
    """
    with contextlib.suppress(asyncio.TimeoutError, WebSocketDisconnect, RuntimeError, OSError):
        message = await asyncio.wait_for(websocket.receive(), timeout=_REFUSED_WAIT_S)
        if message["type"] != "websocket.disconnect":
            await websocket.send_text(WSErrorResponse(data=_error_payload(exc)).model_dump_json())
    await _close_quietly(websocket, code=1013, reason="server at capacity")


async def _serve_session(websocket: WebSocket, session: _Session, pool: SessionPool) -> None:
    """Answer the session's messages until it closes, its client leaves or it idles past `pool.timeout_s`.

    A reader task takes the client's messages while one is being answered, so that a client that leaves
    mid-request is seen at once: the request in progress is cancelled (a decision search stops at its next
    tick) instead of running on for nobody.
    """
    inbox: asyncio.Queue[dict] = asyncio.Queue(maxsize=1)  # the reader waits while a message is pending
    gone = asyncio.Event()
    reader = asyncio.create_task(_read(websocket, inbox, gone))
    try:
        while True:
            try:
                message = await asyncio.wait_for(inbox.get(), timeout=pool.timeout_s)
            except asyncio.TimeoutError:
                err = {"code": WSErrorCode.SESSION_ERROR.value, "error_type": "SessionExpired",
                       "message": f"session closed after {pool.timeout_s:g} s without a message; reconnect, then "
                                  "reset (or restore a snapshot)"}
                await websocket.send_text(WSErrorResponse(data=err).model_dump_json())
                return
            if message["type"] == "websocket.disconnect" or gone.is_set():
                return
            raw = message.get("text")
            if raw is None and message.get("bytes") is not None:
                raw = message["bytes"].decode("utf-8", errors="replace")
            session.last_used = pool.clock()
            reply, done = await _handle(session, raw or "", gone.wait)
            if gone.is_set():
                return
            if reply is not None:
                await websocket.send_text(reply)
            if done:
                return
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def _read(websocket: WebSocket, inbox: asyncio.Queue[dict], gone: asyncio.Event) -> None:
    """Put the client's messages into `inbox`, and set `gone` the moment it disconnects."""
    while True:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError, OSError):
            message = {"type": "websocket.disconnect"}
        if message["type"] == "websocket.disconnect":
            gone.set()
            await inbox.put(message)
            return
        await inbox.put(message)


async def _handle(session: _Session, raw: str,
                  client_left: Callable[[], Awaitable[object]] | None = None) -> tuple[str | None, bool]:
    """One WebSocket message: (the reply, whether the session ends). Every message gets an answer.

    `client_left` completes when the client disconnects: a reset in progress (a decision search can take
    seconds) is then cancelled (`_call`); the other calls take milliseconds.
    """
    try:
        msg = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or nested past the parser's depth
        reason = _TOO_DEEP if isinstance(exc, RecursionError) else f"invalid JSON: {exc}"
        err = {"code": WSErrorCode.INVALID_JSON.value, "error_type": type(exc).__name__,
               "message": f'{reason}; send e.g. {{"type": "step", "data": {{"reply": "..."}}}}'}
        return WSErrorResponse(data=err).model_dump_json(), False
    kind = msg.get("type") if isinstance(msg, dict) else None
    env = session.env
    try:
        if kind == "reset":
            data = WSResetMessage(**msg).data
            obs = await _call(session, lambda: env.reset(**data), client_left)
            return WSObservationResponse(data=_result(obs)).model_dump_json(), False
        if kind == "step":
            action = _action(WSStepMessage(**msg).data)
            obs = await _call(session, lambda: env.step(action))
            return WSObservationResponse(data=_result(obs)).model_dump_json(), False
        if kind == "state":
            WSStateMessage(**msg)
            value = await _call(session, lambda: env.state)
            return WSStateResponse(data=value.model_dump(mode="json")).model_dump_json(), False
        if kind == "snapshot":
            WSSnapshotMessage(**msg)
            token, st = await _call(session, lambda: (env.snapshot(), env.state))
            data = {"snapshot": token, "tick": st.tick, "episode_id": st.episode_id}
            return json.dumps({"type": "snapshot", "data": data}), False
        if kind == "restore":
            data = WSRestoreMessage(**msg).data
            unknown = set(data) - {"snapshot", "episode_id"}
            if unknown or "snapshot" not in data:
                raise ConfigError(f'restore takes data {{"snapshot": TOKEN, "episode_id": optional}}, got keys '
                                  f"{sorted(data)}")
            obs = await _call(session, lambda: env.restore(data["snapshot"], episode_id=data.get("episode_id")))
            return WSObservationResponse(data=_result(obs)).model_dump_json(), False
        if kind == "close":
            WSCloseMessage(**msg)
            return None, True
    except Exception as exc:  # a bad request is answered; the session goes on
        return WSErrorResponse(data=_error_payload(exc)).model_dump_json(), False
    shown = repr(kind)[:80] if isinstance(kind, str) else f"of JSON type {type(kind).__name__}"
    err = {"code": WSErrorCode.UNKNOWN_TYPE.value, "error_type": "UnknownMessageType",
           "message": f"unknown message type {shown}; this server takes reset, step, state, snapshot, restore "
                      'and close, as {"type": "reset", "data": {...}}'}
    return WSErrorResponse(data=err).model_dump_json(), False
