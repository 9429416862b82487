"""Where the original's reward helpers used to live; they are `rlaif_gym.babylon.rewards` now.

Code written against this path keeps working: ``from rlaif_gym.rewards.original import X`` gives,
for every name it offered, the very object `rlaif_gym.babylon.rewards` holds (its private helpers
included), and `bradley_terry_scores` is `rewards.bradley_terry`'s. The list is kept by
tests/babylon/test_compat_imports.py. New code imports from `rlaif_gym.babylon`
(docs/babylon.md ("The original's reward formulas")).
"""

from ..babylon import rewards as _port
from ..babylon.rewards import *  # noqa: F403 (the port's public names, its __all__)
from . import bradley_terry as _bradley_terry
from .bradley_terry import bradley_terry_scores

__all__ = sorted([*_port.__all__, bradley_terry_scores.__name__])


def __getattr__(name: str) -> object:
    """Any other name of the port (a private helper such as ``_effective_end``) is the port's own."""
    for module in (_port, _bradley_terry):  # the Bradley–Terry fit's names were importable here too
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
