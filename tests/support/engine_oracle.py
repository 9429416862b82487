"""The differential oracle: the numpy engine the world's rules were first written in, frozen as it was.

The package's one text of the rules is `rlaif_gym.sim.rules` (per world, compiled or run as Python); this
vectorised engine stays in the tests so that tests/sim/test_world_rules.py can hold the two to each other over whole
episodes (discrete fields exactly, floats to 1e-9 relative: exp and log come from other libraries here). It is
not kept in step with new rules: a rule that changes the world on purpose is checked against its own tests, and
this oracle then goes or is amended in the same commit. `step_agents` below is `sim.multi`'s multi-agent tick on
this engine, as it was.

The engine's own docstring:

The world engine: reset and step a batch of Babylon-style worlds, as numpy array functions.

Order of a step (docs/world.md): validate and apply the agent's action (fees, price impact) → advance
the world one tick (perp prices and narratives, funding, liquidations, NPC trades, news, posts and
group tips, market resolutions and new markets) → report everything the reward needs, including
`pnl_delta` over the whole transition.

Every function works on all B worlds at once; the single env is the case B = 1, so there is one
implementation of the rules. Randomness comes from `rng.uniforms`, keyed per world.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from rlaif_gym.errors import InvalidActionError
from rlaif_gym.sim import rng
from rlaif_gym.sim.actions import ActionBatch, ActionType, ErrorCode
from rlaif_gym.sim.multi import _select, agent_order
from rlaif_gym.sim.params import (
    GROUP_NAMES,
    NEWS_SOURCES,
    NPC_ROSTER,
    PERP_BASE_PRICES,
    POST_HONESTY,
    NpcBehaviour,
    WorldParams,
)
from rlaif_gym.sim.pricing import buy_shares, sell_proceeds, yes_price
from rlaif_gym.sim.state import FEED_LENGTH, WorldState

__all__ = [
    "KINDS",
    "StepOutcome",
    "equity",
    "exposure",
    "liquidation_value",
    "npc_behaviours",
    "reset",
    "share_value",
    "step",
    "step_agents",
    "truth_potential",
    "unrealized_pnl",
]

_MARKET_STREAM = 1 << 40  # + market serial: a market's truth depends only on (key, serial)
_RESET_STREAM = 1 << 41
_SIGNAL_DECAY = 0.97  # per tick, for news/post/tip accumulators
_PERP_NEWS_DECAY = 0.9
_LEAK_RELIABILITY = 0.75
_LEAK_RATE = 0.35
_INFORMED_NOISE = 0.06  # std of informed NPCs' belief around p*
_REP_STEP = 4.0  # reputation change per right/wrong market call
_NEWS_SOURCE_PROBS = np.array([0.35, 0.35, 0.30])
# The ranges of the world's draws, each (low, span): a value is low + span * u for a uniform u in [0, 1).
# Written once here; the compiled backend (`sim.rules`) and the state validator's bounds (`sim.bounds`) read them.
_TRUTH = (0.1, 0.8)  # a market's hidden true probability p*
_OPENING_PRICE = (0.3, 0.4)  # a new market's YES price (uninformative)
_NARRATIVE_LEAD = (6, 15)  # ticks from a narrative's start to its event: low + floor(span * u)
_NARRATIVE_MOVE = (0.04, 0.08)  # the log-return size of a narrative's event
_PERP_START_SPREAD = 0.05  # std of a perp's log start price around its base price
_FUNDING_CAP = 3e-3  # the largest |funding rate| per interval, a fraction of the position's current notional


def _logit_weight(reliability: float | np.ndarray) -> np.ndarray:
    """Evidence weight of a ±1 signal with this reliability (its log-odds)."""
    r = np.asarray(reliability, dtype=np.float64)
    return np.log(r / (1.0 - r))


_SOURCE_WEIGHT = _logit_weight(np.array([s[1] for s in NEWS_SOURCES]))
_POST_HONESTY = np.array(POST_HONESTY, dtype=np.float64)
_GROUP_WEIGHT = _logit_weight(np.array([g[1] for g in GROUP_NAMES]))
_LEAK_WEIGHT = float(_logit_weight(_LEAK_RELIABILITY))


@lru_cache(maxsize=32)
def npc_behaviours(params: WorldParams) -> np.ndarray:
    """Behaviour code of each NPC, shape (K,). Cached per params (read-only: do not modify)."""
    codes = np.array([NPC_ROSTER[k % len(NPC_ROSTER)][1] for k in range(params.num_npcs)], dtype=np.int64)
    codes.flags.writeable = False
    return codes


@dataclass
class StepOutcome:
    """What one step did, per world. All arrays have shape (B,)."""

    success: np.ndarray  # bool: the agent's action was executed
    error: np.ndarray  # int64 ErrorCode
    error_a: np.ndarray  # numbers quoted in the error message
    error_b: np.ndarray
    filled_shares: np.ndarray  # shares bought or sold by the action (0 otherwise)
    filled_usd: np.ndarray  # USD paid (buy), received net of fee (sell), margin posted (open), paid out (close)
    fee: np.ndarray  # USD fee the action paid
    equity_before: np.ndarray
    equity_after: np.ndarray
    pnl_delta: np.ndarray  # equity_after - equity_before, USD, over the whole transition
    added_exposure: np.ndarray  # bool: a successful buy or open
    exposure_ratio: np.ndarray  # gross exposure / equity right after the action
    leverage_requested: np.ndarray  # leverage of an open_perp (0 otherwise)
    resolved: np.ndarray  # int64 markets resolved during the tick
    payout: np.ndarray  # USD paid to the agent by resolutions
    liquidated: np.ndarray  # int64 agent positions liquidated during the tick
    bankrupt: np.ndarray  # bool: equity below one minimum fee after the step


# ---------------------------------------------------------------------------------------------
# Accounting


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


# ---------------------------------------------------------------------------------------------
# Reset


def reset(params: WorldParams, keys: np.ndarray) -> WorldState:
    """Build B fresh worlds, one per key. The same key always gives the same world."""
    keys = np.asarray(keys, dtype=np.uint64)
    b, m, p, k, g = len(keys), params.num_markets, params.num_perps, params.num_npcs, params.num_groups
    u = rng.uniforms(keys, _RESET_STREAM, 2 * p + k)
    base = np.array(PERP_BASE_PRICES[:p])
    price0 = base * np.exp(_PERP_START_SPREAD * rng.normals(u[:, :p], u[:, p : 2 * p]))
    behaviour = npc_behaviours(params)
    rep_centre = np.select(
        [behaviour == NpcBehaviour.INFORMED, behaviour == NpcBehaviour.DECEIVER], [68.0, 58.0], default=48.0
    )
    npc_rep = np.clip(rep_centre[None, :] + 20.0 * (u[:, 2 * p : 2 * p + k] - 0.5), 0.0, 100.0)
    state = WorldState.allocate(b, {"M": m, "P": p, "K": k, "G": g})
    state.key[:] = keys
    state.cash[:] = params.starting_cash
    state.perp_price[:] = price0
    state.perp_prev_price[:] = price0
    state.perp_ema[:] = price0
    state.npc_cash[:] = params.npc_starting_cash
    state.npc_rep[:] = npc_rep
    _open_markets(state, params, np.ones((b, m), dtype=bool), initial=True)
    return state


def _open_markets(state: WorldState, params: WorldParams, slots: np.ndarray, *, initial: bool = False) -> None:
    """Open a new market in every (world, slot) where `slots` is True.

    A market's hidden truth, outcome, opening price and life depend only on (world key, serial).
    The opening price is uninformative (uniform in [0.3, 0.7]); informed NPCs and news move it.
    """
    wb, wm = np.nonzero(slots)
    if len(wb) == 0:
        return
    serial = state.next_serial[wb].copy()
    # Several slots of one world may open in the same tick: number them in slot order.
    order = np.zeros_like(serial)
    for i in range(1, len(wb)):
        order[i] = order[i - 1] + 1 if wb[i] == wb[i - 1] else 0
    serial = serial + order
    np.add.at(state.next_serial, wb, 1)
    u = rng.uniforms(state.key[wb], _MARKET_STREAM + serial, 4)
    truth = _TRUTH[0] + _TRUTH[1] * u[:, 0]
    outcome = (u[:, 1] < truth).astype(np.int64)
    p0 = _OPENING_PRICE[0] + _OPENING_PRICE[1] * u[:, 2]
    lo = params.market_duration_min // 2 if initial else params.market_duration_min
    life = lo + np.floor(u[:, 3] * (params.market_duration_max - lo + 1)).astype(np.int64)
    liq = params.market_liquidity
    pool_yes, pool_no = 2.0 * liq * (1.0 - p0), 2.0 * liq * p0
    collateral = np.maximum(pool_yes, pool_no)
    now = state.tick[wb]
    state.pm_yes[wb, wm], state.pm_no[wb, wm] = pool_yes, pool_no
    state.pm_collateral[wb, wm] = collateral
    state.pm_house_yes[wb, wm], state.pm_house_no[wb, wm] = collateral - pool_yes, collateral - pool_no
    np.subtract.at(state.house_cash, wb, collateral)
    state.pm_truth[wb, wm], state.pm_outcome[wb, wm] = truth, outcome
    state.pm_open_tick[wb, wm], state.pm_resolve_tick[wb, wm] = now, now + life
    state.pm_serial[wb, wm] = serial
    state.pm_last_price[wb, wm] = p0
    state.pm_npc_flow[wb, wm] = 0.0
    state.news_acc[wb, wm] = 0.0
    state.post_acc[wb, wm] = 0.0
    state.group_acc[wb, :, wm] = 0.0
    state.npc_claims[wb, :, wm] = 0.0


# ---------------------------------------------------------------------------------------------
# Agent actions


def _fee(params: WorldParams, gross: np.ndarray) -> np.ndarray:
    return np.maximum(params.fee_rate * gross, params.min_fee)


def _apply_buy(state: WorldState, params: WorldParams, w, a: ActionBatch, r: _Result) -> None:
    err, ea, eb = r.err, r.ea, r.eb
    m, amount, side = a.target[w], a.amount[w], a.side[w]
    bad_m = (m < 0) | (m >= params.num_markets)
    m = np.where(bad_m, 0, m)
    code = np.select(
        [bad_m, ~np.isfinite(amount) | (amount <= 0), amount < params.min_order, amount > state.cash[w]],
        [ErrorCode.UNKNOWN_MARKET, ErrorCode.NOT_A_NUMBER, ErrorCode.BELOW_MIN_ORDER, ErrorCode.INSUFFICIENT_CASH],
        default=ErrorCode.OK,
    )
    err[w], ea[w] = code, np.where(bad_m, a.target[w], amount)
    eb[w] = np.where(code == ErrorCode.INSUFFICIENT_CASH, state.cash[w], params.min_order)
    ok = code == ErrorCode.OK
    w, m, amount, yes = w[ok], m[ok], amount[ok], side[ok] == 0
    fee = _fee(params, amount)
    net = amount - fee
    same = np.where(yes, state.pm_yes[w, m], state.pm_no[w, m])
    other = np.where(yes, state.pm_no[w, m], state.pm_yes[w, m])
    shares, new_same, new_other = buy_shares(same, other, net)
    state.pm_yes[w, m] = np.where(yes, new_same, new_other)
    state.pm_no[w, m] = np.where(yes, new_other, new_same)
    state.pm_collateral[w, m] += net
    state.cash[w] -= amount
    state.fees_paid[w] += fee
    state.fees_collected[w] += fee
    state.hold_yes[w, m] += np.where(yes, shares, 0.0)
    state.hold_no[w, m] += np.where(yes, 0.0, shares)
    state.cost_yes[w, m] += np.where(yes, amount, 0.0)
    state.cost_no[w, m] += np.where(yes, 0.0, amount)
    r.shares[w], r.usd[w], r.fee[w] = shares, amount, fee


def _apply_sell(state: WorldState, params: WorldParams, w, a: ActionBatch, r: _Result) -> None:
    err, ea, eb = r.err, r.ea, r.eb
    m, shares, side = a.target[w], a.amount[w], a.side[w]
    bad_m = (m < 0) | (m >= params.num_markets)
    m = np.where(bad_m, 0, m)
    yes = side == 0
    held = np.where(yes, state.hold_yes[w, m], state.hold_no[w, m])
    # Selling "all" may arrive a hair above the float holding; clamp within a relative 1e-9.
    over = shares > held * (1.0 + 1e-9) + 1e-12
    shares = np.minimum(shares, held)
    same = np.where(yes, state.pm_yes[w, m], state.pm_no[w, m])
    other = np.where(yes, state.pm_no[w, m], state.pm_yes[w, m])
    gross, new_same, new_other = sell_proceeds(same, other, np.where(np.isfinite(shares), shares, 0.0))
    fee = _fee(params, gross)
    code = np.select(
        [bad_m, held <= 0, ~np.isfinite(a.amount[w]) | (a.amount[w] <= 0), over, gross <= fee],
        [ErrorCode.UNKNOWN_MARKET, ErrorCode.NO_SHARES, ErrorCode.NOT_A_NUMBER, ErrorCode.INSUFFICIENT_SHARES,
         ErrorCode.PROCEEDS_BELOW_FEE],
        default=ErrorCode.OK,
    )
    err[w] = code
    ea[w] = np.where(code == ErrorCode.PROCEEDS_BELOW_FEE, gross, np.where(bad_m, a.target[w], a.amount[w]))
    eb[w] = np.where(code == ErrorCode.PROCEEDS_BELOW_FEE, fee, held)
    ok = code == ErrorCode.OK
    w, m, yes, shares, held = w[ok], m[ok], yes[ok], shares[ok], held[ok]
    gross, fee, new_same, new_other = gross[ok], fee[ok], new_same[ok], new_other[ok]
    state.pm_yes[w, m] = np.where(yes, new_same, new_other)
    state.pm_no[w, m] = np.where(yes, new_other, new_same)
    state.pm_collateral[w, m] -= gross
    state.cash[w] += gross - fee
    state.fees_paid[w] += fee
    state.fees_collected[w] += fee
    cost = np.where(yes, state.cost_yes[w, m], state.cost_no[w, m])
    cost_sold = cost * shares / held
    state.realized_pnl[w] += gross - fee - cost_sold
    state.hold_yes[w, m] = np.where(yes, np.maximum(held - shares, 0.0), state.hold_yes[w, m])
    state.hold_no[w, m] = np.where(yes, state.hold_no[w, m], np.maximum(held - shares, 0.0))
    state.cost_yes[w, m] -= np.where(yes, cost_sold, 0.0)
    state.cost_no[w, m] -= np.where(yes, 0.0, cost_sold)
    r.shares[w], r.usd[w], r.fee[w] = shares, gross - fee, fee


def _apply_open(state: WorldState, params: WorldParams, w, a: ActionBatch, r: _Result) -> None:
    err, ea, eb = r.err, r.ea, r.eb
    t, notional, lev = a.target[w], a.amount[w], a.leverage[w]
    bad_t = (t < 0) | (t >= params.num_perps)
    t = np.where(bad_t, 0, t)
    margin = notional / np.where(lev >= 1, lev, 1.0)
    fee = _fee(params, np.where(np.isfinite(notional), notional, 0.0))
    code = np.select(
        [bad_t, ~np.isfinite(notional) | (notional <= 0) | ~np.isfinite(lev), notional < params.min_order,
         lev < 1.0, lev > params.max_leverage, state.pos_side[w, t] != 0, margin + fee > state.cash[w]],
        [ErrorCode.UNKNOWN_TICKER, ErrorCode.NOT_A_NUMBER, ErrorCode.BELOW_MIN_ORDER, ErrorCode.LEVERAGE_BELOW_ONE,
         ErrorCode.LEVERAGE_ABOVE_CAP, ErrorCode.POSITION_EXISTS, ErrorCode.INSUFFICIENT_MARGIN],
        default=ErrorCode.OK,
    )
    err[w] = code
    is_lev = (code == ErrorCode.LEVERAGE_BELOW_ONE) | (code == ErrorCode.LEVERAGE_ABOVE_CAP)
    ea[w] = np.select([bad_t, is_lev, code == ErrorCode.INSUFFICIENT_MARGIN], [a.target[w], lev, margin + fee],
                      default=notional)
    eb[w] = np.select([is_lev, code == ErrorCode.INSUFFICIENT_MARGIN], [params.max_leverage, state.cash[w]],
                      default=params.min_order)
    ok = code == ErrorCode.OK
    w, t, notional, lev, margin, fee = w[ok], t[ok], notional[ok], lev[ok], margin[ok], fee[ok]
    state.cash[w] -= margin + fee
    state.fees_paid[w] += fee
    state.fees_collected[w] += fee
    state.pos_side[w, t] = np.where(a.side[w] == 0, 1, -1)
    state.pos_notional[w, t] = notional
    state.pos_entry[w, t] = state.perp_price[w, t]
    state.pos_leverage[w, t] = lev
    state.pos_margin[w, t] = margin
    state.pos_serial[w, t] = state.next_pos_serial[w]
    state.next_pos_serial[w] += 1
    r.usd[w], r.fee[w] = margin, fee


def _apply_close(state: WorldState, params: WorldParams, w, a: ActionBatch, r: _Result) -> None:
    err, ea = r.err, r.ea
    t = a.target[w]
    bad_t = (t < 0) | (t >= params.num_perps)
    t = np.where(bad_t, 0, t)
    code = np.select([bad_t, state.pos_side[w, t] == 0], [ErrorCode.UNKNOWN_TICKER, ErrorCode.NO_POSITION],
                     default=ErrorCode.OK)
    err[w], ea[w] = code, a.target[w]
    ok = code == ErrorCode.OK
    w, t = w[ok], t[ok]
    r.usd[w], r.fee[w] = _settle_positions(state, params, w, t, liquidation=False)


def _settle_positions(state: WorldState, params: WorldParams, w, t, *, liquidation: bool):
    """Close positions (w, t): pay margin + PnL - fee to cash, or lose the margin on liquidation.

    Returns (payout to cash, fee), USD per closed position.
    """
    margin = state.pos_margin[w, t]
    if liquidation:
        payout = np.zeros_like(margin)
        fee = np.zeros_like(margin)
    else:
        pnl = unrealized_pnl(state)[w, t]
        fee = _fee(params, state.pos_notional[w, t] * state.perp_price[w, t] / state.pos_entry[w, t])
        # The agent never owes more than its margin: a gap beyond it is the house's loss.
        payout = np.maximum(margin + pnl - fee, 0.0)
        fee = np.minimum(fee, margin + np.maximum(pnl, -margin))
        fee = np.maximum(fee, 0.0)
    # One world may settle several positions at once (liquidations): accumulate, never overwrite.
    np.add.at(state.cash, w, payout)
    np.add.at(state.fees_paid, w, fee)
    np.add.at(state.fees_collected, w, fee)
    np.add.at(state.house_cash, w, margin - payout - fee)
    np.add.at(state.realized_pnl, w, payout - margin)
    state.pos_side[w, t] = 0
    state.pos_notional[w, t] = 0.0
    state.pos_entry[w, t] = 0.0
    state.pos_leverage[w, t] = 0.0
    state.pos_margin[w, t] = 0.0
    return payout, fee


def _apply_social(state: WorldState, params: WorldParams, kind: int, w, a: ActionBatch, r: _Result) -> None:
    err, ea = r.err, r.ea
    t = a.target[w]
    if kind == ActionType.JOIN_GROUP:
        bad = (t < 0) | (t >= params.num_groups)
        tt = np.where(bad, 0, t)
        code = np.select([bad, state.joined[w, tt]], [ErrorCode.UNKNOWN_GROUP, ErrorCode.ALREADY_MEMBER],
                         default=ErrorCode.OK)
        err[w], ea[w] = code, t
        ok = code == ErrorCode.OK
        state.joined[w[ok], tt[ok]] = True
    elif kind == ActionType.CREATE_POST:
        state.posts_created[w] += 1
        # Followers and reputation grow with posting, faster for an already reputable poster.
        state.followers[w] += 1 + (state.reputation[w] // 25).astype(np.int64)
        state.reputation[w] = np.minimum(state.reputation[w] + 0.5, 100.0)
    elif kind == ActionType.SEND_DM:
        bad = (t < 0) | (t >= params.num_npcs)
        err[w] = np.where(bad, ErrorCode.UNKNOWN_RECIPIENT, ErrorCode.OK)
        ea[w] = t
        state.dms_sent[w[~bad]] += 1


KINDS = frozenset({ActionType.WAIT, ActionType.BUY_PREDICTION, ActionType.SELL_PREDICTION, ActionType.OPEN_PERP,
                   ActionType.CLOSE_PERP, ActionType.JOIN_GROUP, ActionType.CREATE_POST, ActionType.SEND_DM})
"""The action kinds this frozen engine implements. A kind declared after it was frozen is the rules' alone:
tests/sim/test_world_rules.py holds it compiled against Python, not against this oracle."""

_HANDLERS = {
    ActionType.BUY_PREDICTION: _apply_buy,
    ActionType.SELL_PREDICTION: _apply_sell,
    ActionType.OPEN_PERP: _apply_open,
    ActionType.CLOSE_PERP: _apply_close,
}


class _Result:
    """Per-world results of the agent's action: error code and numbers, and what was filled."""

    def __init__(self, a: ActionBatch) -> None:
        n = len(a.kind)
        self.err = a.pre_error.astype(np.int64).copy()
        self.ea, self.eb = a.pre_a.astype(np.float64).copy(), a.pre_b.astype(np.float64).copy()
        self.shares, self.usd, self.fee = np.zeros(n), np.zeros(n), np.zeros(n)


def _apply_actions(state: WorldState, params: WorldParams, a: ActionBatch) -> _Result:
    if len(a.kind) and (a.kind.min() < 0 or a.kind.max() > max(ActionType)):
        raise InvalidActionError(f"ActionBatch.kind must hold ActionType codes 0..{int(max(ActionType))}, "
                                 f"got {sorted(set(a.kind.tolist()))}; build batches with ActionBatch.from_actions")
    r = _Result(a)
    live = r.err == ErrorCode.OK
    for kind in np.unique(a.kind[live]):
        w = np.nonzero(live & (a.kind == kind))[0]
        kind = ActionType(int(kind))
        if kind in _HANDLERS:
            _HANDLERS[kind](state, params, w, a, r)
        elif kind != ActionType.WAIT:
            _apply_social(state, params, kind, w, a, r)
    return r


# ---------------------------------------------------------------------------------------------
# The world's tick


class _Cols:
    """Column layout of the per-tick uniform draws (fixed, so each phase has its own draws).

    Built once per params (`_cols`), not per step.
    """

    def __init__(self, params: WorldParams) -> None:
        p, g, k = params.num_perps, params.num_groups, params.num_npcs
        sizes = {"perp": 2 * p, "narr": 5, "leak": 2, "news": 4, "post": 4, "tip": 3 * g, "npc": 6 * k}
        self.offset: dict[str, int] = {}
        at = 0
        for name, n in sizes.items():
            self.offset[name] = at
            at += n
        self.total = at


@lru_cache(maxsize=32)
def _cols(params: WorldParams) -> _Cols:
    return _Cols(params)


def _ring_write(state: WorldState, prefix: str, w: np.ndarray, **values: np.ndarray) -> None:
    count = getattr(state, f"{prefix}_count")
    slot = count[w] % FEED_LENGTH
    for name, value in values.items():
        getattr(state, f"{prefix}_{name}")[w, slot] = value
    count[w] += 1


def _advance_perps(state: WorldState, params: WorldParams, u: np.ndarray, c: _Cols, now: np.ndarray) -> None:
    p = params.num_perps
    o = c.offset["perp"]
    z = rng.normals(u[:, o : o + p], u[:, o + p : o + 2 * p])
    sigma = params.perp_volatility
    ret = -0.5 * sigma * sigma + sigma * z
    # A narrative's event fires: the price jumps and an announcement hits the feed.
    fire = state.narr_active & (state.narr_tick <= now)
    fw = np.nonzero(fire)[0]
    ret[fw, state.narr_ticker[fw]] += state.narr_sign[fw] * state.narr_mag[fw]
    if len(fw):
        _ring_write(state, "news", fw, tick=now[fw], kind=np.full(len(fw), 2), target=state.narr_ticker[fw],
                    serial=np.zeros(len(fw), np.int64), source=np.zeros(len(fw), np.int64),
                    signal=state.narr_sign[fw].astype(np.int64))
        state.perp_news_acc[fw, state.narr_ticker[fw]] = 0.0
    state.narr_active &= ~fire
    state.perp_prev_price[:] = state.perp_price
    state.perp_price *= np.exp(ret)
    state.perp_ema += 0.08 * (state.perp_price - state.perp_ema)
    state.perp_news_acc *= _PERP_NEWS_DECAY
    # Leaks and rumours before the event: reading the feed pays (docs/world.md).
    o = c.offset["leak"]
    leak = state.narr_active & (u[:, o] < _LEAK_RATE)
    lw = np.nonzero(leak)[0]
    if len(lw):
        truthful = u[lw, o + 1] < _LEAK_RELIABILITY
        signal = np.where(truthful, state.narr_sign[lw], -state.narr_sign[lw])
        state.perp_news_acc[lw, state.narr_ticker[lw]] += signal * _LEAK_WEIGHT
        _ring_write(state, "news", lw, tick=now[lw], kind=np.ones(len(lw), np.int64), target=state.narr_ticker[lw],
                    serial=np.zeros(len(lw), np.int64), source=np.full(len(lw), 2), signal=signal.astype(np.int64))
    # A new hidden narrative may start.
    o = c.offset["narr"]
    start = ~state.narr_active & ~fire & (u[:, o] < params.narrative_rate)
    sw = np.nonzero(start)[0]
    state.narr_active[sw] = True
    state.narr_ticker[sw] = np.floor(u[sw, o + 1] * p).astype(np.int64)
    state.narr_sign[sw] = np.where(u[sw, o + 2] < 0.5, 1.0, -1.0)
    state.narr_tick[sw] = now[sw] + _NARRATIVE_LEAD[0] + np.floor(u[sw, o + 3] * _NARRATIVE_LEAD[1]).astype(np.int64)
    state.narr_mag[sw] = _NARRATIVE_MOVE[0] + _NARRATIVE_MOVE[1] * u[sw, o + 4]


def _funding_and_liquidation(state: WorldState, params: WorldParams, now: np.ndarray) -> np.ndarray:
    due = (now % params.funding_interval) == 0
    if due.any():
        # Funding follows the premium of price over its moving average; longs pay when positive.
        rate = np.clip(1e-4 + 0.05 * np.log(state.perp_price / state.perp_ema), -_FUNDING_CAP, _FUNDING_CAP)
        state.perp_funding[due] = rate[due]
        current = state.pos_notional * state.perp_price / np.where(state.pos_side != 0, state.pos_entry, 1.0)
        payment = np.where(due[:, None], state.pos_side * current * state.perp_funding, 0.0)
        state.pos_margin -= payment
        state.house_cash += payment.sum(axis=1)
    lev = np.where(state.pos_side != 0, state.pos_leverage, 1.0)
    liq_long = state.pos_entry * (1.0 - 0.9 / lev)
    liq_short = state.pos_entry * (1.0 + 0.9 / lev)
    hit = ((state.pos_side == 1) & (state.perp_price <= liq_long)) | (
        (state.pos_side == -1) & (state.perp_price >= liq_short)
    )
    # Funding can eat the margin before the price reaches the liquidation price: a position whose
    # margin plus unrealized PnL is gone is liquidated too.
    hit |= (state.pos_side != 0) & (state.pos_margin + unrealized_pnl(state) <= 0)
    w, t = np.nonzero(hit)
    _settle_positions(state, params, w, t, liquidation=True)
    return hit.sum(axis=1)


def _npc_trades(state: WorldState, params: WorldParams, u: np.ndarray, c: _Cols, now: np.ndarray,
                last_move: np.ndarray) -> None:
    """All NPC orders of a tick, priced at the tick's opening and executed as two aggregate trades
    per market (YES buyers, then NO buyers, the order alternating by tick) with pro-rata fills.

    `last_move` is each market's YES price move over the previous tick (momentum traders follow it).
    """
    k, m = params.num_npcs, params.num_markets
    o = c.offset["npc"]
    cols = u[:, o : o + 6 * k].reshape(-1, 6, k)
    trades = cols[:, 0] < params.npc_trade_rate
    mk = np.minimum(np.floor(cols[:, 1] * m).astype(np.int64), m - 1)
    rows = np.arange(state.batch_size)[:, None]
    price = yes_price(state.pm_yes, state.pm_no)[rows, mk]
    move = last_move[rows, mk]
    truth = state.pm_truth[rows, mk]
    behaviour = npc_behaviours(params)[None, :]
    belief = truth + _INFORMED_NOISE * rng.normals(cols[:, 2], cols[:, 3])
    gap = belief - price
    informed = (behaviour == NpcBehaviour.INFORMED) | (behaviour == NpcBehaviour.DECEIVER)
    side_yes = np.select(
        [informed, behaviour == NpcBehaviour.MOMENTUM], [gap > 0, move > 0], default=cols[:, 4] < 0.5
    )
    size = np.select(
        [informed, behaviour == NpcBehaviour.MOMENTUM],
        [np.clip(2500.0 * (np.abs(gap) - 0.02), 0.0, 400.0) * np.where(behaviour == NpcBehaviour.DECEIVER, 0.5, 1.0),
         np.where(np.abs(move) > 1e-4, 50.0 + 100.0 * cols[:, 5], 0.0)],
        default=20.0 + 180.0 * cols[:, 5],
    )
    amount = np.where(trades, np.minimum(size, state.npc_cash), 0.0)
    onehot = mk[:, :, None] == np.arange(m)[None, None, :]  # (B,K,M)
    spend_yes = np.where(side_yes[:, :, None] & onehot, amount[:, :, None], 0.0)
    spend_no = np.where(~side_yes[:, :, None] & onehot, amount[:, :, None], 0.0)
    tot_yes, tot_no = spend_yes.sum(axis=1), spend_no.sum(axis=1)  # (B,M)
    state.npc_cash -= amount
    state.pm_npc_flow[:] = (tot_yes - tot_no) / params.market_liquidity
    yes_first = (now % 2 == 0)[:, None]
    for phase in (0, 1):
        buy_yes = yes_first if phase == 0 else ~yes_first
        spend = np.where(buy_yes, tot_yes, tot_no)
        fee = params.fee_rate * spend
        net = spend - fee
        same = np.where(buy_yes, state.pm_yes, state.pm_no)
        other = np.where(buy_yes, state.pm_no, state.pm_yes)
        shares, new_same, new_other = buy_shares(same, other, net)
        # Markets nobody bought in keep their pools exactly (k / other need not round back to same).
        new_same, new_other = np.where(spend > 0, new_same, same), np.where(spend > 0, new_other, other)
        state.pm_yes[:] = np.where(buy_yes, new_same, new_other)
        state.pm_no[:] = np.where(buy_yes, new_other, new_same)
        state.pm_collateral += net
        state.fees_collected += fee.sum(axis=1)
        per_usd = np.divide(shares, spend, out=np.zeros_like(spend), where=spend > 0)
        state.npc_yes += np.where(buy_yes[:, None, :], spend_yes * per_usd[:, None, :], 0.0)
        state.npc_no += np.where(buy_yes[:, None, :], 0.0, spend_no * per_usd[:, None, :])


def _information(state: WorldState, params: WorldParams, u: np.ndarray, c: _Cols, now: np.ndarray) -> None:
    """News, NPC posts and group tips about the markets, each tied to the hidden outcome."""
    m, k, g = params.num_markets, params.num_npcs, params.num_groups
    state.news_acc *= _SIGNAL_DECAY
    state.post_acc *= _SIGNAL_DECAY
    state.group_acc *= _SIGNAL_DECAY
    truth_sign = np.where(state.pm_outcome == 1, 1, -1)  # (B,M)

    o = c.offset["news"]
    w = np.nonzero(u[:, o] < params.news_rate)[0]
    if len(w):
        mk = np.minimum(np.floor(u[w, o + 1] * m).astype(np.int64), m - 1)
        src = np.searchsorted(np.cumsum(_NEWS_SOURCE_PROBS), u[w, o + 2], side="right").clip(0, len(NEWS_SOURCES) - 1)
        reliability = np.array([s[1] for s in NEWS_SOURCES])[src]
        signal = np.where(u[w, o + 3] < reliability, truth_sign[w, mk], -truth_sign[w, mk])
        state.news_acc[w, mk] += signal * _SOURCE_WEIGHT[src]
        _ring_write(state, "news", w, tick=now[w], kind=np.zeros(len(w), np.int64), target=mk,
                    serial=state.pm_serial[w, mk], source=src, signal=signal)

    o = c.offset["post"]
    w = np.nonzero(u[:, o] < params.post_rate)[0]
    if len(w):
        author = np.minimum(np.floor(u[w, o + 1] * k).astype(np.int64), k - 1)
        mk = np.minimum(np.floor(u[w, o + 2] * m).astype(np.int64), m - 1)
        behaviour = npc_behaviours(params)[author]
        honesty = _POST_HONESTY[behaviour]
        signal = np.where(u[w, o + 3] < honesty, truth_sign[w, mk], -truth_sign[w, mk])
        credibility = np.clip((state.npc_rep[w, author] - 50.0) / 50.0, -1.0, 1.0)
        state.post_acc[w, mk] += signal * credibility
        state.npc_claims[w, author, mk] += signal
        _ring_write(state, "post", w, tick=now[w], author=author, target=mk, serial=state.pm_serial[w, mk],
                    signal=signal)

    o = c.offset["tip"]
    for grp in range(g):
        w = np.nonzero(u[:, o + 3 * grp] < params.tip_rate)[0]
        if not len(w):
            continue
        mk = np.minimum(np.floor(u[w, o + 3 * grp + 1] * m).astype(np.int64), m - 1)
        signal = np.where(u[w, o + 3 * grp + 2] < GROUP_NAMES[grp][1], truth_sign[w, mk], -truth_sign[w, mk])
        state.group_acc[w, grp, mk] += signal * _GROUP_WEIGHT[grp]
        _ring_write(state, "tip", w, tick=now[w], group=np.full(len(w), grp), target=mk,
                    serial=state.pm_serial[w, mk], signal=signal)


def _pay_resolutions(state: WorldState, due: np.ndarray) -> np.ndarray:
    """Pay the account's winning shares in the `due` markets (B, M) and clear its holdings there.

    Returns the payout per market, USD, shape (B, M). The account part of a resolution: with several
    learning agents (`sim.multi`) it runs once per agent account.
    """
    yes_wins = state.pm_outcome == 1
    agent_payout = np.where(due, np.where(yes_wins, state.hold_yes, state.hold_no), 0.0)
    state.cash += agent_payout.sum(axis=1)
    state.realized_pnl += np.where(due, agent_payout - state.cost_yes - state.cost_no, 0.0).sum(axis=1)
    for arr in (state.hold_yes, state.hold_no, state.cost_yes, state.cost_no):
        arr[due] = 0.0
    return agent_payout


def _settle_markets(state: WorldState, params: WorldParams, due: np.ndarray, agent_payout: np.ndarray) -> np.ndarray:
    """The world part of a resolution: NPC payouts and reputations, the house's share, new markets.

    `agent_payout` (B, M) is what the agent accounts were paid (summed over agents). Returns the
    number of markets resolved per world.
    """
    yes_wins = state.pm_outcome == 1
    npc_payout = np.where(due[:, None, :], np.where(yes_wins[:, None, :], state.npc_yes, state.npc_no), 0.0)
    state.npc_cash += npc_payout.sum(axis=2)
    # Reputation: +4 for each NPC whose posts called the market right, -4 if wrong.
    call = np.sign(state.npc_claims) * np.where(yes_wins, 1.0, -1.0)[:, None, :]
    state.npc_rep = np.clip(state.npc_rep + _REP_STEP * np.where(due[:, None, :], call, 0.0).sum(axis=2), 0.0, 100.0)
    due3 = np.broadcast_to(due[:, None, :], state.npc_yes.shape)
    state.npc_yes[due3] = 0.0
    state.npc_no[due3] = 0.0
    # Whatever collateral is left backs the pool's and the house's winning shares: it goes to the house.
    state.house_cash += np.where(due, state.pm_collateral - agent_payout - npc_payout.sum(axis=1), 0.0).sum(axis=1)
    state.pm_collateral[due] = 0.0
    _open_markets(state, params, due)
    return due.sum(axis=1)


def _resolve_markets(state: WorldState, params: WorldParams, now: np.ndarray):
    """Pay out markets whose resolve tick has come, then reopen their slots with new questions."""
    due = state.pm_resolve_tick <= now[:, None]
    agent_payout = _pay_resolutions(state, due)
    return _settle_markets(state, params, due, agent_payout), agent_payout.sum(axis=1)


def _single_account(fn):
    """`each_account` of the one-agent world: the account is the state's own."""
    return [fn()]


def tick(state: WorldState, params: WorldParams, each_account=_single_account):
    """Advance every world one tick after the actions: perps, funding and liquidations, NPC trades,
    news, posts and tips, resolutions and new markets (the second half of `step`).

    Args:
        each_account: runs an account-level function once per agent account and returns the list of
            its results; the default is the world's single account. `sim.multi` passes one that
            loads each learning agent's account in turn.

    Returns:
        (liquidated, resolved, payouts): per-account lists of positions liquidated (B,) and
        resolution payouts (B,), and the markets resolved per world (B,).
    """
    now = state.tick + 1
    cols = _cols(params)
    u = rng.uniforms(state.key, now, cols.total)
    opening = yes_price(state.pm_yes, state.pm_no)
    last_move = opening - state.pm_last_price  # the previous tick's move, incl. the agents' own trades
    state.pm_last_price[:] = opening
    _advance_perps(state, params, u, cols, now)
    liquidated = each_account(lambda: _funding_and_liquidation(state, params, now))
    _npc_trades(state, params, u, cols, now, last_move)
    _information(state, params, u, cols, now)
    state.tick[:] = now
    due = state.pm_resolve_tick <= now[:, None]
    payouts = each_account(lambda: _pay_resolutions(state, due))
    total = payouts[0] if len(payouts) == 1 else np.sum(payouts, axis=0)
    resolved = _settle_markets(state, params, due, total)
    return liquidated, [p.sum(axis=1) for p in payouts], resolved


@dataclass
class _ActionPhase:
    """What an account's action did, before the tick."""

    eq0: np.ndarray
    r: _Result
    success: np.ndarray
    added: np.ndarray
    lev: np.ndarray
    exposure_ratio: np.ndarray


def _act(state: WorldState, params: WorldParams, actions: ActionBatch) -> _ActionPhase:
    """Apply the loaded account's actions (the first half of `step`)."""
    eq0 = equity(state, params)
    r = _apply_actions(state, params, actions)
    success = r.err == ErrorCode.OK
    added = success & ((actions.kind == ActionType.BUY_PREDICTION) | (actions.kind == ActionType.OPEN_PERP))
    lev = np.where(actions.kind == ActionType.OPEN_PERP, actions.leverage, 0.0)
    eq_mid = equity(state, params)
    exposure_ratio = exposure(state) / np.maximum(eq_mid, 1e-9)
    return _ActionPhase(eq0, r, success, added, lev, exposure_ratio)


def _outcome(a: _ActionPhase, eq1: np.ndarray, liquidated: np.ndarray, resolved: np.ndarray, payout: np.ndarray,
             params: WorldParams) -> StepOutcome:
    r = a.r
    return StepOutcome(
        success=a.success, error=r.err, error_a=r.ea, error_b=r.eb, filled_shares=r.shares, filled_usd=r.usd,
        fee=r.fee, equity_before=a.eq0, equity_after=eq1,
        pnl_delta=eq1 - a.eq0, added_exposure=a.added, exposure_ratio=a.exposure_ratio, leverage_requested=a.lev,
        resolved=resolved, payout=payout, liquidated=liquidated, bankrupt=eq1 < params.min_fee,
    )


def step(state: WorldState, actions: ActionBatch, params: WorldParams) -> StepOutcome:
    """Apply one action per world, advance every world one tick, and report the transition.

    Mutates `state` in place. A failed action leaves its world unchanged before the tick.
    """
    acted = _act(state, params, actions)
    liquidated, payouts, resolved = tick(state, params)
    return _outcome(acted, equity(state, params), liquidated[0], resolved, payouts[0], params)


# ---------------------------------------------------------------------------------------------
# sim.multi's multi-agent tick on this engine, as it was (the accounts are sim.multi.Accounts; the agents' order
# and the per-world selection of their actions are sim.multi's own, which this engine's rules do not depend on)


def step_agents(state: WorldState, accounts, actions: list[ActionBatch], params: WorldParams,
                order: np.ndarray | None = None) -> list[StepOutcome]:
    """One tick of B worlds shared by A agents; returns one `StepOutcome` per agent (each over B worlds).

    Args:
        state: the shared worlds; their account slots are scratch space (overwritten).
        accounts: the agents' accounts, updated in place.
        actions: one `ActionBatch` per agent (decoded against that agent's own account).
        order: (B, A) execution order; default `agent_order(state, A)`.
    """
    n = accounts.num_agents
    if len(actions) != n:
        raise ValueError(f"step_agents needs one ActionBatch per agent: {n} agents, got {len(actions)} batches")
    order = agent_order(state, n) if order is None else np.asarray(order)
    eq0 = []
    for a in range(n):  # every agent's equity before the tick, before anyone acts
        accounts.load(state, a)
        eq0.append(equity(state, params))
    rounds = []
    for r in range(n):
        who = order[:, r]
        accounts.load(state, who)
        rounds.append(_act(state, params, _select(actions, who)))
        accounts.save(state, who)
    position = np.argsort(order, axis=1)  # position[b, a]: the round in which agent a acted in world b
    phases = [_gather(rounds, position[:, a], eq0[a]) for a in range(n)]

    def each_account(fn):
        results = []
        for a in range(n):
            accounts.load(state, a)
            results.append(fn())
            accounts.save(state, a)
        return results

    liquidated, payouts, resolved = tick(state, params, each_account)
    outcomes = []
    for a in range(n):
        accounts.load(state, a)
        outcomes.append(_outcome(phases[a], equity(state, params), liquidated[a], resolved, payouts[a],
                                        params))
    return outcomes


def _gather(rounds: list, rounds_of: np.ndarray, eq0: np.ndarray) -> _ActionPhase:
    """One agent's action results: world b's from the round `rounds_of[b]` in which it acted there."""
    worlds = np.arange(len(rounds_of))

    def pick(get):
        return np.stack([get(x) for x in rounds])[rounds_of, worlds]

    r = _Result(ActionBatch.waits(len(worlds)))
    for name in ("err", "ea", "eb", "shares", "usd", "fee"):
        setattr(r, name, pick(lambda x, name=name: getattr(x.r, name)))
    return _ActionPhase(eq0=eq0, r=r, success=pick(lambda x: x.success), added=pick(lambda x: x.added),
                               lev=pick(lambda x: x.lev), exposure_ratio=pick(lambda x: x.exposure_ratio))
