"""Per-step reward components computed from the world's transition (no judge, no I/O).

Each function works on arrays of worlds and returns raw component values; `composite.py` weights
them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pnl_component", "risk_component"]


def pnl_component(pnl_delta: np.ndarray, starting_cash: float, pnl_scale: float = 10.0) -> np.ndarray:
    """clip(pnl_scale x pnl_delta / starting_cash, -1, 1): with the default scale, +1% equity is +0.1.

    Args:
        pnl_delta: equity after minus equity before the whole transition, USD.
        starting_cash: the episode's starting cash, USD.
        pnl_scale: the original's x10 (BABYLON.md §5.2), so a 10% move saturates the component.
    """
    return np.clip(pnl_scale * np.asarray(pnl_delta, np.float64) / starting_cash, -1.0, 1.0)


def risk_component(
    added_exposure: np.ndarray,
    exposure_ratio: np.ndarray,
    leverage_requested: np.ndarray,
    max_leverage: float,
    threshold: float = 0.8,
    penalty: float = 0.5,
) -> np.ndarray:
    """-penalty for adding exposure above `threshold` x equity, or for asking beyond the leverage cap.

    After the original's calculate_risk_reward (-0.5 when exposure > 80% and the action buys or
    opens, BABYLON.md §5.2), but with exposure measured as gross exposure over equity rather than the
    original's count of open positions / 10.

    Args:
        added_exposure: the action was a successful buy or open.
        exposure_ratio: gross exposure / equity right after the action.
        leverage_requested: leverage asked by an open_perp (0 for other actions).
        max_leverage: the configured cap.
        threshold: exposure ratio above which adding exposure is penalised.
        penalty: size of the penalty (a positive number; the component is its negative).
    """
    risky = (np.asarray(added_exposure, bool) & (np.asarray(exposure_ratio) > threshold)) | (
        np.asarray(leverage_requested) > max_leverage
    )
    return np.where(risky, -penalty, 0.0)
