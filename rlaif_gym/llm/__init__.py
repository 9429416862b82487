"""LLM clients: the protocol, the one recording client, an offline scripted model and an
OpenAI-compatible client (vLLM, llama.cpp, Ollama, hosted APIs)."""

from .openai_compat import OpenAIChatClient, redact_url
from .recording import RecordingClient
from .scripted import ScriptedLLM
from .types import ChatClient, Completion, LLMError, SamplingParams

__all__ = [
    "ChatClient",
    "Completion",
    "LLMError",
    "OpenAIChatClient",
    "RecordingClient",
    "SamplingParams",
    "ScriptedLLM",
    "redact_url",
]
