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
  `METADATA_CHARS` characters. Every cut comes after the masking, so that no cut leaves a part of a secret.

Numbers a server sends are checked there too, so that every stored number is standard JSON and in range:

* token counts (``usage``) are ints in [0, `MAX_TOKEN_COUNT`], token ids ints in [0, `MAX_TOKEN_ID`],
  logprobs finite floats no greater than 0; a field that fails (``2**64 - 1``, a 401-digit count, a
  ``NaN``, ``"-Infinity"`` or ``1e400`` logprob, a list of strings) is dropped (None), never stored as
  sent, and the record's ``valueDrops`` says which and why (field -> ``"wrong type"``, ``"not finite"`` or
  ``"out of range"``; absent when nothing was dropped);
* the per-token lists (prompt token ids, completion token ids, completion logprobs) are cut to
  `CALL_TOKENS` entries each, and `TokenBudget` cuts them further once one trajectory holds
  `TRAJECTORY_TOKENS`, each cut counted in the record's ``tokenCuts`` (field -> entries the server sent;
  absent when nothing was cut), as ``textCuts`` counts text.

A call that was retried records why each failed attempt failed (``attemptErrors``: type, message and
status of each, as boundary text; absent when the first attempt succeeded), beside ``attempts``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..trajectory import LLMCall, LLMCallError, storable_text
from .types import AttemptError, ChatClient, Completion, LLMError, SamplingParams

__all__ = ["CALL_TOKENS", "ERROR_CHARS", "MAX_TOKEN_COUNT", "MAX_TOKEN_ID", "METADATA_CHARS", "REPLY_CHARS",
           "TOKEN_LISTS", "TRAJECTORY_TOKENS", "RecordingClient", "TokenBudget"]

METADATA_CHARS = 256
"""The most characters kept of a short metadata field a server sends (model name, finish reason)."""
REPLY_CHARS = 131_072
"""The most characters kept of a reply and of its reasoning (128 Ki, about 32k tokens of text)."""
ERROR_CHARS = 2_000
"""The most characters kept of an error message."""
MAX_TOKEN_COUNT = 2**31 - 1
"""The largest token count kept (``usage``: prompt, completion and total tokens of one call), in tokens; the
largest a signed 32-bit column holds, far above any model's context."""
MAX_TOKEN_ID = 2**31 - 1
"""The largest token id kept; the largest a signed 32-bit column holds (vocabularies stay below 2**20 ids)."""
CALL_TOKENS = 32_768
"""The most entries kept of each per-token list of one call (`TOKEN_LISTS`), in tokens (32 Ki, the about 32k
tokens of text that `REPLY_CHARS` keeps of a reply); a call with the default ``max_tokens`` of 512 and the
env's prompts of about 1,200 tokens is far below it."""
TRAJECTORY_TOKENS = 1_048_576
"""The most entries of per-token lists (`TOKEN_LISTS`, all calls together) kept in one trajectory, in tokens
(1 Mi): a 168-tick episode with prompt ids, completion ids and logprobs at the defaults holds about 400,000;
whatever a server sends, the lists add at most about 25 MB to a trajectory's JSONL line (a logprob is at most
25 bytes of JSON)."""
TOKEN_LISTS = ("prompt_token_ids", "completion_token_ids", "completion_logprobs")
"""The per-token lists of an `LLMCall`, in the order a `TokenBudget` spends on them."""


def _status_code(value: Any) -> int | None:
    """An HTTP status code (three digits) a client reports, or None."""
    return value if type(value) is int and 0 <= value <= 999 else None


def _count_problem(value: Any) -> str | None:
    """Why `value` is no token count (None when it is one)."""
    if type(value) is not int:
        return "wrong type"
    return None if 0 <= value <= MAX_TOKEN_COUNT else "out of range"


def _ids_problem(values: list[Any]) -> str | None:
    """Why `values` is no list of token ids (None when it is one)."""
    if not all(type(v) is int for v in values):
        return "wrong type"
    return None if not values or (min(values) >= 0 and max(values) <= MAX_TOKEN_ID) else "out of range"


def _logprobs(values: list[Any]) -> tuple[list[float] | None, str | None]:
    """(`values` as floats, None) for a list of log-probabilities, else (None, why not)."""
    if not all(type(v) in (float, int) for v in values):
        return None, "wrong type"
    try:
        floats = [float(v) for v in values]
    except OverflowError:  # an int too large for a float
        return None, "not finite"
    if not all(map(math.isfinite, floats)):
        return None, "not finite"
    return (floats, None) if not floats or max(floats) <= 0.0 else (None, "out of range")


class TokenBudget:
    """What one trajectory may still store of per-token lists: `TRAJECTORY_TOKENS` entries in all.

    The collector keeps one per episode (a GRPO branch's starts with its trunk's calls) and hands it every
    call it records; once the budget is spent, each list keeps a prefix of what is left (an empty list when
    nothing is), the cut counted in the call's ``tokenCuts`` as `RecordingClient` counts its own.

    Args:
        calls: calls the trajectory already holds (a fork's trunk); they spend the budget first.
    """

    def __init__(self, calls: Iterable[LLMCall] = ()) -> None:
        self.left = TRAJECTORY_TOKENS
        for call in calls:
            self.take(call)

    def take(self, call: LLMCall) -> LLMCall:
        """`call`, its lists cut in place to what the trajectory has left, the rest of the budget spent on them."""
        for name in TOKEN_LISTS:
            values = getattr(call, name)
            if values is None:
                continue
            if len(values) > self.left:
                cuts = call.model_extra.setdefault("tokenCuts", {})  # type: ignore[union-attr]  # extra="allow"
                cuts.setdefault(name, len(values))  # a cut at the boundary already counted what the server sent
                values = values[: self.left]
                setattr(call, name, values)
            self.left -= len(values)
        return call


class _BoundaryText:
    """Masks, repairs and bounds the strings of one call, checks and bounds its numbers, and counts what it
    changed per field."""

    def __init__(self, redact: Callable[[str], str] | None) -> None:
        self.redact = redact
        self.repairs: dict[str, int] = {}
        self.cuts: dict[str, int] = {}
        self.token_cuts: dict[str, int] = {}
        self.drops: dict[str, str] = {}

    def __call__(self, field: str, value: str, limit: int | None = None) -> str:
        if self.redact is not None:
            value = self.redact(value)  # before any cut: a secret across the cut would leave its prefix
        value, repaired = storable_text(value)
        if repaired:
            self.repairs[field] = repaired
        if limit is not None and len(value) > limit:
            self.cuts[field] = len(value)
            value = value[:limit]
        return value

    def annotate(self, record: dict[str, Any]) -> None:
        """Add the repairs, cuts and drops made so far to `record` (each key only when there is something to say)."""
        for key, notes in (("textRepairs", self.repairs), ("textCuts", self.cuts), ("tokenCuts", self.token_cuts),
                           ("valueDrops", self.drops)):
            if notes:
                record[key] = notes

    def count(self, field: str, value: Any) -> int | None:
        """`value` if it is a token count, else None (a value the server sent is noted in ``valueDrops``)."""
        problem = None if value is None else _count_problem(value)
        if problem is not None:
            self.drops[field] = problem
            return None
        return value

    def tokens(self, field: str, value: Any) -> list[Any] | None:
        """The per-token list `value` cut to `CALL_TOKENS` and checked, or None (noted in ``valueDrops``)."""
        if value is None:
            return None
        if not isinstance(value, list):
            self.drops[field] = "wrong type"
            return None
        if len(value) > CALL_TOKENS:
            self.token_cuts[field] = len(value)
            value = value[:CALL_TOKENS]
        if field == "completion_logprobs":
            value, problem = _logprobs(value)
        else:
            problem = _ids_problem(value)
        if problem is not None:
            self.drops[field] = problem
            return None
        return value

    def attempt_errors(self, errors: tuple[AttemptError, ...]) -> list[dict[str, Any]]:
        """The failed attempts' errors as records, their text made boundary text like any server text."""
        return [LLMCallError(type=self("error_type", str(e.type), METADATA_CHARS),
                             message=self("error", str(e.message), ERROR_CHARS),
                             status_code=_status_code(e.status_code), retryable=bool(e.retryable)).to_dict()
                for e in errors]

    def completion(self, completion: Completion, default_model: str) -> Completion:
        """`completion` with every string field made boundary text and every other field checked."""
        model = completion.model if isinstance(completion.model, str) and completion.model else default_model
        reasoning = completion.reasoning if isinstance(completion.reasoning, str) else None
        finish = completion.finish_reason if isinstance(completion.finish_reason, str) else None
        return dataclasses.replace(
            completion,
            text=self("response", completion.text if isinstance(completion.text, str) else "", REPLY_CHARS),
            reasoning=self("reasoning", reasoning, REPLY_CHARS) if reasoning else reasoning,
            model=self("model", model, METADATA_CHARS),
            finish_reason=self("finish_reason", finish, METADATA_CHARS) if finish is not None else None,
            prompt_tokens=self.count("prompt_tokens", completion.prompt_tokens),
            completion_tokens=self.count("completion_tokens", completion.completion_tokens),
            total_tokens=self.count("total_tokens", completion.total_tokens),
            **{name: self.tokens(name, getattr(completion, name)) for name in TOKEN_LISTS},
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
                          error=LLMCallError(type=exc.type, message=message, status_code=_status_code(exc.status_code),
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
