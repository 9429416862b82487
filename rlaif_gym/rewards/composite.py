"""The composite reward: the only place where component weights are applied.

total = clip( sum_c w_c * x_c / sum_{c in present, c != risk} w_c , -1, 1 )

Components are the raw per-step values named in `COMPONENT_NAMES`. Only the components a face
produces are present: the numeric face has pnl and risk, the text face adds format and reasoning,
and behavior appears when an archetype is configured. The denominator renormalises over the present
components, so the numeric face's total is pnl plus the risk term. `risk` is a penalty that is added
but not normalised (the original subtracted it from the PnL score before weighting, BABYLON.md §5.3),
and its default weight equals the pnl weight, which reproduces that. A weight of 0 reports a
component without adding it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["COMPONENT_NAMES", "DEFAULT_WEIGHTS", "combine_components", "resolve_weights"]

COMPONENT_NAMES: tuple[str, ...] = ("pnl", "format", "reasoning", "behavior", "risk")


_PENALTIES = frozenset({"risk"})


def resolve_weights(archetype: str | None, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Every component weight: the archetype's row (BABYLON.md §5.5), risk = the pnl weight, then overrides.

    Args:
        archetype: an archetype name (normalised; None or unknown -> the `default` row).
        overrides: explicit weights from the config, applied last.
    """
    from .archetypes import archetype_weights  # same package; kept local so this module reads standalone

    weights = {k: float(v) for k, v in archetype_weights(archetype).items()}
    weights["risk"] = weights["pnl"]
    if overrides and "pnl" in overrides and "risk" not in overrides:
        weights["risk"] = float(overrides["pnl"])
    weights.update({k: float(v) for k, v in (overrides or {}).items()})
    return weights


def combine_components(components: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """Weighted total of the present components, clipped to [-1, 1].

    Args:
        components: name -> raw values (arrays of worlds, or floats).
        weights: name -> weight; must cover every present component.

    Raises:
        KeyError: a component has no weight or an unknown name (the config layer validates weights
            up front, so this signals a programming error).
        ValueError: a component value is NaN or infinite.
    """
    total: np.ndarray | float = 0.0
    norm = 0.0
    for name, value in components.items():
        if name not in COMPONENT_NAMES:
            raise KeyError(f"unknown reward component {name!r}; known: {', '.join(COMPONENT_NAMES)}")
        arr = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"reward component {name!r} is not finite: {value!r}")
        w = float(weights[name])
        total = total + w * arr
        if name not in _PENALTIES:
            norm += w
    if norm <= 0.0:
        return np.zeros_like(np.asarray(total, dtype=np.float64))
    return np.clip(np.asarray(total, dtype=np.float64) / norm, -1.0, 1.0)


DEFAULT_WEIGHTS: dict[str, float] = resolve_weights(None)
"""The original's `default` archetype row (BABYLON.md §5.5), plus risk tied to the pnl weight."""
