"""`RecordingClient`: every LLM call, policy or judge, goes through here and leaves one record.

One `LLMCall` record per call, success or error, with the messages, the sampling parameters (seed
included), latency, usage, token ids and logprobs when the server returned them, and the error.
A failed call is recorded and then re-raised as `LLMError`, so the caller decides what a failure
means for its episode; nothing here turns a failure into a reply or a reward.

This is the one boundary where server text enters. Every string a completion or an error carries
(the reply, its reasoning, the model name, the finish reason, the error message) passes through
`_BoundaryText` before the caller or the record sees it:

* secrets masked: the wrapped client's `redact(text)` (`OpenAIChatClient` masks its key and the URL's
  credentials in every form); a server or gateway that echoes a key in *any* field stores ``***``;
* made storable (`storable_text`: a lone surrogate becomes U+FFFD), counted in the record's
  ``textRepairs`` (field -> code points replaced; absent when none);
* bounded: the reply and its reasoning are cut to `REPLY_CHARS` characters and error messages to
  `ERROR_CHARS`, each cut counted in the record's ``textCuts`` (field -> characters the server sent;
  absent when nothing was cut), so a server's 8 MiB answer is never an 8 MiB line of JSONL and the
  reply the agent plays is the reply stored; short metadata fields (model, finish reason) are cut to
  `METADATA_CHARS` characters;
* typed: token ids, logprobs and token counts of the wrong type are dropped (None), not stored.

A call that was retried records why each failed attempt failed (``attemptErrors``: type, message and
status of each, as boundary text; absent when the first attempt succeeded), beside ``attempts``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ..trajectory import LLMCall, LLMCallError, storable_text
from .types import AttemptError, ChatClient, Completion, LLMError, SamplingParams

__all__ = ["ERROR_CHARS", "METADATA_CHARS", "REPLY_CHARS", "RecordingClient"]

METADATA_CHARS = 256
"""The most characters kept of a short metadata field a server sends (model name, finish reason)."""
REPLY_CHARS = 131_072
"""The most characters kept of a reply and of its reasoning (128 Ki, about 32k tokens of text)."""
ERROR_CHARS = 2_000
"""The most characters kept of an error message."""


def _ints(value: Any) -> list[int] | None:
    """A list of plain ints (token ids), or None for anything else a server may send."""
    if isinstance(value, list) and all(type(v) is int for v in value):
        return value
    return None


def _floats(value: Any) -> list[float] | None:
    """A list of floats (logprobs), or None for anything else."""
    if isinstance(value, list) and all(type(v) in (float, int) for v in value):
        return [float(v) for v in value]
    return None


def _count(value: Any) -> int | None:
    """A non-negative token count, or None."""
    return value if type(value) is int and value >= 0 else None


class _BoundaryText:
    """Masks, repairs and bounds the strings of one call, and counts the repairs per field."""

    def __init__(self, redact: Callable[[str], str] | None) -> None:
        self.redact = redact
        self.repairs: dict[str, int] = {}
        self.cuts: dict[str, int] = {}

    def __call__(self, field: str, value: str, limit: int | None = None) -> str:
        if self.redact is not None:
            value = self.redact(value)
        value, repaired = storable_text(value)
        if repaired:
            self.repairs[field] = repaired
        if limit is not None and len(value) > limit:
            self.cuts[field] = len(value)
            value = value[:limit]
        return value

    def annotate(self, record: dict[str, Any]) -> None:
        """Add the repairs and cuts made so far to `record` (each key only when there is something to say)."""
        if self.repairs:
            record["textRepairs"] = self.repairs
        if self.cuts:
            record["textCuts"] = self.cuts

    def attempt_errors(self, errors: tuple[AttemptError, ...]) -> list[dict[str, Any]]:
        """The failed attempts' errors as records, their text made boundary text like any server text."""
        return [LLMCallError(type=self("error_type", str(e.type), METADATA_CHARS),
                             message=self("error", str(e.message), ERROR_CHARS),
                             status_code=_count(e.status_code), retryable=bool(e.retryable)).to_dict()
                for e in errors]

    def completion(self, completion: Completion, default_model: str) -> Completion:
        """`completion` with every string field made boundary text and every other field type-checked."""
        model = completion.model if isinstance(completion.model, str) and completion.model else default_model
        reasoning = completion.reasoning if isinstance(completion.reasoning, str) else None
        finish = completion.finish_reason if isinstance(completion.finish_reason, str) else None
        logprobs = _floats(completion.completion_logprobs)
        return dataclasses.replace(
            completion,
            text=self("response", completion.text if isinstance(completion.text, str) else "", REPLY_CHARS),
            reasoning=self("reasoning", reasoning, REPLY_CHARS) if reasoning else reasoning,
            model=self("model", model, METADATA_CHARS),
            finish_reason=self("finish_reason", finish, METADATA_CHARS) if finish is not None else None,
            prompt_tokens=_count(completion.prompt_tokens), completion_tokens=_count(completion.completion_tokens),
            total_tokens=_count(completion.total_tokens), prompt_token_ids=_ints(completion.prompt_token_ids),
            completion_token_ids=_ints(completion.completion_token_ids),
            completion_logprobs=logprobs,
        )


def _multi_turn(messages: list[dict[str, str]]) -> bool:
    roles = [m.get("role") for m in messages]
    return roles not in (["user"], ["system", "user"])


class RecordingClient:
    """Wraps a `ChatClient`; `chat` returns (completion, record) or raises `LLMError` with `.record` set."""

    def __init__(self, inner: ChatClient, purpose: str = "action") -> None:
        self.inner = inner
        self.purpose = purpose
        self.model = inner.model

    def describe(self) -> dict[str, Any]:
        """The wrapped client's description (no credentials)."""
        return self.inner.describe()

    async def chat(self, messages: list[dict[str, str]], params: SamplingParams, *, call_id: str = "",
                   action_type: str | None = None) -> tuple[Completion, LLMCall]:
        """Call the model once (the client may retry internally) and record it."""
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        record: dict[str, Any] = {
            "call_id": call_id, "model": self.inner.model, "system_prompt": system, "user_prompt": user,
            # A single-turn call is fully described by its system and user prompts; keep the message
            # list only when it says more (multi-turn history), to avoid storing every prompt twice.
            "messages": [dict(m) for m in messages] if _multi_turn(messages) else [],
            "temperature": params.temperature,
            "max_tokens": params.max_tokens, "top_p": params.top_p, "seed": params.seed, "purpose": self.purpose,
            "action_type": action_type,
        }
        start = time.perf_counter()
        boundary = _BoundaryText(getattr(self.inner, "redact", None))
        try:
            completion = await self.inner.complete(messages, params)
        except LLMError as exc:
            message = boundary("error", str(exc), ERROR_CHARS)
            exc.args = (message,)  # the caller reports it too (trajectory errors, the summary)
            exc.type = boundary("error_type", str(exc.type), METADATA_CHARS)
            earlier = getattr(exc, "attempt_errors", ())
            if earlier:
                record["attemptErrors"] = boundary.attempt_errors(earlier)
            boundary.annotate(record)
            record.update(latency_ms=1000.0 * (time.perf_counter() - start), attempts=exc.attempts,
                          error=LLMCallError(type=exc.type, message=message, status_code=_count(exc.status_code),
                                             retryable=bool(exc.retryable)))
            exc.record = LLMCall(**record)  # type: ignore[attr-defined]
            raise
        completion = boundary.completion(completion, self.inner.model)
        if completion.attempt_errors:
            record["attemptErrors"] = boundary.attempt_errors(completion.attempt_errors)
        boundary.annotate(record)
        record.update(
            latency_ms=1000.0 * (time.perf_counter() - start), model=completion.model,
            response=completion.text, reasoning=completion.reasoning, finish_reason=completion.finish_reason,
            prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
            total_tokens=completion.total_tokens, prompt_token_ids=completion.prompt_token_ids,
            completion_token_ids=completion.completion_token_ids,
            completion_logprobs=completion.completion_logprobs, attempts=completion.attempts,
        )
        return completion, LLMCall(**record)
