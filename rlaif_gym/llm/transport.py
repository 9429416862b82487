"""`HTTPTransport`: one POST to a model server and its answer, bound to each other and bounded.

Why a layer over the HTTP library. The collector stores each answer as the reply to the prompt it sent,
and a trainer learns from that pair as stored. HTTP/1.1 carries no request id: on a kept-alive
connection the answer to a request is simply the next message the server writes. A server or proxy
that writes an answer twice therefore hands the copy to whatever request that connection carries
next. Against a loopback server that sends some answers twice, aiohttp, httpx and a hand-written
keep-alive pool all gave a share of the calls the answer to another request (the measurements:
docs/collecting.md, "One request, one answer"). No HTTP client closes this, so this module does, over
aiohttp's connection pool:

* **Nothing that arrived before the request.** A request is written only to a connection that holds no
  unread byte. Bytes that reached an idle connection (a copy, an answer nobody asked for) close it
  unused, and the request goes to another connection: not a resend, since nothing was sent (logged
  once, counted in `stale_connections`; `StaleAnswerError` after `STALE_CONNECTIONS` in a row).
* **No copy of an earlier answer.** A 2xx answer whose bytes equal one of the last `REPLAY_WINDOW`
  answers its connection carried (and the caller took) is a copy that arrived after the request was
  sent: the connection is closed and the request is sent again on a new connection
  (`ReplayedAnswerError`), where no copy can wait. Real servers stamp each completion with a unique
  ``id``, so two answers are never equal; a stub that answers every request with the same bytes is
  recognised when the new connection brings those same bytes again, and is then no longer checked
  (logged once). The check on the new connection is one attempt more than `max_retries` allows, if
  need be: until then the answer is not known to be a failure.
* **Bounded.** An answer's body is at most `max_response_bytes` (default `MAX_RESPONSE_BYTES`),
  checked against its Content-Length before reading and counted while reading (chunked, or up to the
  close), so a 10^12-byte Content-Length or an endless chunked body costs at most that much memory;
  header lines are at most `MAX_HEADER_LINE_BYTES`; nothing is decompressed (the request says
  ``Accept-Encoding: identity`` and an answer in any other encoding is refused: a gzip bomb is never
  inflated); interim ``1xx`` answers (``100 Continue``) are skipped; redirects are not followed and
  no cookie is kept.

Each refusal of an answer the server sent is a `TransportError`: typed, retryable, counted by the
caller as a failed attempt and recorded in the call's record (`OpenAIChatClient.complete`). The
residue HTTP/1.1 leaves open: a server that writes a *new* answer out of turn, after the request was
sent, cannot be told from the answer by any client. Requires `aiohttp` (the `[openai]` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

__all__ = ["MAX_HEADER_LINE_BYTES", "MAX_RESPONSE_BYTES", "REPLAY_WINDOW", "STALE_CONNECTIONS", "HTTPTransport",
           "ReplayedAnswerError", "ResponseTooLargeError", "StaleAnswerError", "TransportError",
           "UnrequestedEncodingError", "check_max_response_bytes"]

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""The default bound on an answer's body, in bytes (8 MiB). A chat completion of 512 tokens is a few kB;
with logprobs and token ids, tens of kB."""
MAX_HEADER_LINE_BYTES = 8190
"""The longest status or header line accepted, in bytes (aiohttp's default, stated here so that it is ours)."""
REPLAY_WINDOW = 16
"""How many of a connection's latest 2xx answers a new answer is compared with."""
STALE_CONNECTIONS = 4
"""How many connections in a row one request may find holding an answer before it gives up (a request is never
sent to such a connection, so trying another is not a resend)."""

_log = logging.getLogger(__name__)
T = TypeVar("T")


class TransportError(Exception):
    """An answer this transport refused; the request may be sent again (the caller counts it as an attempt)."""

    at_once = False
    """Send again without the backoff: the server is not overloaded, only the connection was unusable."""


class ResponseTooLargeError(TransportError):
    """The answer's body is larger than the transport's `max_response_bytes`."""


class UnrequestedEncodingError(TransportError):
    """The answer is compressed (or otherwise encoded) although the request asked for ``identity``."""


class StaleAnswerError(TransportError):
    """Bytes reached the connection before the request was sent: they answer another request, or none."""

    at_once = True


class ReplayedAnswerError(TransportError):
    """The answer's bytes equal an earlier answer on its connection: a copy, not this request's answer."""

    at_once = True

    def __init__(self, message: str, digest: int) -> None:
        super().__init__(message)
        self.digest = digest


def check_max_response_bytes(value: object) -> int:
    """`value` as the bound on an answer's body: a positive integer number of bytes (ValueError otherwise)."""
    if type(value) is not int or value < 1:
        raise ValueError(f"max_response_bytes must be a positive integer (bytes), got {value!r}")
    return value


@functools.cache
def _request_class(aiohttp: Any) -> type:
    """aiohttp's request, which refuses a connection that holds unread bytes before it writes a byte to it (aiohttp
    is imported on first use)."""

    class _ExchangeRequest(aiohttp.ClientRequest):
        async def send(self, conn: Any) -> Any:
            protocol = conn.protocol
            # `should_close` is aiohttp's own "this connection holds something unread or broken" test: a message
            # it parsed while nobody waited, bytes it could not parse, or an unfinished payload.
            if protocol is not None and protocol.should_close:
                raise StaleAnswerError("the connection held an answer before the request was sent (a copy of an "
                                       "earlier answer, or one nobody asked for); it was closed unused and the "
                                       "request is sent on another connection")
            response = await super().send(conn)
            response.exchange_protocol = protocol  # the connection whose earlier answers a copy would repeat
            return response

    return _ExchangeRequest


def _header_too_long(exc: BaseException) -> bool:
    """Whether aiohttp's parser refused the answer for a status or header line past its bound."""
    from aiohttp.http_exceptions import LineTooLong

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, LineTooLong):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class HTTPTransport:
    """POSTs to one URL over aiohttp's connection pool, each answer bound to its request and bounded.

    Args:
        url: the ``http://`` or ``https://`` URL every request goes to.
        headers: sent with every request (``Accept-Encoding: identity`` is added).
        proxy: the proxy URL for every request, or None.
        max_connections: connections open at once; more requests wait for one.
        max_response_bytes: the largest answer body accepted, in bytes.

    A transport belongs to the event loop it first ran on; the caller makes one per loop.
    """

    def __init__(self, url: str, headers: dict[str, str], *, proxy: Any = None, max_connections: int = 1000,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.max_response_bytes = check_max_response_bytes(max_response_bytes)
        bad = [k for k, v in headers.items() if any(c in f"{k}{v}" for c in "\r\n\0")]
        if bad:
            raise ValueError(f"the HTTP header(s) {bad} hold a line break or NUL, which would end the header early; "
                             "check the API key and extra headers for stray characters")
        import aiohttp

        self._aiohttp = aiohttp
        self.url, self.proxy = url, proxy
        self._headers = {**headers, "Accept-Encoding": "identity"}
        self._max_connections = max_connections
        self._pool: Any = None
        self._fresh: Any = None  # one connection per request: where a suspected copy is checked
        self._closer: AsyncIterator[None] | None = None  # parked until the event loop ends: `_close_with_loop`
        self._answers: weakref.WeakKeyDictionary[Any, deque[int]] = weakref.WeakKeyDictionary()
        self.checks_replays = True
        """False once the server answered two requests with the same bytes on two connections (a stub)."""
        self.stale_connections = 0
        """Connections closed unused because they held an answer before a request was sent."""

    def _session(self, fresh: bool) -> Any:
        aiohttp = self._aiohttp
        if self._pool is None:
            self._pool = self._new_session(aiohttp.TCPConnector(limit=self._max_connections))
        if fresh and self._fresh is None:
            self._fresh = self._new_session(aiohttp.TCPConnector(force_close=True))
        return self._fresh if fresh else self._pool

    def _new_session(self, connector: Any) -> Any:
        aiohttp = self._aiohttp
        return aiohttp.ClientSession(
            connector=connector, headers=self._headers, request_class=_request_class(aiohttp),
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
            max_line_size=MAX_HEADER_LINE_BYTES, max_field_size=MAX_HEADER_LINE_BYTES,
            # Proxies are given per request (the caller reads them once); `trust_env` would look them and a
            # .netrc up on a worker thread for every call, and a .netrc entry would clash with the key's header.
            trust_env=False, timeout=aiohttp.ClientTimeout(total=None),
        )

    async def post(self, body: bytes, accept: Callable[[int, bytes], T], *, verify: int | None = None) -> T:
        """What `accept(status, body)` makes of the answer to one POST of `body`.

        Args:
            body: the request body (JSON bytes).
            accept: turns the answer's HTTP status and body into the caller's result, or raises (a status or a
                body the caller refuses). Only an answer it accepts is remembered as one a copy could repeat.
            verify: the digest of a `ReplayedAnswerError`: send on a new connection, and when the answer is
                those same bytes again, take it (the server repeats itself) and stop checking for copies.

        Raises:
            TransportError: the answer was refused (stale, a copy, too large, encoded).
            aiohttp.ClientError, OSError: the exchange broke.
            Whatever `accept` raises.
        """
        if self._closer is None:
            self._closer = self._close_with_loop()
            await anext(self._closer)
        session = self._session(verify is not None)
        for _ in range(STALE_CONNECTIONS):
            try:
                return await self._exchange(session, body, verify, accept)
            except StaleAnswerError:  # nothing was sent: another connection, not another attempt
                if not self.stale_connections:
                    _log.warning("the server at %s sent an answer while no request was waiting (a copy, or one "
                                 "nobody asked for); such connections are closed unused", self.url)
                self.stale_connections += 1
            except self._aiohttp.ClientResponseError as exc:
                if _header_too_long(exc):
                    raise ResponseTooLargeError(f"a header line of the answer is longer than the "
                                                f"{MAX_HEADER_LINE_BYTES:,} bytes this client reads") from None
                raise
        raise StaleAnswerError(f"{STALE_CONNECTIONS} connections in a row held an answer before the request was "
                               "sent; the server (or a proxy) answers out of turn")

    async def _exchange(self, session: Any, body: bytes, verify: int | None, accept: Callable[[int, bytes], T]) -> T:
        async with session.post(self.url, data=body, proxy=self.proxy, allow_redirects=False) as response:
            try:
                status, raw = response.status, await self._read(response)
            except BaseException:
                response.close()  # the connection holds an unread rest: never reused
                raise
            if not 200 <= status < 300 or not self.checks_replays:
                return accept(status, raw)
            digest = hash(raw)
            if verify is not None:
                if digest == verify:
                    self.checks_replays = False
                    _log.warning("the server at %s answered two requests with the same bytes on two connections "
                                 "(its answers carry no unique id): answers are no longer compared for copies",
                                 self.url)
                return accept(status, raw)
            protocol = getattr(response, "exchange_protocol", None)
            seen = self._answers.get(protocol) if protocol is not None else None
            if seen is not None and digest in seen:
                protocol.close()  # the real answer may still come on it
                raise ReplayedAnswerError("the answer repeats, byte for byte, one the connection carried before (a "
                                          "copy the server or a proxy sent twice); the connection was closed and the "
                                          "request is sent again on a new one", digest)
            taken = accept(status, raw)  # an answer the caller refuses (malformed) is not remembered
            if protocol is not None:
                if seen is None:
                    seen = self._answers[protocol] = deque(maxlen=REPLAY_WINDOW)
                seen.append(digest)
            return taken

    async def _read(self, response: Any) -> bytes:
        """The body, refused past `max_response_bytes`, in an encoding not asked for, or for a 1xx status."""
        limit = self.max_response_bytes
        if response.status < 200:  # 1xx other than 100-103 (which aiohttp skips): 101 Switching Protocols
            raise TransportError(f"the server answered HTTP {response.status} to a POST (it switches protocols); "
                                 "this client speaks HTTP/1.1 only")
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise UnrequestedEncodingError(
                f"the answer is encoded as {encoding[:40]!r} although the request asked for none (Accept-Encoding: "
                "identity); it is not decoded (a compressed answer can inflate without bound); configure the server "
                "or proxy not to compress")
        length = response.content_length
        if length is not None and length > limit:
            raise ResponseTooLargeError(f"the answer announces {length:,} bytes, more than the {limit:,} this client "
                                        "reads (max_response_bytes)")
        chunks: list[bytes] = []
        size = 0
        while chunk := await response.content.readany():
            size += len(chunk)
            if size > limit:
                raise ResponseTooLargeError(f"the answer's body passed the {limit:,} bytes this client reads "
                                            "(max_response_bytes) and was cut off there")
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def aclose(self) -> None:
        """Close both connection pools (bounded: an interrupted run must still exit)."""
        for session in (self._pool, self._fresh):
            if session is not None and not session.closed:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(session.close(), timeout=1.0)
        self._pool = self._fresh = None

    async def _close_with_loop(self) -> AsyncIterator[None]:
        """Parked at its `yield` from the first request on, for as long as the event loop runs.

        Why: a caller that never awaits `aclose` (its own `asyncio.run` around one `complete`) would leave the pools
        open on a loop that is gone, where they can no longer be closed. Before a loop closes, `asyncio.run` (any
        loop's `shutdown_asyncgens`) closes every async generator still open on it, and this one's `finally`
        closes the pools there, while the loop still runs.
        """
        try:
            yield
        finally:
            self._closer = None  # a later request (on a new loop) parks a new one
            await self.aclose()

    def close_now(self) -> None:
        """Forget the pools without awaiting (a transport left on an event loop that has gone).

        `_close_with_loop` closed them when that loop ended through `asyncio.run` (or `shutdown_asyncgens`); a loop
        closed without it leaves their sockets to the garbage collector, as aiohttp does.
        """
        for session in (self._pool, self._fresh):
            if session is not None and not session.closed:
                with contextlib.suppress(Exception):
                    session.detach()
        self._pool = self._fresh = None
