"""Agents: baselines for the numeric face, and LLM policies (scripted or OpenAI-compatible) for the text face."""

from .baselines import BaselineAgent, InformedAgent, OracleAgent, PassiveAgent, RandomAgent
from .llm import LLMAgent, OpenAIChatAgent, ScriptedLLMAgent

__all__ = [
    "BaselineAgent",
    "InformedAgent",
    "LLMAgent",
    "OpenAIChatAgent",
    "OracleAgent",
    "PassiveAgent",
    "RandomAgent",
    "ScriptedLLMAgent",
]
