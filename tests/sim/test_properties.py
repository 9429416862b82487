"""Property tests of the world core (`rlaif_gym.sim`): money, complete sets, prices, resolution,
liquidation, bankruptcy, failed actions, determinism and the action-alias normaliser.

Only numpy, hypothesis, pytest, `rlaif_gym.sim` and `rlaif_gym.errors` are used here (no gymnasium,
no pydantic). Random action sequences are drawn by hypothesis and turned into `ActionBatch` rows
directly, including out-of-range targets, zero/negative/huge/NaN amounts and leverage outside [1, cap].
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlaif_gym.errors import InvalidActionError
from rlaif_gym.sim import (
    ACTION_TYPES,
    Action,
    ActionBatch,
    ActionType,
    ErrorCode,
    StepOutcome,
    WorldParams,
    WorldState,
    buy_shares,
    equity,
    error_message,
    normalize_action,
    reset,
    sell_proceeds,
    share_value,
    step,
    unrealized_pnl,
    yes_price,
)

# NaN/inf amounts are part of the random actions; the engine rejects them, numpy just warns on the way.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

PARAMS = WorldParams()
NAN, INF = float("nan"), float("inf")

# Hypothesis settings shared by the episode tests: each example runs a short batched episode.
EPISODE = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
B_WORLDS, T_STEPS = 4, 30

# ---------------------------------------------------------------------------------------------
# Strategies


def keys_st(n: int):
    """`n` distinct uint64 world keys."""
    return st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n, unique=True).map(
        lambda ks: np.array(ks, dtype=np.uint64)
    )


_BAD_TARGETS = [-1, -7, 4, 5, 8, 16, 2**31, -(2**40)]
_SPECIAL_AMOUNTS = [0.0, -0.0, -1.0, -1e9, NAN, INF, -INF, 1e300, 0.5, 1e-300, 5e-324, 0.99, 1.0, 1e6]
_SPECIAL_LEVS = [0.0, 0.5, 0.999, -2.0, 1.0, 10.0, 10.000001, 11.0, 100.0, 1e308, NAN, INF, -INF]
# How the amount is derived from the state instead of drawn (None: use the drawn amount); see encode_row.
_FRACS = [None, None, 0.0, 1e-6, 0.1, 0.25, 0.5, 1.0, 1.0 + 5e-10, 1.5]

action_st = st.tuples(
    st.integers(0, len(ActionType) - 1),  # kind
    # target (M=4, P=3, G=3, K=8): mostly in range, sometimes far outside
    st.one_of(st.integers(0, 3), st.integers(0, 3), st.integers(0, 7), st.sampled_from(_BAD_TARGETS)),
    st.integers(0, 1),  # side
    st.one_of(st.floats(1.0, 4000.0), st.floats(1.0, 500.0), st.sampled_from(_SPECIAL_AMOUNTS)),  # amount
    st.one_of(st.floats(1.0, PARAMS.max_leverage), st.sampled_from(_SPECIAL_LEVS)),  # leverage
    st.sampled_from(_FRACS),  # frac
)


def episode_st(b: int, t: int):
    """t steps of b actions each."""
    return st.lists(st.lists(action_st, min_size=b, max_size=b), min_size=t, max_size=t)


# ---------------------------------------------------------------------------------------------
# Helpers


def make_batch(kind, target, side, amount, leverage, pre_error=None) -> ActionBatch:
    n = len(kind)
    return ActionBatch(
        kind=np.asarray(kind, np.int64), target=np.asarray(target, np.int64), side=np.asarray(side, np.int64),
        amount=np.asarray(amount, np.float64), leverage=np.asarray(leverage, np.float64),
        pre_error=np.zeros(n, np.int64) if pre_error is None else np.asarray(pre_error, np.int64),
    )


def one(kind, target=0, side=0, amount=0.0, leverage=1.0, pre_error=0) -> ActionBatch:
    """A batch of one world's action."""
    return make_batch([kind], [target], [side], [amount], [leverage], [pre_error])


def encode_row(state: WorldState, params: WorldParams, row) -> ActionBatch:
    """Turn drawn action tuples (one per world) into an ActionBatch, resolving `frac` against the state.

    frac (when not None) makes the amount depend on the state, so that trades often succeed:
    sells sell that fraction of a held position (switching to one that is held; 1 + 5e-10 exercises the
    "sell all" clamp, 1.5 overshoots); buys spend 0.3 * frac of cash (1 + 5e-10: all of it, 1.5: more
    than there is); opens use the same share of cash as margin + fee; closes pick an open position.
    """
    kinds, targets, sides, amounts, levs = [], [], [], [], []
    for b, (kind, target, side, amount, lev, frac) in enumerate(row):
        if frac is not None:
            if kind == ActionType.SELL_PREDICTION:
                held = np.stack([state.hold_yes[b], state.hold_no[b]], axis=1)  # (M, 2)
                if (0 <= target < params.num_markets and held[target, side] <= 0) and (held > 0).any():
                    target, side = (int(i) for i in np.argwhere(held > 0)[0])
                if 0 <= target < params.num_markets:
                    amount = float(held[target, side]) * frac
            elif kind == ActionType.BUY_PREDICTION:
                amount = float(state.cash[b]) * (0.3 * frac if frac <= 1.0 else 1.0 if frac < 1.1 else frac)
            elif kind == ActionType.OPEN_PERP and math.isfinite(lev):
                scale = 0.3 * frac if frac <= 1.0 else 1.0 if frac < 1.1 else frac
                amount = float(state.cash[b]) * scale * max(lev, 1.0) / (1.0 + params.fee_rate * max(lev, 1.0))
            elif kind == ActionType.CLOSE_PERP:
                open_t = np.nonzero(state.pos_side[b] != 0)[0]
                if len(open_t):
                    target = int(open_t[0])
        kinds.append(kind)
        targets.append(target)
        sides.append(side)
        amounts.append(amount)
        levs.append(lev)
    return make_batch(kinds, targets, sides, amounts, levs)


def run_episode(params: WorldParams, keys: np.ndarray, episode, on_step) -> WorldState:
    """Reset, then for each step: encode, step, and call on_step(t, before, batch, outcome, after)."""
    state = reset(params, keys)
    for t, row in enumerate(episode):
        batch = encode_row(state, params, row)
        before = state.copy()
        out = step(state, batch, params)
        on_step(t, before, batch, out, state)
    return state


def total_money(s: WorldState) -> np.ndarray:
    """Every USD in a world, per world: the money identity that must be conserved."""
    return (s.cash + s.npc_cash.sum(-1) + s.pm_collateral.sum(-1) + s.fees_collected + s.house_cash
            + s.pos_margin.sum(-1))


def fee_of(params: WorldParams, gross: float) -> float:
    return max(params.fee_rate * gross, params.min_fee)


def _eq(x: np.ndarray, y: np.ndarray) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    return bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))


def assert_states_equal(a: WorldState, b: WorldState, ctx: str) -> None:
    diff = [f.name for f in fields(WorldState) if not _eq(getattr(a, f.name), getattr(b, f.name))]
    assert not diff, f"{ctx}: state fields differ: {diff}"


def assert_outcomes_equal(a: StepOutcome, b: StepOutcome, ctx: str, skip=()) -> None:
    diff = [f.name for f in fields(StepOutcome)
            if f.name not in skip and not _eq(getattr(a, f.name), getattr(b, f.name))]
    assert not diff, f"{ctx}: outcome fields differ: {diff}"


def outcome_take(out: StepOutcome, i: int) -> StepOutcome:
    return StepOutcome(**{f.name: np.asarray(getattr(out, f.name))[[i]] for f in fields(StepOutcome)})


# ---------------------------------------------------------------------------------------------
# 1. Money conservation and the agent's ledger


@EPISODE
@given(keys=keys_st(B_WORLDS), episode=episode_st(B_WORLDS, T_STEPS))
def test_money_is_conserved_and_the_agent_ledger_is_exact(keys, episode):
    params = PARAMS
    start = total_money(reset(params, keys))

    def on_step(t, before, batch, out, after):
        total = total_money(after)
        for b in range(len(keys)):
            ctx = f"step {t}, world {b} (key {keys[b]}), action kind {batch.kind[b]}"
            assert math.isclose(total[b], start[b], rel_tol=1e-9), (
                f"{ctx}: money not conserved: {total[b]!r} != {start[b]!r}")
            assert bool(out.success[b]) == (out.error[b] == ErrorCode.OK), f"{ctx}: success/error disagree"
            if not out.success[b]:
                assert error_message(out.error[b], out.error_a[b], out.error_b[b]), f"{ctx}: empty error message"
            kind, ok = int(batch.kind[b]), bool(out.success[b])
            amount, lev, tgt = float(batch.amount[b]), float(batch.leverage[b]), int(batch.target[b])
            payout = float(out.payout[b])
            cash0 = float(before.cash[b])
            fee = 0.0
            cash_change = 0.0
            if ok and kind == ActionType.BUY_PREDICTION:
                fee = fee_of(params, amount)
                cash_change = -amount
            elif ok and kind == ActionType.SELL_PREDICTION:
                yes = batch.side[b] == 0
                held = before.hold_yes[b, tgt] if yes else before.hold_no[b, tgt]
                same = before.pm_yes[b, tgt] if yes else before.pm_no[b, tgt]
                other = before.pm_no[b, tgt] if yes else before.pm_yes[b, tgt]
                gross = float(sell_proceeds(np.array(same), np.array(other), np.array(min(amount, held)))[0])
                fee = fee_of(params, gross)
                cash_change = gross - fee
            elif ok and kind == ActionType.OPEN_PERP:
                fee = fee_of(params, amount)
                cash_change = -(amount / lev + fee)
            elif ok and kind == ActionType.CLOSE_PERP:
                margin = float(before.pos_margin[b, tgt])
                pnl = float(unrealized_pnl(before)[b, tgt])
                gross_fee = fee_of(params, float(before.pos_notional[b, tgt] * before.perp_price[b, tgt]
                                                 / before.pos_entry[b, tgt]))
                cash_change = max(margin + pnl - gross_fee, 0.0)
                fee = max(min(gross_fee, margin + max(pnl, -margin)), 0.0)
            assert math.isclose(float(after.cash[b]), cash0 + cash_change + payout, rel_tol=1e-12, abs_tol=1e-8), (
                f"{ctx}: cash {after.cash[b]!r} != {cash0!r} + {cash_change!r} (action) + {payout!r} (payout)")
            assert math.isclose(float(after.fees_paid[b] - before.fees_paid[b]), fee, rel_tol=1e-9, abs_tol=1e-10), (
                f"{ctx}: fees_paid rose by {after.fees_paid[b] - before.fees_paid[b]!r}, expected {fee!r}")
            assert math.isclose(float(out.pnl_delta[b]), float(out.equity_after[b] - out.equity_before[b]),
                                rel_tol=1e-12, abs_tol=1e-9), f"{ctx}: pnl_delta != equity_after - equity_before"
            assert math.isclose(float(out.equity_after[b]), float(equity(after, params)[b]), rel_tol=1e-12,
                                abs_tol=1e-9), (
                f"{ctx}: equity_after does not match equity(state)")

    run_episode(params, keys, episode, on_step)


@settings(max_examples=40, deadline=None)
@given(key=st.integers(0, 2**64 - 1), slot=st.integers(0, PARAMS.num_markets - 1), side=st.integers(0, 1),
       amount=st.one_of(st.floats(PARAMS.min_order, PARAMS.starting_cash), st.sampled_from([1.0, 5.0, 10.0, 10.01])))
def test_successful_buy_debits_exactly_the_amount_and_charges_the_fee(key, slot, side, amount):
    params = PARAMS
    state = reset(params, np.array([key], np.uint64))
    before = state.copy()
    out = step(state, one(ActionType.BUY_PREDICTION, slot, side, amount), params)
    ctx = f"key {key}, slot {slot}, side {side}, amount {amount!r}"
    assert out.success[0], f"{ctx}: buy failed with {error_message(out.error[0], out.error_a[0], out.error_b[0])}"
    assert out.payout[0] == 0.0, f"{ctx}: no market should resolve on the first tick"
    assert state.cash[0] == before.cash[0] - amount, (
        f"{ctx}: cash {state.cash[0]!r}, expected {before.cash[0] - amount!r}")
    expected_fee = max(params.fee_rate * amount, params.min_fee)
    assert math.isclose(state.fees_paid[0], expected_fee, rel_tol=1e-12), (
        f"{ctx}: fees_paid {state.fees_paid[0]!r} != {expected_fee!r}")
    held = state.hold_yes[0, slot] if side == 0 else state.hold_no[0, slot]
    other_held = state.hold_no[0, slot] if side == 0 else state.hold_yes[0, slot]
    assert held > 0 and other_held == 0, f"{ctx}: holdings {held!r}/{other_held!r}"
    cost = state.cost_yes[0, slot] if side == 0 else state.cost_no[0, slot]
    assert cost == amount, f"{ctx}: cost basis {cost!r} != amount {amount!r}"


# ---------------------------------------------------------------------------------------------
# 2. Complete sets


def assert_complete_sets(s: WorldState, ctx: str) -> None:
    yes = s.pm_yes + s.pm_house_yes + s.hold_yes + s.npc_yes.sum(axis=1)
    no = s.pm_no + s.pm_house_no + s.hold_no + s.npc_no.sum(axis=1)
    tol = 1e-9 * np.maximum(s.pm_collateral, 1.0)
    bad_yes = np.abs(yes - s.pm_collateral) > tol
    bad_no = np.abs(no - s.pm_collateral) > tol
    if bad_yes.any() or bad_no.any():
        w, m = np.nonzero(bad_yes | bad_no)
        where = list(zip(w.tolist(), m.tolist(), strict=True))
        raise AssertionError(
            f"{ctx}: complete-set invariant broken at (world, market) {where}: "
            f"YES {yes[w, m]}, NO {no[w, m]}, collateral {s.pm_collateral[w, m]}")
    for name in ("pm_yes", "pm_no", "pm_house_yes", "pm_house_no", "hold_yes", "hold_no", "npc_yes", "npc_no"):
        arr = getattr(s, name)
        assert (arr >= -1e-9).all(), f"{ctx}: negative {name} at {np.argwhere(arr < -1e-9).tolist()}"


@EPISODE
@given(keys=keys_st(B_WORLDS), episode=episode_st(B_WORLDS, T_STEPS))
def test_complete_sets_back_every_share_after_every_step(keys, episode):
    state = reset(PARAMS, keys)
    assert_complete_sets(state, "after reset")

    def on_step(t, before, batch, out, after):
        assert_complete_sets(after, f"step {t} (actions {batch.kind.tolist()})")

    run_episode(PARAMS, keys, episode, on_step)


# ---------------------------------------------------------------------------------------------
# 3. Prices


@EPISODE
@given(keys=keys_st(B_WORLDS), episode=episode_st(B_WORLDS, T_STEPS))
def test_prices_stay_strictly_inside_zero_one_and_sum_to_one(keys, episode):
    def check(s: WorldState, ctx: str) -> None:
        p_yes = yes_price(s.pm_yes, s.pm_no)
        p_no = s.pm_yes / (s.pm_yes + s.pm_no)
        bad = ~((p_yes > 0) & (p_yes < 1) & np.isfinite(p_yes))
        assert not bad.any(), f"{ctx}: YES price outside (0, 1) at (world, market) {np.argwhere(bad).tolist()}"
        assert np.allclose(p_yes + p_no, 1.0, rtol=0, atol=1e-12), f"{ctx}: YES + NO != 1"

    check(reset(PARAMS, keys), "after reset")
    run_episode(PARAMS, keys, episode, lambda t, before, batch, out, after: check(after, f"step {t}"))


pools_st = st.floats(1.0, 1e6)


@settings(max_examples=300, deadline=None)
@given(same=pools_st, other=pools_st, a1=st.floats(0.0, 1e6), a2=st.floats(0.0, 1e6))
def test_buying_more_usd_gives_more_shares_and_a_higher_price(same, other, a1, a2):
    lo, hi = sorted((a1, a2))
    s_lo, same_lo, other_lo = buy_shares(np.array(same), np.array(other), np.array(lo))
    s_hi, same_hi, other_hi = buy_shares(np.array(same), np.array(other), np.array(hi))
    ctx = f"pools same={same!r} other={other!r}, amounts {lo!r} <= {hi!r}"
    tol = 1e-12 * (same + other + hi)  # float rounding of k / (other + amount)
    assert s_lo >= -tol, f"{ctx}: negative shares {s_lo!r}"
    assert s_hi >= s_lo - tol, f"{ctx}: more USD gave fewer shares ({s_hi!r} < {s_lo!r})"
    # The bought side's price (its pool is `same`; price of a side = other / (same + other)).
    p0 = other / (same + other)
    p_lo, p_hi = other_lo / (same_lo + other_lo), other_hi / (same_hi + other_hi)
    assert p0 - 1e-12 <= p_lo <= p_hi + 1e-12, f"{ctx}: price not monotone {p0!r}, {p_lo!r}, {p_hi!r}"
    if hi > 1e-6 * (same + other):
        assert p_hi > p0, f"{ctx}: a real buy did not raise the price ({p0!r} -> {p_hi!r})"
        assert s_hi > 0, f"{ctx}: a real buy gave no shares"
    assert np.isclose(same_hi * other_hi, same * other, rtol=1e-9), f"{ctx}: CPMM invariant k not preserved"


@settings(max_examples=300, deadline=None)
@given(same=pools_st, other=pools_st, usd=st.floats(0.0, 1e6))
def test_selling_the_shares_just_bought_returns_no_more_than_was_paid(same, other, usd):
    shares, new_same, new_other = buy_shares(np.array(same), np.array(other), np.array(usd))
    back, fin_same, fin_other = sell_proceeds(new_same, new_other, shares)
    ctx = f"pools same={same!r} other={other!r}, usd {usd!r}, shares {shares!r}"
    # Exactly `usd` in real arithmetic; in floats the error grows with usd / pool (~1e-11 relative at
    # 1e5 x the pool), far below any fee, so "no free money" is checked up to 1e-9 relative.
    assert back <= usd * (1 + 1e-9) + 1e-9, f"{ctx}: round trip made money ({back!r} > {usd!r})"
    assert np.isclose(back, usd, rtol=1e-7, atol=1e-7), (
        f"{ctx}: a fee-less round trip should return {usd!r}, got {back!r}")
    assert fin_same > 0 and fin_other > 0, f"{ctx}: pool emptied"
    # With fees taken by the engine on both legs the round trip strictly loses.
    fee_in = max(PARAMS.fee_rate * usd, PARAMS.min_fee)
    net = max(usd - fee_in, 0.0)
    s2, ns, no_ = buy_shares(np.array(same), np.array(other), np.array(net))
    gross = sell_proceeds(ns, no_, s2)[0]
    assert gross - max(PARAMS.fee_rate * gross, PARAMS.min_fee) < usd, f"{ctx}: round trip with fees made money"


@settings(max_examples=100, deadline=None)
@given(same=pools_st, other=pools_st)
def test_selling_zero_shares_gives_zero_and_leaves_the_pool(same, other):
    r, ns, no_ = sell_proceeds(np.array(same), np.array(other), np.array(0.0))
    assert r == 0.0 and ns == same and no_ == other, f"pools {same!r}/{other!r}: selling 0 gave {r!r}, {ns!r}, {no_!r}"
    s, ns, no_ = buy_shares(np.array(same), np.array(other), np.array(0.0))
    assert np.isclose(s, 0.0, atol=1e-9 * same), f"pools {same!r}/{other!r}: buying with 0 USD gave {s!r} shares"


# ---------------------------------------------------------------------------------------------
# 4. Resolution


@settings(max_examples=12, deadline=None)
@given(key=st.integers(0, 2**64 - 1), slot=st.integers(0, PARAMS.num_markets - 1),
       yes_usd=st.floats(1.0, 3000.0), no_usd=st.one_of(st.just(0.0), st.floats(1.0, 3000.0)))
def test_resolution_pays_exactly_one_usd_per_winning_share(key, slot, yes_usd, no_usd):
    params = PARAMS
    state = reset(params, np.array([key], np.uint64))
    out = step(state, one(ActionType.BUY_PREDICTION, slot, 0, yes_usd), params)
    assert out.success[0], f"key {key}: buying YES failed"
    if no_usd > 0:
        out = step(state, one(ActionType.BUY_PREDICTION, slot, 1, no_usd), params)
        assert out.success[0], f"key {key}: buying NO failed"
    resolve_tick = int(state.pm_resolve_tick[0, slot])
    serial, next_serial = int(state.pm_serial[0, slot]), int(state.next_serial[0])
    hy, hn = float(state.hold_yes[0, slot]), float(state.hold_no[0, slot])
    assert hy > 0 and (hn > 0) == (no_usd > 0)
    assert resolve_tick > int(state.tick[0]), f"key {key}: market in slot {slot} resolved before the test waited"
    cash = float(state.cash[0])
    while int(state.tick[0]) + 1 < resolve_tick:
        out = step(state, ActionBatch.waits(1), params)
        t = int(state.tick[0])
        assert state.cash[0] == cash, f"key {key}, tick {t}: cash moved while waiting ({state.cash[0]!r} != {cash!r})"
        assert state.hold_yes[0, slot] == hy and state.hold_no[0, slot] == hn, f"key {key}, tick {t}: holdings moved"
        assert int(state.pm_serial[0, slot]) == serial, f"key {key}, tick {t}: slot {slot} resolved early"
    yes_wins = int(state.pm_outcome[0, slot]) == 1
    out = step(state, ActionBatch.waits(1), params)
    ctx = f"key {key}, slot {slot}, resolving tick {resolve_tick} ({'YES' if yes_wins else 'NO'} wins, held {hy}/{hn})"
    assert int(state.tick[0]) == resolve_tick
    expected = hy if yes_wins else hn
    assert state.cash[0] == cash + expected, f"{ctx}: cash {state.cash[0]!r} != {cash!r} + {expected!r}"
    assert out.payout[0] == expected, f"{ctx}: outcome.payout {out.payout[0]!r} != {expected!r}"
    assert out.resolved[0] >= 1, f"{ctx}: resolved count {out.resolved[0]}"
    assert state.hold_yes[0, slot] == 0 and state.hold_no[0, slot] == 0, f"{ctx}: holdings not cleared"
    assert state.cost_yes[0, slot] == 0 and state.cost_no[0, slot] == 0, f"{ctx}: cost basis not cleared"
    assert int(state.pm_serial[0, slot]) != serial, f"{ctx}: slot did not reopen with a new serial"
    assert int(state.pm_serial[0, slot]) >= next_serial, f"{ctx}: new serial {state.pm_serial[0, slot]} reused"
    assert int(state.pm_open_tick[0, slot]) == resolve_tick, (
        f"{ctx}: reopened market has open tick {state.pm_open_tick[0, slot]}")
    assert int(state.pm_resolve_tick[0, slot]) > resolve_tick, f"{ctx}: reopened market already due"
    assert_complete_sets(state, ctx)


# ---------------------------------------------------------------------------------------------
# 5. Liquidation


@settings(max_examples=25, deadline=None)
@given(key=st.integers(0, 2**64 - 1), ticker=st.integers(0, PARAMS.num_perps - 1), side=st.integers(0, 1),
       lev=st.floats(2.0, PARAMS.max_leverage), use=st.floats(0.01, 0.99), past=st.floats(0.05, 0.5))
def test_liquidation_removes_the_position_and_loses_the_margin(key, ticker, side, lev, use, past):
    params = PARAMS
    state = reset(params, np.array([key], np.uint64))
    cash_open = float(state.cash[0])
    size = use * cash_open * lev / (1.0 + params.fee_rate * lev)  # margin + fee = `use` of the cash
    out = step(state, one(ActionType.OPEN_PERP, ticker, side, size, lev), params)
    ctx = f"key {key}, ticker {ticker}, {'long' if side == 0 else 'short'} {size!r} at {lev!r}x"
    assert out.success[0], f"{ctx}: open failed: {error_message(out.error[0], out.error_a[0], out.error_b[0])}"
    assert state.pos_side[0, ticker] == (1 if side == 0 else -1)
    assert math.isclose(state.cash[0], cash_open - size / lev - fee_of(params, size), rel_tol=1e-12, abs_tol=1e-8)
    # The next tick must neither pay funding nor resolve a market, so the house's books isolate the liquidation.
    now = int(state.tick[0]) + 1
    assert now % params.funding_interval != 0 and (state.pm_resolve_tick[0] > now).all()
    entry, margin = float(state.pos_entry[0, ticker]), float(state.pos_margin[0, ticker])
    sign = 1.0 if side == 0 else -1.0  # long: below entry * (1 - 0.9/lev); short: above entry * (1 + 0.9/lev)
    forced = entry * (1.0 - sign * 0.9 / lev) * (1.0 - sign * past)
    kept = state.copy()  # the same world, price not forced
    state.perp_price[0, ticker] = forced
    before = state.copy()
    out = step(state, ActionBatch.waits(1), params)
    ctx += f", forced price {forced!r} (entry {entry!r})"
    assert state.pos_side[0, ticker] == 0, f"{ctx}: position survived"
    assert state.pos_margin[0, ticker] == 0 and state.pos_notional[0, ticker] == 0, f"{ctx}: position not cleared"
    assert out.liquidated[0] == 1, f"{ctx}: liquidated count {out.liquidated[0]}"
    assert state.cash[0] == before.cash[0], f"{ctx}: liquidation moved cash {before.cash[0]!r} -> {state.cash[0]!r}"
    assert state.fees_paid[0] == before.fees_paid[0], f"{ctx}: liquidation charged a fee"
    assert math.isclose(state.house_cash[0] - before.house_cash[0], margin, rel_tol=1e-9), (
        f"{ctx}: house got {state.house_cash[0] - before.house_cash[0]!r}, the margin was {margin!r}")
    assert math.isclose(state.realized_pnl[0] - before.realized_pnl[0], -margin, rel_tol=1e-9), (
        f"{ctx}: realized pnl change {state.realized_pnl[0] - before.realized_pnl[0]!r} != -margin")
    assert math.isclose(equity(state, params)[0], state.cash[0], rel_tol=1e-12), f"{ctx}: equity is not just the cash"
    # Against the unforced copy: the liquidated world is poorer by what the position was worth.
    out_kept = step(kept, ActionBatch.waits(1), params)
    assert kept.pos_side[0, ticker] != 0 and out_kept.liquidated[0] == 0, f"{ctx}: unforced copy was liquidated too"
    worth = float(kept.pos_margin[0, ticker] + unrealized_pnl(kept)[0, ticker])
    assert math.isclose(equity(kept, params)[0] - equity(state, params)[0], worth, rel_tol=1e-9, abs_tol=1e-6), (
        f"{ctx}: equity gap {equity(kept, params)[0] - equity(state, params)[0]!r} != position worth {worth!r}")
    assert 0 < worth < 2 * margin, f"{ctx}: unforced position worth {worth!r} vs margin {margin!r}"
    assert math.isclose(total_money(state)[0], total_money(before)[0], rel_tol=1e-12)


# ---------------------------------------------------------------------------------------------
# 6. Bankruptcy


@settings(max_examples=12, deadline=None)
@given(key=st.integers(0, 2**64 - 1))
def test_all_in_on_the_losing_side_ends_in_bankruptcy(key):
    params = PARAMS
    state = reset(params, np.array([key], np.uint64))
    slot = int(np.argmin(state.pm_resolve_tick[0]))
    resolve_tick = int(state.pm_resolve_tick[0, slot])
    losing_side = int(state.pm_outcome[0, slot])  # outcome 1 (YES wins) -> side 1 (NO) loses, and vice versa
    out = step(state, one(ActionType.BUY_PREDICTION, slot, losing_side, float(state.cash[0])), params)
    ctx = f"key {key}, slot {slot} resolves at {resolve_tick}, bought side {losing_side}"
    assert out.success[0], f"{ctx}: all-in buy failed: {error_message(out.error[0], out.error_a[0], out.error_b[0])}"
    assert state.cash[0] == 0.0, f"{ctx}: cash left {state.cash[0]!r}"
    while True:
        t = int(state.tick[0])
        assert out.bankrupt[0] == (equity(state, params)[0] < params.min_fee), f"{ctx}, tick {t}: bankrupt vs equity"
        if t >= resolve_tick:
            break
        assert not out.bankrupt[0], f"{ctx}, tick {t}: bankrupt while holding shares worth {share_value(state)[0]!r}"
        out = step(state, ActionBatch.waits(1), params)
    assert out.bankrupt[0], f"{ctx}: not bankrupt after losing everything (equity {equity(state, params)[0]!r})"
    assert out.payout[0] == 0.0, f"{ctx}: losing side paid {out.payout[0]!r}"
    assert equity(state, params)[0] < params.min_fee, f"{ctx}: equity {equity(state, params)[0]!r}"
    out = step(state, ActionBatch.waits(1), params)
    assert out.bankrupt[0], f"{ctx}: bankruptcy did not persist"


@EPISODE
@given(keys=keys_st(B_WORLDS), episode=episode_st(B_WORLDS, T_STEPS))
def test_a_world_with_money_is_never_flagged_bankrupt(keys, episode):
    def on_step(t, before, batch, out, after):
        eq = equity(after, PARAMS)
        for b in range(len(keys)):
            ctx = f"step {t}, world {b} (key {keys[b]}): cash {after.cash[b]!r}, equity {eq[b]!r}"
            assert bool(out.bankrupt[b]) == bool(eq[b] < PARAMS.min_fee), f"{ctx}: bankrupt flag disagrees with equity"
            if after.cash[b] >= PARAMS.min_fee:
                assert not out.bankrupt[b], f"{ctx}: flagged bankrupt while holding cash"

    run_episode(PARAMS, keys, episode, on_step)


def test_an_underwater_perp_does_not_bankrupt_a_world_that_still_holds_cash():
    """A perp position is worth max(margin + pnl - fee, 0) to the agent (closing never costs more than the
    margin; liquidation takes only the margin), so a world holding cash must not be flagged bankrupt.

    Found by a batch search: with funding every tick (a valid `funding_interval=1`), funding erodes a 10x
    position's margin until margin + unrealized PnL < 0 while the price is still short of the liquidation
    price. `equity()` then counts that negative value in full, and `bankrupt` fires with $200 in cash.
    """
    params = WorldParams(funding_interval=1)
    worlds = [(287, 0, 2), (838, 1, 1), (5721, 0, 1)]  # (key, side 0 long / 1 short, ticker)
    keys = np.array([w[0] for w in worlds], np.uint64)
    n = len(worlds)
    s = reset(params, keys)
    lev = 10.0
    notional = (s.cash - 200.0) * lev / (1.0 + params.fee_rate * lev)  # keep $200 in cash
    out = step(s, make_batch([ActionType.OPEN_PERP] * n, [w[2] for w in worlds], [w[1] for w in worlds],
                             notional, [lev] * n), params)
    assert out.success.all(), f"opening failed: {out.error}"
    for _ in range(60):
        out = step(s, ActionBatch.waits(n), params)
        for b, (key, side, ticker) in enumerate(worlds):
            if s.cash[b] >= params.min_fee and out.bankrupt[b]:
                margin, pnl = float(s.pos_margin[b, ticker]), float(unrealized_pnl(s)[b, ticker])
                close_fee = fee_of(params, float(s.pos_notional[b, ticker] * s.perp_price[b, ticker]
                                                 / s.pos_entry[b, ticker]))
                raise AssertionError(
                    f"tick {int(s.tick[b])}, world {b} (key {key}, {'long' if side == 0 else 'short'} ticker {ticker} "
                    f"at {lev}x, funding_interval=1): flagged bankrupt with cash {s.cash[b]:.2f}; equity "
                    f"{equity(s, params)[b]:.2f} counts the position at margin {margin:.2f} + pnl {pnl:.2f} = "
                    f"{margin + pnl:.2f}, but closing it would pay max({margin + pnl - close_fee:.2f}, 0) = "
                    f"{max(margin + pnl - close_fee, 0.0):.2f}")


# ---------------------------------------------------------------------------------------------
# 7. Failed actions change nothing


def _failure_cases(s: WorldState, params: WorldParams):
    """(name, batch, expected error) for a prepared one-world state: YES shares in slot 0, a long on
    perp 0, member of group 0, nothing else."""
    A = ActionType
    E = ErrorCode
    cash = float(s.cash[0])
    held = float(s.hold_yes[0, 0])
    m, p, g, k = params.num_markets, params.num_perps, params.num_groups, params.num_npcs
    return [
        ("buy more than cash", one(A.BUY_PREDICTION, 1, 0, cash + 1.0), E.INSUFFICIENT_CASH),
        ("buy a huge amount", one(A.BUY_PREDICTION, 1, 1, 1e300), E.INSUFFICIENT_CASH),
        ("buy NaN", one(A.BUY_PREDICTION, 1, 0, NAN), E.NOT_A_NUMBER),
        ("buy inf", one(A.BUY_PREDICTION, 1, 0, INF), E.NOT_A_NUMBER),
        ("buy zero", one(A.BUY_PREDICTION, 1, 0, 0.0), E.NOT_A_NUMBER),
        ("buy negative", one(A.BUY_PREDICTION, 1, 0, -50.0), E.NOT_A_NUMBER),
        ("buy below min order", one(A.BUY_PREDICTION, 1, 0, params.min_order / 2), E.BELOW_MIN_ORDER),
        ("buy slot -1", one(A.BUY_PREDICTION, -1, 0, 10.0), E.UNKNOWN_MARKET),
        ("buy slot M", one(A.BUY_PREDICTION, m, 0, 10.0), E.UNKNOWN_MARKET),
        ("buy slot 2**40", one(A.BUY_PREDICTION, 2**40, 0, 10.0), E.UNKNOWN_MARKET),
        ("sell shares never held", one(A.SELL_PREDICTION, 1, 0, 10.0), E.NO_SHARES),
        ("sell the side not held", one(A.SELL_PREDICTION, 0, 1, 10.0), E.NO_SHARES),
        ("sell more than held", one(A.SELL_PREDICTION, 0, 0, held * 2), E.INSUFFICIENT_SHARES),
        ("sell NaN shares", one(A.SELL_PREDICTION, 0, 0, NAN), E.NOT_A_NUMBER),
        ("sell negative shares", one(A.SELL_PREDICTION, 0, 0, -held), E.NOT_A_NUMBER),
        ("sell dust below the fee", one(A.SELL_PREDICTION, 0, 0, 1e-4), E.PROCEEDS_BELOW_FEE),
        ("sell unknown slot", one(A.SELL_PREDICTION, m + 3, 0, 1.0), E.UNKNOWN_MARKET),
        ("open above leverage cap", one(A.OPEN_PERP, 1, 0, 100.0, params.max_leverage + 0.5), E.LEVERAGE_ABOVE_CAP),
        ("open at 1e6x", one(A.OPEN_PERP, 1, 1, 100.0, 1e6), E.LEVERAGE_ABOVE_CAP),
        ("open below 1x", one(A.OPEN_PERP, 1, 0, 100.0, 0.5), E.LEVERAGE_BELOW_ONE),
        ("open negative leverage", one(A.OPEN_PERP, 1, 0, 100.0, -3.0), E.LEVERAGE_BELOW_ONE),
        ("open NaN leverage", one(A.OPEN_PERP, 1, 0, 100.0, NAN), E.NOT_A_NUMBER),
        ("open NaN size", one(A.OPEN_PERP, 1, 0, NAN, 2.0), E.NOT_A_NUMBER),
        ("open below min order", one(A.OPEN_PERP, 1, 0, params.min_order / 2, 2.0), E.BELOW_MIN_ORDER),
        ("open unknown ticker", one(A.OPEN_PERP, p, 0, 100.0, 2.0), E.UNKNOWN_TICKER),
        ("open on an open ticker", one(A.OPEN_PERP, 0, 1, 100.0, 2.0), E.POSITION_EXISTS),
        ("open without margin", one(A.OPEN_PERP, 1, 0, cash * 5, 1.0), E.INSUFFICIENT_MARGIN),
        ("close a position that does not exist", one(A.CLOSE_PERP, 1), E.NO_POSITION),
        ("close unknown ticker", one(A.CLOSE_PERP, -1), E.UNKNOWN_TICKER),
        ("join a joined group", one(A.JOIN_GROUP, 0), E.ALREADY_MEMBER),
        ("join unknown group", one(A.JOIN_GROUP, g), E.UNKNOWN_GROUP),
        ("dm unknown npc", one(A.SEND_DM, k), E.UNKNOWN_RECIPIENT),
        ("valid buy with a decode error", one(A.BUY_PREDICTION, 1, 0, 100.0, pre_error=E.MARKET_CLOSED),
         E.MARKET_CLOSED),
        ("valid open with a decode error", one(A.OPEN_PERP, 1, 0, 100.0, 2.0, pre_error=E.UNKNOWN_POSITION),
         E.UNKNOWN_POSITION),
        ("post with empty content", one(A.CREATE_POST, pre_error=E.EMPTY_CONTENT), E.EMPTY_CONTENT),
        ("join with a decode error", one(A.JOIN_GROUP, 1, pre_error=E.UNKNOWN_GROUP), E.UNKNOWN_GROUP),
    ]


@settings(max_examples=10, deadline=None)
@given(key=st.integers(0, 2**64 - 1), waits=st.integers(0, 5))
def test_a_failed_action_changes_nothing(key, waits):
    params = PARAMS
    s = reset(params, np.array([key], np.uint64))
    for prep in (one(ActionType.BUY_PREDICTION, 0, 0, 500.0), one(ActionType.OPEN_PERP, 0, 0, 1000.0, 2.0),
                 one(ActionType.JOIN_GROUP, 0)):
        assert step(s, prep, params).success[0], f"key {key}: preparation step failed"
    for _ in range(waits):
        step(s, ActionBatch.waits(1), params)
    assert s.hold_yes[0, 0] > 0 and s.pos_side[0, 0] == 1 and s.joined[0, 0], f"key {key}: preparation lost"
    for name, batch, expected in _failure_cases(s, params):
        ctx = f"key {key}, tick {int(s.tick[0])}, case '{name}'"
        failed, waited = s.copy(), s.copy()
        out_f = step(failed, batch, params)
        out_w = step(waited, ActionBatch.waits(1), params)
        assert not out_f.success[0], f"{ctx}: the action succeeded"
        assert out_f.error[0] != ErrorCode.OK, f"{ctx}: no error code"
        assert out_f.error[0] == expected, (
            f"{ctx}: error {ErrorCode(int(out_f.error[0])).name}, expected {expected.name}")
        msg = error_message(out_f.error[0], out_f.error_a[0], out_f.error_b[0])
        assert isinstance(msg, str) and msg.strip(), f"{ctx}: empty error message"
        assert not out_f.added_exposure[0], f"{ctx}: a failed action reported added exposure"
        assert_states_equal(failed, waited, ctx)
        assert_outcomes_equal(out_f, out_w, ctx, skip=("success", "error", "error_a", "error_b", "leverage_requested"))


# ---------------------------------------------------------------------------------------------
# 8. Determinism and batch independence


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=keys_st(5), episode=episode_st(5, 25), pick=st.integers(0, 4))
def test_same_keys_and_actions_give_identical_worlds_whatever_the_batch(keys, episode, pick):
    params = PARAMS
    a, b = reset(params, keys), reset(params, keys)
    solo = reset(params, keys[[pick]])
    assert_states_equal(a, b, "after reset")
    assert_states_equal(a.take([pick]), solo, f"after reset, world {pick} alone vs in the batch")
    for t, row in enumerate(episode):
        batch_a, batch_b = encode_row(a, params, row), encode_row(b, params, row)
        batch_solo = encode_row(solo, params, [row[pick]])
        out_a, out_b = step(a, batch_a, params), step(b, batch_b, params)
        out_solo = step(solo, batch_solo, params)
        assert_states_equal(a, b, f"step {t}, same batch run twice")
        assert_outcomes_equal(out_a, out_b, f"step {t}, same batch run twice")
        assert_states_equal(a.take([pick]), solo, f"step {t}, world {pick} (key {keys[pick]}) alone vs in a batch of 5")
        assert_outcomes_equal(outcome_take(out_a, pick), out_solo, f"step {t}, world {pick} alone vs in a batch of 5")


# ---------------------------------------------------------------------------------------------
# Bonus: an action succeeds exactly when its documented preconditions hold


@EPISODE
@given(keys=keys_st(B_WORLDS), episode=episode_st(B_WORLDS, T_STEPS))
def test_an_action_succeeds_exactly_when_its_preconditions_hold(keys, episode):
    params = PARAMS
    m, p = params.num_markets, params.num_perps

    def on_step(t, s, batch, out, after):
        for b in range(len(keys)):
            kind, tgt = int(batch.kind[b]), int(batch.target[b])
            amount, lev = float(batch.amount[b]), float(batch.leverage[b])
            yes = batch.side[b] == 0
            cash = float(s.cash[b])
            if kind == ActionType.BUY_PREDICTION:
                ok = 0 <= tgt < m and math.isfinite(amount) and amount >= params.min_order and amount <= cash
            elif kind == ActionType.SELL_PREDICTION:
                ok = 0 <= tgt < m
                if ok:
                    held = float(s.hold_yes[b, tgt] if yes else s.hold_no[b, tgt])
                    ok = held > 0 and math.isfinite(amount) and 0 < amount <= held * (1 + 1e-9) + 1e-12
                    if ok:
                        same = s.pm_yes[b, tgt] if yes else s.pm_no[b, tgt]
                        other = s.pm_no[b, tgt] if yes else s.pm_yes[b, tgt]
                        gross = float(sell_proceeds(np.array(same), np.array(other), np.array(min(amount, held)))[0])
                        ok = gross > fee_of(params, gross)
            elif kind == ActionType.OPEN_PERP:
                ok = (0 <= tgt < p and math.isfinite(amount) and math.isfinite(lev) and amount >= params.min_order
                      and 1.0 <= lev <= params.max_leverage and s.pos_side[b, tgt] == 0
                      and amount / lev + fee_of(params, amount) <= cash)
            elif kind == ActionType.CLOSE_PERP:
                ok = 0 <= tgt < p and s.pos_side[b, tgt] != 0
            elif kind == ActionType.JOIN_GROUP:
                ok = 0 <= tgt < params.num_groups and not s.joined[b, tgt]
            elif kind == ActionType.SEND_DM:
                ok = 0 <= tgt < params.num_npcs
            elif kind in (ActionType.WAIT, ActionType.CREATE_POST):
                ok = True
            else:  # a kind declared after these: its preconditions are its own test's
                continue
            ctx = (f"step {t}, world {b} (key {keys[b]}): kind {ActionType(kind).name}, target {tgt}, "
                   f"amount {amount!r}, leverage {lev!r}, cash {cash!r}")
            assert bool(out.success[b]) == ok, (
                f"{ctx}: success={bool(out.success[b])}, expected {ok} "
                f"({error_message(out.error[b], out.error_a[b], out.error_b[b])!r})")
            assert bool(out.added_exposure[b]) == (ok and kind in (ActionType.BUY_PREDICTION, ActionType.OPEN_PERP))

    run_episode(params, keys, episode, on_step)


# ---------------------------------------------------------------------------------------------
# 9. normalize_action


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"action": "buy_yes", "marketId": "market-3", "amount": 100},
         Action(type="buy_prediction", market="market-3", outcome="YES", amount=100.0)),
        ({"type": "buy_no", "market_id": "market-2", "usd": "1,250.5"},
         Action(type="buy_prediction", market="market-2", outcome="NO", amount=1250.5)),
        ({"type": "open_long", "ticker": "BTCAI", "size": 500},
         Action(type="open_perp", ticker="BTCAI", side="LONG", size=500.0, leverage=None)),
        ({"type": "short", "symbol": "ETHAI", "notional": 200, "lev": 3},
         Action(type="open_perp", ticker="ETHAI", side="SHORT", size=200.0, leverage=3.0)),
        ({"type": "buy", "market": "market-1", "side": "no", "amount": "50"},
         Action(type="buy_prediction", market="market-1", outcome="NO", amount=50.0)),
        ({"type": "Sell-Shares", "params": {"marketId": "market-4", "outcome": "y", "quantity": 7}},
         Action(type="sell_prediction", market="market-4", outcome="YES", shares=7.0)),
        ({"type": "hold"}, Action(type="wait")),
        ({"type": "noop"}, Action(type="wait")),
        ({"actionType": "close", "positionId": "pos-2"}, Action(type="close_perp", position_id="pos-2")),
        ({"type": "dm", "toUserId": "agent-3", "text": " hi "},
         Action(type="send_dm", recipient="agent-3", content="hi")),
        ({"type": "joinGroup", "groupId": "group-1"}, None),  # "joingroup" alias (case-folded)
    ],
)
def test_normalize_action_maps_legacy_aliases(raw, expected):
    got = normalize_action(raw)
    if expected is None:
        expected = Action(type="join_group", group="group-1")
    assert got == expected, f"normalize_action({raw!r}) = {got!r}, expected {expected!r}"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"type": "buy_prediction", "market": "market-1", "outcome": "YES"}, "amount"),
        ({"type": "buy_yes", "amount": 10}, "market"),
        ({"type": "buy", "market": "market-1", "amount": 10}, "outcome"),
        ({"type": "sell", "market": "market-1", "outcome": "NO"}, "shares"),
        ({"type": "open_perp", "ticker": "BTCAI", "size": 10}, "side"),
        ({"type": "open_long", "size": 10}, "ticker"),
        ({"type": "open_short", "ticker": "BTCAI"}, "size"),
        ({"type": "join_group"}, "group"),
        ({"type": "post"}, "content"),
        ({"type": "send_dm", "content": "hello"}, "recipient"),
        ({"type": "close_perp"}, "ticker"),
        ({"marketId": "market-1", "amount": 5}, "type"),
    ],
)
def test_normalize_action_names_the_missing_field(raw, field):
    with pytest.raises(InvalidActionError) as info:
        normalize_action(raw)
    assert field in str(info.value), f"normalize_action({raw!r}) raised {info.value!s} without naming {field!r}"


def test_normalize_action_unknown_type_lists_the_known_types():
    with pytest.raises(InvalidActionError) as info:
        normalize_action({"type": "teleport", "market": "market-1"})
    msg = str(info.value)
    assert "teleport" in msg, msg
    missing = [t for t in ACTION_TYPES if t not in msg]
    assert not missing, f"message {msg!r} does not list {missing}"


@pytest.mark.parametrize(
    "bad", [NAN, INF, -INF, "nan", "inf", "-Infinity", "1e400", 10**400, True, None, [1], {"x": 1}, "ten"]
)
def test_normalize_action_rejects_non_finite_or_non_numeric_amounts(bad):
    raw = {"type": "buy_yes", "market": "market-1", "amount": bad}
    with pytest.raises(InvalidActionError):
        normalize_action(raw)
    with pytest.raises(InvalidActionError):
        normalize_action({"type": "open_long", "ticker": "BTCAI", "size": bad})
    if bad is not None:  # leverage is optional: None means "not given"
        with pytest.raises(InvalidActionError):
            normalize_action({"type": "open_long", "ticker": "BTCAI", "size": 100, "leverage": bad})


_KNOWN_TYPES = [
    *ACTION_TYPES,
    "buy", "buy_shares", "buyShares", "predict", "bet", "buy_yes", "BUY-NO", "sell", "sell_shares", "open_long",
    "open short", "long", "short", "openPosition", "close_position", "close", "hold", "noop", "post", "dm",
    "direct_message", "send_message", "join_group_chat", "joingroup",
]
_GARBAGE_TYPES = ["", " ", "teleport", "BUY YES!", "0", "None", "wait\x00", "ÿ"]
_KEYS = ["type", "action", "market", "marketId", "outcome", "amount", "shares", "quantity", "usd", "ticker",
         "symbol", "side", "direction", "size", "notional", "leverage", "lev", "position_id", "positionId",
         "content", "text", "recipient", "toUserId", "group", "groupId", "params", "parameters", "data"]

json_st = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-(10**400), 10**400) | st.floats() | st.text(max_size=20)
    | st.sampled_from(["YES", "no", "LONG", "short", "market-1", "BTCAI", "group-0", "agent-1", "1e999", "$1,000",
                       " 12 ", "nan", "slot:2"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10) | st.sampled_from(_KEYS),
                                                                      children, max_size=4),
    max_leaves=12,
)


def _check_normalize(raw) -> None:
    try:
        got = normalize_action(raw)
    except InvalidActionError as exc:
        assert str(exc), f"normalize_action({raw!r}) raised an InvalidActionError without a message"
        return
    except Exception as exc:  # the property: nothing else escapes
        raise AssertionError(f"normalize_action({raw!r}) raised {type(exc).__name__}: {exc}") from exc
    assert isinstance(got, Action), f"normalize_action({raw!r}) returned {got!r}"
    assert got.type in ACTION_TYPES, f"normalize_action({raw!r}) returned unknown type {got.type!r}"
    for name in ("amount", "shares", "size", "leverage"):
        v = getattr(got, name)
        assert v is None or (isinstance(v, float) and math.isfinite(v)), f"normalize_action({raw!r}).{name} = {v!r}"
    if got.outcome is not None:
        assert got.outcome in ("YES", "NO"), f"normalize_action({raw!r}).outcome = {got.outcome!r}"
    if got.side is not None:
        assert got.side in ("LONG", "SHORT"), f"normalize_action({raw!r}).side = {got.side!r}"


@settings(max_examples=150, deadline=None)
@given(raw=st.dictionaries(st.text(max_size=12) | st.sampled_from(_KEYS), json_st, max_size=8))
def test_normalize_action_on_arbitrary_dicts_returns_an_action_or_raises_invalid_action(raw):
    _check_normalize(raw)


@settings(max_examples=250, deadline=None)
@given(kind=st.sampled_from(_KNOWN_TYPES + _GARBAGE_TYPES) | st.text(max_size=12),
       type_key=st.sampled_from(["type", "action", "action_type", "actionType"]),
       rest=st.dictionaries(st.sampled_from(_KEYS), json_st, max_size=8))
def test_normalize_action_on_typed_dicts_returns_an_action_or_raises_invalid_action(kind, type_key, rest):
    raw = dict(rest)
    raw[type_key] = kind
    _check_normalize(raw)


@pytest.mark.parametrize("raw", [None, [], "buy", 3, ("type", "wait")])
def test_normalize_action_rejects_non_mappings(raw):
    with pytest.raises(InvalidActionError):
        normalize_action(raw)
