"""The Gymnasium faces of the world."""

from .core import RLAIFCore, world_params
from .evaluate import EpisodeStats, evaluate_policy, seed_keys
from .registration import register_envs
from .rlaif_env import RLAIFEnv
from .text_env import RLAIFTextEnv
from .vector_env import RLAIFVectorEnv

__all__ = [
    "EpisodeStats",
    "RLAIFCore",
    "RLAIFEnv",
    "RLAIFTextEnv",
    "RLAIFVectorEnv",
    "evaluate_policy",
    "register_envs",
    "seed_keys",
    "world_params",
]
