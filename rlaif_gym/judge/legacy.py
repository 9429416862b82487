"""Where the original's quality heuristics used to live; they are `rlaif_gym.babylon.quality` now.

Code written against this path keeps working: ``from rlaif_gym.judge.legacy import X`` gives, for
every name it offered, the very object `rlaif_gym.babylon.quality` holds (its private helpers
included), and tests/babylon/test_compat_imports.py keeps the list. New code imports from
`rlaif_gym.babylon` (docs/babylon.md ("The original's quality heuristics")).
"""

from ..babylon import quality as _port
from ..babylon.quality import *  # noqa: F403 (the port's public names, its __all__)

__all__ = list(_port.__all__)


def __getattr__(name: str) -> object:
    """Any other name of the port (a private helper, a type alias such as ``Direction``) is the port's own."""
    if hasattr(_port, name):
        return getattr(_port, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
