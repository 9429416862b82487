"""The world's rules, written once and per world: reset, the agent's action, and the tick (docs/world.md).

Order of a step: validate and apply the agent's action (fees, price impact; `_agent_action`, one handler per
ActionType) → advance the world one tick (`_mark_prices`, `_advance_perps`, `_funding_and_liquidation`,
`_npc_trades`, `_information`, then resolutions: `_pay_resolutions` and `_settle_markets` with `_open_market`) →
report everything the reward needs, including `pnl_delta` over the whole transition. Randomness is counter-based:
each phase draws from its own columns of the world's (key, tick) stream (`sim._scalars._uniform_at`).

One kernel (`kernel`) loops over the worlds of a batch and runs the phases for each; `reset` opens each world's
first markets with the same `_open_market`; the multi-agent tick (`sim.multi`) runs the same phases as stages
(`tick_stage`) with each agent's account loaded in turn. Every function here is numba-compiled where numba imports
(a core dependency; `sim._jit` holds the compile plumbing and the cache), and the same source runs as Python for
``backend="numpy"`` (`step(..., compiled=False)`, via `sim._jit.python_twin`) and wherever numba is missing: the
two give the same bits (tests/sim/test_world_rules.py). The arithmetic the rules share, with numpy's semantics, lives in
`sim._scalars`; the fixed constants in `sim.constants`; how a state, the constants and the outcome reach and leave
a kernel (flat buffers and named layouts) in `sim.packing`.

The kernel surface (`__all__`) is what the fused numeric step (`envs/fused.py`) and the compiled encoder and
action mask (`encoding/`) build on: the kernel, the accounting helpers, numpy's scalar semantics, the layouts of
the constant and outcome arrays (by name: a caller looks its rows up, never hard-codes them) and the decorators.
Everything with a leading underscore is the kernels' own.

The rules were first written as a vectorised numpy engine; it is kept, frozen, in the tests
(tests/support/engine_oracle.py), and tests/sim/test_world_rules.py holds these rules to it over whole episodes:
discrete fields exactly, floats to 1e-9 relative (exp, log and log1p come from the C library here and from numpy's
SIMD code there, and differ in the last bit for a few percent of arguments). A rule changed on purpose changes or
retires the oracle in the same commit.
"""

from __future__ import annotations

import collections
import functools
import math

import numpy as np

from ..errors import InvalidActionError
from . import _scalars, rng
from ._jit import (
    available,
    call_variant,
    compile_notice,
    jit,
    jit_flat,
    jit_inline,
    jit_phase,
    kernel_cache_dir,
    numba,
    python_twin,
)
from ._scalars import (
    _S16,
    _U64,
    _buy_shares,
    _fee,
    _normal,
    _psum,
    _sell_proceeds,
    _uniform_at,
    _uniforms,
    equity,
    exposure,
    fmax,
    fmin,
    isfinite,
)
from .actions import ActionBatch, ActionType, ErrorCode
from .constants import (
    FUNDING_CAP,
    INFORMED_NOISE,
    LEAK_RATE,
    LEAK_RELIABILITY,
    MARKET_STREAM,
    NARRATIVE_LEAD,
    NARRATIVE_MOVE,
    OPENING_PRICE,
    PERP_NEWS_DECAY,
    PERP_START_SPREAD,
    POST_HONESTY_ARRAY,
    REP_STEP,
    RESET_STREAM,
    SIGNAL_DECAY,
    TRUTH,
    npc_behaviours,
)
from .packing import (
    CF,
    CF_OFFSET,
    COLUMNS,
    OUT_B,
    OUT_F,
    OUT_I,
    PF,
    PI,
    STATE_FIELDS,
    StepOutcome,
    WorldArrays,
    outcome_of,
    packed,
    packed_copy,
    packed_fresh,
    param_arrays,
    state_views,
)
from .params import PERP_BASE_PRICES, NpcBehaviour, WorldParams
from .state import FEED_LENGTH, WorldState

# The world's entry points (reset, step; act, tick_stage, equities and the STAGE_ codes for sim.multi), then the kernel
# surface (see the module docstring).
__all__ = ["OUT_B", "OUT_F", "OUT_I", "PF", "PI", "STAGE_FEED", "STAGE_FUNDING", "STAGE_PAY", "STAGE_PERPS",
           "STAGE_SETTLE", "STATE_FIELDS", "WorldArrays", "act", "apply_action", "available", "compile_notice",
           "equities", "equity", "equity_of", "exposure", "fmax", "fmin", "isfinite", "jit", "jit_flat", "jit_inline",
           "kernel", "kernel_cache_dir", "outcome_of", "packed", "packed_copy", "param_arrays", "reset", "scratch",
           "state_views", "step", "tick_stage"]

_warm = False  # `step` has run its compiled kernel in this process (so it skips `compile_notice`)
_R = FEED_LENGTH
_INFORMED = NpcBehaviour.INFORMED
_DECEIVER = NpcBehaviour.DECEIVER
_TRUTH_LOW, _TRUTH_SPAN = TRUTH
_OPEN_LOW, _OPEN_SPAN = OPENING_PRICE
_LEAD_LOW, _LEAD_SPAN = NARRATIVE_LEAD
_MOVE_LOW, _MOVE_SPAN = NARRATIVE_MOVE
_MOMENTUM = NpcBehaviour.MOMENTUM
# ---------------------------------------------------------------------------------------------
# The kernel's names for codes, rows and constants, derived from what they name (so a renumbering follows)

_BUY = int(ActionType.BUY_PREDICTION)
_SELL = int(ActionType.SELL_PREDICTION)
_OPEN_PERP = int(ActionType.OPEN_PERP)
_CLOSE_PERP = int(ActionType.CLOSE_PERP)
_JOIN_GROUP = int(ActionType.JOIN_GROUP)
_CREATE_POST = int(ActionType.CREATE_POST)
_SEND_DM = int(ActionType.SEND_DM)
_MAX_KIND = int(max(ActionType))

_OK = int(ErrorCode.OK)
_UNKNOWN_MARKET = int(ErrorCode.UNKNOWN_MARKET)
_BELOW_MIN_ORDER = int(ErrorCode.BELOW_MIN_ORDER)
_INSUFFICIENT_CASH = int(ErrorCode.INSUFFICIENT_CASH)
_NO_SHARES = int(ErrorCode.NO_SHARES)
_INSUFFICIENT_SHARES = int(ErrorCode.INSUFFICIENT_SHARES)
_UNKNOWN_TICKER = int(ErrorCode.UNKNOWN_TICKER)
_POSITION_EXISTS = int(ErrorCode.POSITION_EXISTS)
_LEVERAGE_ABOVE_CAP = int(ErrorCode.LEVERAGE_ABOVE_CAP)
_LEVERAGE_BELOW_ONE = int(ErrorCode.LEVERAGE_BELOW_ONE)
_INSUFFICIENT_MARGIN = int(ErrorCode.INSUFFICIENT_MARGIN)
_NO_POSITION = int(ErrorCode.NO_POSITION)
_UNKNOWN_GROUP = int(ErrorCode.UNKNOWN_GROUP)
_ALREADY_MEMBER = int(ErrorCode.ALREADY_MEMBER)
_UNKNOWN_RECIPIENT = int(ErrorCode.UNKNOWN_RECIPIENT)
_NOT_A_NUMBER = int(ErrorCode.NOT_A_NUMBER)
_PROCEEDS_BELOW_FEE = int(ErrorCode.PROCEEDS_BELOW_FEE)

# news_kind values (WorldState.news_kind) and the NEWS_SOURCES index of the perp items' sources.
_NEWS_MARKET, _NEWS_LEAK, _NEWS_ANNOUNCEMENT = 0, 1, 2
_ANNOUNCEMENT_SOURCE, _LEAK_SOURCE = 0, 2

# Rows of the constant arrays and the outcome arrays, by name (their layouts: `sim.packing`).
_FEE_RATE, _MIN_FEE, _MIN_ORDER, _MAX_LEVERAGE = (
    PF.index(n) for n in ("fee_rate", "min_fee", "min_order", "max_leverage"))
_PERP_VOLATILITY, _NEWS_RATE, _POST_RATE, _TIP_RATE = (
    PF.index(n) for n in ("perp_volatility", "news_rate", "post_rate", "tip_rate"))
_NPC_TRADE_RATE, _NARRATIVE_RATE, _MARKET_LIQUIDITY = (
    PF.index(n) for n in ("npc_trade_rate", "narrative_rate", "market_liquidity"))
_NUM_MARKETS, _NUM_PERPS, _NUM_NPCS, _NUM_GROUPS = (
    PI.index(n) for n in ("num_markets", "num_perps", "num_npcs", "num_groups"))
_DURATION_MIN, _DURATION_MAX, _FUNDING_INTERVAL = (
    PI.index(n) for n in ("market_duration_min", "market_duration_max", "funding_interval"))
_COL_PERP, _COL_NARR, _COL_LEAK, _COL_NEWS, _COL_POST, _COL_TIP, _COL_NPC = (PI.index(f"col_{n}") for n in COLUMNS)

_CF_SOURCE_WEIGHT, _CF_SOURCE_CUM, _CF_SOURCE_RELIABILITY, _CF_GROUP_WEIGHT, _CF_GROUP_RELIABILITY, _CF_LEAK_WEIGHT = (
    CF_OFFSET[n] for n in CF)
_ERROR_A, _ERROR_B, _FILLED_SHARES, _FILLED_USD, _FEE = (
    OUT_F.index(n) for n in ("error_a", "error_b", "filled_shares", "filled_usd", "fee"))
_EQUITY_BEFORE, _EQUITY_AFTER, _PNL_DELTA, _EXPOSURE_RATIO = (
    OUT_F.index(n) for n in ("equity_before", "equity_after", "pnl_delta", "exposure_ratio"))
_LEVERAGE_REQUESTED, _PAYOUT = OUT_F.index("leverage_requested"), OUT_F.index("payout")
_ERROR, _RESOLVED, _LIQUIDATED = (OUT_I.index(n) for n in OUT_I)
_SUCCESS, _ADDED_EXPOSURE, _BANKRUPT = (OUT_B.index(n) for n in OUT_B)


Scratch = collections.namedtuple("Scratch", ["u4", "buf", "ret", "payment", "lmove", "tot_yes", "tot_no", "per_usd",
                                             "fee_m", "ap", "npc_pay_m", "amt", "kbuf", "npc_pay", "ts", "npc_mk",
                                             "hit", "due", "npc_buys_yes"])
"""The kernels' per-world scratch arrays by name (`_carve` cuts them from the three buffers `scratch` allocates):
u4 4 uniforms; buf max(M, P, K, 8) floats for sums; per perp: ret, payment, hit; per market: lmove, tot_yes, tot_no,
per_usd, fee_m, ap, npc_pay_m, ts, due; per NPC: amt, kbuf, npc_mk, npc_buys_yes; npc_pay (K, M)."""


@jit_phase
def equity_of(b, s, pf, pi, buf):
    """The equity of world b, USD (`sim.accounting.equity`, in numpy's summation order); buf: scratch of max(M, P)."""
    return equity(b, pi[_NUM_MARKETS], pi[_NUM_PERPS], pf[_FEE_RATE], pf[_MIN_FEE], s.cash, s.pm_yes, s.pm_no,
                   s.hold_yes, s.hold_no, s.pos_side, s.pos_entry, s.pos_margin, s.pos_notional, s.perp_price, buf)


@jit_phase
def _exposure_of(b, s, pi, buf):
    """The gross exposure of world b, USD (`sim.accounting.exposure`)."""
    return exposure(b, pi[_NUM_MARKETS], pi[_NUM_PERPS], s.pm_yes, s.pm_no, s.hold_yes, s.hold_no, s.pos_side,
                     s.pos_entry, s.pos_notional, s.perp_price, buf)


@jit_phase
def _settle(b, t, liquidation, pf, s):
    """Close perp position t of world b: pay margin + PnL - fee to cash (never below 0: a gap beyond the margin is
    the house's loss), or lose the margin on liquidation. Returns (payout, fee), USD. Several positions of one world
    settle one after another, in position order."""
    margin = s.pos_margin[b, t]
    if liquidation:
        payout = 0.0
        fee = 0.0
        s.cash[b] = s.cash[b] + payout
        s.fees_paid[b] = s.fees_paid[b] + fee
        s.fees_collected[b] = s.fees_collected[b] + fee
        s.house_cash[b] += margin - payout - fee
        s.realized_pnl[b] += payout - margin
    else:
        side, price, entry, notional = s.pos_side[b, t], s.perp_price[b, t], s.pos_entry[b, t], s.pos_notional[b, t]
        pnl = side * (price / entry - 1.0) * notional
        fee = _fee(pf[_FEE_RATE], pf[_MIN_FEE], notional * price / entry)
        payout = fmax(margin + pnl - fee, 0.0)
        fee = fmin(fee, margin + fmax(pnl, -margin))
        fee = fmax(fee, 0.0)
        s.cash[b] += payout
        s.fees_paid[b] += fee
        s.fees_collected[b] += fee
        s.house_cash[b] += margin - payout - fee
        s.realized_pnl[b] += payout - margin
    s.pos_side[b, t] = 0
    s.pos_notional[b, t] = 0.0
    s.pos_entry[b, t] = 0.0
    s.pos_leverage[b, t] = 0.0
    s.pos_margin[b, t] = 0.0
    return payout, fee


# ---------------------------------------------------------------------------------------------
# The agent's action. Every handler takes (b, s, pf, pi, target, side, amount, leverage, error_a, error_b, commit)
# and returns (error, error_a, error_b, filled shares, filled USD, fee), as the outcome rows hold them; it checks
# the action first and changes the world only when accepted and `commit` (`apply_action` dispatches by kind).


@jit_phase
def _buy(b, s, pf, pi, tg, sd, amount_b, lev, ea, eb, commit):
    """Buy: amount_b USD (fee included) of YES (sd 0) or NO in market slot tg."""
    fee_rate, min_fee, min_order = pf[_FEE_RATE], pf[_MIN_FEE], pf[_MIN_ORDER]
    bad = tg < 0 or tg >= pi[_NUM_MARKETS]
    mm = 0 if bad else tg
    err = _OK
    if bad:
        err = _UNKNOWN_MARKET
    elif not isfinite(amount_b) or amount_b <= 0:
        err = _NOT_A_NUMBER
    elif amount_b < min_order:
        err = _BELOW_MIN_ORDER
    elif amount_b > s.cash[b]:
        err = _INSUFFICIENT_CASH
    ea = float(tg) if bad else amount_b
    eb = s.cash[b] if err == _INSUFFICIENT_CASH else min_order
    if err != _OK or not commit:
        return err, ea, eb, 0.0, 0.0, 0.0
    yes = sd == 0
    fee = _fee(fee_rate, min_fee, amount_b)
    net = amount_b - fee
    same = s.pm_yes[b, mm] if yes else s.pm_no[b, mm]
    other = s.pm_no[b, mm] if yes else s.pm_yes[b, mm]
    shares, new_same, new_other = _buy_shares(same, other, net)
    s.pm_yes[b, mm] = new_same if yes else new_other
    s.pm_no[b, mm] = new_other if yes else new_same
    s.pm_collateral[b, mm] += net
    s.cash[b] -= amount_b
    s.fees_paid[b] += fee
    s.fees_collected[b] += fee
    s.hold_yes[b, mm] += shares if yes else 0.0
    s.hold_no[b, mm] += 0.0 if yes else shares
    s.cost_yes[b, mm] += amount_b if yes else 0.0
    s.cost_no[b, mm] += 0.0 if yes else amount_b
    return err, ea, eb, shares, amount_b, fee


@jit_phase
def _sell(b, s, pf, pi, tg, sd, req, lev, ea, eb, commit):
    """Sell: req shares of YES (sd 0) or NO in market slot tg."""
    fee_rate, min_fee = pf[_FEE_RATE], pf[_MIN_FEE]
    bad = tg < 0 or tg >= pi[_NUM_MARKETS]
    mm = 0 if bad else tg
    yes = sd == 0
    held = s.hold_yes[b, mm] if yes else s.hold_no[b, mm]
    over = req > held * (1.0 + 1e-9) + 1e-12
    shares = fmin(req, held)
    same = s.pm_yes[b, mm] if yes else s.pm_no[b, mm]
    other = s.pm_no[b, mm] if yes else s.pm_yes[b, mm]
    sh = shares if isfinite(shares) else 0.0
    gross, new_same, new_other = _sell_proceeds(same, other, sh)
    fee = _fee(fee_rate, min_fee, gross)
    err = _OK
    if bad:
        err = _UNKNOWN_MARKET
    elif held <= 0:
        err = _NO_SHARES
    elif not isfinite(req) or req <= 0:
        err = _NOT_A_NUMBER
    elif over:
        err = _INSUFFICIENT_SHARES
    elif gross <= fee:
        err = _PROCEEDS_BELOW_FEE
    ea = gross if err == _PROCEEDS_BELOW_FEE else (float(tg) if bad else req)
    eb = fee if err == _PROCEEDS_BELOW_FEE else held
    if err != _OK or not commit:
        return err, ea, eb, 0.0, 0.0, 0.0
    s.pm_yes[b, mm] = new_same if yes else new_other
    s.pm_no[b, mm] = new_other if yes else new_same
    s.pm_collateral[b, mm] -= gross
    s.cash[b] += gross - fee
    s.fees_paid[b] += fee
    s.fees_collected[b] += fee
    cost = s.cost_yes[b, mm] if yes else s.cost_no[b, mm]
    cost_sold = cost * shares / held
    s.realized_pnl[b] += gross - fee - cost_sold
    if yes:
        s.hold_yes[b, mm] = fmax(held - shares, 0.0)
    else:
        s.hold_no[b, mm] = fmax(held - shares, 0.0)
    s.cost_yes[b, mm] -= cost_sold if yes else 0.0
    s.cost_no[b, mm] -= 0.0 if yes else cost_sold
    return err, ea, eb, shares, gross - fee, fee


@jit_phase
def _open_perp(b, s, pf, pi, tg, sd, notional, lev, ea, eb, commit):
    """Open a perp: a LONG (sd 0) or SHORT of `notional` USD at `lev` on perp tg."""
    fee_rate, min_fee, min_order, max_leverage = pf[_FEE_RATE], pf[_MIN_FEE], pf[_MIN_ORDER], pf[_MAX_LEVERAGE]
    bad = tg < 0 or tg >= pi[_NUM_PERPS]
    t = 0 if bad else tg
    margin = notional / (lev if lev >= 1 else 1.0)
    fee = _fee(fee_rate, min_fee, notional if isfinite(notional) else 0.0)
    err = _OK
    if bad:
        err = _UNKNOWN_TICKER
    elif not isfinite(notional) or notional <= 0 or not isfinite(lev):
        err = _NOT_A_NUMBER
    elif notional < min_order:
        err = _BELOW_MIN_ORDER
    elif lev < 1.0:
        err = _LEVERAGE_BELOW_ONE
    elif lev > max_leverage:
        err = _LEVERAGE_ABOVE_CAP
    elif s.pos_side[b, t] != 0:
        err = _POSITION_EXISTS
    elif margin + fee > s.cash[b]:
        err = _INSUFFICIENT_MARGIN
    is_lev = err == _LEVERAGE_BELOW_ONE or err == _LEVERAGE_ABOVE_CAP
    if bad:
        ea = float(tg)
    elif is_lev:
        ea = lev
    elif err == _INSUFFICIENT_MARGIN:
        ea = margin + fee
    else:
        ea = notional
    if is_lev:
        eb = max_leverage
    elif err == _INSUFFICIENT_MARGIN:
        eb = s.cash[b]
    else:
        eb = min_order
    if err != _OK or not commit:
        return err, ea, eb, 0.0, 0.0, 0.0
    s.cash[b] -= margin + fee
    s.fees_paid[b] += fee
    s.fees_collected[b] += fee
    s.pos_side[b, t] = 1 if sd == 0 else -1
    s.pos_notional[b, t] = notional
    s.pos_entry[b, t] = s.perp_price[b, t]
    s.pos_leverage[b, t] = lev
    s.pos_margin[b, t] = margin
    s.pos_serial[b, t] = s.next_pos_serial[b]
    s.next_pos_serial[b] += 1
    return err, ea, eb, 0.0, margin, fee


@jit_phase
def _close_perp(b, s, pf, pi, tg, sd, amount_b, lev, ea, eb, commit):
    """Close a perp: settle the position on perp tg at the current price."""
    bad = tg < 0 or tg >= pi[_NUM_PERPS]
    t = 0 if bad else tg
    err = _OK
    if bad:
        err = _UNKNOWN_TICKER
    elif s.pos_side[b, t] == 0:
        err = _NO_POSITION
    if err != _OK or not commit:
        return err, float(tg), eb, 0.0, 0.0, 0.0
    payout, fee = _settle(b, t, False, pf, s)
    return err, float(tg), eb, 0.0, payout, fee


@jit_phase
def _join_group(b, s, pf, pi, tg, sd, amount_b, lev, ea, eb, commit):
    """Join group chat tg."""
    bad = tg < 0 or tg >= pi[_NUM_GROUPS]
    tt = 0 if bad else tg
    err = _OK
    if bad:
        err = _UNKNOWN_GROUP
    elif s.joined[b, tt]:
        err = _ALREADY_MEMBER
    if err == _OK and commit:
        s.joined[b, tt] = True
    return err, float(tg), eb, 0.0, 0.0, 0.0


@jit_phase
def _create_post(b, s, pf, pi, tg, sd, amount_b, lev, ea, eb, commit):
    """Post: followers and reputation grow, faster for a reputable poster."""
    if commit:
        s.posts_created[b] += 1
        s.followers[b] += 1 + np.int64(s.reputation[b] // 25)
        s.reputation[b] = fmin(s.reputation[b] + 0.5, 100.0)
    return _OK, ea, eb, 0.0, 0.0, 0.0


@jit_phase
def _send_dm(b, s, pf, pi, tg, sd, amount_b, lev, ea, eb, commit):
    """Send a DM to NPC tg."""
    bad = tg < 0 or tg >= pi[_NUM_NPCS]
    if not bad and commit:
        s.dms_sent[b] += 1
    return (_UNKNOWN_RECIPIENT if bad else _OK), float(tg), eb, 0.0, 0.0, 0.0


@jit_phase
def apply_action(b, s, pf, pi, kd, tg, sd, am, lev, ea, eb, commit):
    """World b's action of kind kd (an `ActionType` code) checked against its state and, when `commit` and
    accepted, applied. Returns (error, error_a, error_b, filled shares, filled USD, fee); with commit False
    nothing changes, which is how the numeric face's action masks ask these rules what they would accept
    (`encoding.mask`). A wait, and any code without a handler, is accepted and does nothing."""
    if kd == _BUY:
        return _buy(b, s, pf, pi, tg, sd, am, lev, ea, eb, commit)
    if kd == _SELL:
        return _sell(b, s, pf, pi, tg, sd, am, lev, ea, eb, commit)
    if kd == _OPEN_PERP:
        return _open_perp(b, s, pf, pi, tg, sd, am, lev, ea, eb, commit)
    if kd == _CLOSE_PERP:
        return _close_perp(b, s, pf, pi, tg, sd, am, lev, ea, eb, commit)
    if kd == _JOIN_GROUP:
        return _join_group(b, s, pf, pi, tg, sd, am, lev, ea, eb, commit)
    if kd == _CREATE_POST:
        return _create_post(b, s, pf, pi, tg, sd, am, lev, ea, eb, commit)
    if kd == _SEND_DM:
        return _send_dm(b, s, pf, pi, tg, sd, am, lev, ea, eb, commit)
    return _OK, ea, eb, 0.0, 0.0, 0.0


@jit_phase
def _agent_action(b, s, pf, pi, kind, target, side, amount, leverage, pre_error, pre_a, pre_b, out_f, out_i, out_b,
                  buf):
    """Apply world b's action and write its part of the outcome; returns the equity before it (USD)."""
    eq0 = equity_of(b, s, pf, pi, buf)
    err = pre_error[b]
    ea = float(pre_a[b])
    eb = float(pre_b[b])
    shares, usd, fee = 0.0, 0.0, 0.0
    kd = kind[b]
    tg, sd, am, lev = target[b], side[b], float(amount[b]), float(leverage[b])
    if err == _OK:
        err, ea, eb, shares, usd, fee = apply_action(b, s, pf, pi, kd, tg, sd, am, lev, ea, eb, True)
    success = err == _OK
    # Only trades move cash, shares or positions: after any other action equity is still eq0.
    if kd == _BUY or kd == _SELL or kd == _OPEN_PERP or kd == _CLOSE_PERP:  # noqa: SIM108 (four lines read better)
        eq_mid = equity_of(b, s, pf, pi, buf)
    else:
        eq_mid = eq0
    expo = _exposure_of(b, s, pi, buf)
    out_f[_ERROR_A, b] = ea
    out_f[_ERROR_B, b] = eb
    out_f[_FILLED_SHARES, b] = shares
    out_f[_FILLED_USD, b] = usd
    out_f[_FEE, b] = fee
    out_f[_EQUITY_BEFORE, b] = eq0
    out_f[_EXPOSURE_RATIO, b] = expo / fmax(eq_mid, 1e-9)
    out_f[_LEVERAGE_REQUESTED, b] = float(leverage[b]) if kd == _OPEN_PERP else 0.0
    out_i[_ERROR, b] = err
    out_b[_SUCCESS, b] = success
    out_b[_ADDED_EXPOSURE, b] = success and (kd == _BUY or kd == _OPEN_PERP)
    return eq0


# ---------------------------------------------------------------------------------------------
# The world's tick, phase by phase, in the step's order


@jit_phase
def _push_news(b, s, now, kind, target, serial, source, signal):
    """Append an item to world b's news ring (the newest FEED_LENGTH items are kept)."""
    slot = s.news_count[b] % _R
    s.news_tick[b, slot] = now
    s.news_kind[b, slot] = kind
    s.news_target[b, slot] = target
    s.news_serial[b, slot] = serial
    s.news_source[b, slot] = source
    s.news_signal[b, slot] = signal
    s.news_count[b] += 1


@jit_phase
def _push_post(b, s, now, author, target, serial, signal):
    """Append an NPC post to world b's post ring."""
    slot = s.post_count[b] % _R
    s.post_tick[b, slot] = now
    s.post_author[b, slot] = author
    s.post_target[b, slot] = target
    s.post_serial[b, slot] = serial
    s.post_signal[b, slot] = signal
    s.post_count[b] += 1


@jit_phase
def _push_tip(b, s, now, group, target, serial, signal):
    """Append a group tip to world b's tip ring."""
    slot = s.tip_count[b] % _R
    s.tip_tick[b, slot] = now
    s.tip_group[b, slot] = group
    s.tip_target[b, slot] = target
    s.tip_serial[b, slot] = serial
    s.tip_signal[b, slot] = signal
    s.tip_count[b] += 1


@jit_phase
def _mark_prices(b, s, m, lmove):
    """The tick's first step: each market's YES price becomes its last price; lmove[j] is the move since."""
    for j in range(m):
        opening = s.pm_no[b, j] / (s.pm_yes[b, j] + s.pm_no[b, j])
        lmove[j] = opening - s.pm_last_price[b, j]
        s.pm_last_price[b, j] = opening


@jit_phase
def _advance_perps(b, s, pf, pi, cf, now, key, su, ret):
    """Perps of world b: prices move, a narrative fires, leaks, a new narrative may start."""
    np_, o_perp, o_narr, o_leak = pi[_NUM_PERPS], pi[_COL_PERP], pi[_COL_NARR], pi[_COL_LEAK]
    sigma = pf[_PERP_VOLATILITY]
    sigma_drift = -0.5 * sigma * sigma
    for t in range(np_):
        z = _normal(_uniform_at(key, su, o_perp + t), _uniform_at(key, su, o_perp + np_ + t))
        ret[t] = sigma_drift + sigma * z
    fire = s.narr_active[b] and s.narr_tick[b] <= now
    if fire:
        tk = s.narr_ticker[b]
        ret[tk] += s.narr_sign[b] * s.narr_mag[b]
        _push_news(b, s, now, _NEWS_ANNOUNCEMENT, tk, 0, _ANNOUNCEMENT_SOURCE, np.int64(s.narr_sign[b]))
        s.perp_news_acc[b, tk] = 0.0
        s.narr_active[b] = False
    for t in range(np_):
        s.perp_prev_price[b, t] = s.perp_price[b, t]
        s.perp_price[b, t] *= math.exp(ret[t])
        s.perp_ema[b, t] += 0.08 * (s.perp_price[b, t] - s.perp_ema[b, t])
        s.perp_news_acc[b, t] *= PERP_NEWS_DECAY
    if s.narr_active[b] and _uniform_at(key, su, o_leak) < LEAK_RATE:
        sgn = s.narr_sign[b] if _uniform_at(key, su, o_leak + 1) < LEAK_RELIABILITY else -s.narr_sign[b]
        tk = s.narr_ticker[b]
        s.perp_news_acc[b, tk] += sgn * cf[_CF_LEAK_WEIGHT]
        _push_news(b, s, now, _NEWS_LEAK, tk, 0, _LEAK_SOURCE, np.int64(sgn))
    if not s.narr_active[b] and not fire and _uniform_at(key, su, o_narr) < pf[_NARRATIVE_RATE]:
        s.narr_active[b] = True
        s.narr_ticker[b] = np.int64(math.floor(_uniform_at(key, su, o_narr + 1) * np_))
        s.narr_sign[b] = 1.0 if _uniform_at(key, su, o_narr + 2) < 0.5 else -1.0
        s.narr_tick[b] = now + _LEAD_LOW + np.int64(math.floor(_uniform_at(key, su, o_narr + 3) * _LEAD_SPAN))
        s.narr_mag[b] = _MOVE_LOW + _MOVE_SPAN * _uniform_at(key, su, o_narr + 4)


@jit_phase
def _funding_and_liquidation(b, s, pf, pi, now, payment, hit):
    """Funding every `funding_interval` ticks (a rate from the price's gap to its EMA, capped at FUNDING_CAP of the
    current notional, paid to the house), then liquidation of world b's positions whose price moved 90 % of the
    margin against them, or whose margin plus PnL is gone; returns how many positions were liquidated."""
    np_ = pi[_NUM_PERPS]
    if now % pi[_FUNDING_INTERVAL] == 0:
        for t in range(np_):
            rate = 1e-4 + 0.05 * math.log(s.perp_price[b, t] / s.perp_ema[b, t])
            s.perp_funding[b, t] = fmin(fmax(rate, -FUNDING_CAP), FUNDING_CAP)
            side = s.pos_side[b, t]
            current = s.pos_notional[b, t] * s.perp_price[b, t] / (s.pos_entry[b, t] if side != 0 else 1.0)
            payment[t] = side * current * s.perp_funding[b, t]
            s.pos_margin[b, t] -= payment[t]
        s.house_cash[b] += _psum(payment, np_)
    n_hit = 0
    for t in range(np_):
        side = s.pos_side[b, t]
        lev = s.pos_leverage[b, t] if side != 0 else 1.0
        entry = s.pos_entry[b, t]
        liq_long = entry * (1.0 - 0.9 / lev)
        liq_short = entry * (1.0 + 0.9 / lev)
        px = s.perp_price[b, t]
        h = (side == 1 and px <= liq_long) or (side == -1 and px >= liq_short)
        e1 = entry if side != 0 else 1.0
        upnl = side * (px / e1 - 1.0) * s.pos_notional[b, t]
        h = h or (side != 0 and s.pos_margin[b, t] + upnl <= 0)
        hit[t] = h
        n_hit += 1 if h else 0
    if n_hit:
        for t in range(np_):
            if hit[t]:
                _settle(b, t, True, pf, s)
    return n_hit


@jit_phase
def _npc_trades(b, s, pf, pi, beh, now, key, su, lmove, tot_yes, tot_no, per_usd, fee_m, amt, kbuf, npc_mk,
                npc_buys_yes):
    """The NPCs of world b trade: each may spend on one market (npc_mk) and one side (npc_buys_yes), informed and
    deceiving NPCs toward their belief about p*, momentum traders after the last move, noise traders at random;
    the flows are summed per market and bought in two rounds (YES first on even ticks), at the pools' prices.
    A market's sums add only its own NPCs' amounts, in NPC order (numpy's order, which the oracle keeps)."""
    m, k, o_npc = pi[_NUM_MARKETS], pi[_NUM_NPCS], pi[_COL_NPC]
    fee_rate, liq = pf[_FEE_RATE], pf[_MARKET_LIQUIDITY]
    for j in range(m):
        tot_yes[j] = 0.0
        tot_no[j] = 0.0
    for i in range(k):
        a_i = 0.0
        mk = 0
        side_yes = True
        if _uniform_at(key, su, o_npc + i) < pf[_NPC_TRADE_RATE]:
            mk = min(np.int64(math.floor(_uniform_at(key, su, o_npc + k + i) * m)), m - 1)
            bh = beh[i]
            if bh == _INFORMED or bh == _DECEIVER:
                price = s.pm_no[b, mk] / (s.pm_yes[b, mk] + s.pm_no[b, mk])
                z = _normal(_uniform_at(key, su, o_npc + 2 * k + i), _uniform_at(key, su, o_npc + 3 * k + i))
                gap = s.pm_truth[b, mk] + INFORMED_NOISE * z - price
                side_yes = gap > 0
                size = fmin(fmax(2500.0 * (abs(gap) - 0.02), 0.0), 400.0) * (0.5 if bh == _DECEIVER else 1.0)
            elif bh == _MOMENTUM:
                move = lmove[mk]
                side_yes = move > 0
                size = 50.0 + 100.0 * _uniform_at(key, su, o_npc + 5 * k + i) if abs(move) > 1e-4 else 0.0
            else:
                side_yes = _uniform_at(key, su, o_npc + 4 * k + i) < 0.5
                size = 20.0 + 180.0 * _uniform_at(key, su, o_npc + 5 * k + i)
            a_i = fmin(size, s.npc_cash[b, i])
        amt[i] = a_i
        npc_mk[i] = mk
        npc_buys_yes[i] = side_yes
    if m == 1:  # one market: numpy drops the market axis and sums the NPC axis pairwise
        for i in range(k):
            kbuf[i] = amt[i] if npc_buys_yes[i] else 0.0
        tot_yes[0] = _psum(kbuf, k)
        for i in range(k):
            kbuf[i] = 0.0 if npc_buys_yes[i] else amt[i]
        tot_no[0] = _psum(kbuf, k)
    else:
        for i in range(k):
            if npc_buys_yes[i]:
                tot_yes[npc_mk[i]] += amt[i]
            else:
                tot_no[npc_mk[i]] += amt[i]
    for i in range(k):
        s.npc_cash[b, i] -= amt[i]
    for j in range(m):
        s.pm_npc_flow[b, j] = (tot_yes[j] - tot_no[j]) / liq
    yes_first = now % 2 == 0
    for phase in range(2):
        buy_yes = yes_first if phase == 0 else not yes_first
        for j in range(m):
            spend = tot_yes[j] if buy_yes else tot_no[j]
            fee = fee_rate * spend
            net = spend - fee
            same = s.pm_yes[b, j] if buy_yes else s.pm_no[b, j]
            other = s.pm_no[b, j] if buy_yes else s.pm_yes[b, j]
            shares, new_same, new_other = _buy_shares(same, other, net)
            if not spend > 0:  # markets nobody bought in keep their pools exactly
                new_same, new_other = same, other
            s.pm_yes[b, j] = new_same if buy_yes else new_other
            s.pm_no[b, j] = new_other if buy_yes else new_same
            s.pm_collateral[b, j] += net
            fee_m[j] = fee
            per_usd[j] = shares / spend if spend > 0 else 0.0
        s.fees_collected[b] += _psum(fee_m, m)
        for i in range(k):
            if npc_buys_yes[i] == buy_yes:
                j = npc_mk[i]
                if buy_yes:
                    s.npc_yes[b, i, j] += amt[i] * per_usd[j]
                else:
                    s.npc_no[b, i, j] += amt[i] * per_usd[j]


@jit_phase
def _information(b, s, pf, pi, beh, cf, now, key, su, ts):
    """The feed of world b: signals decay; news, a post and group tips may arrive."""
    m, k, g = pi[_NUM_MARKETS], pi[_NUM_NPCS], pi[_NUM_GROUPS]
    o_news, o_post, o_tip = pi[_COL_NEWS], pi[_COL_POST], pi[_COL_TIP]
    for j in range(m):
        s.news_acc[b, j] *= SIGNAL_DECAY
        s.post_acc[b, j] *= SIGNAL_DECAY
        ts[j] = 1 if s.pm_outcome[b, j] == 1 else -1
    for gg in range(s.group_acc.shape[1]):
        for j in range(m):
            s.group_acc[b, gg, j] *= SIGNAL_DECAY
    if _uniform_at(key, su, o_news) < pf[_NEWS_RATE]:
        mk = min(np.int64(math.floor(_uniform_at(key, su, o_news + 1) * m)), m - 1)
        x = _uniform_at(key, su, o_news + 2)
        src = 0
        for q in range(3):
            if cf[_CF_SOURCE_CUM + q] <= x:
                src = q + 1
        src = min(max(src, 0), 2)
        sgn_i = ts[mk] if _uniform_at(key, su, o_news + 3) < cf[_CF_SOURCE_RELIABILITY + src] else -ts[mk]
        s.news_acc[b, mk] += sgn_i * cf[_CF_SOURCE_WEIGHT + src]
        _push_news(b, s, now, _NEWS_MARKET, mk, s.pm_serial[b, mk], src, sgn_i)
    if _uniform_at(key, su, o_post) < pf[_POST_RATE]:
        author = min(np.int64(math.floor(_uniform_at(key, su, o_post + 1) * k)), k - 1)
        mk = min(np.int64(math.floor(_uniform_at(key, su, o_post + 2) * m)), m - 1)
        bh = beh[author]
        honesty = POST_HONESTY_ARRAY[bh]
        sgn_i = ts[mk] if _uniform_at(key, su, o_post + 3) < honesty else -ts[mk]
        credibility = fmin(fmax((s.npc_rep[b, author] - 50.0) / 50.0, -1.0), 1.0)
        s.post_acc[b, mk] += sgn_i * credibility
        s.npc_claims[b, author, mk] += sgn_i
        _push_post(b, s, now, author, mk, s.pm_serial[b, mk], sgn_i)
    for grp in range(g):
        if _uniform_at(key, su, o_tip + 3 * grp) < pf[_TIP_RATE]:
            mk = min(np.int64(math.floor(_uniform_at(key, su, o_tip + 3 * grp + 1) * m)), m - 1)
            sgn_i = ts[mk] if _uniform_at(key, su, o_tip + 3 * grp + 2) < cf[_CF_GROUP_RELIABILITY + grp] else -ts[mk]
            s.group_acc[b, grp, mk] += sgn_i * cf[_CF_GROUP_WEIGHT + grp]
            _push_tip(b, s, now, grp, mk, s.pm_serial[b, mk], sgn_i)


@jit_phase
def _rule_uniform(key, stream, now, j):
    """The j-th uniform in [0, 1) of a rule's own random stream at tick `now`: a rule that draws from its own
    stream (a constant of its own, a multiple of 2**40 not taken by `sim.constants`' streams, below 2**47) adds its
    draws without moving any other phase's."""
    return _uniform_at(key, _U64(stream + now) * _S16, j)


@jit_phase
def _world_tick(b, s, pf, pi, beh, cf, now, key, su, lmove, sf, si, sb):
    """The world's own part of the tick, after the accounts' funding: the NPCs trade, the feed arrives, the clock
    advances. The one place a new world rule is called (the step's kernel and the multi-agent stages both run this).
    A rule with draws of its own takes them from its own stream (`_rule_uniform`), so no other phase's draws move.
    lmove: the markets' moves since the last tick (`_mark_prices`); sf, si, sb: the kernels' scratch (`_carve`)."""
    sc = _carve(pi, sf, si, sb)
    _npc_trades(b, s, pf, pi, beh, now, key, su, lmove, sc.tot_yes, sc.tot_no, sc.per_usd, sc.fee_m, sc.amt, sc.kbuf,
                sc.npc_mk, sc.npc_buys_yes)
    _information(b, s, pf, pi, beh, cf, now, key, su, sc.ts)
    s.tick[b] = now


@jit_phase
def _open_market(b, s, j, serial, now, life_min, life_max, liq, u4):
    """Open market `serial` in world b's slot j at tick `now`, with a life of life_min..life_max ticks and pools of
    2 x liq USD. Its hidden truth, outcome, opening price and life depend only on (world key, serial); the opening
    price is uninformative (uniform in [0.3, 0.7]: informed NPCs and the feed move it). u4: scratch of 4."""
    _uniforms(s.key[b], _U64(MARKET_STREAM + serial), 4, u4)
    truth = _TRUTH_LOW + _TRUTH_SPAN * u4[0]
    p0 = _OPEN_LOW + _OPEN_SPAN * u4[2]
    life = life_min + np.int64(math.floor(u4[3] * (life_max - life_min + 1)))
    pool_yes = 2.0 * liq * (1.0 - p0)
    pool_no = 2.0 * liq * p0
    collateral = fmax(pool_yes, pool_no)
    s.pm_yes[b, j] = pool_yes
    s.pm_no[b, j] = pool_no
    s.pm_collateral[b, j] = collateral
    s.pm_house_yes[b, j] = collateral - pool_yes
    s.pm_house_no[b, j] = collateral - pool_no
    s.house_cash[b] -= collateral
    s.pm_truth[b, j] = truth
    s.pm_outcome[b, j] = 1 if u4[1] < truth else 0
    s.pm_open_tick[b, j] = now
    s.pm_resolve_tick[b, j] = now + life
    s.pm_serial[b, j] = serial
    s.pm_last_price[b, j] = p0
    s.pm_npc_flow[b, j] = 0.0
    s.news_acc[b, j] = 0.0
    s.post_acc[b, j] = 0.0
    for gg in range(s.group_acc.shape[1]):
        s.group_acc[b, gg, j] = 0.0
    for i in range(s.npc_claims.shape[1]):
        s.npc_claims[b, i, j] = 0.0


@jit_flat
def _open_first_markets(pf, pi, fb, ib, kb, bb, tab, sf, si, sb):
    """Reset's markets: every world opens markets 0..M-1 in slots 0..M-1 at its tick, with lives from half the
    shortest (so the first resolutions are spread out) to the longest."""
    s = state_views(fb, ib, kb, bb, tab)
    u4 = _carve(pi, sf, si, sb).u4
    m, dmin, dmax, liq = pi[_NUM_MARKETS], pi[_DURATION_MIN], pi[_DURATION_MAX], pf[_MARKET_LIQUIDITY]
    for b in range(s.tick.shape[0]):
        for j in range(m):
            _open_market(b, s, j, s.next_serial[b] + j, s.tick[b], dmin // 2, dmax, liq, u4)
        s.next_serial[b] += m


@jit_phase
def _due_markets(b, s, m, now, due):
    """Which of world b's markets resolve at `now` (due[j]); returns how many."""
    n_due = 0
    for j in range(m):
        d = s.pm_resolve_tick[b, j] <= now
        due[j] = d
        n_due += 1 if d else 0
    return n_due


@jit_flat  # a real call: it runs only on ticks where a market is due
def _pay_due(b, fb, ib, kb, bb, tab, pi, due, ap, buf):
    """Pay world b's account, on a tick where a market is due: pays the winning shares
    of the due markets (ap[j], USD), clears the holdings there; returns the payout (USD).

    A real call, so it takes the packed state (fb, ib, kb, bb, tab) and builds its own views: a tuple of 73
    arrays as an argument costs compile time at every call site."""
    s = state_views(fb, ib, kb, bb, tab)
    m = pi[_NUM_MARKETS]
    for j in range(m):
        ap[j] = (s.hold_yes[b, j] if s.pm_outcome[b, j] == 1 else s.hold_no[b, j]) if due[j] else 0.0
    payout = _psum(ap, m)
    s.cash[b] += payout
    for j in range(m):
        buf[j] = ap[j] - s.cost_yes[b, j] - s.cost_no[b, j] if due[j] else 0.0
    s.realized_pnl[b] += _psum(buf, m)
    for j in range(m):
        if due[j]:
            s.hold_yes[b, j] = 0.0
            s.hold_no[b, j] = 0.0
            s.cost_yes[b, j] = 0.0
            s.cost_no[b, j] = 0.0
    return payout


@jit_flat  # a real call, as `_pay_due`
def _settle_due(b, now, fb, ib, kb, bb, tab, pf, pi, due, ap, buf, npc_pay, npc_pay_m, kbuf, u4):
    """Settle world b's due markets, on a tick where a market is due: NPC payouts and
    reputations, the house's share (after the agents' payouts ap[j], USD), then a new market in each due slot."""
    s = state_views(fb, ib, kb, bb, tab)
    m, k, dmin, dmax = pi[_NUM_MARKETS], pi[_NUM_NPCS], pi[_DURATION_MIN], pi[_DURATION_MAX]
    liq = pf[_MARKET_LIQUIDITY]
    for i in range(k):
        for j in range(m):
            yw = s.pm_outcome[b, j] == 1
            npc_pay[i, j] = (s.npc_yes[b, i, j] if yw else s.npc_no[b, i, j]) if due[j] else 0.0
        s.npc_cash[b, i] += _psum(npc_pay[i], m)
        for j in range(m):
            c = s.npc_claims[b, i, j]
            sg = 1.0 if c > 0 else (-1.0 if c < 0 else (0.0 if c == 0 else c))
            buf[j] = sg * (1.0 if s.pm_outcome[b, j] == 1 else -1.0) if due[j] else 0.0
        rep = s.npc_rep[b, i] + REP_STEP * _psum(buf, m)
        s.npc_rep[b, i] = fmin(fmax(rep, 0.0), 100.0)
        for j in range(m):
            if due[j]:
                s.npc_yes[b, i, j] = 0.0
                s.npc_no[b, i, j] = 0.0
    for j in range(m):
        if m == 1:  # sums over NPCs run pairwise only where numpy drops the market axis
            for i in range(k):
                kbuf[i] = npc_pay[i, j]
            npc_pay_m[j] = _psum(kbuf, k)
        else:
            acc = 0.0
            for i in range(k):
                acc += npc_pay[i, j]
            npc_pay_m[j] = acc
        buf[j] = s.pm_collateral[b, j] - ap[j] - npc_pay_m[j] if due[j] else 0.0
    s.house_cash[b] += _psum(buf, m)
    opened = 0
    for j in range(m):
        if due[j]:
            s.pm_collateral[b, j] = 0.0
            _open_market(b, s, j, s.next_serial[b] + opened, now, dmin, dmax, liq, u4)
            opened += 1
    s.next_serial[b] += opened


@jit_phase
def _pay_resolutions(b, s, packed_state, pi, now, due, ap, buf):
    """Pay world b's account its winning shares in the markets due at `now`: returns (markets due, payout USD);
    ap[j] is each due market's payout."""
    m = pi[_NUM_MARKETS]
    n_due = _due_markets(b, s, m, now, due)
    if n_due:
        fb, ib, kb, bb, tab = packed_state
        return n_due, _pay_due(b, fb, ib, kb, bb, tab, pi, due, ap, buf)
    # Adding the (zero) sums all the same turns a -0.0 into 0.0, as the payouts of a due tick would.
    s.cash[b] += 0.0
    s.realized_pnl[b] += 0.0
    return 0, 0.0


@jit_phase
def _settle_markets(b, s, packed_state, pf, pi, now, n_due, due, ap, buf, npc_pay, npc_pay_m, kbuf, u4):
    """Settle world b's n_due markets due at `now` (due[j], as `_due_markets` marked them), after every account was
    paid (ap[j]: their payouts in market j, USD): the NPCs' payouts and reputations, the house's share, new markets
    in the due slots."""
    k = pi[_NUM_NPCS]
    if n_due:
        fb, ib, kb, bb, tab = packed_state
        _settle_due(b, now, fb, ib, kb, bb, tab, pf, pi, due, ap, buf, npc_pay, npc_pay_m, kbuf, u4)
        return
    for i in range(k):
        s.npc_cash[b, i] += 0.0
        s.npc_rep[b, i] = fmin(fmax(s.npc_rep[b, i] + 0.0, 0.0), 100.0)
    s.house_cash[b] += 0.0


@jit_phase
def _carve(pi, sf, si, sb):
    """The kernels' scratch (`Scratch`), carved from sf / si / sb in `scratch`'s sizes (every element is written
    before it is read)."""
    m, np_, k = pi[_NUM_MARKETS], pi[_NUM_PERPS], pi[_NUM_NPCS]
    nbuf = max(m, np_, k, 8)
    u4, buf, ret, payment = sf[0:4], sf[4:4 + nbuf], sf[4 + nbuf:4 + nbuf + np_], sf[4 + nbuf + np_:4 + nbuf + 2 * np_]
    o = 4 + nbuf + 2 * np_
    lmove, tot_yes, tot_no, per_usd = sf[o:o + m], sf[o + m:o + 2 * m], sf[o + 2 * m:o + 3 * m], sf[o + 3 * m:o + 4 * m]
    fee_m, ap, npc_pay_m = sf[o + 4 * m:o + 5 * m], sf[o + 5 * m:o + 6 * m], sf[o + 6 * m:o + 7 * m]
    o += 7 * m
    amt, kbuf, npc_pay = sf[o:o + k], sf[o + k:o + 2 * k], sf[o + 2 * k:o + 2 * k + k * m].reshape((k, m))
    ts, npc_mk = si[0:m], si[m:m + k]
    hit, due, npc_buys_yes = sb[0:np_], sb[np_:np_ + m], sb[np_ + m:np_ + m + k]
    return Scratch(u4, buf, ret, payment, lmove, tot_yes, tot_no, per_usd, fee_m, ap, npc_pay_m, amt, kbuf, npc_pay,
                   ts, npc_mk, hit, due, npc_buys_yes)


@jit_flat
def kernel(pf, pi, beh, cf, kind, target, side, amount, leverage, pre_error, pre_a, pre_b, out_f, out_i, out_b, fb,
            ib, kb, bb, tab, sf, si, sb):
    """Apply one action per world and advance every world one tick (the phases, in the step's order).

    fb, ib, kb, bb, tab: the packed state (`packed`); sf, si, sb: float, int and bool scratch from `scratch(pi)`.
    Returns False, with no world touched, when an action kind is not an ActionType code."""
    s = state_views(fb, ib, kb, bb, tab)
    nb = s.tick.shape[0]
    # The numpy path rejects the whole batch before touching any world.
    for b in range(nb):
        if kind[b] < 0 or kind[b] > _MAX_KIND:
            return False
    m = pi[_NUM_MARKETS]
    sc = _carve(pi, sf, si, sb)
    for b in range(nb):
        eq0 = _agent_action(b, s, pf, pi, kind, target, side, amount, leverage, pre_error, pre_a, pre_b, out_f, out_i,
                            out_b, sc.buf)
        now = s.tick[b] + 1
        key = s.key[b]
        su = _U64(now) * _S16
        _mark_prices(b, s, m, sc.lmove)
        _advance_perps(b, s, pf, pi, cf, now, key, su, sc.ret)
        out_i[_LIQUIDATED, b] = _funding_and_liquidation(b, s, pf, pi, now, sc.payment, sc.hit)
        _world_tick(b, s, pf, pi, beh, cf, now, key, su, sc.lmove, sf, si, sb)
        n_due, payout = _pay_resolutions(b, s, (fb, ib, kb, bb, tab), pi, now, sc.due, sc.ap, sc.buf)
        _settle_markets(b, s, (fb, ib, kb, bb, tab), pf, pi, now, n_due, sc.due, sc.ap, sc.buf, sc.npc_pay,
                        sc.npc_pay_m, sc.kbuf, sc.u4)
        out_i[_RESOLVED, b] = n_due
        out_f[_PAYOUT, b] = payout
        eq1 = equity_of(b, s, pf, pi, sc.buf)
        out_f[_EQUITY_AFTER, b] = eq1
        out_f[_PNL_DELTA, b] = eq1 - eq0
        out_b[_BANKRUPT, b] = eq1 < pf[_MIN_FEE]
    return True


# ---------------------------------------------------------------------------------------------
# The same phases as stages over every world, for several agents' accounts around one world (`sim.multi`), which
# loads each account into the state between the stages that read or change it


STAGE_PERPS, STAGE_FUNDING, STAGE_FEED, STAGE_PAY, STAGE_SETTLE = range(5)
"""The tick's stages, in `kernel`'s order: the world's perps; one account's funding and liquidations; the world's
own tick (`_world_tick`: NPC trades, the feed, the clock); one account's resolution payouts; the markets'
settlement."""


@jit_flat
def _equities(pf, pi, fb, ib, kb, bb, tab, sf, si, sb, out):
    """out[b] = equity of world b (USD)."""
    s = state_views(fb, ib, kb, bb, tab)
    buf = _carve(pi, sf, si, sb).buf
    for b in range(s.tick.shape[0]):
        out[b] = equity_of(b, s, pf, pi, buf)


@jit_flat
def _act_all(pf, pi, kind, target, side, amount, leverage, pre_error, pre_a, pre_b, out_f, out_i, out_b, fb, ib, kb,
             bb, tab, sf, si, sb):
    """Apply the loaded account's action in every world (`kernel`'s first phase)."""
    s = state_views(fb, ib, kb, bb, tab)
    buf = _carve(pi, sf, si, sb).buf
    for b in range(s.tick.shape[0]):
        _agent_action(b, s, pf, pi, kind, target, side, amount, leverage, pre_error, pre_a, pre_b, out_f, out_i, out_b,
                      buf)


@jit_flat
def _tick_stage(stage, pf, pi, beh, cf, fb, ib, kb, bb, tab, sf, si, sb, lmove_all, ap_all, count, usd):
    """One stage of every world's tick (`STAGE_*`), as `kernel` runs it. lmove_all (B, M): the markets' last moves
    (PERPS writes, FEED reads); ap_all (B, M): the resolution payouts by market (PAY writes the loaded account's,
    SETTLE reads every account's sum); count, usd (B,): FUNDING's liquidations, PAY's markets due and payout."""
    s = state_views(fb, ib, kb, bb, tab)
    sc = _carve(pi, sf, si, sb)
    m = pi[_NUM_MARKETS]
    for b in range(s.tick.shape[0]):
        now = s.tick[b] + 1 if stage <= STAGE_FEED else s.tick[b]
        key = s.key[b]
        su = _U64(now) * _S16
        if stage == STAGE_PERPS:
            _mark_prices(b, s, m, lmove_all[b])
            _advance_perps(b, s, pf, pi, cf, now, key, su, sc.ret)
        elif stage == STAGE_FUNDING:
            count[b] = _funding_and_liquidation(b, s, pf, pi, now, sc.payment, sc.hit)
        elif stage == STAGE_FEED:
            _world_tick(b, s, pf, pi, beh, cf, now, key, su, lmove_all[b], sf, si, sb)
        elif stage == STAGE_PAY:
            count[b], usd[b] = _pay_resolutions(b, s, (fb, ib, kb, bb, tab), pi, now, sc.due, ap_all[b], sc.buf)
        else:
            n_due = _due_markets(b, s, m, now, sc.due)  # the accounts' payouts left the markets' ticks as they were
            _settle_markets(b, s, (fb, ib, kb, bb, tab), pf, pi, now, n_due, sc.due, ap_all[b], sc.buf, sc.npc_pay,
                            sc.npc_pay_m, sc.kbuf, sc.u4)


def scratch(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The float, int and bool scratch `kernel` carves up (the two in step), for the world sizes in pi
    (`param_arrays`' pi). Its size does not depend on the number of worlds."""
    m, np_, k = int(pi[_NUM_MARKETS]), int(pi[_NUM_PERPS]), int(pi[_NUM_NPCS])
    return (np.empty(4 + max(m, np_, k, 8) + 2 * np_ + 7 * m + 2 * k + k * m), np.empty(m + k, dtype=np.int64),
            np.empty(np_ + m + k, dtype=np.bool_))


# The world step with real calls to its small helpers (`sim._jit.call_variant`): what `step` runs (the text face,
# and the numeric face's unfused paths); the fused numeric step (envs/fused.py) calls `kernel`, all inlined.
_calls = call_variant(globals(), ("_pay_due", "_settle_due", "kernel", "_equities", "_act_all", "_tick_stage",
                                 "_open_first_markets"),
                      helpers=(vars(_scalars),))
_kernel_calls = _calls["kernel"]


@functools.cache
def _python_calls() -> dict:
    """The kernels as Python (`sim._jit.python_twin`): the same source, run by the interpreter."""
    return {name: python_twin(globals()[name]) for name in _calls}


def _run(name: str, compiled: bool, *args):
    """Call kernel `name` compiled (its copy in `_calls`; the first call in a process may compile it) or as Python."""
    if not compiled or numba is None:
        with np.errstate(over="ignore"):  # the draws' hash multiplies uint64s modulo 2**64, as compiled code does
            return _python_calls()[name](*args)
    global _warm
    if _warm and name == "kernel":
        return _kernel_calls(*args)
    with compile_notice(_calls[name]):
        result = _calls[name](*args)
    _warm = _warm or name == "kernel"
    return result


def _refuse_kinds(a: ActionBatch) -> None:
    raise InvalidActionError(f"ActionBatch.kind must hold ActionType codes 0..{_MAX_KIND}, "
                             f"got {sorted(set(a.kind.tolist()))}; build batches with ActionBatch.from_actions")


def _outcome_rows(b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.empty((len(OUT_F), b)), np.empty((len(OUT_I), b), dtype=np.int64),
            np.empty((len(OUT_B), b), dtype=np.bool_))


def step(state: WorldState, actions: ActionBatch, params: WorldParams, *, compiled: bool = True) -> StepOutcome:
    """Apply one action per world, advance every world one tick, and report the transition.

    Mutates `state` in place (every array, `npc_rep` included, is updated in place rather than rebound). A failed
    action leaves its world unchanged before the tick. compiled=False runs the same rules as Python
    (``backend="numpy"``: readable, steppable in a debugger, no compile; its speed: docs/benchmarks.md), as does
    every call where numba is missing. Raises InvalidActionError, touching no world, for a kind that is not an
    ActionType.
    """
    pf, pi, beh, cf = param_arrays(params)
    out_f, out_i, out_b = _outcome_rows(state.tick.shape[0])
    a = actions
    if not _run("kernel", compiled, pf, pi, beh, cf, a.kind, a.target, a.side, a.amount, a.leverage, a.pre_error,
                a.pre_a, a.pre_b, out_f, out_i, out_b, *packed(state), *scratch(pi)):
        _refuse_kinds(a)
    return outcome_of(out_f, out_i, out_b)


def equities(state: WorldState, params: WorldParams, *, compiled: bool = True) -> np.ndarray:
    """Each world's equity (USD, shape (B,)) as the step computes it (`equity_of`)."""
    pf, pi, _, _ = param_arrays(params)
    out = np.empty(state.tick.shape[0])
    _run("_equities", compiled, pf, pi, *packed(state), *scratch(pi), out)
    return out


def act(state: WorldState, actions: ActionBatch, params: WorldParams, *, compiled: bool = True):
    """The step's first phase alone: apply the loaded account's action in every world. Returns the outcome rows
    (out_f, out_i, out_b; `OUT_F`, ...) with the action's fields filled, the tick's left unset."""
    a = actions
    if len(a.kind) and (a.kind.min() < 0 or a.kind.max() > _MAX_KIND):
        _refuse_kinds(a)
    pf, pi, _, _ = param_arrays(params)
    rows = _outcome_rows(state.tick.shape[0])
    _run("_act_all", compiled, pf, pi, a.kind, a.target, a.side, a.amount, a.leverage, a.pre_error, a.pre_a, a.pre_b,
         *rows, *packed(state), *scratch(pi))
    return rows


def tick_stage(stage: int, state: WorldState, params: WorldParams, lmove: np.ndarray, ap: np.ndarray, *,
               compiled: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """One stage of the tick (`STAGE_PERPS` ...) in every world; lmove and ap (B, M) as `_tick_stage` reads them.
    Returns (count, usd), shape (B,): FUNDING's liquidations, PAY's markets due and payout (USD)."""
    pf, pi, beh, cf = param_arrays(params)
    b = state.tick.shape[0]
    count, usd = np.zeros(b, dtype=np.int64), np.zeros(b)
    _run("_tick_stage", compiled, stage, pf, pi, beh, cf, *packed(state), *scratch(pi), lmove, ap, count, usd)
    return count, usd


def reset(params: WorldParams, keys: np.ndarray, *, compiled: bool = True) -> WorldState:
    """Build B fresh worlds, one per key (uint64, shape (B,)). The same key always gives the same world: perps at
    their base prices spread by a log-normal draw, NPC reputations around their behaviour's centre, and the first
    markets (`_open_market`). compiled=False opens the markets as Python (``backend="numpy"``), with the same bits.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    b, m, p, k, g = len(keys), params.num_markets, params.num_perps, params.num_npcs, params.num_groups
    u = rng.uniforms(keys, RESET_STREAM, 2 * p + k)
    base = np.array(PERP_BASE_PRICES[:p])
    price0 = base * np.exp(PERP_START_SPREAD * rng.normals(u[:, :p], u[:, p : 2 * p]))
    behaviour = npc_behaviours(params)
    rep_centre = np.select(
        [behaviour == NpcBehaviour.INFORMED, behaviour == NpcBehaviour.DECEIVER], [68.0, 58.0], default=48.0
    )
    npc_rep = np.clip(rep_centre[None, :] + 20.0 * (u[:, 2 * p : 2 * p + k] - 0.5), 0.0, 100.0)
    state = packed_fresh(b, {"M": m, "P": p, "K": k, "G": g})
    state.key[:] = keys
    state.cash[:] = params.starting_cash
    state.perp_price[:] = price0
    state.perp_prev_price[:] = price0
    state.perp_ema[:] = price0
    state.npc_cash[:] = params.npc_starting_cash
    state.npc_rep[:] = npc_rep
    pf, pi, _, _ = param_arrays(params)
    _run("_open_first_markets", compiled, pf, pi, *packed(state), *scratch(pi))
    return state
