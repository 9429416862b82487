"""The HTTP transport against hostile servers: raw sockets on 127.0.0.1 that answer out of turn, twice, without
end, compressed, with a 25 MB header line, or close a connection after reading the request.

Each server runs on an event loop in a thread of its own, so that its writes race the client's as a real
server's do, and writes raw bytes, so that the client is checked on the bytes, not on a library's server.
The calls go through the public `OpenAIChatClient` (and `RecordingClient`, for what is stored). The rows
K1-K6 are docs/collecting.md's fault matrix rows of the same names.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import json
import random
import threading
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from rlaif_gym.llm import LLMError, OpenAIChatClient, RecordingClient, SamplingParams
from rlaif_gym.llm.recording import REPLY_CHARS
from rlaif_gym.llm.transport import MAX_HEADER_LINE_BYTES, MAX_RESPONSE_BYTES, HTTPTransport

pytest.importorskip("aiohttp")

PARAMS = SamplingParams(logprobs=False)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class ThreadServer:
    """`asyncio.start_server(handle)` on 127.0.0.1, on a loop in a daemon thread; `url` is its /v1 base URL."""

    def __init__(self, handle: Handler) -> None:
        self.handle = handle
        self.requests = 0
        self.connections = 0
        self._ready = threading.Event()

    def _count(self, handle: Handler) -> Handler:
        async def counted(reader, writer):
            self.connections += 1
            try:
                await handle(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()
        return counted

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()

        async def main():
            self._server = await asyncio.start_server(self._count(self.handle), "127.0.0.1", 0)
            self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"
            self._ready.set()
            async with self._server:
                await self._server.serve_forever()

        with contextlib.suppress(asyncio.CancelledError):
            self.loop.run_until_complete(main())

    def __enter__(self) -> ThreadServer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(self.loop)])
        self._thread.join(10)

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[bytes, dict]:
        """The next request's head and JSON body (counted)."""
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))
        body = json.loads(await reader.readexactly(length))
        self.requests += 1
        return head, body


_ids = itertools.count()


def completion(content: str, *, unique: bool = True) -> bytes:
    """A chat completion whose reply is `content` (with a unique id, as real servers give, unless told not to)."""
    ident = f"chatcmpl-{next(_ids)}" if unique else "chatcmpl-stub"
    return json.dumps({"id": ident, "object": "chat.completion", "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}]}).encode()


def http(body: bytes, *, head: bytes = b"") -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n" % (len(body), head)
    return head + body


def echo(body: dict) -> bytes:
    """The answer that belongs to the request `body`: its last user message, echoed."""
    return http(completion(f"answer to {body['messages'][-1]['content']}"))


def ask(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"prompt {i}"}]


def client(server: ThreadServer, **kw) -> OpenAIChatClient:
    return OpenAIChatClient("m", server.url, **{"timeout": 10.0, "max_retries": 3, "backoff": 0.01, **kw})


def run(coro_fn: Callable[[OpenAIChatClient], Awaitable], llm: OpenAIChatClient):
    async def go():
        try:
            return await coro_fn(llm)
        finally:
            await llm.aclose()

    return asyncio.run(go())


# -- K1: an answer belongs to its request -------------------------------------------------------------------------


def test_k1_duplicate_answers_0_to_30_ms_apart_over_1000_calls_never_reach_the_wrong_request():
    """Every third answer is written twice, the copy 0-30 ms after the first (seeded): no call gets another
    call's answer, and the copies were really met (the refusals are recorded as attempt errors)."""
    rng = random.Random(37)
    serial = itertools.count(1)

    async def handle(reader, writer):
        loop = asyncio.get_running_loop()
        while True:
            _, body = await server.read_request(reader)
            data = echo(body)
            writer.write(data)
            if next(serial) % 3 == 0:
                loop.call_later(rng.uniform(0.0, 0.03), lambda d=data: writer.is_closing() or writer.write(d))

    calls = 1200

    async def main(llm):
        slots = asyncio.Semaphore(16)

        async def one(i):
            async with slots:
                try:
                    return i, await llm.complete(ask(i), PARAMS)
                except LLMError as exc:
                    return i, exc

        return await asyncio.gather(*(one(i) for i in range(calls)))

    with ThreadServer(handle) as server:
        out = run(main, client(server))
    wrong = [i for i, c in out if not isinstance(c, LLMError) and c.text != f"answer to prompt {i}"]
    failed = [i for i, c in out if isinstance(c, LLMError)]
    refused = Counter(e.type for _, c in out if not isinstance(c, LLMError) for e in c.attempt_errors)
    assert wrong == [], f"{len(wrong)} of {calls} calls got the answer to another request"
    assert failed == [], f"{len(failed)} calls failed: {out[failed[0]][1]}"
    assert refused["ReplayedAnswerError"] >= calls // 20 and set(refused) == {"ReplayedAnswerError"}, refused
    assert sum(c.attempts for _, c in out) == calls + refused["ReplayedAnswerError"] == server.requests


def test_k1_an_answer_sent_while_no_request_waits_is_never_taken(caplog):
    """The server answers, then writes an answer nobody asked for on the idle connection; the next call
    gets its own answer, from another connection (the request is never written to the stale one, so it
    is no resend), and the client says so once in its log."""

    async def handle(reader, writer):
        _, body = await server.read_request(reader)
        writer.write(echo(body))
        await asyncio.sleep(0.02)
        writer.write(http(completion("an answer nobody asked for")))
        while True:
            _, body = await server.read_request(reader)
            writer.write(echo(body))

    async def main(llm):
        recording = RecordingClient(llm)
        first = await recording.chat(ask(1), PARAMS)
        await asyncio.sleep(0.2)  # the unsolicited answer reaches the idle connection
        return first, await recording.chat(ask(2), PARAMS)

    with ThreadServer(handle) as server:
        (_, rec1), (second, rec2) = run(main, client(server))
    assert rec1.response == "answer to prompt 1" and rec1.attempts == 1
    assert second.text == rec2.response == "answer to prompt 2" and rec2.attempts == 1
    assert "attemptErrors" not in rec2.model_extra
    assert server.requests == 2 and server.connections == 2  # the stale connection was closed unused
    assert "sent an answer while no request was waiting" in caplog.text


def test_a_stub_that_answers_every_request_with_the_same_bytes_costs_one_resend_then_is_trusted():
    async def handle(reader, writer):
        while True:
            await server.read_request(reader)
            writer.write(http(completion("the same", unique=False)))

    async def main(llm):
        return [await llm.complete(ask(i), PARAMS) for i in range(5)]

    with ThreadServer(handle) as server:
        out = run(main, client(server))
    assert [c.text for c in out] == ["the same"] * 5
    assert [c.attempts for c in out] == [1, 2, 1, 1, 1] and server.requests == 6
    assert out[1].attempt_errors[0].type == "ReplayedAnswerError"


# -- K2, K3: every answer bounded ----------------------------------------------------------------------------------


def _peak(fn: Callable[[], object]) -> tuple[object, int]:
    """(what `fn` returned or raised, the peak of Python's traced memory while it ran, in bytes)."""
    tracemalloc.start()
    try:
        try:
            out = fn()
        except LLMError as exc:
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_k2_an_endless_body_is_refused_at_the_bound_with_memory_bounded(framing):
    """A body announced as 10^12 bytes, or chunked without end, is refused as `ResponseTooLargeError`
    (retryable, each attempt recorded), and the client never holds more than a few times the bound."""
    limit = 1 << 20
    chunk = b"x" * 65536

    async def handle(reader, writer):
        while True:
            await server.read_request(reader)
            if framing == "chunked":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                             % 10**12)
                frame = chunk
            for _ in range(4096):  # 256 MiB at most, as fast as the client reads
                writer.write(frame)
                await writer.drain()

    with ThreadServer(handle) as server:
        llm = client(server, max_response_bytes=limit, max_retries=1, timeout=30.0)
        err, peak = _peak(lambda: run(lambda c: c.complete(ask(0), PARAMS), llm))
    assert isinstance(err, LLMError) and err.type == "ResponseTooLargeError" and err.retryable
    assert err.attempts == 2 and [e.type for e in err.attempt_errors] == ["ResponseTooLargeError"]
    assert f"{limit:,}" in str(err)
    assert peak < 8 * limit, f"the client held {peak / 2**20:.0f} MiB for a {limit / 2**20:.0f} MiB bound"


def test_the_default_bound_is_8_mib_and_a_32_mb_reply_is_refused():
    assert MAX_RESPONSE_BYTES == 8 * 1024 * 1024
    big = completion("y" * (32 * 1024 * 1024))

    async def handle(reader, writer):
        while True:
            await server.read_request(reader)
            writer.write(http(big))
            await writer.drain()

    with ThreadServer(handle) as server:
        err, _ = _peak(lambda: run(lambda c: c.complete(ask(0), PARAMS), client(server, max_retries=0)))
    assert isinstance(err, LLMError) and err.type == "ResponseTooLargeError"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_k3_a_compressed_answer_is_refused_never_inflated(encoding):
    """The client asks for `identity`; a 256 MiB gzip bomb (0.26 MB on the wire) or any other encoding is
    refused as `UnrequestedEncodingError` without being decoded."""
    bomb = gzip.compress(b"\0" * (256 << 20)) if encoding == "gzip" else zlib.compress(b"\0" * (1 << 20))
    heads = []

    async def handle(reader, writer):
        while True:
            head, _ = await server.read_request(reader)
            heads.append(head.lower())
            writer.write(http(bomb, head=b"Content-Encoding: %s\r\n" % encoding.encode()))

    with ThreadServer(handle) as server:
        err, peak = _peak(lambda: run(lambda c: c.complete(ask(0), PARAMS), client(server, max_retries=1)))
    assert isinstance(err, LLMError) and err.type == "UnrequestedEncodingError" and err.retryable
    assert err.attempts == 2 and all(b"accept-encoding: identity" in h for h in heads)
    assert peak < 32 << 20, f"the client held {peak / 2**20:.0f} MiB: the body was decoded"


def test_k3_a_long_reply_is_stored_cut_at_reply_chars_with_the_cut_recorded():
    long_reply = "<think>" + "z" * (3 * REPLY_CHARS) + '</think>{"type": "wait"}'

    async def handle(reader, writer):
        while True:
            await server.read_request(reader)
            writer.write(http(completion(long_reply)))

    async def main(llm):
        return await RecordingClient(llm).chat(ask(0), PARAMS)

    with ThreadServer(handle) as server:
        played, record = run(main, client(server))
    assert len(record.response) == REPLY_CHARS == len(played.text)
    assert record.response == long_reply[:REPLY_CHARS]
    assert record.model_extra["textCuts"] == {"response": len(long_reply)}
    assert len(record.to_json()) < REPLY_CHARS + 4096


# -- K4, K5, K6 ------------------------------------------------------------------------------------------------------


def test_k4_a_100_continue_before_the_answer_is_skipped():
    async def handle(reader, writer):
        while True:
            _, body = await server.read_request(reader)
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await asyncio.sleep(0.01)
            writer.write(echo(body))

    with ThreadServer(handle) as server:
        out = run(lambda c: asyncio.gather(*(c.complete(ask(i), PARAMS) for i in range(3))), client(server))
    assert [c.text for c in out] == [f"answer to prompt {i}" for i in range(3)]
    assert [c.attempts for c in out] == [1, 1, 1]


def test_k5_a_25_mb_header_line_is_refused_early():
    """The client stops reading at the header bound (`MAX_HEADER_LINE_BYTES`): the server cannot hand it the
    whole 25 MB line; the call fails as a typed, retryable `ResponseTooLargeError` naming the bound."""
    sent = []

    async def handle(reader, writer):
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Big: ")
        total = 0
        try:
            for _ in range(400):  # 25 MiB in 64 KiB pieces
                writer.write(b"a" * 65536)
                await writer.drain()
                total += 65536
        finally:
            sent.append(total)

    with ThreadServer(handle) as server:
        err, _ = _peak(lambda: run(lambda c: c.complete(ask(0), PARAMS), client(server, max_retries=0)))
    assert isinstance(err, LLMError) and err.type == "ResponseTooLargeError" and err.retryable
    assert f"longer than the {MAX_HEADER_LINE_BYTES:,} bytes" in str(err)
    assert sent and sent[0] < 25 << 20, "the client read the whole 25 MB header line"


def test_k6_a_resend_after_the_server_closed_a_reused_connection_counts_and_is_recorded():
    """The server reads a request on a reused connection, then closes it without an answer: the resend
    counts against max_retries, is recorded, and the server never reads a call more often than the client says."""

    async def handle(reader, writer):
        _, body = await server.read_request(reader)
        writer.write(echo(body))
        await server.read_request(reader)  # a reused connection: read the request, then hang up

    async def main(llm):
        return [await RecordingClient(llm).chat(ask(i), PARAMS) for i in range(12)]

    with ThreadServer(handle) as server:
        out = run(main, client(server))
    records = [rec for _, rec in out]
    assert [r.response for r in records] == [f"answer to prompt {i}" for i in range(12)]
    assert sum(r.attempts for r in records) == server.requests
    for r in records[1:]:
        assert r.attempts == 2 and [e["type"] for e in r.model_extra["attemptErrors"]] == ["APIConnectionError"]
    with ThreadServer(handle) as server, pytest.raises(LLMError) as info:
        run(lambda c: main_sequential(c, 2), client(server, max_retries=0))
    assert info.value.attempts == 1 and info.value.type == "APIConnectionError" and server.requests == 2


async def main_sequential(llm: OpenAIChatClient, calls: int) -> list:
    return [await llm.complete(ask(i), PARAMS) for i in range(calls)]


def test_a_101_switching_protocols_answer_is_refused():
    async def handle(reader, writer):
        while True:
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")

    with ThreadServer(handle) as server:
        err, _ = _peak(lambda: run(lambda c: c.complete(ask(0), PARAMS), client(server, max_retries=0, timeout=5.0)))
    assert isinstance(err, LLMError) and err.type == "TransportError" and "101" in str(err)


def test_a_header_with_a_line_break_is_refused():
    with pytest.raises(ValueError, match="line break"):
        HTTPTransport("http://127.0.0.1:9/v1", {"Authorization": "Bearer k\r\nX-Evil: 1"})


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_max_response_bytes_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_response_bytes must be a positive integer"):
        OpenAIChatClient("m", "http://127.0.0.1:9/v1", max_response_bytes=bad)


def test_a_proxy_from_the_environment_carries_the_requests(monkeypatch):
    """`HTTP_PROXY` is read once per pool: the requests reach the proxy in absolute form (the model server's
    host need not resolve here), and its answers are bound and bounded like any other."""
    targets = []

    async def proxy(reader, writer):
        while True:
            head, body = await server.read_request(reader)
            targets.append(head.split(b"\r\n")[0])
            writer.write(echo(body))

    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with ThreadServer(proxy) as server:
        monkeypatch.setenv("HTTP_PROXY", server.url.removesuffix("/v1"))
        llm = OpenAIChatClient("m", "http://model.invalid:8000/v1", timeout=10.0, max_retries=0)
        out = run(lambda c: main_sequential(c, 2), llm)
    assert [c.text for c in out] == ["answer to prompt 0", "answer to prompt 1"]
    assert targets == [b"POST http://model.invalid:8000/v1/chat/completions HTTP/1.1"] * 2
