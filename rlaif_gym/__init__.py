"""rlaif_gym: a Babylon-style market and social world as a Gymnasium environment for RLAIF.

`import rlaif_gym` registers `RLAIF-v0` (numeric) and `RLAIF-Text-v0` (prompt in, reply out); both
are also reachable as `gym.make("rlaif_gym:<id>")`. The env and config classes load on first use
(PEP 562), so importing the package (and `rlaif-gym --help`) costs little more than Gymnasium.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .envs.registration import register_envs
from .errors import ConfigError, DependencyNotInstalled, InvalidActionError, ResetNeeded, RLAIFError

if TYPE_CHECKING:  # for type checkers and API docs: the same names, imported eagerly
    from .config import RLAIFEnvConfig
    from .envs.rlaif_env import RLAIFEnv
    from .envs.text_env import RLAIFTextEnv

    BabylonRLAIFEnv = RLAIFEnv
    BabylonEnvConfig = RLAIFEnvConfig

_LAZY = {
    "RLAIFEnv": ("envs.rlaif_env", "RLAIFEnv"),
    "RLAIFTextEnv": ("envs.text_env", "RLAIFTextEnv"),
    "RLAIFEnvConfig": ("config", "RLAIFEnvConfig"),
    # Aliases kept for users of the original Babylon system: the very same classes.
    "BabylonRLAIFEnv": ("envs.rlaif_env", "RLAIFEnv"),
    "BabylonEnvConfig": ("config", "RLAIFEnvConfig"),
}

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
    "register_envs",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
