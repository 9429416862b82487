"""The numeric action: MultiDiscrete([kind, target, size, side]) decoded into an `ActionBatch`.

| index | meaning | values |
|---|---|---|
| 0 | kind | 0 wait, 1 buy_prediction, 2 sell_prediction, 3 open_perp, 4 close_perp, 5 join_group |
| 1 | target | market slot, perp index or group index (by kind) |
| 2 | size bucket | buys and perps: `BUY_FRACTIONS` of equity; sells: `SELL_FRACTIONS` of the holding |
| 3 | side | 0 YES / LONG, 1 NO / SHORT |

Sizes are fractions of equity so the same action means the same thing at any account size. A target
outside the kind's range (e.g. perp 3 when there are 3 perps) is a well-formed action that the world
refuses with a reason, like any other failed action.
"""

from __future__ import annotations

import numpy as np

from ..sim import ActionBatch, ActionType, WorldParams, WorldState, equity

__all__ = ["ACTION_KINDS", "BUY_FRACTIONS", "SELL_FRACTIONS", "action_nvec", "decode_actions"]

ACTION_KINDS: tuple[ActionType, ...] = (
    ActionType.WAIT,
    ActionType.BUY_PREDICTION,
    ActionType.SELL_PREDICTION,
    ActionType.OPEN_PERP,
    ActionType.CLOSE_PERP,
    ActionType.JOIN_GROUP,
)
BUY_FRACTIONS = np.array([0.01, 0.02, 0.05, 0.10, 0.25])
"""Order size as a fraction of equity (buys: USD spent; perps: margin)."""
SELL_FRACTIONS = np.array([0.10, 0.25, 0.50, 0.75, 1.00])
"""Fraction of the held shares to sell."""


_KIND_CODES = np.asarray(ACTION_KINDS, dtype=np.int64)
_BUY, _SELL, _PERP = int(ActionType.BUY_PREDICTION), int(ActionType.SELL_PREDICTION), int(ActionType.OPEN_PERP)


def action_nvec(params: WorldParams) -> np.ndarray:
    """The MultiDiscrete sizes [kinds, targets, size buckets, sides]."""
    targets = max(params.num_markets, params.num_perps, params.num_groups)
    return np.array([len(ACTION_KINDS), targets, len(BUY_FRACTIONS), 2], dtype=np.int64)


def decode_actions(
    actions: np.ndarray, state: WorldState, params: WorldParams, perp_leverage: float
) -> ActionBatch:
    """Decode integer actions of shape (B, 4) against the current state.

    Args:
        actions: rows of [kind, target, size bucket, side], already checked against the space.
        state: the worlds the actions apply to.
        params: their parameters.
        perp_leverage: leverage used by numeric `open_perp` (notional = margin x leverage).
    """
    a = np.asarray(actions, dtype=np.int64).reshape(-1, 4)
    n = len(a)
    kind = _KIND_CODES[a[:, 0]]
    target, bucket, side = a[:, 1], a[:, 2], a[:, 3]
    # Only the kinds present are priced (equity is the costly part, and a wait, close or join needs
    # none); the values are the same as pricing every row and selecting (the numeric env's hot path).
    amount = np.zeros(n)
    buy, sell, perp = kind == _BUY, kind == _SELL, kind == _PERP
    if buy.any() or perp.any():
        margin = BUY_FRACTIONS[bucket] * equity(state, params)
        amount = np.where(buy, margin, np.where(perp, margin * perp_leverage, amount))
    if sell.any():
        m = np.minimum(target, params.num_markets - 1)
        rows = np.arange(n)
        held = np.where(side == 0, state.hold_yes[rows, m], state.hold_no[rows, m])
        amount = np.where(sell, SELL_FRACTIONS[bucket] * held, amount)
    return ActionBatch(
        kind=kind, target=target.copy(), side=side.copy(), amount=amount,
        leverage=np.full(n, float(perp_leverage)), pre_error=np.zeros(n, np.int64),
    )
