"""`OpenAIChatClient`: any OpenAI-compatible chat server (vLLM, llama.cpp, Ollama, hosted APIs).

Requests go through `llm.transport.HTTPTransport` (a connection of its own per request, framed by
`h11`: the `[openai]` extra, imported when the first call is made, so constructing a client needs neither
package nor a connection), which binds each answer to its request by construction and bounds it
(`max_response_bytes`, default 8 MiB; see that module for what it refuses and why). Bodies go through
`orjson`: the `openai` SDK's client CPU per call bounded the collector, whose event loop is one thread
(docs/benchmarks.md). The request
and the errors follow the SDK's conventions (the body fields, ``Authorization: Bearer <key>``, the error
type names and messages), so records and servers see what they saw before; proxies come from the
environment (``HTTP(S)_PROXY``, ``NO_PROXY``), read once per client. The base URL, model
and key come from the arguments or from `OPENAI_BASE_URL`, `RLAIF_MODEL` / `OPENAI_MODEL` and
`OPENAI_API_KEY`; local servers accept any key, so a missing key becomes "EMPTY". The key is held
only by the HTTP client: `describe()` and every record omit it. Credentials embedded in the base URL
(``http://user:pass@host/v1``) are stripped, with a warning, before the HTTP client sees the URL:
an HTTP client would otherwise send them as HTTP Basic auth instead of the key, and a server that echoes its
headers would hand base64(user:pass) back into every record.

Servers echo what they receive. `redact` masks each known secret as ``***``: the key, the URL
password and user:password pair, plain and in base64 (standard and URL-safe). This client masks its
own error messages and logs with it, always before it cuts them (a secret across a cut would leave its
first characters, which no mask recognises); `RecordingClient` applies it to every string field of every
completion (reply, reasoning, model, finish reason), so a key echoed in any field is never stored.

Retries: timeouts, connection errors, refused answers (`TransportError`), 429 and 5xx are retried with
exponential backoff and jitter (drawn from a seeded generator); 4xx errors are not, nor is a server that
keeps connections open against ``Connection: close``. A connection that delivered two different answers
is retried at once, on a new connection. Every resend counts in `attempts`, and
the error of each failed attempt travels with the outcome (`Completion.attempt_errors`,
`LLMError.attempt_errors`) into the call's record. A server that rejects the `logprobs` option is asked
again without it, and remembered.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import os
import warnings
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np

from .._version import __version__ as _pkg_version
from ..errors import DependencyNotInstalled, install_hint
from .transport import (
    MAX_RESPONSE_BYTES,
    HTTPTransport,
    TransportError,
    check_max_response_bytes,
    environment_proxy,
    within,
)
from .types import AttemptError, Completion, LLMError, SamplingParams

__all__ = ["OpenAIChatClient", "redact_url", "require_http_client"]

_EXTRA_HINT = install_hint("openai")
_STATUS_ERRORS = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                  404: "NotFoundError", 409: "ConflictError", 422: "UnprocessableEntityError", 429: "RateLimitError"}
"""The error type recorded for an HTTP status (the names the `openai` SDK gave them; >= 500 is
"InternalServerError", any other "APIStatusError")."""
_SHOWN_CHARS = 200
"""The most characters of a malformed answer shown in its error message (after its secrets are masked)."""

_log = logging.getLogger(__name__)


def redact_url(url: str | None) -> str | None:
    """The URL without any user:password part (safe to record)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _strip_credentials(url: str | None) -> tuple[str | None, list[str]]:
    """(the URL without its user:password part, query and fragment kept; the secrets it held)."""
    if not url:
        return url, []
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, []
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    secrets = [v for v in {userinfo, unquote(userinfo), password, unquote(password),
                           f"{unquote(user)}:{unquote(password)}"} if v and len(v) >= 4]
    return urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment)), secrets


def require_http_client(what: str = "OpenAIChatClient") -> tuple[Any, Any]:
    """The `h11` and `orjson` modules, or `DependencyNotInstalled` naming the `[openai]` extra.

    The command line calls it before anything starts (a missing extra would otherwise fail every call).
    """
    try:
        import h11
        import orjson
    except ImportError as exc:
        raise DependencyNotInstalled(f"{what} needs the h11 and orjson packages ({exc.name} is missing): "
                                     f"{_EXTRA_HINT}") from None
    return h11, orjson


class _HTTPStatusError(Exception):
    """A non-2xx answer (internal: `complete` turns it into `LLMError`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status
        self.type = _STATUS_ERRORS.get(status) or ("InternalServerError" if status >= 500 else "APIStatusError")


def _loads(raw: bytes, orjson: Any) -> Any:
    """Decoded JSON; the standard library decides where orjson is stricter (a lone surrogate escape such as
    ``\\ud800``, which JSON allows and `RecordingClient` repairs). Raises ValueError when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            return json.loads(raw)
        except RecursionError:  # a body nested past the parser's depth: malformed, like any other non-JSON
            raise ValueError("malformed response: the JSON is nested too deeply to read") from None


def _status_message(status: int, raw: bytes) -> str:
    """The SDK's error text: "Error code: 503", then " - <error.message>" when the body carries one."""
    message = f"Error code: {status}"
    try:
        body = json.loads(raw.decode("utf-8", "replace").strip())
    except (ValueError, RecursionError):
        return message
    error = body.get("error", body) if isinstance(body, dict) else None
    detail = error.get("message") if isinstance(error, dict) else None
    return f"{message} - {detail}" if isinstance(detail, str) and detail else message


def _secret_forms(secret: str) -> set[str]:
    """The forms in which a server may echo `secret`: plain, and base64 (standard and URL-safe, padded or
    not, and the prefix that stays the same when more text follows, as in a Basic-auth pair); and the plain
    secret as JSON and Python escape it (a quote or backslash in it), as an error message may show a body."""
    raw = secret.encode("utf-8")
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]}
    for chunk in (raw, raw[: len(raw) - len(raw) % 3]):
        if len(chunk) < 3:
            continue
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(chunk).decode("ascii")
            forms |= {encoded, encoded.rstrip("=")}
    return {f for f in forms if len(f) >= 4}


class OpenAIChatClient:
    """Chat completions against an OpenAI-compatible endpoint, with timeouts and retries.

    Args:
        model: model name on the server (or RLAIF_MODEL / OPENAI_MODEL).
        base_url: e.g. http://127.0.0.1:8000/v1 (or OPENAI_BASE_URL; default the OpenAI API).
        api_key: the key (or OPENAI_API_KEY; "EMPTY" when neither is set). Never recorded.
        timeout: seconds per attempt.
        max_retries: retries after the first attempt, for transient failures only.
        backoff: first backoff in seconds; doubles per retry, with up to 50% jitter.
        jitter_seed: seeds the jitter generator (reproducible schedules in tests).
        extra_body: extra JSON fields for the server (e.g. vLLM's {"return_token_ids": True}); they win
            over the fields this client sets.
        max_response_bytes: the largest answer body read, in bytes (default 8 MiB); a larger one is a
            retryable `ResponseTooLargeError`.
    """

    DEFAULT_BASE_URL = "https://api.openai.com/v1"
    def __init__(self, model: str | None = None, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 60.0, max_retries: int = 3, backoff: float = 0.5, jitter_seed: int = 0,
                 extra_body: dict[str, Any] | None = None, max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.model = model or os.environ.get("RLAIF_MODEL") or os.environ.get("OPENAI_MODEL") or ""
        if not self.model:
            raise ValueError("OpenAIChatClient needs a model name: pass model=... or set RLAIF_MODEL")
        self.base_url, url_secrets = _strip_credentials(base_url or os.environ.get("OPENAI_BASE_URL") or None)
        if url_secrets:
            warnings.warn(f"credentials in the base URL were removed: requests go to {self.base_url} and are "
                          "authenticated with the API key only (pass it as api_key or OPENAI_API_KEY)",
                          UserWarning, stacklevel=2)
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        secrets = [*url_secrets, *([self._api_key] if len(self._api_key) >= 4 and self._api_key != "EMPTY" else [])]
        self._secret_forms = sorted({f for secret in secrets for f in _secret_forms(secret)}, key=len, reverse=True)
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.max_response_bytes = check_max_response_bytes(max_response_bytes)
        self.extra_body = dict(extra_body or {})
        self._rng = np.random.default_rng(jitter_seed)
        self._transport: HTTPTransport | None = None
        self._orjson: Any = None
        self._logprobs_supported = True

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatClient(model={self.model!r}, base_url={redact_url(self.base_url)!r})"

    def describe(self) -> dict[str, Any]:
        """Kind, model, endpoint and limits; never the key."""
        return {"kind": "openai-compatible", "model": self.model, "base_url": redact_url(self.base_url),
                "timeout_s": self.timeout, "max_retries": self.max_retries,
                "max_response_bytes": self.max_response_bytes}

    @property
    def endpoint(self) -> str:
        """The chat-completions URL: the base URL's path plus ``/chat/completions`` (its query kept)."""
        parts = urlsplit(self.base_url or self.DEFAULT_BASE_URL)
        return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/chat/completions", parts.query, ""))

    def _get_transport(self) -> HTTPTransport:
        """The transport, made on the first call (it holds no connection, so any event loop may use it)."""
        if self._transport is None:
            _, self._orjson = require_http_client()
            url = self.endpoint
            headers = {"Authorization": f"Bearer {self._api_key}", "Content-Type": "application/json",
                       "Accept": "application/json", "User-Agent": f"rlaif-gym/{_pkg_version}"}
            # Proxies are read once, here, not per request.
            self._transport = HTTPTransport(url, headers, proxy=environment_proxy(url),
                                            max_response_bytes=self.max_response_bytes)
        return self._transport

    async def aclose(self) -> None:
        """Nothing to release: every request's connection is closed when its answer is read. Kept so that callers
        (the collector) may close any client alike."""

    def _body(self, messages: list[dict[str, str]], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages, "model": self.model}
        for name in ("temperature", "max_tokens", "top_p", "seed"):
            value = getattr(params, name)
            if value is not None:
                body[name] = value
        if params.logprobs and self._logprobs_supported:
            # top_logprobs=0: the chosen tokens' logprobs only. llama-cpp-python's server returns no
            # logprobs at all unless top_logprobs is set (OpenAI and vLLM accept 0).
            body["logprobs"], body["top_logprobs"] = True, 0
        extra = self.extra_body
        if extra:
            body.update(extra)
        return body

    async def _post(self, body: dict[str, Any], attempt: int) -> Completion:
        """One attempt: the completion of a 2xx answer; `_HTTPStatusError` for any other status, ValueError for a
        malformed body."""
        transport, orjson = self._get_transport(), self._orjson
        try:
            data = orjson.dumps(body)
        except TypeError:  # e.g. a lone surrogate in a prompt: the standard library escapes it
            data = json.dumps(body).encode("ascii")

        def accept(status: int, raw: bytes) -> Completion:
            if _log.isEnabledFor(logging.DEBUG):
                _log.debug("POST %s: HTTP %d, %d bytes", redact_url(transport.url), status, len(raw))
            if not 200 <= status < 300:
                raise _HTTPStatusError(status, _status_message(status, raw))
            return self._completion(_loads(raw, orjson), attempt)

        return await within(self.timeout, transport.post(data, accept))

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        """One completion, retried on transient failures; raises `LLMError` when it gives up.

        Every attempt counts against `max_retries`. The errors of the failed attempts come back as
        `attempt_errors`, on the completion or on the `LLMError`."""
        require_http_client()
        attempt = 0
        failures: list[AttemptError] = []
        while True:
            attempt += 1
            body = self._body(messages, params)
            at_once = False
            try:
                completion = await self._post(body, attempt)
                return dataclasses.replace(completion, attempt_errors=tuple(failures)) if failures else completion
            except _HTTPStatusError as exc:
                status, reason = exc.status_code, self._message(exc)
                if status == 400 and "logprobs" in body and "logprob" in str(exc).lower():
                    self._logprobs_supported = False
                    _log.warning("the server at %s refused logprobs (%s); calls go on without them",
                                 redact_url(self.base_url), reason[:120])
                    attempt -= 1
                    continue
                failure = AttemptError(exc.type, reason, status, retryable=status >= 500 or status == 429)
            except TransportError as exc:  # an answer refused: a second one, too large, encoded, unclosed
                failure = AttemptError(type(exc).__name__, self._message(exc), None, retryable=exc.retryable)
                at_once = exc.at_once
            except (asyncio.TimeoutError, TimeoutError):
                failure = AttemptError("APITimeoutError", "Request timed out.", None, retryable=True)
            except OSError as exc:  # refused, reset, closed before the answer was complete, a bad host
                failure = AttemptError("APIConnectionError", "Connection error.", None, retryable=True)
                _log.debug("connection error on %s: %s", redact_url(self.base_url), self._message(exc))
            except ValueError as exc:  # a malformed answer (not JSON, no choices, ...)
                failure = AttemptError(type(exc).__name__, self._message(exc), None, retryable=True)
            if not failure.retryable or attempt > self.max_retries:
                raise LLMError(failure.message, type_=failure.type, status_code=failure.status_code,
                               retryable=failure.retryable, attempts=attempt,
                               attempt_errors=tuple(failures)) from None
            failures.append(failure)
            delay = 0.0 if at_once else self.backoff * (2 ** (attempt - 1)) * (1.0 + 0.5 * self._rng.random())
            if _log.isEnabledFor(logging.INFO):
                _log.info("call to %s failed (%s); retry %d of %d in %.2f s", redact_url(self.base_url),
                          failure.message[:160], attempt, self.max_retries, delay)
            await asyncio.sleep(delay)

    def redact(self, text: str) -> str:
        """`text` with every form of this client's secrets masked as ``***`` (servers echo them)."""
        for form in self._secret_forms:
            if form in text:
                text = text.replace(form, "***")
        return text

    def _message(self, exc: Exception) -> str:
        """The error text, cut to 500 characters, with this client's secrets masked."""
        return self.redact(str(exc) or type(exc).__name__)[:500]

    def _completion(self, response: Any, attempts: int) -> Completion:
        """Normalise a decoded response; any malformed part raises ValueError, which the caller retries."""
        try:
            return self._parse(response, attempts)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            raise ValueError(f"malformed response: {type(exc).__name__}: {exc}") from None

    def _parse(self, response: Any, attempts: int) -> Completion:
        choices = response.get("choices") if isinstance(response, dict) else None
        if not choices or not isinstance(choices, list):
            # Masked before the cut: a secret across the cut would leave its first characters in the message.
            raise ValueError(f"malformed response: no choices in {self.redact(str(response))[:_SHOWN_CHARS]!r}")
        choice = choices[0]
        message = choice.get("message")
        text = message.get("content") if message is not None else None
        if not isinstance(text, str):
            raise ValueError(f"malformed response: message content is {type(text).__name__}, expected text")
        logprobs = None
        content = choice.get("logprobs")
        content = content.get("content") if isinstance(content, dict) else None
        if content:  # as sent: `RecordingClient` checks them (finite, in range) and drops a list that is not
            logprobs = [t["logprob"] for t in content]
        usage = response.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        token_ids = choice.get("token_ids")
        prompt_ids = response.get("prompt_token_ids")
        reasoning = message.get("reasoning_content")
        # As sent: masked, repaired, checked and bounded by `RecordingClient`, the one boundary every field passes.
        return Completion(
            text=text, model=response.get("model") or self.model,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
            total_tokens=usage.get("total_tokens"), prompt_token_ids=prompt_ids,
            completion_token_ids=token_ids, completion_logprobs=logprobs, reasoning=reasoning,
            attempts=attempts,
        )
