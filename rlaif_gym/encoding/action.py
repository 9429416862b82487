"""The numeric action: MultiDiscrete([kinds, targets, sizes, sides]) decoded into an `ActionBatch`.

| index | meaning | values |
|---|---|---|
| 0 | kind | the numeric face's kinds, `ACTION_KINDS` (docs/world.md lists them) |
| 1 | target | what the kind's `ActionSpec.numeric_target` names: a market slot, perp index or group index |
| 2 | size bucket | by the kind's `numeric_size`: `BUY_FRACTIONS` of equity, or `SELL_FRACTIONS` of the holding |
| 3 | side | 0 YES / LONG, 1 NO / SHORT, for a kind that reads it |

Everything here is derived from the action declarations (`sim.ACTION_SPECS`): the kinds are those declared
`numeric`, in their `ActionType` order; T is the largest count a kind's target ranges over; a kind's size rule
says how its bucket becomes an amount. Sizes are fractions of equity so the same action means the same thing at
any account size. A target outside the kind's range (e.g. perp 3 when there are 3 perps) is a well-formed action
that the world refuses with a reason, like any other failed action.
"""

from __future__ import annotations

import numpy as np

from ..sim import ACTION_SPECS, ActionBatch, ActionType, WorldParams, WorldState, equity
from ..sim import rules as sim_rules
from ..sim.actions import NUMERIC_SIZES

__all__ = ["ACTION_KINDS", "BUY_FRACTIONS", "KIND_READS", "KIND_SIZE_RULES", "NUMERIC_SPECS", "SELL_FRACTIONS",
           "SIZE_EQUITY", "SIZE_HELD", "SIZE_LEVERAGED", "SIZE_NONE", "action_nvec", "decode_actions", "numeric_amount"]

NUMERIC_SPECS = tuple(spec for spec in ACTION_SPECS if spec.numeric)
"""The declarations of the numeric face's kinds, in its order (kind i of a MultiDiscrete action)."""
ACTION_KINDS: tuple[ActionType, ...] = tuple(spec.kind for spec in NUMERIC_SPECS)
"""The numeric face's kinds: kind i of a MultiDiscrete action is `ACTION_KINDS[i]`."""
BUY_FRACTIONS = np.array([0.01, 0.02, 0.05, 0.10, 0.25])
"""Order size as a fraction of equity (buys: USD spent; perps: margin)."""
SELL_FRACTIONS = np.array([0.10, 0.25, 0.50, 0.75, 1.00])
"""Fraction of the held shares to sell."""

_SIZE_CODES = {None: 0, **{name: 1 + i for i, name in enumerate(NUMERIC_SIZES)}}
SIZE_NONE, SIZE_EQUITY, SIZE_LEVERAGED, SIZE_HELD = (_SIZE_CODES[n] for n in (None, "equity", "leveraged", "held"))
KIND_SIZE_RULES = np.array([_SIZE_CODES[spec.numeric_size] for spec in NUMERIC_SPECS], dtype=np.int64)
"""Per numeric kind, how its size bucket becomes an amount (`SIZE_NONE` ... `SIZE_HELD`; `numeric_amount`)."""
KIND_READS = np.array([(spec.numeric_target is not None, spec.numeric_size is not None, spec.numeric_side)
                       for spec in NUMERIC_SPECS], dtype=np.bool_).reshape(len(NUMERIC_SPECS), 3)
"""Per numeric kind, whether it reads the target, the size and the side (a kind ignores the entries it does not
read: two actions that differ only there do the same thing)."""
_KIND_CODES = np.asarray(ACTION_KINDS, dtype=np.int64)


def action_nvec(params: WorldParams) -> np.ndarray:
    """The MultiDiscrete sizes [kinds, targets, size buckets, sides]; targets is the largest count a kind's target
    ranges over (at least 1)."""
    counts = {"market": params.num_markets, "perp": params.num_perps, "group": params.num_groups}
    targets = max([1] + [counts[spec.numeric_target] for spec in NUMERIC_SPECS if spec.numeric_target])
    return np.array([len(ACTION_KINDS), targets, len(BUY_FRACTIONS), 2], dtype=np.int64)


def numeric_amount(rule, bucket, target, side, b, s, pi, eq, buy_fractions, sell_fractions, perp_leverage):
    """The amount of world b's numeric action by its kind's size `rule` (`KIND_SIZE_RULES`): a fraction of its equity
    `eq` (USD), that times the perp leverage (USD notional), or a fraction of the shares held on `side` of market
    `target` (clamped to the last slot: an unknown market is refused by the rules, not here); 0 for a kind without a
    size. The compiled decoder's (the fused step's and the masks'); `decode_actions` is the same arithmetic over a
    batch."""
    if rule == SIZE_EQUITY:
        return buy_fractions[bucket] * eq
    if rule == SIZE_LEVERAGED:
        return buy_fractions[bucket] * eq * perp_leverage
    if rule == SIZE_HELD:
        slot = min(target, pi[_NUM_MARKETS] - 1)
        held = s.hold_yes[b, slot] if side == 0 else s.hold_no[b, slot]
        return sell_fractions[bucket] * held
    return 0.0


_NUM_MARKETS = sim_rules.PI.index("num_markets")
numeric_amount = sim_rules.jit_inline(numeric_amount)


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
    kind, rule = _KIND_CODES[a[:, 0]], KIND_SIZE_RULES[a[:, 0]]
    target, bucket, side = a[:, 1], a[:, 2], a[:, 3]
    # Only the rules present are priced (equity is the costly part, and a wait, close or join needs
    # none); the values are the same as pricing every row and selecting (the numeric env's hot path).
    amount = np.zeros(n)
    of_equity, leveraged, held = rule == SIZE_EQUITY, rule == SIZE_LEVERAGED, rule == SIZE_HELD
    if of_equity.any() or leveraged.any():
        margin = BUY_FRACTIONS[bucket] * equity(state, params)
        amount = np.where(of_equity, margin, np.where(leveraged, margin * perp_leverage, amount))
    if held.any():
        m = np.minimum(target, params.num_markets - 1)
        rows = np.arange(n)
        shares = np.where(side == 0, state.hold_yes[rows, m], state.hold_no[rows, m])
        amount = np.where(held, SELL_FRACTIONS[bucket] * shares, amount)
    return ActionBatch(
        kind=kind, target=target.copy(), side=side.copy(), amount=amount,
        leverage=np.full(n, float(perp_leverage)), pre_error=np.zeros(n, np.int64),
    )
