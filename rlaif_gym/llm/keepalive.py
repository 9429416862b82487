"""`KeepAlivePool`: the lean HTTP/1.1 client of `OpenAIChatClient` for plain-http model servers.

Why. The rollout collector's event loop is one thread, and each tick makes one POST to the model server.
aiohttp's `ClientSession.post` costs 170-300 us of CPU per call on the project's 2-core machine: it builds a
request object, a response object, header multidicts, a timer and trace hooks per call, all of which a
POST of a prepared JSON body to one server does not need. This pool keeps persistent connections and
parses each answer with httptools (the llhttp parser, as uvicorn does): about 80 us per call in the same
measurement (docs/benchmarks.md, "The lean tick").

What it does: one POST per `post` call, on an idle kept-alive connection of the current event loop (or a
new one); the response's status and body (Content-Length, chunked, or up to the close of an HTTP/1.0
connection; gzip and deflate decoded). A kept-alive connection that the server closed while idle fails
before any byte of an answer arrives, and the request is then sent once more on a new connection, as
HTTP clients do. Anything else that breaks the exchange (refused, reset, a malformed answer) raises
`ConnectionError`, which the caller retries like aiohttp's connection errors; a timeout is the caller's
(`asyncio.timeout` around the call), and the connection it cut is closed, never reused.

`OpenAIChatClient` uses it only for `http://` URLs that no proxy applies to; HTTPS and proxies go through
aiohttp. Requires `httptools` (the `[openai]` extra).
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any
from urllib.parse import urlsplit

__all__ = ["KeepAlivePool"]


class _StaleConnection(ConnectionError):
    """A reused connection closed before any byte of the answer: the request may be sent again."""


class _Exchange(asyncio.Protocol):
    """One TCP connection and the answer it is reading (httptools calls the `on_*` methods)."""

    def __init__(self, httptools: Any) -> None:
        self._httptools = httptools
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.parser: Any = None
        self.status = 0
        self.body: list[bytes] = []
        self.encoding = b""
        self.delimited = False  # the answer says where its body ends (Content-Length or chunked)
        self.keep_alive = False
        self.received = False

    def start(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        self.waiter = loop.create_future()
        self.parser = self._httptools.HttpResponseParser(self)
        self.status, self.body, self.encoding = 0, [], b""
        self.delimited = self.keep_alive = self.received = False
        return self.waiter

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        if self.waiter is None or self.waiter.done():  # bytes nobody asked for: the stream cannot be trusted
            self.transport.close()
            return
        try:
            self.parser.feed_data(data)
        except self._httptools.HttpParserError as exc:
            self._finish(ConnectionError(f"malformed HTTP answer: {exc}"))
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is None or self.waiter.done():
            return
        if self.status and not self.delimited:  # an HTTP/1.0 body ends where the connection does
            self.keep_alive = False
            self._finish(None)
        elif not self.received:
            self._finish(_StaleConnection("the server closed the connection before answering"))
        else:
            self._finish(ConnectionError("the server closed the connection in the middle of its answer"))

    # -- httptools callbacks -----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-encoding":
            self.encoding = value.strip().lower()
        elif name in (b"content-length", b"transfer-encoding"):
            self.delimited = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        self._finish(None)

    def _finish(self, error: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            if error is None:
                self.waiter.set_result(None)
            else:
                self.waiter.set_exception(error)


def _decoded(body: bytes, encoding: bytes) -> bytes:
    if encoding in (b"", b"identity"):
        return body
    try:
        if encoding in (b"gzip", b"x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if encoding == b"deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:  # raw deflate, without the zlib header (some servers send it)
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error as exc:
        raise ConnectionError(f"the answer's {encoding.decode('latin-1')} body does not decode: {exc}") from None
    raise ConnectionError(f"the answer is encoded as {encoding.decode('latin-1')!r}, which this client does not "
                          "read (it asks for none); use an https:// URL or a proxy to go through aiohttp")


class KeepAlivePool:
    """Persistent HTTP/1.1 connections to the host of `url`, for POSTs to that URL.

    Args:
        url: an ``http://`` URL (its path and query are the request target).
        headers: sent with every request (Host and Content-Length are added).
        httptools: the imported `httptools` module.
        max_connections: connections open at once; more calls wait for one (aiohttp's pool had the same limit).

    A pool belongs to the event loop it first ran on; the caller makes one per loop.
    """

    def __init__(self, url: str, headers: dict[str, str], httptools: Any, max_connections: int = 1000) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"KeepAlivePool needs an http:// URL with a host, got {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        bad = [k for k, v in headers.items() if any(c in f"{k}{v}" for c in "\r\n\0")]
        if bad:
            raise ValueError(f"the HTTP header(s) {bad} hold a line break or NUL, which would end the header early; "
                             "check the API key and extra headers for stray characters")
        lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc}", *(f"{k}: {v}" for k, v in headers.items())]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("utf-8")
        self._httptools = httptools
        self._idle: list[_Exchange] = []
        self._slots = asyncio.Semaphore(max_connections)  # open sockets stay under the process's file limit
        self.closed = False

    async def post(self, body: bytes) -> tuple[int, bytes]:
        """(HTTP status, decoded body) of one POST of `body`. Raises ConnectionError (OSError) when the exchange
        breaks; cancelling it (a timeout) closes its connection."""
        async with self._slots:
            return await self._post(asyncio.get_running_loop(), self._head + b"%d\r\n\r\n" % len(body) + body)

    async def _post(self, loop: asyncio.AbstractEventLoop, request: bytes) -> tuple[int, bytes]:
        while self._idle:
            conn = self._idle.pop()
            if conn.closed:
                continue
            try:
                return await self._exchange(loop, conn, request)
            except _StaleConnection:
                continue  # closed by the server while idle: the request never reached it
        _, conn = await loop.create_connection(lambda: _Exchange(self._httptools), self.host, self.port)
        try:
            return await self._exchange(loop, conn, request)
        except _StaleConnection as exc:
            raise ConnectionError(str(exc)) from None

    async def _exchange(self, loop: asyncio.AbstractEventLoop, conn: _Exchange, request: bytes) -> tuple[int, bytes]:
        waiter = conn.start(loop)
        conn.transport.write(request)
        try:
            await waiter
        except BaseException:
            conn.transport.close()
            raise
        if conn.keep_alive and not conn.closed and not self.closed:
            self._idle.append(conn)
        else:
            conn.transport.close()
        return conn.status, _decoded(b"".join(conn.body), conn.encoding)

    def close(self) -> None:
        """Close the idle connections (those in use close when their exchange ends)."""
        self.closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            if conn.transport is not None:
                conn.transport.close()
