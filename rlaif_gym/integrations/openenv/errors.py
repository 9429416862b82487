"""The OpenEnv server's errors: its exceptions, and their form on the wire (docs/openenv.md).

An error answer is OpenEnv's error data (``code``, ``message``) plus ``error_type``, the exception's
class: in a WebSocket ``error`` message, or as an HTTP body's ``detail`` with the code's status.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.types import WSErrorCode
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...errors import ConfigError, InvalidActionError, ResetNeeded, RLAIFError, SearchLimitError

logger = logging.getLogger(__package__)  # rlaif_gym.integrations.openenv: one logger for the whole server


class SnapshotTokenError(RLAIFError, ValueError):
    """A snapshot token that this server cannot restore: malformed, altered, or signed with another key."""


class ServerAtCapacityError(RLAIFError, RuntimeError):
    """Every session slot of the server is taken; the message says the cap and how to raise it.

    Attributes:
        active_sessions: sessions open when the request came.
        max_sessions: the server's cap.
    """

    def __init__(self, message: str, active_sessions: int, max_sessions: int) -> None:
        self.active_sessions, self.max_sessions = active_sessions, max_sessions
        super().__init__(message)


class UnknownSessionError(RLAIFError, LookupError):
    """A request named a session that is not open (closed, expired or never opened)."""


class RemoteEnvError(RLAIFError, RuntimeError):
    """The server answered a client request with an error; the session stays usable unless it was closed.

    Attributes:
        code: OpenEnv's error code (``VALIDATION_ERROR``, ``EXECUTION_ERROR``, ``CAPACITY_REACHED``,
            ``SESSION_ERROR``, ``UNKNOWN_TYPE``, ``INVALID_JSON``).
        error_type: the server-side exception class (``InvalidActionError``, ``ConfigError``,
            ``ResetNeeded``, ``SnapshotTokenError``, ``SearchLimitError``, ``ValidationError``, ...).
        data: the whole error payload.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = dict(data)
        self.code = str(self.data.get("code", "UNKNOWN"))
        self.error_type = str(self.data.get("error_type", ""))
        self.message = str(self.data.get("message", "unknown error"))
        kind = f", {self.error_type}" if self.error_type else ""
        super().__init__(f"{self.message} (server error {self.code}{kind})")


class RemoteCapacityError(RemoteEnvError):
    """The server refused a new session: it is at its `max_sessions` (``CAPACITY_REACHED``)."""


# -- errors on the wire ---------------------------------------------------------------------------

_HTTP_STATUS = {"VALIDATION_ERROR": 422, "EXECUTION_ERROR": 409, "CAPACITY_REACHED": 503, "SESSION_ERROR": 404,
                "UNKNOWN_TYPE": 400, "INVALID_JSON": 400, "PAYLOAD_TOO_LARGE": 413, "INTERNAL_ERROR": 500}
_TOO_DEEP = ("the request is nested too deeply to read (JSON arrays or objects inside each other more than "
             "Python's parser handles); no message of this protocol nests more than a few levels")


def _readable(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "message"
        parts.append(f"{where}: {err.get('msg')}")
    return "; ".join(parts)


def _error_payload(exc: BaseException) -> dict[str, Any]:
    """OpenEnv's error data for an exception: code, message, and our `error_type`."""
    if isinstance(exc, ServerAtCapacityError):
        return {"code": WSErrorCode.CAPACITY_REACHED.value, "error_type": type(exc).__name__, "message": str(exc),
                "active_sessions": exc.active_sessions, "max_sessions": exc.max_sessions}
    if isinstance(exc, ValidationError):  # the errors without the input, which may be megabytes
        return {"code": WSErrorCode.VALIDATION_ERROR.value, "error_type": "ValidationError",
                "message": f"invalid message: {_readable(exc)}",
                "errors": jsonable_encoder(exc.errors(include_url=False, include_input=False))}
    if isinstance(exc, RecursionError):  # a deeply nested value that reached a recursive reader: the input's fault
        return {"code": WSErrorCode.VALIDATION_ERROR.value, "error_type": "RecursionError", "message": _TOO_DEEP}
    if isinstance(exc, SearchLimitError):  # a decision search past its bound: the request asked for too much
        return {"code": WSErrorCode.VALIDATION_ERROR.value, "error_type": type(exc).__name__, "message": str(exc),
                "reason": exc.reason, "ticks_searched": exc.ticks_searched}
    if isinstance(exc, (ConfigError, InvalidActionError, SnapshotTokenError)):
        code = WSErrorCode.VALIDATION_ERROR
    elif isinstance(exc, ResetNeeded):
        code = WSErrorCode.EXECUTION_ERROR
    elif isinstance(exc, UnknownSessionError):
        code = WSErrorCode.SESSION_ERROR
    else:
        logger.error("internal error while serving a request", exc_info=exc)
        return {"code": "INTERNAL_ERROR", "error_type": type(exc).__name__,
                "message": f"internal error: {type(exc).__name__}: {exc}. This is a bug in rlaif-gym, not in your "
                           "request: please report it with the request and the server log"}
    return {"code": code.value, "error_type": type(exc).__name__, "message": str(exc)}


def _http_error(exc: BaseException) -> JSONResponse:
    payload = _error_payload(exc)
    return JSONResponse({"detail": payload}, status_code=_HTTP_STATUS.get(payload["code"], 500))


_HTTP_CODES = {400: "INVALID_JSON", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "PAYLOAD_TOO_LARGE"}


# -- FastAPI's own refusals, in this format -------------------------------------------------------


async def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """A body or query that fails the route's model, in this server's error format."""
    # Without each error's input: it echoes the body, which may be megabytes.
    errors = jsonable_encoder([{k: v for k, v in e.items() if k not in ("input", "url")} for e in exc.errors()])
    where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors)
    return JSONResponse({"detail": {"code": WSErrorCode.VALIDATION_ERROR.value, "error_type": "ValidationError",
                                    "message": f"invalid request: {where}", "errors": errors}}, status_code=422)


async def _http_exception(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """FastAPI's own refusals (a body it cannot parse, an unknown route) in this server's error format."""
    message = str(exc.detail)
    if exc.status_code == 400:  # FastAPI's "There was an error parsing the body": e.g. JSON nested too deeply
        message = (f"the body could not be parsed as JSON: {_TOO_DEEP}, or not JSON this server can read; send a "
                   'JSON object such as {"session_id": "...", "action": {"reply": "..."}}')
    detail = {"code": _HTTP_CODES.get(exc.status_code, "HTTP_ERROR"), "error_type": "HTTPException",
              "message": message}
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))
