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
            # No registry cap: the env truncates itself at its config's num_ticks, so the limit follows the config
            # (gym.make, make_vec in every mode, the collector). An explicit max_episode_steps still adds TimeLimit.
            max_episode_steps=None,
            nondeterministic=False,
        )
    if "RLAIF-Text-v0" not in gym.registry:
        gym.register(
            id="RLAIF-Text-v0",
            entry_point="rlaif_gym.envs.text_env:RLAIFTextEnv",
            max_episode_steps=None,  # as above: the env truncates itself at num_ticks
            nondeterministic=False,  # the rule judge is deterministic; LLM judges run in the collector
        )
