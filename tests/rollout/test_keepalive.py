"""`KeepAlivePool`, the lean HTTP client of plain-http model servers, against real sockets on 127.0.0.1.

Each test runs a raw asyncio server that answers the way a server may (kept alive or closed, chunked, gzip,
HTTP/1.0 without a length, broken, silent), so the pool is checked on the bytes, not on a library's
server. The OpenAI client's own tests (test_openai_client.py, test_rollout_faults.py) run through the
pool as well, since their server is plain http.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Callable

import httptools
import pytest

from rlaif_gym.llm import LLMError, OpenAIChatClient, SamplingParams
from rlaif_gym.llm.keepalive import KeepAlivePool

BODY = json.dumps({"choices": [{"message": {"content": "<think>t</think>{\"type\": \"wait\"}"},
                                "finish_reason": "stop"}], "model": "m"}).encode()


def answer(body: bytes = BODY, *, close: bool = False, extra: bytes = b"") -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head + (b"Connection: close\r\n" if close else b"") + extra + b"\r\n" + body


class RawServer:
    """Reads each request whole; `respond(n, request)` gives the bytes for the n-th request (None: close the
    connection without a word). Counts connections and requests."""

    def __init__(self, respond: Callable[[int, bytes], bytes | None], close_after: bool = False) -> None:
        self.respond, self.close_after = respond, close_after
        self.connections = 0
        self.requests: list[bytes] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                data = self.respond(len(self.requests), request)
                if data is None:
                    break
                writer.write(data)
                await writer.drain()
                if self.close_after or b"Connection: close" in data or data.startswith(b"HTTP/1.0"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1/chat/completions"

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()


def posts(respond, n: int = 1, close_after: bool = False, between: float = 0.0) -> tuple[list, RawServer]:
    async def main():
        server = RawServer(respond, close_after)
        out = []
        async with server as url:
            pool = KeepAlivePool(url, {"Content-Type": "application/json"}, httptools)
            for i in range(n):
                try:
                    out.append(await pool.post(b'{"i": %d}' % i))
                except Exception as exc:  # the test looks at what was raised
                    out.append(exc)
                await asyncio.sleep(between)
            pool.close()
        return out, server

    return asyncio.run(main())


def test_one_connection_carries_every_call_and_the_request_is_well_formed():
    out, server = posts(lambda n, req: answer(), n=4)
    assert out == [(200, BODY)] * 4 and server.connections == 1
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Content-Length: 8" in head and body == b'{"i": 0}'


def test_a_connection_the_server_closed_while_idle_is_replaced_and_the_call_is_made_once():
    out, server = posts(lambda n, req: answer(), n=3, close_after=True, between=0.05)
    assert out == [(200, BODY)] * 3
    assert server.connections == 3 and len(server.requests) == 3


def test_connection_close_chunked_gzip_and_an_http10_body_up_to_the_close():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    zipped = gzip.compress(BODY)
    answers = {1: answer(close=True), 2: chunked, 3: answer(zipped, extra=b"Content-Encoding: gzip\r\n"),
               4: b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n\r\n{\"error\": 1}",
               5: answer()}
    out, server = posts(lambda n, req: answers[n], n=5)
    assert out == [(200, BODY), (200, b"hello world"), (200, BODY), (503, b'{"error": 1}'), (200, BODY)]
    assert server.connections == 3  # a new one after the "Connection: close" answer and after the HTTP/1.0 one


@pytest.mark.parametrize("bad", [b"HTTP/1.1 2OO OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{\"cut",
                                 b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}"])
def test_a_broken_answer_is_a_connection_error_and_the_next_call_works(bad):
    out, _ = posts(lambda n, req: bad if n == 1 else answer(), n=2, close_after=b"99" in bad)
    assert isinstance(out[0], ConnectionError) and out[1] == (200, BODY)


def test_calls_beyond_the_connection_limit_wait_for_a_connection():
    async def main():
        server = RawServer(lambda n, req: answer())
        async with server as url:
            pool = KeepAlivePool(url, {}, httptools, max_connections=2)
            out = await asyncio.gather(*(pool.post(b"{}") for _ in range(6)))
            pool.close()
        return out, server

    out, server = asyncio.run(main())
    assert out == [(200, BODY)] * 6 and server.connections == 2


def test_a_header_with_a_line_break_is_refused():
    with pytest.raises(ValueError, match="line break"):
        KeepAlivePool("http://127.0.0.1:9/v1", {"Authorization": "Bearer k\r\nX-Evil: 1"}, httptools)


def test_a_server_that_never_answers_a_fresh_connection_is_a_connection_error():
    out, _ = posts(lambda n, req: None, n=1)
    assert isinstance(out[0], ConnectionError)


def test_a_timeout_closes_its_connection_and_the_client_retries_on_a_new_one():
    """Through `OpenAIChatClient`: the first attempt hangs past the timeout, the retry gets a new connection."""

    async def main():
        hang = asyncio.Event()

        async def handle(reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            if not hang.is_set():
                hang.set()
                await asyncio.sleep(5)
            writer.write(answer())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        client = OpenAIChatClient(model="m", base_url=url, timeout=0.3, max_retries=1, backoff=0.01)
        try:
            completion = await client.complete([{"role": "user", "content": "hi"}], SamplingParams(logprobs=False))
            assert isinstance(client._session, KeepAlivePool)
            return completion
        finally:
            await client.aclose()
            server.close()

    completion = asyncio.run(main())
    assert completion.text.startswith("<think>") and completion.attempts == 2


def test_a_refused_connection_fails_the_call_as_a_connection_error():
    client = OpenAIChatClient(model="m", base_url="http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(LLMError) as info:
        asyncio.run(client.complete([{"role": "user", "content": "hi"}], SamplingParams(logprobs=False)))
    assert info.value.type == "APIConnectionError"


@pytest.mark.parametrize("url,proxy", [("https://api.example.com/v1", None),
                                       ("http://10.1.2.3:8000/v1", "http://proxy.example:3128")])
def test_https_and_proxied_servers_go_through_aiohttp(monkeypatch, url, proxy):
    import aiohttp

    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    if proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)

    async def main():
        client = OpenAIChatClient(model="m", base_url=url)
        session = client._get_session()
        kind = type(session)
        await client.aclose()
        return kind

    assert asyncio.run(main()) is aiohttp.ClientSession
