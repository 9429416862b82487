"""Register the env ids with Gymnasium (idempotent, string entry points so import stays cheap)."""

from __future__ import annotations

import gymnasium as gym

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register `RLAIF-v0` and `RLAIF-Text-v0`. Safe to call more than once (e.g. in subprocesses)."""
    if "RLAIF-v0" not in gym.registry:
        gym.register(
            id="RLAIF-v0",
            entry_point="rlaif_gym.envs.rlaif_env:RLAIFEnv",
            vector_entry_point="rlaif_gym.envs.vector_env:RLAIFVectorEnv",
            max_episode_steps=168,  # the default num_ticks; the env also truncates itself at its num_ticks
            nondeterministic=False,
        )
    if "RLAIF-Text-v0" not in gym.registry:
        gym.register(
            id="RLAIF-Text-v0",
            entry_point="rlaif_gym.envs.text_env:RLAIFTextEnv",
            max_episode_steps=168,
            nondeterministic=False,  # the rule judge is deterministic; LLM judges run in the collector
        )
