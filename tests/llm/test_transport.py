"""The HTTP transport against hostile servers: raw sockets on 127.0.0.1 that answer twice, before the request,
with copies that differ in a byte, without ids, without end, compressed, with a 25 MB header line, or that keep
a connection open against ``Connection: close``.

Each server runs on an event loop in a thread of its own, so that its writes race the client's as a real
server's do, and writes raw bytes, so that the client is checked on the bytes, not on a library's server.
Servers keep connections alive, as real ones do, until a request asks them to close (`serve`): a client that
reuses connections meets every fault here. The calls go through the public `OpenAIChatClient` (and
`RecordingClient`, for what is stored). The rows T1-T5 and K1-K6 are docs/collecting.md's fault matrix rows
of the same names.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import json
import random
import ssl
import subprocess
import threading
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from rlaif_gym.llm import LLMError, OpenAIChatClient, RecordingClient, SamplingParams
from rlaif_gym.llm.recording import REPLY_CHARS
from rlaif_gym.llm.transport import MAX_HEAD_BYTES, MAX_RESPONSE_BYTES, HTTPTransport

pytest.importorskip("h11")

PARAMS = SamplingParams(logprobs=False)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class ThreadServer:
    """`asyncio.start_server(handle)` on 127.0.0.1, on a loop in a daemon thread; `url` is its /v1 base URL."""

    def __init__(self, handle: Handler, *, tls: ssl.SSLContext | None = None) -> None:
        self.handle = handle
        self.tls = tls
        self.requests = 0
        self.connections = 0
        self._ready = threading.Event()

    def _count(self, handle: Handler) -> Handler:
        async def counted(reader, writer):
            self.connections += 1
            try:
                await handle(reader, writer)
                await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
                pass
            finally:
                writer.close()
        return counted

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()

        async def main():
            self._server = await asyncio.start_server(self._count(self.handle), "127.0.0.1", 0, ssl=self.tls)
            scheme = "https" if self.tls else "http"
            self.url = f"{scheme}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"
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

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    answer: Callable[[dict, bool], Awaitable[None] | None]) -> None:
        """Requests on one connection, each answered by `answer(body, last)`, until one asks to close (`last`)."""
        while True:
            head, body = await self.read_request(reader)
            last = b"connection: close" in head.lower()
            done = answer(body, last)
            if done is not None:
                await done
            if last:
                return


_ids = itertools.count()


def completion(content: str, *, unique: bool = True, created: int = 0) -> bytes:
    """A chat completion whose reply is `content` (with a unique id, as real servers give, unless told not to)."""
    ident = f"chatcmpl-{next(_ids)}" if unique else "chatcmpl-stub"
    return json.dumps({"id": ident, "object": "chat.completion", "created": created, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}]}).encode()


def http(body: bytes, *, head: bytes = b"", status: bytes = b"200 OK") -> bytes:
    return (b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (status, len(body), head)) + body


def prompt_of(body: dict) -> str:
    return body["messages"][-1]["content"]


def echo(body: dict) -> bytes:
    """The answer that belongs to the request `body`: its last user message, echoed."""
    return http(completion(f"answer to {prompt_of(body)}"))


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


async def many(llm: OpenAIChatClient, calls: int, in_flight: int = 16) -> list[tuple[int, object]]:
    """(i, the completion or the LLMError) of `calls` calls, prompt i each, `in_flight` at once."""
    slots = asyncio.Semaphore(in_flight)

    async def one(i):
        async with slots:
            try:
                return i, await llm.complete(ask(i), PARAMS)
            except LLMError as exc:
                return i, exc

    return await asyncio.gather(*(one(i) for i in range(calls)))


def wrong_answers(out: list[tuple[int, object]]) -> list[int]:
    """The calls whose completion is not the echo of their own prompt."""
    return [i for i, c in out if not isinstance(c, LLMError) and c.text != f"answer to prompt {i}"]


def refusals(out: list[tuple[int, object]]) -> Counter:
    return Counter(e.type for _, c in out for e in c.attempt_errors)


def twice(writer: asyncio.StreamWriter, data: bytes, copy: bytes, delay: float, last: bool) -> Awaitable[None] | None:
    """Write `data`, then `copy` `delay` s later; on the connection's last exchange, close only after the copy."""
    writer.write(data)
    if last:
        return asyncio.sleep(delay, writer.write(copy))
    asyncio.get_running_loop().call_later(delay, lambda: writer.is_closing() or writer.write(copy))
    return None


def sometimes_twice(server_of: Callable[[], ThreadServer], answer_for: Callable[[dict], bytes],
                    again: Callable[[], bool], rng: random.Random,
                    copy_of: Callable[[bytes], bytes] = lambda data: data) -> Handler:
    """A server's handler: each request's `answer_for(body)`, written again (as `copy_of` it) 0-3 ms later
    whenever `again()` says so."""

    async def handle(reader, writer):
        def answer(body, last):
            data = answer_for(body)
            if again():
                return twice(writer, data, copy_of(data), rng.uniform(0.0, 0.003), last)
            writer.write(data)
            return None

        await server_of().serve(reader, writer, answer)

    return handle


# -- T1-T5: an answer belongs to its request, by construction ---------------------------------------------------


def test_t1_copies_of_any_answer_400_503_or_without_choices_never_reach_another_request():
    """Every 5th answer is written twice, 0-3 ms apart, whatever it is: a 400 naming its prompt, a 503, a 200
    without `choices`, or the real answer. Over 1,400 calls at 16 in flight, no call fails with another call's
    error and none gets another call's answer (before: 77-82 failed with another request's 400)."""
    rng = random.Random(5)
    serial = itertools.count(1)
    tried: Counter[str] = Counter()

    def answer_for(body: dict) -> bytes:
        prompt = prompt_of(body)
        i = int(prompt.split()[-1])
        tried[prompt] += 1
        if i % 7 == 0:
            return http(json.dumps({"error": {"message": f"bad request for <{prompt}>"}}).encode(),
                        status=b"400 Bad Request")
        if i % 7 == 1 and tried[prompt] == 1:
            return http(json.dumps({"error": {"message": f"overloaded at <{prompt}>"}}).encode(),
                        status=b"503 Service Unavailable")
        if i % 7 == 2 and tried[prompt] == 1:
            return http(json.dumps({"id": f"x-{prompt}", "object": "chat.completion"}).encode())
        return echo(body)

    handle = sometimes_twice(lambda: server, answer_for, lambda: next(serial) % 5 == 0, rng)
    calls = 1400
    with ThreadServer(handle) as server:
        out = run(lambda c: many(c, calls), client(server))
    assert wrong_answers(out) == []
    for i, c in out:
        if i % 7 == 0:
            assert isinstance(c, LLMError) and c.status_code == 400, (i, c)
            assert f"<prompt {i}>" in str(c), f"call {i} failed with another request's error: {c}"
        else:
            assert not isinstance(c, LLMError), (i, c)
    assert sum(tried.values()) == server.requests


def test_t2_an_answer_written_before_the_request_was_read_is_never_taken():
    """On every new connection the server first writes the last answer it gave (to another request), then reads
    the request and answers it. Every call sees two different answers on its connection: neither is taken, the
    call fails as `ExtraAnswerError` after its retries (before: 590-609 of 640 calls got another's answer)."""
    last_answer = [http(completion("answer to nobody"))]

    async def handle(reader, writer):
        writer.write(last_answer[0])

        def answer(body, last):
            last_answer[0] = echo(body)
            writer.write(last_answer[0])

        await server.serve(reader, writer, answer)

    calls = 1000
    with ThreadServer(handle) as server:
        out = run(lambda c: many(c, calls), client(server, max_retries=1))
    assert wrong_answers(out) == []
    failed = [c for _, c in out if isinstance(c, LLMError)]
    assert len(failed) == calls and {c.type for c in failed} == {"ExtraAnswerError"}
    assert all(c.attempts == 2 for c in failed) and server.requests == 2 * calls
    assert "second, different answer" in str(failed[0])


def test_t3_a_server_without_ids_may_repeat_itself_and_still_never_crosses_answers():
    """A greedy GRPO group: four requests with one prompt get the same bytes (no `id`), each taken at once; then
    the server writes every 5th answer twice. 1,000 calls, none gets another call's answer (before: one repeat
    turned the copy check off for the run, then 109-171 of 640 crossed)."""
    rng = random.Random(3)
    serial = itertools.count(1)

    handle = sometimes_twice(lambda: server, lambda body: http(completion(f"answer to {prompt_of(body)}",
                                                                          unique=False)),
                             lambda: next(serial) % 5 == 0, rng)

    async def main(llm):
        group = [await llm.complete(ask(0), PARAMS) for _ in range(4)]
        return group, await many(llm, 1000)

    with ThreadServer(handle) as server:
        group, out = run(main, client(server))
    assert [c.text for c in group] == ["answer to prompt 0"] * 4 and [c.attempts for c in group] == [1] * 4
    assert wrong_answers(out) == [] and not any(isinstance(c, LLMError) for _, c in out)
    assert refusals(out) == Counter() and server.requests == 1004


def test_t4_a_copy_that_differs_in_one_byte_is_never_taken_for_another_request():
    """A re-sending proxy: one answer in five is sent again 0-3 ms later with another `created` stamp. No call
    gets another call's answer (before: 156-183 of 640 crossed); a connection that carried both is refused and
    the request sent again (`ExtraAnswerError` in `attempt_errors`)."""
    rng = random.Random(4)

    handle = sometimes_twice(lambda: server, lambda body: http(completion(f"answer to {prompt_of(body)}", created=1)),
                             lambda: rng.random() < 0.2, rng,
                             copy_of=lambda data: data.replace(b'"created": 1', b'"created": 2'))

    calls = 1000
    with ThreadServer(handle) as server:
        out = run(lambda c: many(c, calls), client(server))
    assert wrong_answers(out) == []
    failed = [c for _, c in out if isinstance(c, LLMError)]
    assert len(failed) <= 10 and {c.type for c in failed} <= {"ExtraAnswerError"}
    assert set(refusals(out)) == {"ExtraAnswerError"} and refusals(out)["ExtraAnswerError"] >= calls // 10
    done = [c for _, c in out if not isinstance(c, LLMError)]
    assert sum(c.attempts for c in done) + sum(c.attempts for c in failed) == server.requests


def test_t5_answers_without_ids_that_repeat_by_chance_are_each_taken_at_once():
    """20 fixed replies without ids, drawn at random: every call takes the first answer its request got; nothing
    is refused and re-drawn (before: 34 of 400 stored replies were re-draws of a refused first answer)."""
    rng = random.Random(20)
    replies = [f"reply {k}" for k in range(20)]
    first_answer: dict[str, str] = {}

    async def handle(reader, writer):
        def answer(body, last):
            text = rng.choice(replies)
            first_answer.setdefault(prompt_of(body), text)
            writer.write(http(completion(text, unique=False)))

        await server.serve(reader, writer, answer)

    async def main(llm):
        return [(i, await RecordingClient(llm).chat(ask(i), PARAMS)) for i in range(400)]

    with ThreadServer(handle) as server:
        out = run(main, client(server))
    assert [rec.response for _, (_, rec) in out] == [first_answer[f"prompt {i}"] for i, _ in out]
    assert all(rec.attempts == 1 for _, (_, rec) in out) and server.requests == 400


def test_a_server_that_keeps_the_connection_open_against_connection_close_is_refused_once():
    """HTTP/1.1 obliges a server to close after answering a request that asked it to; one that does not could
    still send a second answer, so its answer is not taken: `UnclosedConnectionError`, not retried, naming the fix."""

    async def handle(reader, writer):
        while True:
            _, body = await server.read_request(reader)
            writer.write(echo(body))

    with ThreadServer(handle) as server, pytest.raises(LLMError) as info:
        run(lambda c: c.complete(ask(0), PARAMS), client(server))
    assert info.value.type == "UnclosedConnectionError" and not info.value.retryable
    assert info.value.attempts == 1 and server.requests == 1
    assert "Connection: close" in str(info.value) and "Configure the server" in str(info.value)


def test_each_request_has_a_connection_of_its_own_and_asks_it_closed():
    heads = []

    async def record(reader, writer):
        head, body = await server.read_request(reader)
        heads.append(head.lower())
        writer.write(echo(body))

    with ThreadServer(record) as server:
        out = run(lambda c: many(c, 20, in_flight=4), client(server))
    assert wrong_answers(out) == [] and server.connections == server.requests == 20
    assert all(b"connection: close" in h and b"accept-encoding: identity" in h for h in heads)


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
        await server.serve(reader, writer, lambda body, last: writer.write(http(completion(long_reply))))

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
        async def answer(body, last):
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await asyncio.sleep(0.01)
            writer.write(echo(body))

        await server.serve(reader, writer, answer)

    with ThreadServer(handle) as server:
        out = run(lambda c: asyncio.gather(*(c.complete(ask(i), PARAMS) for i in range(3))), client(server))
    assert [c.text for c in out] == [f"answer to prompt {i}" for i in range(3)]
    assert [c.attempts for c in out] == [1, 1, 1]


def test_k5_a_25_mb_header_line_is_refused_early():
    """The client stops reading at the head's bound (`MAX_HEAD_BYTES`): the server cannot hand it the whole 25 MB
    line; the call fails as a typed, retryable `ResponseTooLargeError` naming the bound."""
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
    assert f"longer than the {MAX_HEAD_BYTES:,} bytes" in str(err)
    assert sent and sent[0] < 25 << 20, "the client read the whole 25 MB header line"


def test_k6_a_server_that_hangs_up_after_reading_the_request_is_retried_counted_and_recorded():
    """The server reads each call's first request, then closes the connection without an answer: the resend
    counts against max_retries, is recorded, and the server never reads a call more often than the client says."""
    seen: Counter[str] = Counter()

    async def handle(reader, writer):
        async def answer(body, last):
            seen[prompt_of(body)] += 1
            if seen[prompt_of(body)] > 1:
                writer.write(echo(body))

        await server.serve(reader, writer, answer)

    async def main(llm):
        return [await RecordingClient(llm).chat(ask(i), PARAMS) for i in range(12)]

    with ThreadServer(handle) as server:
        out = run(main, client(server))
    records = [rec for _, rec in out]
    assert [r.response for r in records] == [f"answer to prompt {i}" for i in range(12)]
    assert sum(r.attempts for r in records) == server.requests == 24
    for r in records:
        assert r.attempts == 2 and [e["type"] for e in r.model_extra["attemptErrors"]] == ["APIConnectionError"]
    seen.clear()
    with ThreadServer(handle) as server, pytest.raises(LLMError) as info:
        run(lambda c: c.complete(ask(0), PARAMS), client(server, max_retries=0))
    assert info.value.attempts == 1 and info.value.type == "APIConnectionError" and server.requests == 1


def test_a_101_switching_protocols_answer_is_refused():
    async def handle(reader, writer):
        while True:
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")

    with ThreadServer(handle) as server:
        err, _ = _peak(lambda: run(lambda c: c.complete(ask(0), PARAMS), client(server, max_retries=0, timeout=5.0)))
    assert isinstance(err, LLMError) and err.type == "MalformedAnswerError" and "101" in str(err)


def test_a_header_with_a_line_break_is_refused():
    with pytest.raises(ValueError, match="line break"):
        HTTPTransport("http://127.0.0.1:9/v1", {"Authorization": "Bearer k\r\nX-Evil: 1"})


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_max_response_bytes_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_response_bytes must be a positive integer"):
        OpenAIChatClient("m", "http://127.0.0.1:9/v1", max_response_bytes=bad)


def test_a_proxy_from_the_environment_carries_the_requests(monkeypatch):
    """`HTTP_PROXY` is read once per client: the requests reach the proxy in absolute form (the model server's
    host need not resolve here), and its answers are bound and bounded like any other."""
    targets = []

    async def proxy(reader, writer):
        head, body = await server.read_request(reader)
        targets.append(head.split(b"\r\n")[0])
        writer.write(echo(body))

    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with ThreadServer(proxy) as server:
        monkeypatch.setenv("HTTP_PROXY", server.url.removesuffix("/v1"))
        llm = OpenAIChatClient("m", "http://model.invalid:8000/v1", timeout=10.0, max_retries=0)
        out = run(lambda c: asyncio.gather(c.complete(ask(0), PARAMS), c.complete(ask(1), PARAMS)), llm)
    assert [c.text for c in out] == ["answer to prompt 0", "answer to prompt 1"]
    assert targets == [b"POST http://model.invalid:8000/v1/chat/completions HTTP/1.1"] * 2


@pytest.fixture
def tls_pair(tmp_path, monkeypatch):
    """(the server's TLS context, for a self-signed certificate of 127.0.0.1 that the client trusts through
    $SSL_CERT_FILE), made by the openssl command line."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"no openssl command to make a test certificate: {exc}")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def _clear_proxies(monkeypatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_https_direct_and_through_a_connect_proxy_get_their_own_answers(tls_pair, monkeypatch):
    """An https server (its certificate checked against $SSL_CERT_FILE), called directly and through an http proxy
    that tunnels with CONNECT (`HTTPS_PROXY`): each call its own answer, one connection each."""
    _clear_proxies(monkeypatch)
    tunnels = []

    async def handle(reader, writer):
        await server.serve(reader, writer, lambda body, last: writer.write(echo(body)))

    async def proxy(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        tunnels.append(head.split(b"\r\n")[0])
        host, port = head.split()[1].decode().rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src, dst):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)

    with ThreadServer(handle, tls=tls_pair) as server:
        direct = run(lambda c: many(c, 8, in_flight=4), client(server))
        with ThreadServer(proxy) as tunnel:
            monkeypatch.setenv("HTTPS_PROXY", tunnel.url.removesuffix("/v1"))
            tunnelled = run(lambda c: many(c, 8, in_flight=4), client(server))
    assert wrong_answers(direct) == wrong_answers(tunnelled) == []
    assert not any(isinstance(c, LLMError) for _, c in direct + tunnelled)
    port = server.url.split(":")[2].split("/")[0]
    assert tunnels == [f"CONNECT 127.0.0.1:{port} HTTP/1.1".encode()] * 8
