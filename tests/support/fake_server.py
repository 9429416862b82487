"""A real OpenAI-compatible chat server on 127.0.0.1 for the rollout integration tests.

`FakeOpenAIServer` is a `ThreadingHTTPServer` in a daemon thread serving `POST /v1/chat/completions`.
Its replies are meaningful: the content is `ScriptedLLM().decide(<last user message>)` written as
`<think>...</think>\\n{json action}`, with `usage`, `finish_reason` and, when the request asked for
them, `logprobs.content` (deterministic values derived from the reply, see `fake_logprobs`).

Every request is recorded (`server.requests`: path, headers, raw body, parsed JSON).

Faults are deterministic. A call is identified by its *call key*, a hash of the request's model,
messages and seed (not of `logprobs`), so that every retry of one call has the same key; each
request of a call is its `attempt` (1, 2, ...). A `Fault` applies to the requests whose body its
`match` accepts and whose attempt is at most `times` (None: every attempt, a permanent fault).
The first fault that applies decides the answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rlaif_gym.llm import ScriptedLLM
from rlaif_gym.rollout import call_seed

__all__ = [
    "FAULT_KINDS",
    "FakeOpenAIServer",
    "Fault",
    "RecordedRequest",
    "call_key",
    "episode_seeds",
    "fake_logprobs",
    "fake_server",
    "scripted_reply",
]

FAULT_KINDS = (
    "latency",  # sleep `delay_s`, then answer normally
    "status",  # answer HTTP `status` (500, 503, 429, ...) with an OpenAI error body
    "hang",  # sleep `delay_s` (longer than the client timeout), then answer normally if still connected
    "invalid_json",  # 200, application/json, a body that is not JSON
    "no_choices",  # 200, a JSON object without `choices`
    "wrong_content_type",  # 200, text/html
    "reject_logprobs",  # 400 "logprobs is not supported" when the request asks for logprobs
    "body",  # 200 with `payload` (bytes) as the body and `content_type`: any malformed answer
    "duplicate",  # answer normally, then write the same answer again 0 to `delay_s` later (a per-call fraction)
)
COPY_KINDS = ("same", "created")
"""How a fault's `twice` copy is written: the same bytes, or with another `created` stamp (a re-sending proxy)."""

_MODEL = ScriptedLLM()


def call_key(body: dict[str, Any]) -> str:
    """The identity of one logical call: the same for every retry of it (logprobs or not)."""
    ident = {"model": body.get("model"), "messages": body.get("messages"), "seed": body.get("seed")}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def episode_seeds(env_seed: int, member: int, ticks: range) -> frozenset[int]:
    """The per-call sampling seeds the collector sends for one episode's ticks."""
    return frozenset(call_seed(env_seed, member, t) for t in ticks)


def scripted_reply(body: dict[str, Any]) -> str:
    """The reply text for a request: the scripted model's decision on the last user message."""
    user = next((m.get("content", "") for m in reversed(body.get("messages") or []) if m.get("role") == "user"), "")
    think, action = _MODEL.decide(user)
    return f"<think>{think}</think>\n{json.dumps(action)}"


def _tokens(text: str) -> list[str]:
    """A crude whitespace-keeping tokenisation (every token but the first starts with its space)."""
    words = text.split(" ")
    return [words[0]] + [" " + w for w in words[1:]]


def fake_logprobs(text: str) -> list[float]:
    """The logprob values the server returns for `text`, one per token (deterministic)."""
    return [-round(0.01 * (1 + (i * 7) % 13), 4) for i, _ in enumerate(_tokens(text))]


@dataclass(frozen=True)
class Fault:
    """One fault rule; see the module docstring.

    Args:
        kind: one of `FAULT_KINDS`.
        match: a predicate on the parsed request body (None: every request).
        times: the fault applies to attempts 1..times of each matching call; None: every attempt.
        status: the HTTP status for kind "status".
        delay_s: seconds for "latency" and "hang".
        payload, content_type: the answer for kind "body".
        message: the error message for kind "status"; `{status}` and `{authorization}` (the request's
            Authorization header, as some gateways echo it) are filled in.
        twice: write the answer, whatever it is, once more 0 to `delay_s` later (kind "duplicate" always does).
        copy: how the copy is written, one of `COPY_KINDS`.
    """

    kind: str
    match: Callable[[dict[str, Any]], bool] | None = None
    times: int | None = None
    status: int = 503
    delay_s: float = 0.0
    payload: bytes = b""
    content_type: str = "application/json"
    message: str = "injected fault: HTTP {status}"
    twice: bool = False
    copy: str = "same"

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if self.copy not in COPY_KINDS:
            raise ValueError(f"unknown copy kind {self.copy!r}")

    def applies(self, body: dict[str, Any], attempt: int) -> bool:
        if self.kind == "reject_logprobs" and not body.get("logprobs"):
            return False
        if self.times is not None and attempt > self.times:
            return False
        return self.match is None or bool(self.match(body))


@dataclass
class RecordedRequest:
    """One HTTP request as the server saw it, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    raw_body: bytes
    body: dict[str, Any] | None
    key: str | None
    attempt: int
    answer: str = ""  # "ok" or the fault kind that answered it
    status: int = 0
    response: dict[str, Any] | None = field(default=None, repr=False)
    time: float = 0.0
    latency_fault: float = 0.0  # seconds a "latency" fault added before the answer
    answered_at: float = 0.0  # time.monotonic() when the answer was sent


class FakeOpenAIServer:
    """The server; use as a context manager or call `start()` / `stop()`.

    Args:
        faults: the fault rules (see the module docstring).
        model_name: the `model` of every answer (default: the request's).
        unique_ids: stamp each answer with an id of its own, as real servers do; False: all answers to one
            prompt are the same bytes (a stub, or a server without ids).
        early_answers: on each new connection, write the last answer the server sent (to any request) before
            reading the request (a server or proxy that answers out of turn).
        port: the port to listen on (0: any free one); a server brought back on the port of one that went away.
    """

    def __init__(self, faults: list[Fault] | None = None, model_name: str | None = None, *,
                 unique_ids: bool = True, early_answers: bool = False, port: int = 0) -> None:
        self.faults: list[Fault] = list(faults or [])
        self.model_name = model_name
        self.unique_ids = unique_ids
        self._port = port
        self.early_answers = early_answers
        self.last_answer: bytes | None = None
        """The bytes of the last answer sent (status line, headers and body)."""
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        """The most chat requests the server was answering at once."""
        self.handler_errors: list[str] = []
        """Exceptions raised inside the server itself (a broken fault predicate): the fixture fails on any."""
        self._attempts: dict[str, int] = {}
        self._answer_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = _QuietServer(("127.0.0.1", self._port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a "hang" or "latency" fault
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- queries for assertions

    def chat_requests(self) -> list[RecordedRequest]:
        """Requests to the chat endpoint with a parsed body, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions") and r.body is not None]

    def answered(self, kind: str) -> list[RecordedRequest]:
        """Requests answered by `kind` ("ok" or a fault kind)."""
        return [r for r in self.chat_requests() if r.answer == kind]

    def attempts_of(self, body: dict[str, Any]) -> int:
        with self._lock:
            return self._attempts.get(call_key(body), 0)

    # -- the answer

    def _record(self, handler: BaseHTTPRequestHandler, raw: bytes) -> RecordedRequest:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = None
        key = call_key(body) if body is not None else None
        with self._lock:
            attempt = 0
            if key is not None:
                attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
            rec = RecordedRequest(method=handler.command, path=handler.path, headers=dict(handler.headers.items()),
                                  raw_body=raw, body=body, key=key, attempt=attempt, time=time.monotonic())
            self.requests.append(rec)
        return rec

    def completion_id(self, body: dict[str, Any]) -> str:
        """A completion id unique to each answer, as real servers give (vLLM: a UUID; llama.cpp: random text):
        the call's key, then a serial number, so that no two answers are the same bytes."""
        if not self.unique_ids:
            return "chatcmpl-fake"
        return f"chatcmpl-{call_key(body)[:16]}-{next(self._answer_ids)}"

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """A valid chat-completion object answering `body`."""
        text = scripted_reply(body)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
        completion_tokens = len(_tokens(text))
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop", "logprobs": None}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [
                {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8")), "top_logprobs": []}
                for tok, lp in zip(_tokens(text), fake_logprobs(text), strict=True)
            ], "refusal": None}
        return {
            "id": self.completion_id(body), "object": "chat.completion", "created": 1_767_225_600,
            "model": self.model_name or body.get("model") or "fake", "system_fingerprint": "fp_fake",
            "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a timeout, a closed keep-alive connection) is normal here; report the rest."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAIServer
    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1.0"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between headers and body

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        rec = getattr(self, "_current", None)
        fault = getattr(self, "_fault", None)
        reason = self.responses.get(status, ("",))[0]
        data = (f"HTTP/1.1 {status} {reason}\r\nServer: {self.server_version}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode("latin-1") + payload
        try:
            self.wfile.write(data)
            self.wfile.flush()
            if rec is not None:
                rec.answered_at = time.monotonic()
            self.owner.last_answer = data
            if fault is not None and (fault.twice or fault.kind == "duplicate"):
                # The copy 0 to delay_s later (a per-call fraction), before the connection is closed.
                time.sleep(fault.delay_s * int(rec.key[:4], 16) / 0xFFFF if rec is not None and rec.key else 0.0)
                if fault.copy == "created":
                    data = data.replace(b'"created": 1767225600', b'"created": 1767225601')
                self.wfile.write(data)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError, ValueError):
            self.close_connection = True  # the client gave up (a timeout): nothing to answer

    def setup(self) -> None:
        super().setup()
        early = self.owner.last_answer
        if self.owner.early_answers and early is not None:  # before the request is read
            with contextlib.suppress(OSError):
                self.wfile.write(early)
                self.wfile.flush()

    def _error(self, status: int, message: str, type_: str, param: str | None = None) -> None:
        payload = {"error": {"message": message, "type": type_, "param": param, "code": None}}
        self._send(status, json.dumps(payload).encode())

    def do_GET(self) -> None:
        self._fault = None
        self.owner._record(self, b"")
        self._error(404, f"no route GET {self.path}", "not_found")

    def do_POST(self) -> None:
        owner = self.owner
        with owner._lock:
            owner.in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
        try:
            self._post()
        except Exception as exc:  # a bug in the test's fault rules, not a fault: answer 599 and report it
            self.owner.handler_errors.append(f"{type(exc).__name__}: {exc}")
            self._error(599, f"fake server error: {type(exc).__name__}: {exc}", "test_bug")
        finally:
            with owner._lock:
                owner.in_flight -= 1

    def _post(self) -> None:
        self._fault = None
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        owner = self.owner
        rec = owner._record(self, raw)
        self._current = rec
        if not self.path.rstrip("/").endswith("/v1/chat/completions"):
            rec.answer, rec.status = "not_found", 404
            self._error(404, f"no route POST {self.path}", "not_found")
            return
        body = rec.body
        if body is None:
            rec.answer, rec.status = "bad_request", 400
            self._error(400, "the request body is not a JSON object", "invalid_request_error")
            return
        fault = next((f for f in owner.faults if f.applies(body, rec.attempt)), None)
        self._fault = fault
        kind = fault.kind if fault is not None else "ok"
        rec.answer = kind
        if kind == "latency":
            rec.latency_fault = fault.delay_s
        if kind in ("latency", "hang"):
            owner._stopping.wait(fault.delay_s)
        if kind == "status":
            rec.status = fault.status
            auth = self.headers.get("Authorization", "")
            self._error(fault.status, fault.message.format(status=fault.status, authorization=auth), "server_error")
        elif kind == "invalid_json":
            rec.status = 200
            self._send(200, b'{"id": "chatcmpl-broken", "choices": [{"index": 0, "message": {"role": "assist')
        elif kind == "no_choices":
            rec.status = 200
            self._send(200, json.dumps({"id": "chatcmpl-empty", "object": "chat.completion", "created": 0,
                                        "model": body.get("model")}).encode())
        elif kind == "wrong_content_type":
            rec.status = 200
            self._send(200, b"<html><body>502 Bad Gateway (proxy)</body></html>", "text/html; charset=utf-8")
        elif kind == "body":
            rec.status = 200
            self._send(200, fault.payload, fault.content_type)
        elif kind == "duplicate":
            rec.status = 200
            rec.response = owner.completion(body)
            self._send(200, json.dumps(rec.response).encode())
        elif kind == "reject_logprobs":
            rec.status = 400
            self._error(400, "logprobs is not supported by this model", "invalid_request_error", "logprobs")
        else:  # "ok", "latency", "hang" (a hang answers late; the client has usually gone)
            rec.status = 200
            rec.response = owner.completion(body)
            self._send(200, json.dumps(rec.response).encode())


@pytest.fixture
def fake_server():
    """A started `FakeOpenAIServer` with no faults; set `fake_server.faults` in the test (a conftest imports this
    fixture to offer it)."""
    server = FakeOpenAIServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert not server.handler_errors, f"the fake server itself raised: {server.handler_errors}"
