"""The agent's account, valued: what its shares and perp positions are worth and how large they are, for a
batch of worlds (numpy, vectorised over the worlds).

The step's own per-world valuation (`sim._scalars.equity`, which the compiled step and encoder use) follows the
same formulas in numpy's operation order; tests/sim/test_world_rules.py holds the two to the same bits.
"""

from __future__ import annotations

import numpy as np

from .params import WorldParams
from .pricing import sell_proceeds, yes_price
from .state import WorldState

__all__ = ["equity", "exposure", "liquidation_value", "share_value", "truth_potential", "unrealized_pnl"]


def _fee(params: WorldParams, gross: np.ndarray) -> np.ndarray:
    return np.maximum(params.fee_rate * gross, params.min_fee)


def share_value(state: WorldState) -> np.ndarray:
    """The agent's prediction shares at the displayed price, USD, shape (B,): their size for exposure,
    not what they are worth (that is `liquidation_value`, which equity uses)."""
    p = yes_price(state.pm_yes, state.pm_no)
    return (state.hold_yes * p + state.hold_no * (1.0 - p)).sum(axis=1)


def _net_sale(pool_same: np.ndarray, pool_other: np.ndarray, shares: np.ndarray, params: WorldParams) -> np.ndarray:
    gross = sell_proceeds(pool_same, pool_other, shares)[0]
    return np.maximum(gross - _fee(params, gross), 0.0)


def liquidation_value(state: WorldState, params: WorldParams) -> np.ndarray:
    """What selling every prediction share now would return, USD, shape (B,).

    Each holding (YES and NO of each market) is sold to its own pool, as `sell_prediction` would sell
    it: the CPMM's slippage, then the fee; a holding whose proceeds would not cover the fee (the sale
    would be refused) is worth 0. This is the shares' part of `equity`, so a position is never worth a
    price that only the agent's own buying made: buying then selling at once returns the amount less
    the two fees, and a blind buy at the end of an episode cannot show a profit.
    """
    return (_net_sale(state.pm_yes, state.pm_no, state.hold_yes, params)
            + _net_sale(state.pm_no, state.pm_yes, state.hold_no, params)).sum(axis=1)


def unrealized_pnl(state: WorldState) -> np.ndarray:
    """Unrealized PnL of each perp position, USD, shape (B,P); 0 where flat."""
    entry = np.where(state.pos_side != 0, state.pos_entry, 1.0)
    return state.pos_side * (state.perp_price / entry - 1.0) * state.pos_notional


def truth_potential(state: WorldState, params: WorldParams) -> np.ndarray:
    """What the agent's prediction shares are worth at the hidden truth, less what they would fetch if sold
    now, USD, shape (B,): sum of hold_yes x p* + hold_no x (1 - p*), minus `liquidation_value`.

    Ground truth: only the training reward's `truth_mark` term (`reward_mark="truth"`) reads it, as the
    potential of potential-based shaping; no observation does. 0 when nothing is held.
    """
    truth = state.pm_truth
    at_truth = (state.hold_yes * truth + state.hold_no * (1.0 - truth)).sum(axis=1)
    return at_truth - liquidation_value(state, params)


def equity(state: WorldState, params: WorldParams) -> np.ndarray:
    """cash + what the shares would fetch if sold now (`liquidation_value`) + perp margin + unrealized perp
    PnL, USD, shape (B,).

    A position is worth at least 0: the agent never owes more than its margin (closing pays
    max(margin + PnL - fee, 0), and a position worth nothing is liquidated at the next tick).
    """
    perp = np.where(state.pos_side != 0, np.maximum(state.pos_margin + unrealized_pnl(state), 0.0), 0.0).sum(axis=1)
    return state.cash + liquidation_value(state, params) + perp


def exposure(state: WorldState) -> np.ndarray:
    """Gross exposure: shares at market plus current perp notional, USD, shape (B,). It measures how big the
    positions are (at the displayed price), while equity counts what they would fetch: a position too large for
    its pool's depth shows more exposure per dollar of equity, and the risk term charges it."""
    entry = np.where(state.pos_side != 0, state.pos_entry, 1.0)
    notional = np.abs(state.pos_side) * state.pos_notional * state.perp_price / entry
    return share_value(state) + notional.sum(axis=1)
