"""`RecordingClient`: every LLM call, policy or judge, goes through here and leaves one record.

One `LLMCall` record per call, success or error, with the messages, the sampling parameters (seed
included), latency, usage, token ids and logprobs when the server returned them, and the error.
A failed call is recorded and then re-raised as `LLMError`, so the caller decides what a failure
means for its episode; nothing here turns a failure into a reply or a reward.

This is the boundary where server text enters: the reply, its reasoning and the error message are
made storable here (`storable_text`: a lone surrogate becomes U+FFFD), for the caller as well as the
record, and the record says so (``textRepairs``: field -> code points replaced; absent when none).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..trajectory import LLMCall, LLMCallError, storable_text
from .types import ChatClient, Completion, LLMError, SamplingParams

__all__ = ["RecordingClient"]


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
        try:
            completion = await self.inner.complete(messages, params)
        except LLMError as exc:
            message, repaired = storable_text(str(exc))
            if repaired:
                exc.args = (message,)  # the caller reports it too (trajectory errors, the summary)
                record["textRepairs"] = {"error": repaired}
            record.update(latency_ms=1000.0 * (time.perf_counter() - start), attempts=exc.attempts,
                          error=LLMCallError(type=exc.type, message=message, status_code=exc.status_code,
                                             retryable=exc.retryable))
            exc.record = LLMCall(**record)  # type: ignore[attr-defined]
            raise
        text, text_repairs = storable_text(completion.text)
        reasoning, reasoning_repairs = storable_text(completion.reasoning) if completion.reasoning else (None, 0)
        if text_repairs or reasoning_repairs:
            completion = dataclasses.replace(completion, text=text, reasoning=reasoning or completion.reasoning)
            record["textRepairs"] = {k: n for k, n in (("response", text_repairs), ("reasoning", reasoning_repairs))
                                     if n}
        record.update(
            latency_ms=1000.0 * (time.perf_counter() - start), model=completion.model or self.inner.model,
            response=completion.text, reasoning=completion.reasoning, finish_reason=completion.finish_reason,
            prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
            total_tokens=completion.total_tokens, prompt_token_ids=completion.prompt_token_ids,
            completion_token_ids=completion.completion_token_ids,
            completion_logprobs=completion.completion_logprobs, attempts=completion.attempts,
        )
        return completion, LLMCall(**record)
