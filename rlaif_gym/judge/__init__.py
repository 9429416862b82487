"""Judges that score an LLM reply without calling a model.

`rules.RuleJudge` is the hardened judge the text env trains with: grounded in the tick the model saw
and robust to keyword stuffing, repetition, padding and prompt copying. `__all__` lists it and its
verdict.

The original Babylon heuristics moved to the compatibility package `rlaif_gym.babylon`
(`babylon.quality`; docs/babylon.md ("The original's quality heuristics")), so that scores can be
compared with the original's. Code written against this package still imports them from here or
from `judge.legacy`: `__getattr__` below hands out the very same objects, without listing them in
`__all__` or `dir()`. tests/babylon/test_compat_imports.py keeps the list.
"""

from .rules import JudgeVerdict, RuleJudge

__all__ = ["JudgeVerdict", "RuleJudge"]


def __getattr__(name: str) -> object:
    """The original's heuristics this package exported before the port moved (PEP 562): the same objects."""
    if name == "legacy":  # the submodule, imported on first use (a `from . import` here would recurse)
        import importlib

        return importlib.import_module(f"{__name__}.legacy")
    from ..babylon import quality

    if name in quality.__all__:
        return getattr(quality, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
