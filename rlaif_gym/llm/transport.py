"""`HTTPTransport`: one POST to a model server and its answer, bound to each other and bounded.

Why a layer over a socket. The collector stores each answer as the reply to the prompt it sent, and a
trainer learns from that pair as stored. HTTP/1.1 carries no request id: on a kept-alive connection the
answer to a request is simply the next message the server writes, so a server or proxy that writes an
answer twice, writes one before it has read the request, or sends one nobody asked for, hands it to
whatever request the connection carries next. Heuristics over a shared pool (refusing idle bytes,
comparing digests of earlier answers) closed some of these and not others (docs/collecting.md, "One
request, one answer").

So this transport binds an answer to its request **by construction**: every request has a connection of
its own, and is the only request that connection ever carries.

* **One exchange per connection.** The request says ``Connection: close``; HTTP/1.1 obliges the server
  to close the connection after its answer (RFC 9112, "Tear-down"). Whatever the connection delivers can only be
  about this one request, so no answer can reach another request, whatever a server or proxy sends, and
  whenever.
* **Exactly one answer, or none.** The transport reads to the close. A connection that delivers a
  second, different answer (one written before the server read the request, then the real one; or a copy
  that differs in a byte) is refused as `ExtraAnswerError`: which of the two is this request's cannot be
  known, so neither is taken and the request is sent again on a new connection. A byte-equal copy of the
  answer is the same answer and is taken. A server that keeps the connection open after its answer
  (`close_wait` seconds) is refused as `UnclosedConnectionError` (not retried): a second answer could
  still follow, and the server needs to honour ``Connection: close``.
* **Bounded.** An answer's body is at most `max_response_bytes` (default `MAX_RESPONSE_BYTES`), checked
  against its Content-Length before reading and counted while reading (chunked, or up to the close), so
  a 10^12-byte Content-Length or an endless chunked body costs at most that much memory; the status line
  and headers together are at most `MAX_HEAD_BYTES`; nothing is decompressed (the request says
  ``Accept-Encoding: identity`` and an answer in any other encoding is refused: a gzip bomb is never
  inflated); interim ``1xx`` answers (``100 Continue``) are skipped; redirects are not followed and no
  cookie is kept.

The HTTP/1.1 framing is `h11`'s (a well-kept protocol state machine, the one httpx and uvicorn use); the
connections are asyncio's streams (TLS through `ssl`'s default context; a proxy from the environment,
with ``CONNECT`` for https). What it costs: a TCP connect per call (its CPU, measured side by side with
the kept-alive pool it replaces, is in docs/benchmarks.md, "One request, one answer, by construction"),
and a TLS handshake per call on https.

Each refusal of an answer the server sent is a `TransportError`: typed, counted by the caller as a
failed attempt and recorded in the call's record (`OpenAIChatClient.complete`). Requires `h11` (the
`[openai]` extra).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

__all__ = ["CLOSE_WAIT_S", "MAX_EXTRA_COPIES", "MAX_HEAD_BYTES", "MAX_RESPONSE_BYTES", "ExtraAnswerError",
           "HTTPTransport", "MalformedAnswerError", "ResponseTooLargeError", "TransportError",
           "UnclosedConnectionError", "UnrequestedEncodingError", "check_max_response_bytes", "environment_proxy",
           "within"]

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""The default bound on an answer's body, in bytes (8 MiB). A chat completion of 512 tokens is a few kB;
with logprobs and token ids, tens of kB."""
MAX_HEAD_BYTES = 16 * 1024
"""The longest status line plus headers accepted, in bytes (h11's default; stated here so that it is ours)."""
CLOSE_WAIT_S = 2.0
"""How long, in seconds, the server has to close the connection once its answer is complete. A server that
honours ``Connection: close`` closes at once (its FIN follows the last byte of the answer)."""
MAX_EXTRA_COPIES = 4
"""How many byte-equal copies of the answer may follow it on its connection before it is refused (the bytes a
connection may carry are bounded by (1 + this) times the answer)."""
_READ_BYTES = 64 * 1024

T = TypeVar("T")


class TransportError(Exception):
    """An answer this transport refused; the request may be sent again (the caller counts it as an attempt)."""

    at_once = False
    """Send again without the backoff: the server is not overloaded, only the exchange was unusable."""
    retryable = True
    """Whether sending the request again can help (False: the server must be configured differently)."""


class ResponseTooLargeError(TransportError):
    """The answer's body (or its head) is larger than the transport reads."""


class UnrequestedEncodingError(TransportError):
    """The answer is compressed (or otherwise encoded) although the request asked for ``identity``."""


class MalformedAnswerError(TransportError):
    """The bytes are not an HTTP/1.1 answer to this request (a protocol switch, broken framing)."""


class ExtraAnswerError(TransportError):
    """The connection delivered a second, different answer to its one request: neither can be known to be its own."""

    at_once = True


class UnclosedConnectionError(TransportError):
    """The server kept the connection open after its answer, though the request asked it to close."""

    retryable = False


def check_max_response_bytes(value: object) -> int:
    """`value` as the bound on an answer's body: a positive integer number of bytes (ValueError otherwise)."""
    if type(value) is not int or value < 1:
        raise ValueError(f"max_response_bytes must be a positive integer (bytes), got {value!r}")
    return value


def environment_proxy(url: str) -> str | None:
    """The proxy URL the environment names for `url` (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), or None."""
    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all") or None


def _require_h11() -> Any:
    import h11

    return h11


class _Endpoint:
    """Where a URL's requests go: the host and port to connect to, TLS or not, and the request target."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the URL {url!r} is not an http:// or https:// URL with a host; pass one such as "
                             "http://127.0.0.1:8000/v1")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = (self.tls and self.port == 443) or (not self.tls and self.port == 80)
        self.authority = host if default else f"{host}:{self.port}"
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.url = f"{parts.scheme}://{self.authority}{self.path}"


def _proxy_authorization(proxy: _Endpoint, url: str) -> list[tuple[str, str]]:
    """The ``Proxy-Authorization`` header for a proxy URL with a user:password part (none without)."""
    parts = urlsplit(url)
    if parts.username is None:
        return []
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return [("Proxy-Authorization", "Basic " + base64.b64encode(pair).decode("ascii"))]


class HTTPTransport:
    """POSTs to one URL, each request on a connection of its own, each answer bound to its request and bounded.

    Args:
        url: the ``http://`` or ``https://`` URL every request goes to.
        headers: sent with every request (``Accept-Encoding: identity`` and ``Connection: close`` are added).
        proxy: the proxy URL for every request (``http://[user:password@]host:port``), or None.
        max_response_bytes: the largest answer body accepted, in bytes.
        close_wait: seconds the server has to close the connection once its answer is complete.

    The transport holds no connection between calls, so one transport serves any number of event loops.
    """

    def __init__(self, url: str, headers: dict[str, str], *, proxy: str | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, close_wait: float = CLOSE_WAIT_S) -> None:
        self.max_response_bytes = check_max_response_bytes(max_response_bytes)
        bad = [k for k, v in headers.items() if any(c in f"{k}{v}" for c in "\r\n\0")]
        if bad:
            raise ValueError(f"the HTTP header(s) {bad} hold a line break or NUL, which would end the header early; "
                             "check the API key and extra headers for stray characters")
        self._h11 = _require_h11()
        self._target = _Endpoint(url)
        self.url = self._target.url
        self._proxy = _Endpoint(proxy) if proxy else None
        if self._proxy is not None and self._proxy.tls:
            raise ValueError(f"the proxy {proxy!r} is an https:// proxy; this client speaks to proxies over plain "
                             "http:// (an https target is tunnelled through CONNECT): set HTTP(S)_PROXY to http://...")
        proxy_auth = _proxy_authorization(self._proxy, proxy) if self._proxy is not None and proxy else []
        self._connect_headers = [("Host", self._target.authority), *proxy_auth]
        tunnel = self._proxy is not None and self._target.tls
        self._request_target = self._target.url if self._proxy is not None and not tunnel else self._target.path
        self._headers = [("Host", self._target.authority), *headers.items(), ("Accept-Encoding", "identity"),
                         ("Connection", "close"), *(proxy_auth if self._proxy is not None and not tunnel else [])]
        self.close_wait = close_wait
        self._ssl: ssl.SSLContext | None = None

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()  # the system's CAs (and $SSL_CERT_FILE), hostname checked
        return self._ssl

    async def post(self, body: bytes, accept: Callable[[int, bytes], T]) -> T:
        """What `accept(status, body)` makes of the answer to one POST of `body`, on a connection of its own.

        Args:
            body: the request body (JSON bytes).
            accept: turns the answer's HTTP status and body into the caller's result, or raises (a status or a
                body the caller refuses).

        Raises:
            TransportError: the answer was refused (a second answer, too large, encoded, malformed, unclosed).
            OSError: the connection could not be made, or broke before the answer was complete.
            Whatever `accept` raises.
        """
        reader, writer = await self._connect()
        try:
            status, raw = await self._exchange(reader, writer, body)
        finally:
            writer.transport.abort()  # nothing more is read or written on it, whatever happened
        return accept(status, raw)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        target, proxy = self._target, self._proxy
        if proxy is None:
            return await asyncio.open_connection(target.host, target.port, limit=_READ_BYTES,
                                                 ssl=self._ssl_context() if target.tls else None,
                                                 server_hostname=target.host if target.tls else None)
        reader, writer = await asyncio.open_connection(proxy.host, proxy.port, limit=_READ_BYTES)
        if not target.tls:
            return reader, writer
        try:
            await self._tunnel(reader, writer)
            if not hasattr(writer, "start_tls"):  # Python 3.10
                raise OSError("an https URL through a proxy needs Python 3.11 or later (asyncio's start_tls)")
            await writer.start_tls(self._ssl_context(), server_hostname=target.host)
        except BaseException:
            writer.transport.abort()
            raise
        return reader, writer

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """``CONNECT`` the target through the proxy; OSError naming the proxy's status when it refuses."""
        h11 = self._h11
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        authority = f"{self._target.host}:{self._target.port}"
        writer.write(conn.send(h11.Request(method="CONNECT", target=authority, headers=self._connect_headers)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(_READ_BYTES))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response) and 200 <= event.status_code < 300:
                return
            status = getattr(event, "status_code", None)
            raise OSError(f"the proxy at {self._proxy.authority if self._proxy else '?'} refused to tunnel to "
                          f"{authority} (HTTP {status}); check HTTPS_PROXY and NO_PROXY")

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        body: bytes) -> tuple[int, bytes]:
        h11 = self._h11
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            head = conn.send(h11.Request(method="POST", target=self._request_target,
                                         headers=[*self._headers, ("Content-Length", str(len(body)))]))
            writer.write(head + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError as exc:
            raise ValueError(f"the request cannot be written as HTTP/1.1: {exc}; check the URL and the extra "
                             "headers") from None
        await writer.drain()
        answer = _Answer(self.max_response_bytes)
        data = b"-"
        while True:  # the answer, up to its end
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise _protocol_error(exc, closed=not data) from None
            if event is h11.NEED_DATA:
                data = await reader.read(_READ_BYTES)
                answer.received(data)
                conn.receive_data(data)  # b"": the close (which ends a body that has no length)
                continue
            if isinstance(event, h11.EndOfMessage):
                break
            if isinstance(event, h11.ConnectionClosed):
                raise ConnectionResetError("the server closed the connection before its answer was complete")
            answer.event(event, h11)
        trailing, closed = conn.trailing_data
        await answer.check_rest(trailing, closed, reader, self.close_wait)
        return answer.status, answer.body()


class _Answer:
    """The one answer a connection carries: its status and body, bounded, and the check that nothing else came."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.status = 0
        self._chunks: list[bytes] = []
        self._size = 0
        self._raw = bytearray()  # every byte the connection delivered, up to the answer's end (bounded with it)

    def received(self, data: bytes) -> None:
        self._raw += data

    def event(self, event: Any, h11: Any) -> None:
        if isinstance(event, h11.InformationalResponse):  # 100 Continue, 103 Early Hints: not the answer
            return
        if isinstance(event, h11.Response):
            self.status = event.status_code
            headers = {name.lower(): value for name, value in event.headers}
            encoding = headers.get(b"content-encoding", b"")
            if encoding.strip().lower() not in (b"", b"identity"):
                # The header as sent, uncut and last: the client masks secrets in a message before it cuts it.
                raise UnrequestedEncodingError(
                    "the answer is encoded although the request asked for none (Accept-Encoding: identity); it is not "
                    "decoded (a compressed answer can inflate without bound); configure the server or proxy not to "
                    f"compress (Content-Encoding: {encoding.decode('latin-1')!r})")
            length = headers.get(b"content-length")
            if length is not None and int(length) > self.limit:
                raise ResponseTooLargeError(f"the answer announces {int(length):,} bytes, more than the "
                                            f"{self.limit:,} this client reads (max_response_bytes)")
            return
        if isinstance(event, h11.Data):
            self._size += len(event.data)
            if self._size > self.limit:
                raise ResponseTooLargeError(f"the answer's body passed the {self.limit:,} bytes this client reads "
                                            "(max_response_bytes) and was cut off there")
            self._chunks.append(bytes(event.data))

    def body(self) -> bytes:
        return self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)

    async def check_rest(self, trailing: bytes, closed: bool, reader: asyncio.StreamReader, wait: float) -> None:
        """Read the connection to its close: only byte-equal copies of the answer may follow it."""
        whole = bytes(self._raw[: len(self._raw) - len(trailing)])  # the answer as the connection carried it
        rest = bytearray(trailing)
        budget = MAX_EXTRA_COPIES * len(whole)
        while not closed:
            try:
                data = await within(wait, reader.read(_READ_BYTES))
            except (asyncio.TimeoutError, TimeoutError):
                raise UnclosedConnectionError(
                    f"the server kept the connection open {wait:g} s after its answer, though the request asked it "
                    "to close (Connection: close, which HTTP/1.1 servers must honour); a second answer could still "
                    "follow, so this one is not taken. Configure the server (or the proxy before it) to close "
                    "connections when asked") from None
            closed = not data
            rest += data
            if len(rest) > budget or not _copies_so_far(rest, whole):
                break
        if rest and (not _copies_so_far(rest, whole) or len(rest) % len(whole) or len(rest) > budget):
            raise ExtraAnswerError("the connection delivered a second, different answer to its one request (one "
                                   "written before the request was read, or a copy that differs); neither can be "
                                   "known to be this request's, so neither was taken and the request is sent again "
                                   "on a new connection")


async def within(seconds: float, call: Any) -> Any:
    """`await call`, cancelled after `seconds` (`asyncio.timeout` where Python has it: no task per call)."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(seconds):
            return await call
    return await asyncio.wait_for(call, seconds)


def _copies_so_far(rest: bytearray, whole: bytes) -> bool:
    """Whether `rest` is, so far, the answer's bytes over again (whole copies, then the start of one)."""
    n = len(whole)
    return all(rest[i:i + n] == whole[: len(rest) - i] for i in range(0, len(rest), n))


def _protocol_error(exc: Any, *, closed: bool) -> Exception:
    """h11's refusal of the server's bytes as the transport's error: too large a head; the connection closed before
    the answer was whole (`closed`); else bytes that are no answer to this request."""
    if getattr(exc, "error_status_hint", None) == 431:
        return ResponseTooLargeError(f"the answer's status line and headers are longer than the {MAX_HEAD_BYTES:,} "
                                     "bytes this client reads")
    message = str(exc) or type(exc).__name__
    if closed:
        return ConnectionResetError(f"the server closed the connection before its answer was complete ({message})")
    if "_SWITCH_UPGRADE" in message:
        message = "the server switched protocols (HTTP 101) in answer to a POST that asked for no switch"
    return MalformedAnswerError(f"the server's answer is not HTTP/1.1 this client reads: {message}")
