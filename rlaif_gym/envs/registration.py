"""Register the env ids with Gymnasium (idempotent, string entry points so import stays cheap)."""

from __future__ import annotations

import gymnasium as gym

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register `RLAIF-v0`. Safe to call more than once (e.g. when subprocesses re-import us)."""
    if "RLAIF-v0" in gym.registry:
        return
    gym.register(
        id="RLAIF-v0",
        entry_point="rlaif_gym.envs.rlaif_env:RLAIFEnv",
        max_episode_steps=168,  # the default num_ticks; the env also truncates itself at its num_ticks
        nondeterministic=False,
    )
