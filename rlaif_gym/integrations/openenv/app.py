"""The OpenEnv server as a FastAPI app (`create_app`): the pieces of the other modules, put together.

`create_app` checks its options, builds the session pool and the app, and adds the body limit, the
error handlers, the HTTP routes (`http_routes`), OpenEnv's info routes (here) and the WebSocket
(`ws_routes`). docs/openenv.md describes the protocol.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from openenv.core.env_server.mcp_types import JsonRpcErrorCode, JsonRpcRequest, JsonRpcResponse
from openenv.core.env_server.types import EnvironmentMetadata, HealthResponse, SchemaResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..._version import __version__
from ...config import RLAIFEnvConfig
from ...envs.text_env import warm_up
from ...errors import ConfigError
from .env import DEFAULT_DECISION_MAX_TICKS, DEFAULT_DECISION_TIMEOUT_S, ENV_NAME, RLAIFOpenEnv
from .errors import _http_exception, _invalid_request
from .http_routes import add_http_routes
from .sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TIMEOUT_S, SessionPool
from .tokens import SnapshotCodec, _default_codec
from .wire import MAX_REPLY_LENGTH, RLAIFAction, RLAIFObservation, RLAIFState
from .ws_routes import add_websocket_route

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest HTTP request body read, bytes: the longest reply (`MAX_REPLY_LENGTH` characters) fits even as
escaped JSON (6 bytes a character); a larger body gets 413 before it is read."""


class _BodyLimit:
    """ASGI middleware: an HTTP request body over `limit` bytes is answered 413 before the app reads it.

    A declared ``Content-Length`` over the limit is refused before a byte of the body is read; a body
    without one (chunked) is counted as it streams in and refused once past the limit. A body within
    the limit is read here, whole, and handed to the app unchanged.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[Any], Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers", ()) if k.lower() == b"content-length"), None)
        if declared is not None and declared.strip().isdigit() and int(declared) > self.limit:
            await self._refuse(send, f"{int(declared)} bytes")
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before its body arrived
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send, f"more than {self.limit} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, delivered = b"".join(chunks), False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _refuse(self, send: Callable[[Any], Any], size: str) -> None:
        payload = {"detail": {
            "code": "PAYLOAD_TOO_LARGE", "error_type": "PayloadTooLarge",
            "message": f"the request body has {size}; this server reads at most {self.limit} bytes per HTTP request "
                       f"(max_body_bytes), so it was not read. A reply of up to {MAX_REPLY_LENGTH:,} characters fits; "
                       "send less, or raise the limit: create_app(max_body_bytes=...)"}}
        data = json.dumps(payload).encode("utf-8")
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": data})


def create_app(*, max_sessions: int = DEFAULT_MAX_SESSIONS,
               session_timeout_s: float | None = DEFAULT_SESSION_TIMEOUT_S,
               env_config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
               snapshot_key: bytes | str | None = None,
               clock: Callable[[], float] = time.monotonic,
               max_sessions_per_client: int | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               decision_max_ticks: int = DEFAULT_DECISION_MAX_TICKS,
               decision_timeout_s: float = DEFAULT_DECISION_TIMEOUT_S,
               warm: bool = True) -> FastAPI:
    """The OpenEnv server of `RLAIF-Text-v0` as a FastAPI app (run it with uvicorn, or `rlaif-gym serve`).

    It has no authentication: serve it on 127.0.0.1 (the default of `serve`) or a private network only.

    Args:
        max_sessions: sessions open at once; one more gets ``CAPACITY_REACHED`` (HTTP 503).
        session_timeout_s: idle seconds before a session is closed (None: never).
        env_config: the env config of every session (a reset may override fields for its episode).
        snapshot_key: signs snapshot tokens (see `SnapshotCodec`; default `$RLAIF_SNAPSHOT_KEY` or random).
        clock: time source of HTTP-session expiry (tests pass a fake one).
        max_sessions_per_client: sessions one client address may hold at once (None: any number up to
            `max_sessions`); past it, ``CAPACITY_REACHED`` for that client only.
        max_body_bytes: largest HTTP request body; a larger one gets 413 before it is read.
        decision_max_ticks: ticks one ``reset(decision=...)`` may play looking for its decision point; past
            it, a ``SearchLimitError`` (``VALIDATION_ERROR``, HTTP 422).
        decision_timeout_s: seconds one such search may take; past it, the same error. A search also stops
            when its client goes away (WebSocket closed, HTTP connection dropped).
        warm: play one tick of an env of `env_config` before returning (`warm_up`), so the world kernels
            are loaded, or compiled on a machine's first run (minutes), before any client waits on them: a
            first `step` would otherwise outlast openenv-core's 60 s message timeout on a fresh install.

    Raises:
        ConfigError: a bad `env_config`, `max_sessions`, `session_timeout_s`, `max_sessions_per_client`,
            `max_body_bytes`, `decision_max_ticks` or `decision_timeout_s` (before anything is served).
    """
    base = RLAIFEnvConfig.from_any(env_config)
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1024:
        raise ConfigError(f"max_body_bytes must be an integer >= 1024, got {max_body_bytes!r}")
    codec = SnapshotCodec(snapshot_key) if snapshot_key is not None else _default_codec()
    limits = {"decision_max_ticks": decision_max_ticks, "decision_timeout_s": decision_timeout_s}
    probe = RLAIFOpenEnv(base, codec=codec, **limits)  # checks the limits before anything is served
    pool = SessionPool(lambda: RLAIFOpenEnv(base, codec=codec, **limits), max_sessions, session_timeout_s, clock,
                       max_per_client=max_sessions_per_client)
    if warm:
        warm_up(base)

    app = FastAPI(title=f"rlaif-gym OpenEnv server ({ENV_NAME})", version=__version__, lifespan=_closing(pool),
                  description="OpenEnv's /ws protocol and HTTP routes over the RLAIF text env, plus snapshot and "
                              "restore. See docs/openenv.md.")
    app.state.pool = pool
    app.add_middleware(_BodyLimit, limit=max_body_bytes)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    add_http_routes(app, pool)
    _add_info_routes(app, probe)
    add_websocket_route(app, pool)
    return app


def _closing(pool: SessionPool) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The app's lifespan: nothing at startup; at shutdown, close every session of `pool`."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        pool.close_all()

    return lifespan


def _add_info_routes(app: FastAPI, probe: RLAIFOpenEnv) -> None:
    """Add OpenEnv's info routes to `app`: health, metadata (`probe`'s), schema and the (empty) MCP endpoint."""

    @app.get("/health", tags=["Health"])
    async def health() -> HealthResponse:
        """``{"status": "healthy"}`` while the server runs."""
        return HealthResponse()

    @app.get("/metadata", tags=["Environment Info"])
    async def metadata() -> EnvironmentMetadata:
        """Name, description and version of the environment."""
        return probe.get_metadata()

    @app.get("/schema", tags=["Schema"])
    async def schema() -> SchemaResponse:
        """JSON schemas of the action, the observation and the state."""
        return SchemaResponse(action=RLAIFAction.model_json_schema(),
                              observation=RLAIFObservation.model_json_schema(),
                              state=RLAIFState.model_json_schema())

    @app.post("/mcp", tags=["MCP"])
    async def mcp(request: Request) -> dict[str, Any]:
        """OpenEnv's JSON-RPC endpoint: this environment exposes no MCP tools (``tools/list`` is empty)."""
        try:
            rpc = JsonRpcRequest(**json.loads(await request.body()))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return JsonRpcResponse.error_response(JsonRpcErrorCode.PARSE_ERROR).model_dump()
        except (ValidationError, TypeError) as exc:
            return JsonRpcResponse.error_response(JsonRpcErrorCode.INVALID_REQUEST,
                                                  f"Invalid request: {exc}").model_dump()
        if rpc.method == "tools/list":
            return JsonRpcResponse.success(result={"tools": []}, request_id=rpc.id).model_dump()
        return JsonRpcResponse.error_response(
            JsonRpcErrorCode.METHOD_NOT_FOUND,
            f"{rpc.method!r}: this environment has no MCP tools; drive it over /ws (reset, step, state, snapshot, "
            "restore)", request_id=rpc.id).model_dump()
