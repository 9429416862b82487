"""Numbers a server sends are checked where they enter, and per-token lists are bounded (issue 57, rows N1, N2).

Token counts, token ids and logprobs are stored only when they are standard JSON numbers in range: ``usage``
of 2**64 - 1 or of 401 digits, logprobs of NaN, -Infinity or 1e400 (as JSON numbers, which Python's reader
takes) or as strings, ids below 0 or above 2**31 - 1 are dropped, and the record's ``valueDrops`` says which
and why. The per-token lists are cut to `CALL_TOKENS` entries per call and `TRAJECTORY_TOKENS` per trajectory,
the cut recorded in ``tokenCuts``; every line of the run's JSONL is then strict JSON (RFC 8259) and the report
draws every plot.

Real loopback servers (`fake_server.FakeOpenAIServer`, and raw answer bodies where JSON's own writer cannot
write the number), the public API and the CLI.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fake_server import FakeOpenAIServer, Fault

from rlaif_gym.llm import OpenAIChatClient, RecordingClient, SamplingParams
from rlaif_gym.llm.recording import MAX_TOKEN_COUNT, MAX_TOKEN_ID

pytest.importorskip("h11")


def _strict(raw: bytes | str) -> Any:
    """`json.loads` that refuses what RFC 8259 does not allow (NaN, Infinity, -Infinity)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(raw, parse_constant=refuse)


def _body(usage: str = '{"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}',
          logprobs: str = "[-0.5, -0.25]", token_ids: str = "[11, 12]", prompt_ids: str = "[1, 2, 3]") -> bytes:
    """A chat completion written by hand, each number as the text given (JSON's writer has no 1e400)."""
    content = ", ".join(f'{{"token": "t", "logprob": {lp}}}' for lp in _items(logprobs))
    return (f'{{"id": "c-1", "object": "chat.completion", "model": "m", "prompt_token_ids": {prompt_ids}, '
            f'"choices": [{{"index": 0, "message": {{"role": "assistant", "content": "hello world"}}, '
            f'"finish_reason": "stop", "token_ids": {token_ids}, "logprobs": {{"content": [{content}]}}}}], '
            f'"usage": {usage}}}').encode()


def _items(array: str) -> list[str]:
    return [x.strip() for x in array.strip()[1:-1].split(",")]


CASES = {
    "usage 2**64 - 1": ({"usage": f'{{"prompt_tokens": {2**64 - 1}, "completion_tokens": 2, "total_tokens": 5}}'},
                        {"prompt_tokens": "out of range"}),
    "usage of 401 digits": ({"usage": f'{{"prompt_tokens": 3, "completion_tokens": {10**400}, "total_tokens": 5}}'},
                            {"completion_tokens": "out of range"}),
    "usage -1 and 2.5": ({"usage": '{"prompt_tokens": 3, "completion_tokens": 2.5, "total_tokens": -1}'},
                         {"completion_tokens": "wrong type", "total_tokens": "out of range"}),
    "logprob NaN": ({"logprobs": "[-0.5, NaN]"}, {"completion_logprobs": "not finite"}),
    "logprob -Infinity": ({"logprobs": "[-Infinity, -0.5]"}, {"completion_logprobs": "not finite"}),
    "logprob 1e400": ({"logprobs": "[-0.5, 1e400]"}, {"completion_logprobs": "not finite"}),
    "logprob -1e400": ({"logprobs": "[-1e400, -0.5]"}, {"completion_logprobs": "not finite"}),
    'logprob "NaN"': ({"logprobs": '[-0.5, "NaN"]'}, {"completion_logprobs": "wrong type"}),
    'logprob "-Infinity"': ({"logprobs": '["-Infinity", -0.5]'}, {"completion_logprobs": "wrong type"}),
    "logprob of 401 digits": ({"logprobs": f"[-0.5, -{10**400}]"}, {"completion_logprobs": "not finite"}),
    "logprob above 0": ({"logprobs": "[-0.5, 0.25]"}, {"completion_logprobs": "out of range"}),
    "token id -1": ({"token_ids": "[11, -1]"}, {"completion_token_ids": "out of range"}),
    "token id 2**31": ({"token_ids": f"[11, {2**31}]"}, {"completion_token_ids": "out of range"}),
    "token id 2**64 - 1": ({"prompt_ids": f"[1, {2**64 - 1}, 3]"}, {"prompt_token_ids": "out of range"}),
    "token id true": ({"prompt_ids": "[1, true, 3]"}, {"prompt_token_ids": "wrong type"}),
    "token ids not a list": ({"token_ids": '"11 12"'}, {"completion_token_ids": "wrong type"}),
}
"""What the server sends -> what the record's ``valueDrops`` says."""


def _call(payload: bytes):
    async def go(llm):
        try:
            return await RecordingClient(llm).chat([{"role": "user", "content": "go"}], SamplingParams())
        finally:
            await llm.aclose()

    with FakeOpenAIServer([Fault("body", payload=payload)]) as server:
        return asyncio.run(go(OpenAIChatClient("m", server.base_url, api_key="sk-test", max_retries=0)))


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_number_out_of_range_is_dropped_with_a_note_and_the_rest_is_kept(case):
    sent, drops = CASES[case]
    completion, record = _call(_body(**sent))
    assert record.model_extra.get("valueDrops") == drops
    for field in drops:
        assert getattr(record, field) is None and getattr(completion, field) is None, field
    kept = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "completion_logprobs": [-0.5, -0.25],
            "completion_token_ids": [11, 12], "prompt_token_ids": [1, 2, 3]}
    assert {f: getattr(record, f) for f in kept if f not in drops} == {f: v for f, v in kept.items() if f not in drops}
    assert record.response == "hello world"
    line = record.to_json()
    _strict(line)
    for number in _numbers(_strict(line)):
        assert abs(number) <= MAX_TOKEN_COUNT, f"{case}: {number} stored"


def _numbers(value: Any):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)


def test_numbers_in_range_are_kept_as_sent():
    edge = _body(usage=f'{{"prompt_tokens": 0, "completion_tokens": {MAX_TOKEN_COUNT}, "total_tokens": 7}}',
                 logprobs="[0, -0.0, -1e-300, -9999, -1.7976931348623157e308]",
                 token_ids=f"[0, {MAX_TOKEN_ID}]", prompt_ids="[]")
    _, record = _call(edge)
    assert "valueDrops" not in record.model_extra and "tokenCuts" not in record.model_extra
    assert (record.prompt_tokens, record.completion_tokens, record.total_tokens) == (0, MAX_TOKEN_COUNT, 7)
    assert record.completion_logprobs == [0.0, -0.0, -1e-300, -9999.0, -1.7976931348623157e308]
    assert record.completion_token_ids == [0, MAX_TOKEN_ID] and record.prompt_token_ids == []
    assert all(isinstance(v, float) for v in record.completion_logprobs)
