"""Plain data shared by every LLM client: sampling parameters, a completion, and the client protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["AttemptError", "ChatClient", "Completion", "LLMError", "SamplingParams"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. `seed` is per call; the collector derives it from the run seed and the tick."""

    temperature: float | None = 0.7
    max_tokens: int | None = 512
    top_p: float | None = None
    seed: int | None = None
    logprobs: bool = True
    """Ask for per-token logprobs (servers that reject the option are retried without it)."""

    def with_seed(self, seed: int | None) -> SamplingParams:
        """A copy with another seed."""
        return SamplingParams(self.temperature, self.max_tokens, self.top_p, seed, self.logprobs)


@dataclass(frozen=True)
class AttemptError:
    """Why one attempt of a call failed (a call that was retried carries one per failed attempt)."""

    type: str
    """The error's type name (the `openai` SDK's names, e.g. ``APITimeoutError``, or the transport's)."""
    message: str
    status_code: int | None = None
    retryable: bool = True


@dataclass(frozen=True)
class Completion:
    """One successful completion, normalised across servers."""

    text: str
    model: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    reasoning: str | None = None
    attempts: int = 1
    attempt_errors: tuple[AttemptError, ...] = ()
    """The errors of the attempts that failed before this one succeeded (each was a resend)."""
    extra: dict[str, Any] = field(default_factory=dict)


class LLMError(Exception):
    """A call failed for good. `retryable` says whether the failure was transient (it was retried)."""

    def __init__(self, message: str, *, type_: str, status_code: int | None = None, retryable: bool = False,
                 attempts: int = 1, attempt_errors: tuple[AttemptError, ...] = ()) -> None:
        super().__init__(message)
        self.type = type_
        self.status_code = status_code
        self.retryable = retryable
        self.attempts = attempts
        self.attempt_errors = attempt_errors
        """The errors of the earlier attempts, each retried (the last attempt's error is this one)."""


class ChatClient(Protocol):
    """Anything that turns chat messages into a completion. Constructing one opens no connection.

    A client that holds secrets (an API key) may also define ``redact(text) -> str``, which masks
    them; `RecordingClient` applies it to every string of every completion and error it records.
    """

    model: str

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        """Return a completion or raise `LLMError`."""
        ...

    def describe(self) -> dict[str, Any]:
        """What to record about this client (kind, model, endpoint); never a credential."""
        ...
