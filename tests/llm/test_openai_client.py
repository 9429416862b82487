"""`OpenAIChatClient` on the wire, against a real HTTP server on 127.0.0.1 (`fake_server.FakeOpenAIServer`).

What the request carries (body fields, the key as a Bearer token, `extra_body` winning), what a reply
becomes (token ids, logprobs, reasoning, usage), one keep-alive pool per event loop, the seeded
retry schedule, and which failures are retried. Collector-level faults are in test_rollout_faults.py.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from typing import Any

import pytest
from fake_server import FakeOpenAIServer, Fault, fake_logprobs, scripted_reply

import rlaif_gym.llm.openai_compat as openai_compat
from rlaif_gym.llm import LLMError, OpenAIChatClient, RecordingClient, SamplingParams

MESSAGES = [{"role": "system", "content": "You trade."}, {"role": "user", "content": "# Babylon market update"}]


def _client(server: FakeOpenAIServer, **kw: Any) -> OpenAIChatClient:
    return OpenAIChatClient("fake", server.base_url, api_key="sk-wire-test-key", **{"timeout": 5.0, **kw})


def _run(client: OpenAIChatClient, params: SamplingParams, calls: int = 1):
    async def go():
        try:
            return [await client.complete(MESSAGES, params) for _ in range(calls)]
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_the_request_carries_the_sampling_the_key_and_extra_body(fake_server):
    client = _client(fake_server, extra_body={"return_token_ids": True, "temperature": 0.0})
    (completion,) = _run(client, SamplingParams(temperature=0.7, max_tokens=64, top_p=0.9, seed=7, logprobs=True))
    (request,) = fake_server.chat_requests()
    assert request.path == "/v1/chat/completions" and request.method == "POST"
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["authorization"] == "Bearer sk-wire-test-key"
    assert headers["content-type"] == "application/json"
    assert request.body == {"model": "fake", "messages": MESSAGES, "temperature": 0.0, "max_tokens": 64,
                            "top_p": 0.9, "seed": 7, "logprobs": True, "top_logprobs": 0, "return_token_ids": True}
    expected = scripted_reply(request.body)
    assert completion.text == expected and completion.model == "fake" and completion.finish_reason == "stop"
    assert completion.completion_logprobs == fake_logprobs(expected)
    usage = request.response["usage"]
    assert (completion.prompt_tokens, completion.completion_tokens, completion.total_tokens) == (
        usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"])
    assert completion.attempts == 1


def test_unset_sampling_fields_are_not_sent(fake_server):
    _run(_client(fake_server), SamplingParams(temperature=None, max_tokens=None, top_p=None, seed=None, logprobs=False))
    (request,) = fake_server.chat_requests()
    assert request.body == {"model": "fake", "messages": MESSAGES}


class TokenIdServer(FakeOpenAIServer):
    """Answers with vLLM's token ids (per choice and for the prompt) and a reasoning field."""

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().completion(body)
        answer["prompt_token_ids"] = [1, 2, 3]
        answer["choices"][0]["token_ids"] = [40, 41, 42, 43]
        answer["choices"][0]["message"]["reasoning_content"] = "the model's own reasoning"
        answer["model"] = "served-model-v2"
        return answer


def test_token_ids_reasoning_and_the_served_model_reach_the_record():
    with TokenIdServer() as server:
        recording = RecordingClient(_client(server), purpose="action")

        async def go():
            try:
                return await recording.chat(MESSAGES, SamplingParams(seed=3), call_id="c-1")
            finally:
                await recording.inner.aclose()

        completion, record = asyncio.run(go())
    assert completion.prompt_token_ids == [1, 2, 3] and completion.completion_token_ids == [40, 41, 42, 43]
    assert record.prompt_token_ids == [1, 2, 3] and record.completion_token_ids == [40, 41, 42, 43]
    assert record.reasoning == "the model's own reasoning" and record.model == "served-model-v2"
    assert record.seed == 3 and record.call_id == "c-1" and record.error is None


class ConnectionCountingServer(FakeOpenAIServer):
    """Counts the TCP connections the server accepted."""

    def start(self) -> ConnectionCountingServer:
        super().start()
        self.connections = 0
        lock, accept = threading.Lock(), self._httpd.process_request

        def counting(request, client_address):
            with lock:
                self.connections += 1
            return accept(request, client_address)

        self._httpd.process_request = counting
        return self


def test_one_connection_per_call_closed_when_answered_on_any_event_loop():
    """Each call has a connection of its own (docs/collecting.md, "One request, one answer"), closed once its
    answer is read: no socket outlives its call, whichever event loop ran it, with or without `aclose`."""
    with ConnectionCountingServer() as server:
        client = _client(server)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)  # an unclosed socket or transport fails the test
            _run(client, SamplingParams(seed=1, logprobs=False), calls=5)
            assert server.connections == 5, f"5 calls opened {server.connections} connections"
            # A second event loop (a second collect, a resume), and a bare `asyncio.run` without aclose.
            _run(client, SamplingParams(seed=2, logprobs=False), calls=2)
            asyncio.run(client.complete(MESSAGES, SamplingParams(seed=3, logprobs=False)))
            gc.collect()
        assert server.connections == 8 and len(server.chat_requests()) == 8


def test_a_client_serves_a_later_event_loop_without_aclose(fake_server):
    client = _client(fake_server)
    first = asyncio.run(client.complete(MESSAGES, SamplingParams(seed=1, logprobs=False)))  # no aclose
    second = _run(client, SamplingParams(seed=1, logprobs=False))[0]
    assert first.text == second.text and len(fake_server.chat_requests()) == 2


def _delays(monkeypatch) -> list[float]:
    """Record the backoff delays `complete` sleeps (no wall clock involved)."""
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay, *args, **kwargs):
        slept.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(openai_compat.asyncio, "sleep", fake_sleep)
    return slept


def test_transient_errors_are_retried_on_a_seeded_jitter_schedule(fake_server, monkeypatch):
    import numpy as np

    slept = _delays(monkeypatch)
    fake_server.faults = [Fault("status", status=503, times=2)]
    schedules = []
    for seed in (5, 5, 6):
        slept.clear()
        completion = _run(_client(fake_server, max_retries=3, backoff=0.25, jitter_seed=seed),
                          SamplingParams(seed=100 + len(schedules), logprobs=False))[0]
        assert completion.attempts == 3
        schedules.append(list(slept))
    rng = np.random.default_rng(5)
    assert schedules[0] == [0.25 * 2 ** a * (1.0 + 0.5 * rng.random()) for a in range(2)]
    assert schedules[0] == schedules[1], "the same jitter seed gave another schedule"
    assert schedules[0] != schedules[2], "another jitter seed gave the same schedule"


@pytest.mark.parametrize(("status", "type_", "retryable"), [
    (429, "RateLimitError", True), (500, "InternalServerError", True), (503, "InternalServerError", True),
    (400, "BadRequestError", False), (401, "AuthenticationError", False), (403, "PermissionDeniedError", False),
    (404, "NotFoundError", False), (422, "UnprocessableEntityError", False), (418, "APIStatusError", False),
])
def test_which_statuses_are_retried(fake_server, monkeypatch, status, type_, retryable):
    _delays(monkeypatch)
    fake_server.faults = [Fault("status", status=status, message="nope: {status}")]
    with pytest.raises(LLMError) as info:
        _run(_client(fake_server, max_retries=2), SamplingParams(seed=9, logprobs=False))
    err = info.value
    assert (err.type, err.status_code, err.retryable) == (type_, status, retryable)
    assert str(err) == f"Error code: {status} - nope: {status}"
    assert err.attempts == (3 if retryable else 1) == len(fake_server.chat_requests())


def test_a_timeout_and_a_refused_connection_are_retried_then_reported(fake_server, monkeypatch):
    _delays(monkeypatch)
    fake_server.faults = [Fault("hang", delay_s=2.0)]
    with pytest.raises(LLMError) as info:
        _run(_client(fake_server, timeout=0.3, max_retries=1), SamplingParams(seed=1, logprobs=False))
    assert (info.value.type, info.value.retryable, info.value.attempts) == ("APITimeoutError", True, 2)
    assert str(info.value) == "Request timed out."
    closed = FakeOpenAIServer().start()
    url = closed.base_url
    closed.stop()
    with pytest.raises(LLMError) as info:
        _run(OpenAIChatClient("fake", url, timeout=2.0, max_retries=2), SamplingParams(seed=1, logprobs=False))
    assert (info.value.type, info.value.retryable, info.value.attempts) == ("APIConnectionError", True, 3)


def test_a_rejected_logprobs_option_is_dropped_and_remembered(fake_server):
    fake_server.faults = [Fault("reject_logprobs")]
    client = _client(fake_server)
    completions = _run(client, SamplingParams(seed=4, logprobs=True), calls=3)
    asked = [bool(r.body.get("logprobs")) for r in fake_server.chat_requests()]
    assert asked == [True, False, False, False], asked  # rejected once, then never asked again
    assert [c.attempts for c in completions] == [1, 1, 1] and completions[0].completion_logprobs is None


def test_an_echoed_key_is_masked_in_errors_and_replies(fake_server):
    fake_server.faults = [Fault("status", status=401, message="bad key in {authorization}")]
    with pytest.raises(LLMError) as info:
        _run(_client(fake_server), SamplingParams(seed=1, logprobs=False))
    assert str(info.value) == "Error code: 401 - bad key in Bearer ***"
