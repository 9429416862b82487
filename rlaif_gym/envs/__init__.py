"""The Gymnasium faces of the world."""

from .core import RLAIFCore, world_params
from .registration import register_envs
from .rlaif_env import RLAIFEnv

__all__ = ["RLAIFCore", "RLAIFEnv", "register_envs", "world_params"]
