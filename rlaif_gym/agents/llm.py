"""LLM policies for the text face: a system prompt and a tick prompt in, one recorded reply out.

Each tick is one chat turn (system + the tick's prompt, which already carries the last action's
result), so every call can be replayed and trained on alone. Every call goes through the
`RecordingClient`; a failed call raises `LLMError` carrying its record.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import asdict
from typing import Any

from ..encoding.grammar import GrammarLimits, TickIds, canonical_reply_from_json, constraint_body
from ..llm import ChatClient, OpenAIChatClient, RecordingClient, SamplingParams, ScriptedLLM
from ..llm.transport import MAX_RESPONSE_BYTES
from ..trajectory import LLMCall

__all__ = ["LLMAgent", "OpenAIChatAgent", "ScriptedLLMAgent"]


class LLMAgent:
    """A chat-model policy.

    Args:
        client: any `ChatClient` (scripted, OpenAI-compatible, or your own).
        sampling: sampling parameters; the per-call seed is set by the caller.
        name: the agent id recorded in trajectories.
    """

    def __init__(self, client: ChatClient, sampling: SamplingParams | None = None, name: str | None = None) -> None:
        self.client = RecordingClient(client, purpose="action")
        self.sampling = sampling or SamplingParams()
        self.name = name or client.model

    def describe(self) -> dict[str, Any]:
        """The agent as recorded in each trajectory: client description and sampling (no secrets)."""
        return {"name": self.name, **self.client.describe(), "sampling": asdict(self.sampling)}

    async def aclose(self) -> None:
        """Release the client's connections (clients without any are left alone)."""
        close = getattr(self.client.inner, "aclose", None)
        if close is not None:
            await close()

    async def act(self, system_prompt: str, prompt: str, *, seed: int | None = None,
                  call_id: str = "") -> tuple[str, LLMCall]:
        """The reply to one tick and its call record. Raises `LLMError` (with `.record`) on failure."""
        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": prompt}]
        completion, record = await self.client.chat(messages, self.sampling.with_seed(seed), call_id=call_id)
        return completion.text, record


class ScriptedLLMAgent(LLMAgent):
    """The embedded offline default: `ScriptedLLM` behind the same recording path as a real model."""

    def __init__(self, temperature: float = 0.7, latency_s: float = 0.0, jitter_s: float = 0.0,
                 name: str = "scripted") -> None:
        super().__init__(ScriptedLLM(latency_s=latency_s, jitter_s=jitter_s),
                         SamplingParams(temperature=temperature, max_tokens=512, logprobs=False), name=name)


class OpenAIChatAgent(LLMAgent):
    """A policy served by any OpenAI-compatible server (vLLM, llama.cpp, Ollama, hosted APIs).

    Args:
        model: the model name on the server (default: $RLAIF_MODEL); see `OpenAIChatClient`.
        base_url: the server URL, e.g. http://127.0.0.1:8000/v1 (default: $OPENAI_BASE_URL).
        api_key: the key (default: $OPENAI_API_KEY); it is never recorded.
        temperature, max_tokens, top_p: sampling.
        logprobs: ask for per-token logprobs.
        timeout, max_retries: per attempt / transient failures only.
        max_response_bytes: the largest answer read from the server, in bytes (default 8 MiB; see
            `rlaif_gym.llm.transport`); a larger one is a failed, retried attempt.
        extra_body: extra server fields (e.g. {"return_token_ids": True} on vLLM); they win over `constrain`'s.
        constrain: constrained decoding of the canonical reply (`encoding.grammar`): "gbnf" (llama.cpp's
            `grammar` field), "guided_json" (vLLM) or "response_format" (OpenAI structured outputs); None
            sends no constraint. The JSON modes make the model write {"reasoning": ..., "action": {...}}:
            the system prompt says so, the call record keeps that raw reply, and the env receives it
            rewritten as the canonical `<think>...</think>` + JSON action.
        grammar_limits: length bounds of the constrained reply (characters); see `GrammarLimits`.
        per_tick: build the constraint per call from the ids the tick's prompt shows (`TickIds.from_prompt`),
            so a reply that satisfies it names only open markets, held shares, free tickers, open
            positions, unjoined groups and NPCs it was shown. A prompt that is not a rendered tick
            prompt gets the id-agnostic constraint. False: the id-agnostic constraint on every call.
    """

    def __init__(self, model: str | None = None, base_url: str | None = None, api_key: str | None = None, *,
                 temperature: float = 0.7, max_tokens: int = 512, top_p: float | None = None, logprobs: bool = True,
                 timeout: float = 60.0, max_retries: int = 3, backoff: float = 0.5,
                 extra_body: dict[str, Any] | None = None, name: str | None = None, constrain: str | None = None,
                 grammar_limits: GrammarLimits | None = None, per_tick: bool = True,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.constrain = constrain
        self.grammar_limits = (grammar_limits or GrammarLimits()) if constrain else None
        self.per_tick = bool(constrain) and per_tick
        self._fixed_constraint = constraint_body(constrain, grammar_limits) if constrain else {}
        client = _PerCallBodyClient(model, base_url, api_key, timeout=timeout, max_retries=max_retries,
                                    backoff=backoff, extra_body=extra_body, max_response_bytes=max_response_bytes)
        super().__init__(client, SamplingParams(temperature, max_tokens, top_p, None, logprobs), name=name)

    def describe(self) -> dict[str, Any]:
        """As `LLMAgent.describe`, plus the constrained-decoding mode (None: unconstrained), its bounds and
        whether it is built per tick."""
        limits = asdict(self.grammar_limits) if self.grammar_limits is not None else None
        return {**super().describe(), "constrain": self.constrain, "grammar_limits": limits,
                "constrain_per_tick": self.per_tick}

    def constraint(self, system_prompt: str, prompt: str) -> dict[str, Any]:
        """The constraint fields sent with the call for this prompt ({} when unconstrained)."""
        if not self.per_tick:
            return self._fixed_constraint
        ids = TickIds.from_prompt(prompt, system_prompt)
        return self._fixed_constraint if ids is None else constraint_body(self.constrain, self.grammar_limits, ids)

    async def act(self, system_prompt: str, prompt: str, *, seed: int | None = None,
                  call_id: str = "") -> tuple[str, LLMCall]:
        """As `LLMAgent.act`, with this tick's constraint; in the JSON modes the reply is rewritten as the
        canonical reply for the env."""
        token = _CALL_BODY.set(self.constraint(system_prompt, prompt))
        try:
            if self.constrain not in ("guided_json", "response_format"):
                return await super().act(system_prompt, prompt, seed=seed, call_id=call_id)
            text, record = await super().act(system_prompt + _JSON_REPLY_NOTE, prompt, seed=seed, call_id=call_id)
            return canonical_reply_from_json(text), record
        finally:
            _CALL_BODY.reset(token)


_CALL_BODY: ContextVar[dict[str, Any]] = ContextVar("rlaif_gym_call_constraint", default={})  # noqa: B039


class _PerCallBodyClient(OpenAIChatClient):
    """`OpenAIChatClient` whose `extra_body` is the current call's constraint under the fixed extra fields.

    The agent sets the constraint in a context variable around each call. Every episode's calls run
    in their own asyncio task, whose context is its own, so concurrent episodes (and a retry after a
    backoff) each send their own tick's grammar. Fixed fields win over the constraint, as before.
    """

    @property
    def extra_body(self) -> dict[str, Any]:  # type: ignore[override]
        return {**_CALL_BODY.get(), **self._fixed_body}

    @extra_body.setter
    def extra_body(self, value: dict[str, Any]) -> None:
        self._fixed_body = dict(value)


_JSON_REPLY_NOTE = ('\n\nThis server constrains your reply to one JSON object instead: '
                    '{"reasoning": "<your thinking>", "action": <exactly one action object as above>}.')
