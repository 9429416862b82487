"""The server's HTTP routes for clients without WebSockets: OpenEnv's, each with a ``session_id``.

``POST /reset`` (or ``/restore``) without a ``session_id`` opens a session and returns its id;
``/step``, ``/state``, ``/snapshot``, ``/restore`` and ``/close`` take it; ``/sessions`` says the
capacity (docs/openenv.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse

from .env import RLAIFOpenEnv
from .errors import UnknownSessionError, _http_error
from .sessions import SessionPool, _call
from .wire import (
    HTTPResetRequest,
    HTTPRestoreRequest,
    HTTPSessionRequest,
    HTTPStepRequest,
    RLAIFObservation,
    _action,
    _result,
)


def add_http_routes(app: FastAPI, pool: SessionPool) -> None:
    """Add the session routes over `pool` to `app`: reset, step, state, snapshot, restore, close, sessions."""

    @app.post("/reset", tags=["Environment Control"])
    async def reset(body: HTTPResetRequest, request: Request) -> JSONResponse:
        """Reset a session (or open one: no ``session_id``); returns the observation and the ``session_id``."""
        kwargs = body.model_dump(exclude_unset=True, exclude={"session_id"})
        return await _start(body.session_id, lambda env: env.reset(**kwargs), request)

    async def _start(session_id: str | None, fn: Callable[[RLAIFOpenEnv], RLAIFObservation],
                     request: Request) -> JSONResponse:
        """Reset or restore `session_id`, or a new session when None (closed again if that first call fails)."""
        session = None
        try:
            client = request.client.host if request.client is not None else None
            session = pool.open("http", client) if session_id is None else pool.get(session_id)
            obs = await _call(session, lambda: fn(session.env), client_left=lambda: _client_left(request))
            return JSONResponse({**_result(obs), "session_id": session.id})  # rendered here: a failure is answered
        except Exception as exc:
            if session_id is None and session is not None:  # the client never learnt its id: free the slot
                pool.close(session.id)
            return _http_error(exc)

    @app.post("/step", tags=["Environment Control"])
    async def step(body: HTTPStepRequest) -> JSONResponse:
        """One step of a session: ``{"session_id": ..., "action": {"reply": "..."}}``."""
        try:
            session = pool.get(body.session_id)
            action = _action(body.action)
            obs = await _call(session, lambda: session.env.step(action))
            return JSONResponse(_result(obs))
        except Exception as exc:
            return _http_error(exc)

    @app.get("/state", tags=["State Management"])
    async def state(session_id: str = Query(..., description="The session")) -> JSONResponse:
        """The session's `RLAIFState`."""
        try:
            session = pool.get(session_id)
            value = await _call(session, lambda: session.env.state)
            return JSONResponse(value.model_dump(mode="json"))
        except Exception as exc:
            return _http_error(exc)

    @app.post("/snapshot", tags=["State Management"])
    async def snapshot(body: HTTPSessionRequest) -> JSONResponse:
        """The session's episode as a token: ``{"snapshot": TOKEN, "tick": n, "episode_id": ...}``."""
        try:
            session = pool.get(body.session_id)
            token, st = await _call(session, lambda: (session.env.snapshot(), session.env.state))
            return JSONResponse({"snapshot": token, "tick": st.tick, "episode_id": st.episode_id})
        except Exception as exc:
            return _http_error(exc)

    @app.post("/restore", tags=["State Management"])
    async def restore(body: HTTPRestoreRequest, request: Request) -> JSONResponse:
        """Continue from a token, in ``session_id`` or a new session; returns the observation and ``session_id``."""
        return await _start(body.session_id, lambda env: env.restore(body.snapshot, episode_id=body.episode_id),
                            request)

    @app.post("/close", tags=["Environment Control"])
    async def close(body: HTTPSessionRequest) -> JSONResponse:
        """Close a session and free its slot."""
        try:
            pool.get(body.session_id)  # an HTTP session: a WebSocket's ends with its connection
        except UnknownSessionError as exc:
            return _http_error(exc)
        pool.close(body.session_id)
        return JSONResponse({"closed": body.session_id, **pool.status()})

    @app.get("/sessions", tags=["Environment Info"])
    async def sessions() -> dict[str, Any]:
        """Capacity: active, max and available sessions, and the idle timeout."""
        pool.reap()
        return pool.status()


async def _client_left(request: Request) -> None:
    """Return once the client has closed its connection (the ASGI server's ``http.disconnect``); never, if the
    server cannot say. The body has been read by then, so the next message is the disconnect."""
    try:
        while (await request.receive())["type"] != "http.disconnect":
            pass
    except Exception:  # no word from the server: the request runs to its own bounds
        await asyncio.Event().wait()
