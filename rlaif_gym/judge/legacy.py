"""Where the original's quality heuristics used to live; they are `rlaif_gym.babylon.quality` now.

Code written against this path keeps working: ``from rlaif_gym.judge.legacy import X`` gives, for
every name it offered, the very object the port holds (its private helpers included, from the
port's module that defines them), and tests/babylon/test_compat_imports.py keeps the list. New code imports from
`rlaif_gym.babylon` (docs/babylon.md ("The original's quality heuristics")).
"""

from ..babylon import format_validator, keywords, quality_scorer, tick_quality
from ..babylon import quality as _port
from ..babylon.quality import *  # noqa: F403 (the port's public names, its __all__)

__all__ = list(_port.__all__)

# Where the port's names are defined: its one module per original file (`babylon.quality` gathers their public
# names; the private helpers stay in their own file).
_HOMES = (_port, keywords, tick_quality, format_validator, quality_scorer)


def __getattr__(name: str) -> object:
    """Any other name of the port (a private helper, a type alias such as ``Direction``) is the port's own."""
    for home in _HOMES:
        if hasattr(home, name):
            return getattr(home, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
