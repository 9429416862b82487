"""The Gymnasium faces of the world.

Names load on first use (PEP 562), so `import rlaif_gym` (which registers the env ids) and the
`rlaif-gym --help` it precedes stay cheap; `from rlaif_gym.envs import RLAIFEnv` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .registration import register_envs

if TYPE_CHECKING:  # for type checkers and API docs: the same names, imported eagerly
    from .core import RLAIFCore, world_params
    from .evaluate import EpisodeStats, evaluate_policy, seed_keys
    from .multi_agent import RLAIFMultiAgentEnv
    from .rlaif_env import RLAIFEnv
    from .snapshot import EnvSnapshot
    from .text_env import RLAIFTextEnv, warm_up
    from .vector_env import RLAIFVectorEnv

_WHERE = {
    "RLAIFCore": "core", "world_params": "core",
    "EpisodeStats": "evaluate", "evaluate_policy": "evaluate", "seed_keys": "evaluate",
    "RLAIFMultiAgentEnv": "multi_agent",
    "EnvSnapshot": "snapshot", "RLAIFEnv": "rlaif_env",
    "RLAIFTextEnv": "text_env", "warm_up": "text_env",
    "RLAIFVectorEnv": "vector_env",
}

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
    "warm_up",
    "world_params",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        if name == "EnvSnapshot":  # its bytes name the face that wrote them: both register with the codec on import
            importlib.import_module(".text_env", __name__)
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
