"""Reward components and the composite reward: raw named components, weighted in exactly one place.

`RewardFunction` (composite.py) is what every env's `step` calls: the default `skill` scheme, whose
return ranks traders, or the `original` scheme that reproduces Babylon's numbers. The components
are in components.py, the archetype weights, behaviour score and rubrics the envs and the LLM judge
read in archetypes.py, and the one Bradley–Terry fit in bradley_terry.py. `__all__` lists what the
design uses.

The original system's reward helpers (primitive rewards, the composite, the ranking helpers, the
normalizer) moved to the compatibility package `rlaif_gym.babylon` (docs/babylon.md ("The original's
reward formulas")). Code written against this package still imports them from here, and the
original's archetype names (the bonus tiers, the archetype composite, the priority metrics) too:
`__getattr__` below hands out the very same objects, without listing them in `__all__` or `dir()`.
tests/babylon/test_compat_imports.py keeps the list of every name importable from here.
"""

from ..babylon.rewards import relative_scores
from . import archetypes
from .archetypes import (
    APPROXIMATED_METRICS,
    ARCHETYPES,
    DEFAULT_ARCHETYPE,
    UNAVAILABLE_METRIC_VALUES,
    BehaviorMetrics,
    RubricsError,
    RubricSet,
    archetype_weights,
    behavior_score,
    load_rubrics,
    metric_range,
    normalize_archetype,
)
from .bradley_terry import bradley_terry_scores
from .components import (
    BANKRUPTCY_PENALTY,
    format_penalty,
    pnl_component,
    proportional_risk_component,
    risk_component,
    trading_component,
)
from .composite import (
    COMPONENT_NAMES,
    DEFAULT_WEIGHTS,
    REWARD_SCHEMES,
    SCHEME_DEFAULTS,
    RewardFunction,
    combine_components,
    resolve_weights,
)

__all__ = [
    "APPROXIMATED_METRICS",
    "ARCHETYPES",
    "BANKRUPTCY_PENALTY",
    "COMPONENT_NAMES",
    "DEFAULT_ARCHETYPE",
    "DEFAULT_WEIGHTS",
    "REWARD_SCHEMES",
    "SCHEME_DEFAULTS",
    "UNAVAILABLE_METRIC_VALUES",
    "BehaviorMetrics",
    "RewardFunction",
    "RubricSet",
    "RubricsError",
    "archetype_weights",
    "behavior_score",
    "bradley_terry_scores",
    "combine_components",
    "format_penalty",
    "load_rubrics",
    "metric_range",
    "normalize_archetype",
    "pnl_component",
    "proportional_risk_component",
    "relative_scores",
    "resolve_weights",
    "risk_component",
    "trading_component",
]


def __getattr__(name: str) -> object:
    """The original's names this package exported before the port moved (PEP 562): the same objects."""
    if name == "original":  # the submodule, imported on first use (a `from . import` here would recurse)
        import importlib

        return importlib.import_module(f"{__name__}.original")
    from ..babylon import rewards as port

    for module in (port, archetypes):
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
