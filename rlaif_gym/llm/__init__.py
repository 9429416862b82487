"""LLM clients: the protocol, the one recording client, an offline scripted model and an
OpenAI-compatible client (vLLM, llama.cpp, Ollama, hosted APIs)."""

from .format_teacher import FormatOnlyLLM, bet_reply
from .openai_compat import OpenAIChatClient, redact_url
from .recording import RecordingClient
from .scripted import ScriptedLLM
from .types import ChatClient, Completion, LLMError, SamplingParams

__all__ = [
    "ChatClient",
    "Completion",
    "FormatOnlyLLM",
    "LLMError",
    "OpenAIChatClient",
    "RecordingClient",
    "SamplingParams",
    "ScriptedLLM",
    "bet_reply",
    "redact_url",
]
