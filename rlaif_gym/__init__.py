"""rlaif_gym: a Babylon-style market and social world as a Gymnasium environment for RLAIF.

`import rlaif_gym` registers `RLAIF-v0` (numeric) and `RLAIF-Text-v0` (prompt in, reply out); both
are also reachable as `gym.make("rlaif_gym:<id>")`.
"""

from ._version import __version__
from .config import RLAIFEnvConfig
from .envs import RLAIFEnv, RLAIFTextEnv, register_envs
from .errors import ConfigError, DependencyNotInstalled, InvalidActionError, ResetNeeded, RLAIFError

BabylonRLAIFEnv = RLAIFEnv
"""Alias kept for users of the original Babylon system."""
BabylonEnvConfig = RLAIFEnvConfig
"""Alias kept for users of the original Babylon system."""

register_envs()

__all__ = [
    "BabylonEnvConfig",
    "BabylonRLAIFEnv",
    "ConfigError",
    "DependencyNotInstalled",
    "InvalidActionError",
    "RLAIFEnv",
    "RLAIFEnvConfig",
    "RLAIFError",
    "RLAIFTextEnv",
    "ResetNeeded",
    "__version__",
]
