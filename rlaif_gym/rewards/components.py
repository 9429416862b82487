"""Per-step reward components computed from the world's transition (no judge, no I/O).

Each function works on arrays of worlds and returns raw component values; `composite.py` weights
them. Two families live here, one per reward scheme (`composite.RewardFunction`):

* **skill** (the default): `trading_component` telescopes (its sum over an episode is a fixed
  function of the final equity), `proportional_risk_component` grows with how far the action pushes
  exposure past the threshold, `format_penalty` is 0 for a clean reply and negative otherwise.
* **original** (Babylon's numbers): `pnl_component` clips each step, `risk_component` is a flat
  charge per risky action; the text face's format score is the rule judge's [-1, 1] as it is.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BANKRUPTCY_PENALTY",
    "format_penalty",
    "pnl_component",
    "proportional_risk_component",
    "risk_component",
    "trading_component",
]

BANKRUPTCY_PENALTY = 1.0
"""What the skill scheme's trading component loses, on top of the equity, on the bankrupt step."""


def trading_component(
    pnl_delta: np.ndarray, bankrupt: np.ndarray, starting_cash: float, pnl_scale: float = 1.0
) -> np.ndarray:
    """pnl_scale x pnl_delta / starting_cash, minus `BANKRUPTCY_PENALTY` on the step that goes bankrupt.

    No clipping, so the values of an episode telescope: their sum is exactly

        pnl_scale x (final equity - starting cash) / starting cash - 1[bankrupt]

    i.e. the episode's PnL in units of starting cash with the default scale. A bankrupt episode
    (final equity below one minimum fee) therefore sums to about -(pnl_scale + 1): below any episode
    that survives, however badly it traded.

    Args:
        pnl_delta: equity after minus equity before the whole transition, USD.
        bankrupt: the transition ended in bankruptcy.
        starting_cash: the episode's starting cash, USD.
        pnl_scale: multiplier of the PnL term (1: the return is PnL / starting cash).
    """
    money = pnl_scale * np.asarray(pnl_delta, np.float64) / starting_cash
    return money - BANKRUPTCY_PENALTY * np.asarray(bankrupt, bool)


def proportional_risk_component(
    added_exposure: np.ndarray,
    exposure_ratio: np.ndarray,
    filled_usd: np.ndarray,
    leverage_requested: np.ndarray,
    equity_before: np.ndarray,
    starting_cash: float,
    max_leverage: float,
    threshold: float = 0.8,
    penalty: float = 0.1,
) -> np.ndarray:
    """-penalty x (exposure the action adds above `threshold` x equity, plus leverage asked above the cap).

    The exposure part is in USD over starting cash, like the trading component: an action that adds
    X USD of gross exposure (shares bought, or perp notional = margin x leverage) of which Y USD lie
    above `threshold` x equity costs `penalty` x Y / starting_cash. Exposure below the threshold
    costs nothing, and a position that is already large is not charged again each tick: only the
    action that takes the book past the threshold pays, in proportion to how far it goes. A request
    for leverage above the cap (refused by the world) costs `penalty` x (leverage / cap - 1).

    Args:
        added_exposure: the action was a successful buy or open.
        exposure_ratio: gross exposure / equity right after the action.
        filled_usd: USD paid for a buy, margin posted for an open.
        leverage_requested: leverage asked by an open_perp (0 for other actions).
        equity_before: equity before the action, USD.
        starting_cash: the episode's starting cash, USD.
        max_leverage: the configured cap.
        threshold: exposure / equity above which added exposure is charged.
        penalty: cost per USD of exposure above the threshold, in USD (a positive number).
    """
    lev = np.asarray(leverage_requested, np.float64)
    equity = np.maximum(np.asarray(equity_before, np.float64), 1e-9)
    added_usd = np.asarray(filled_usd, np.float64) * np.maximum(lev, 1.0)
    above_usd = np.maximum(np.asarray(exposure_ratio, np.float64) - threshold, 0.0) * equity
    excess_usd = np.where(np.asarray(added_exposure, bool), np.minimum(added_usd, above_usd), 0.0)
    excess_leverage = np.maximum(lev / max_leverage - 1.0, 0.0)
    return 0.0 - penalty * (excess_usd / starting_cash + excess_leverage)  # 0.0 - 0.0: no "-0.0" in logs


def format_penalty(format_score: np.ndarray | float) -> np.ndarray:
    """The skill scheme's `format`: 0 for a clean canonical reply, negative otherwise, -1 without an action.

    Maps the rule judge's score in [-1, 1] (1: canonical `<think>` + one JSON action; -1: nothing
    executable) to score - 1, floored at -1, so a valid reply earns nothing and a lenient one costs
    what its deductions say.
    """
    return np.maximum(np.asarray(format_score, np.float64) - 1.0, -1.0)


def pnl_component(pnl_delta: np.ndarray, starting_cash: float, pnl_scale: float = 10.0) -> np.ndarray:
    """The original scheme's clip(pnl_scale x pnl_delta / starting_cash, -1, 1): +1% equity is +0.1.

    The per-step clip is why the original's return does not rank traders: a resolution's gain
    saturates at +1 while many small losses each count in full. The skill scheme uses
    `trading_component` instead.

    Args:
        pnl_delta: equity after minus equity before the whole transition, USD.
        starting_cash: the episode's starting cash, USD.
        pnl_scale: the original's x10, so a 10% move saturates the component.
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
    """The original scheme's flat -penalty for adding exposure above `threshold` x equity, or asking beyond the cap.

    After the original's calculate_risk_reward (-0.5 when exposure > 80% and the action buys or
    opens), but with exposure measured as gross exposure over equity rather than the
    original's count of open positions / 10. A 1-USD buy and a 10,000-USD buy pay the same; the
    skill scheme uses `proportional_risk_component` instead.

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
