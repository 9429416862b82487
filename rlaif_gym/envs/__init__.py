"""The Gymnasium faces of the world."""

from .core import RLAIFCore, world_params
from .evaluate import EpisodeStats, evaluate_policy, seed_keys
from .multi_agent import RLAIFMultiAgentEnv
from .registration import register_envs
from .rlaif_env import EnvSnapshot, RLAIFEnv
from .text_env import RLAIFTextEnv
from .vector_env import RLAIFVectorEnv

__all__ = [
    "EnvSnapshot",
    "EpisodeStats",
    "RLAIFCore",
    "RLAIFEnv",
    "RLAIFMultiAgentEnv",
    "RLAIFTextEnv",
    "RLAIFVectorEnv",
    "evaluate_policy",
    "register_envs",
    "seed_keys",
    "world_params",
]
