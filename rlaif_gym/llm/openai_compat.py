"""`OpenAIChatClient`: any OpenAI-compatible chat server (vLLM, llama.cpp, Ollama, hosted APIs).

Built on the official `openai` package (the `[openai]` extra, imported when the first call is
made, so constructing a client needs neither the package nor a connection). The base URL, model
and key come from the arguments or from `OPENAI_BASE_URL`, `RLAIF_MODEL` / `OPENAI_MODEL` and
`OPENAI_API_KEY`; local servers accept any key, so a missing key becomes "EMPTY". The key is held
only by the HTTP client: `describe()` and every record omit it. Credentials embedded in the base URL
(``http://user:pass@host/v1``) are stripped, with a warning, before the HTTP client sees the URL:
httpx would otherwise send them as HTTP Basic auth instead of the key, and a server that echoes its
headers would hand base64(user:pass) back into every record.

Servers echo what they receive. Every text that comes back, errors and successful replies (the
content and the reasoning) alike, has each known secret masked as ``***`` (`_redact`): the key, the
URL password and user:password pair, plain and in base64 (standard and URL-safe).

Retries: timeouts, connection errors, 429 and 5xx are retried with exponential backoff and jitter
(drawn from a seeded generator); 4xx errors are not. A server that rejects the `logprobs` option is
asked again without it, and remembered.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import warnings
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np

from ..errors import DependencyNotInstalled
from .types import Completion, LLMError, SamplingParams

__all__ = ["OpenAIChatClient", "redact_url"]

_log = logging.getLogger(__name__)


def redact_url(url: str | None) -> str | None:
    """The URL without any user:password part (safe to record)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _strip_credentials(url: str | None) -> tuple[str | None, list[str]]:
    """(the URL without its user:password part, query and fragment kept; the secrets it held)."""
    if not url:
        return url, []
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, []
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    secrets = [v for v in {userinfo, unquote(userinfo), password, unquote(password),
                           f"{unquote(user)}:{unquote(password)}"} if v and len(v) >= 4]
    return urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment)), secrets


def _secret_forms(secret: str) -> set[str]:
    """The forms in which a server may echo `secret`: plain, and base64 (standard and URL-safe, padded or
    not, and the prefix that stays the same when more text follows, as in a Basic-auth pair)."""
    raw = secret.encode("utf-8")
    forms = {secret}
    for chunk in (raw, raw[: len(raw) - len(raw) % 3]):
        if len(chunk) < 3:
            continue
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(chunk).decode("ascii")
            forms |= {encoded, encoded.rstrip("=")}
    return {f for f in forms if len(f) >= 4}


class OpenAIChatClient:
    """Chat completions against an OpenAI-compatible endpoint, with timeouts and retries.

    Args:
        model: model name on the server (or RLAIF_MODEL / OPENAI_MODEL).
        base_url: e.g. http://127.0.0.1:8000/v1 (or OPENAI_BASE_URL; default the OpenAI API).
        api_key: the key (or OPENAI_API_KEY; "EMPTY" when neither is set). Never recorded.
        timeout: seconds per attempt.
        max_retries: retries after the first attempt, for transient failures only.
        backoff: first backoff in seconds; doubles per retry, with up to 50% jitter.
        jitter_seed: seeds the jitter generator (reproducible schedules in tests).
        extra_body: extra JSON fields for the server (e.g. vLLM's {"return_token_ids": True}).
    """

    def __init__(self, model: str | None = None, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 60.0, max_retries: int = 3, backoff: float = 0.5, jitter_seed: int = 0,
                 extra_body: dict[str, Any] | None = None) -> None:
        self.model = model or os.environ.get("RLAIF_MODEL") or os.environ.get("OPENAI_MODEL") or ""
        if not self.model:
            raise ValueError("OpenAIChatClient needs a model name: pass model=... or set RLAIF_MODEL")
        self.base_url, url_secrets = _strip_credentials(base_url or os.environ.get("OPENAI_BASE_URL") or None)
        if url_secrets:
            warnings.warn(f"credentials in the base URL were removed: requests go to {self.base_url} and are "
                          "authenticated with the API key only (pass it as api_key or OPENAI_API_KEY)",
                          UserWarning, stacklevel=2)
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        secrets = [*url_secrets, *([self._api_key] if len(self._api_key) >= 4 and self._api_key != "EMPTY" else [])]
        self._secret_forms = sorted({f for secret in secrets for f in _secret_forms(secret)}, key=len, reverse=True)
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.extra_body = dict(extra_body or {})
        self._rng = np.random.default_rng(jitter_seed)
        self._client = None
        self._client_loop = None
        self._logprobs_supported = True

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatClient(model={self.model!r}, base_url={redact_url(self.base_url)!r})"

    def describe(self) -> dict[str, Any]:
        """Kind, model, endpoint and limits; never the key."""
        return {"kind": "openai-compatible", "model": self.model, "base_url": redact_url(self.base_url),
                "timeout_s": self.timeout, "max_retries": self.max_retries}

    def _get_client(self):
        # An AsyncOpenAI client belongs to the event loop it first ran on; each `asyncio.run` (e.g. a
        # second collect, or a resume in the same process) gets its own.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            try:
                import openai
            except ImportError as exc:
                raise DependencyNotInstalled(
                    'OpenAIChatClient needs the openai package: pip install "rlaif-gym[openai]"'
                ) from exc
            self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self.timeout,
                                              max_retries=0)
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop (the collector calls this when it finishes)."""
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            # Bounded: closing a pool whose request was just cancelled (Ctrl-C mid-call) can wait on
            # that connection; an interrupted run must still exit (the OS reclaims the sockets).
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(client.close(), timeout=1.0)

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        """One completion, retried on transient failures; raises `LLMError` when it gives up."""
        import openai  # the client above has checked that it is installed

        client = self._get_client()
        attempt = 0
        while True:
            attempt += 1
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
            for name in ("temperature", "max_tokens", "top_p", "seed"):
                if getattr(params, name) is not None:
                    kwargs[name] = getattr(params, name)
            if params.logprobs and self._logprobs_supported:
                # top_logprobs=0: the chosen tokens' logprobs only. llama-cpp-python's server returns no
                # logprobs at all unless top_logprobs is set (OpenAI and vLLM accept 0).
                kwargs["logprobs"], kwargs["top_logprobs"] = True, 0
            if self.extra_body:
                kwargs["extra_body"] = self.extra_body
            try:
                response = await client.chat.completions.create(**kwargs)
                return self._completion(response, attempt)
            except openai.BadRequestError as exc:
                if "logprobs" in kwargs and "logprob" in str(exc).lower():
                    self._logprobs_supported = False
                    _log.warning("the server at %s refused logprobs (%s); calls go on without them",
                                 self.base_url, self._message(exc)[:120])
                    attempt -= 1
                    continue
                raise LLMError(self._message(exc), type_="BadRequestError", status_code=exc.status_code,
                               attempts=attempt) from None
            except (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError,
                    openai.InternalServerError, openai.APIResponseValidationError, ValueError) as exc:
                status, reason = getattr(exc, "status_code", None), self._message(exc)
                if attempt > self.max_retries:
                    raise LLMError(self._message(exc), type_=type(exc).__name__, status_code=status, retryable=True,
                                   attempts=attempt) from None
            except openai.APIStatusError as exc:
                retryable, reason = exc.status_code >= 500 or exc.status_code == 429, self._message(exc)
                if not retryable or attempt > self.max_retries:
                    raise LLMError(self._message(exc), type_=type(exc).__name__, status_code=exc.status_code,
                                   retryable=retryable, attempts=attempt) from None
            delay = self.backoff * (2 ** (attempt - 1)) * (1.0 + 0.5 * self._rng.random())
            if _log.isEnabledFor(logging.INFO):
                _log.info("call to %s failed (%s); retry %d of %d in %.2f s", self.base_url,
                          reason[:160], attempt, self.max_retries, delay)
            await asyncio.sleep(delay)

    def _redact(self, text: str) -> str:
        """`text` with every form of this client's secrets masked as ``***`` (servers echo them)."""
        for form in self._secret_forms:
            if form in text:
                text = text.replace(form, "***")
        return text

    def _message(self, exc: Exception) -> str:
        """The error text, cut to 500 characters, with this client's secrets masked."""
        return self._redact(str(exc) or type(exc).__name__)[:500]

    def _completion(self, response: Any, attempts: int) -> Completion:
        """Normalise a response; any malformed part raises ValueError, which the caller retries."""
        try:
            return self._parse(response, attempts)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            raise ValueError(f"malformed response: {type(exc).__name__}: {exc}") from None

    def _parse(self, response: Any, attempts: int) -> Completion:
        choices = getattr(response, "choices", None)
        if not choices or not isinstance(choices, list):
            raise ValueError(f"malformed response: no choices in {str(response)[:200]!r}")
        choice = choices[0]
        message = choice.message
        text = message.content if message is not None else None
        if not isinstance(text, str):
            raise ValueError(f"malformed response: message content is {type(text).__name__}, expected text")
        logprobs = None
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        if content:
            logprobs = [float(t.logprob) for t in content]
        usage = getattr(response, "usage", None)
        extra = getattr(choice, "model_extra", None) or {}
        token_ids = extra.get("token_ids") if isinstance(extra.get("token_ids"), list) else None
        response_extra = getattr(response, "model_extra", {}) or {}
        prompt_ids = response_extra.get("prompt_token_ids")
        prompt_ids = prompt_ids if isinstance(prompt_ids, list) else None
        reasoning = getattr(message, "reasoning_content", None) or (getattr(message, "model_extra", None) or {}).get(
            "reasoning_content")
        if isinstance(reasoning, str):
            reasoning = self._redact(reasoning)
        return Completion(
            text=self._redact(text), model=getattr(response, "model", None) or self.model,
            finish_reason=choice.finish_reason,
            prompt_tokens=getattr(usage, "prompt_tokens", None), completion_tokens=getattr(usage, "completion_tokens",
                                                                                           None),
            total_tokens=getattr(usage, "total_tokens", None), prompt_token_ids=prompt_ids,
            completion_token_ids=token_ids, completion_logprobs=logprobs, reasoning=reasoning, attempts=attempts,
        )

