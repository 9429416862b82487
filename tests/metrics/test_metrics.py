"""Every metric pinned on a small example computed by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlaif_gym.metrics import (
    TICKS_PER_YEAR,
    ClosedTrade,
    EpisodeLedger,
    Resolution,
    call_stats,
    calmar_ratio,
    component_stats,
    episode_metrics,
    equity_curve,
    format_rates,
    judge_score,
    max_drawdown,
    prediction_scores,
    profit_factor,
    rank_correlation,
    run_metrics,
    sharpe_ratio,
    sortino_ratio,
    tick_returns,
    to_jsonable,
    turnover,
    win_rate,
)
from rlaif_gym.trajectory import (
    Action,
    EnvironmentState,
    Feedback,
    LLMCall,
    LLMCallError,
    Trajectory,
    TrajectoryStep,
)


def _step(i: int, balance: float, delta: float, *, action: str = "wait", ok: bool = True, reward: float = 0.0,
          components: dict | None = None, format_errors: list | None = None, calls: list | None = None):
    return TrajectoryStep(
        step_number=i, timestamp=0, environment_state=EnvironmentState(agent_balance=balance, tick=i),
        action=Action(action_type=action, success=ok), feedback=Feedback(success=ok, pnl_delta=delta), reward=reward,
        reward_components=components or {}, format_errors=format_errors or [], llm_calls=calls or [],
    )


def _traj(balances_and_deltas, tid: str = "t", **kw) -> Trajectory:
    steps = [_step(i, b, d) for i, (b, d) in enumerate(balances_and_deltas)]
    return Trajectory(trajectory_id=tid, agent_id="a", steps=steps, **kw)


# ------------------------------------------------------------------------------ equity and ratios


def test_equity_curve_and_tick_returns():
    traj = _traj([(100.0, 10.0), (110.0, -11.0), (99.0, 9.9)])
    e = equity_curve(traj)
    np.testing.assert_allclose(e, [100.0, 110.0, 99.0, 108.9])
    # 110/100 - 1, 99/110 - 1, 108.9/99 - 1
    np.testing.assert_allclose(tick_returns(e), [0.1, -0.1, 0.1])


def test_equity_curve_without_feedback_uses_the_next_balance_and_the_final_balance():
    steps = [TrajectoryStep(step_number=i, timestamp=0, environment_state=EnvironmentState(agent_balance=b))
             for i, b in enumerate([100.0, 105.0])]
    traj = Trajectory(trajectory_id="t", agent_id="a", steps=steps, final_balance=95.0)
    np.testing.assert_allclose(equity_curve(traj), [100.0, 105.0, 95.0])


def test_sharpe_ratio_by_hand():
    r = np.array([0.1, -0.1, 0.1])
    # mean 1/30; sample std sqrt(((1/15)^2 * 2 + (2/15)^2) / 2) = sqrt(1/75); ratio sqrt(75)/30 = sqrt(3)/6
    assert sharpe_ratio(r, periods_per_year=1) == pytest.approx(math.sqrt(3) / 6)
    # annualised: x sqrt(8760) (one tick = one simulated hour)
    assert TICKS_PER_YEAR == 8760
    assert sharpe_ratio(r) == pytest.approx(math.sqrt(3) / 6 * math.sqrt(8760))


def test_sharpe_is_undefined_without_spread():
    assert math.isnan(sharpe_ratio(np.zeros(10)))
    assert math.isnan(sharpe_ratio(np.array([0.1])))


def test_sortino_ratio_by_hand():
    r = np.array([0.1, -0.1, 0.1])
    # downside deviation sqrt((0 + 0.01 + 0) / 3); (1/30) / sqrt(1/300) = sqrt(300)/30 = 1/sqrt(3)
    assert sortino_ratio(r, periods_per_year=1) == pytest.approx(1 / math.sqrt(3))
    assert sortino_ratio(r, periods_per_year=4) == pytest.approx(2 / math.sqrt(3))
    assert math.isnan(sortino_ratio(np.array([0.1, 0.2])))  # no losing tick


def test_max_drawdown_value_and_duration_by_hand():
    e = np.array([100.0, 120.0, 90.0, 95.0, 130.0, 117.0])
    dd = max_drawdown(e)
    # peaks 100 120 120 120 130 130; gaps 0 0 30 25 0 13; worst fraction 30/120 at index 2 from the peak at 1
    assert dd.max_fraction == pytest.approx(0.25)
    assert dd.max_usd == pytest.approx(30.0)
    assert (dd.peak_index, dd.trough_index) == (1, 2)
    # under water at indices 2, 3 (recovered at 4), then 5: the longest stretch is 2 ticks
    assert dd.duration_ticks == 2
    assert max_drawdown(np.array([100.0, 90.0, 95.0, 100.0])).duration_ticks == 2
    unrecovered = max_drawdown(np.array([100.0, 80.0, 90.0]))
    assert (unrecovered.max_fraction, unrecovered.duration_ticks) == (pytest.approx(0.2), 2)
    flat = max_drawdown(np.full(5, 100.0))
    assert (flat.max_fraction, flat.max_usd, flat.duration_ticks) == (0.0, 0.0, 0)


def test_calmar_ratio_by_hand():
    e = np.array([100.0, 120.0, 90.0, 95.0, 130.0, 117.0])
    r = tick_returns(e)
    expected_mean = (20 / 100 - 30 / 120 + 5 / 90 + 35 / 95 - 13 / 130) / 5
    assert calmar_ratio(r, max_drawdown(e), periods_per_year=1) == pytest.approx(expected_mean / 0.25)
    assert calmar_ratio(r, max_drawdown(e)) == pytest.approx(expected_mean * 8760 / 0.25)
    assert math.isnan(calmar_ratio(np.array([0.1, 0.1]), max_drawdown(np.array([1.0, 1.1, 1.21]))))


# ------------------------------------------------------------------------------ trades and ledger


def _trade(pnl: float) -> ClosedTrade:
    return ClosedTrade("market-1 YES", "prediction", 0, 1, 100.0, 100.0 + pnl, "sold")


def test_win_rate_and_profit_factor_by_hand():
    trades = [_trade(p) for p in (30.0, -10.0, 0.0, 20.0, -5.0)]
    assert win_rate(trades) == pytest.approx(2 / 5)  # break-even is not a win
    assert profit_factor(trades) == pytest.approx(50 / 15)
    assert profit_factor([_trade(5.0)]) == math.inf
    assert math.isnan(profit_factor([])) and math.isnan(win_rate([]))
    assert math.isnan(profit_factor([_trade(0.0)])) and win_rate([_trade(0.0)]) == 0.0


def test_closed_trade_pnl_is_proceeds_minus_cost():
    assert ClosedTrade("BTCAI LONG", "perp", 3, 9, 501.0, 0.0, "liquidated").pnl_usd == -501.0


def test_turnover_by_hand():
    # 150 USD traded over a mean equity of (100 + 110 + 90 + 100) / 4 = 100
    assert turnover(np.array([100.0, 0.0, 50.0]), np.array([100.0, 110.0, 90.0, 100.0])) == pytest.approx(1.5)
    assert math.isnan(turnover(np.array([1.0]), np.array([0.0, 0.0])))


def test_prediction_accuracy_and_brier_by_hand():
    res = [
        Resolution("market-1", 5, outcome=1, truth=0.7, price=0.6, yes_shares=10.0, no_shares=0.0),  # p 1, right
        Resolution("market-2", 6, outcome=0, truth=0.2, price=0.4, yes_shares=30.0, no_shares=10.0),  # p .75, wrong
        Resolution("market-3", 7, outcome=0, truth=0.5, price=0.5, yes_shares=0.0, no_shares=5.0),  # p 0, right
        Resolution("market-4", 7, outcome=1, truth=0.9, price=0.9, yes_shares=0.0, no_shares=0.0),  # not held
    ]
    s = prediction_scores(res)
    assert s.count == 3
    assert s.accuracy == pytest.approx(2 / 3)
    assert s.brier == pytest.approx((0.0 + 0.75**2 + 0.0) / 3)
    assert s.market_brier == pytest.approx((0.4**2 + 0.4**2 + 0.5**2) / 3)
    assert s.truth_brier == pytest.approx((0.3**2 + 0.2**2 + 0.5**2) / 3)
    hedge = prediction_scores([Resolution("market-5", 1, 1, 0.5, 0.5, 5.0, 5.0)])
    assert hedge.accuracy == 0.0 and hedge.brier == pytest.approx(0.25)  # an exact hedge is no call
    assert prediction_scores([]).count == 0 and math.isnan(prediction_scores([]).accuracy)


# ------------------------------------------------------------------------------ LLM-side metrics


def test_format_rates_by_hand():
    steps = [
        _step(0, 100.0, 0.0, action="wait"),
        _step(1, 100.0, 0.0, action="buy_prediction", ok=False, format_errors=["legacy layout; ..."]),
        _step(2, 100.0, 0.0, action="invalid", ok=False, format_errors=["no action found; ..."]),
    ]
    traj = Trajectory(trajectory_id="t", agent_id="a", steps=steps)
    valid, clean = format_rates(traj)
    assert valid == pytest.approx(2 / 3)  # a failed trade is still a valid reply
    assert clean == pytest.approx(1 / 3)


def test_component_stats_by_hand():
    steps = [_step(0, 100.0, 0.0, components={"pnl": 0.2, "format": 1.0}),
             _step(1, 100.0, 0.0, components={"pnl": -0.4, "format": -1.0})]
    traj = Trajectory(trajectory_id="t", agent_id="a", steps=steps, reward_weights={"pnl": 0.5, "format": 0.25})
    stats = component_stats([traj])
    assert list(stats) == ["format", "pnl"]
    pnl = stats["pnl"]
    assert (pnl.count, pnl.mean, pnl.std, pnl.min, pnl.max, pnl.weight) == (
        2, pytest.approx(-0.1), pytest.approx(0.3), -0.4, 0.2, 0.5)
    assert stats["format"].mean == 0.0 and stats["format"].weight == 0.25


def test_call_stats_latency_and_tokens_by_hand():
    calls = [LLMCall(model="m", latency_ms=lat, prompt_tokens=pt, completion_tokens=ct, total_tokens=tt)
             for lat, pt, ct, tt in ((10.0, 100, 20, 120), (20.0, 200, 40, 240), (30.0, None, None, None))]
    failed = LLMCall(model="m", latency_ms=40.0, error=LLMCallError(type="timeout", message="slow"))
    steps = [_step(i, 100.0, 0.0, calls=[c]) for i, c in enumerate(calls)]
    traj = Trajectory(trajectory_id="t", agent_id="a", steps=steps, failed_calls=[failed])
    s = call_stats([traj])
    assert (s.calls, s.failed) == (4, 1)
    assert s.latency_mean_ms == pytest.approx(25.0)
    assert s.latency_p50_ms == pytest.approx(25.0)  # between 20 and 30
    assert s.latency_p95_ms == pytest.approx(38.5)  # position 0.95 * 3 = 2.85: 30 + 0.85 * 10
    assert s.latency_max_ms == 40.0
    assert (s.prompt_tokens_mean, s.completion_tokens_mean, s.total_tokens_mean) == (150.0, 30.0, 180.0)


def test_judge_score_prefers_the_trajectory_judge_then_the_rule_judge():
    steps = [_step(0, 100.0, 0.0, components={"reasoning": 0.5}), _step(1, 100.0, 0.0, components={"reasoning": 1.0})]
    judged = Trajectory(trajectory_id="t", agent_id="a", steps=steps,
                        judge_scores={"ruler": 0.75, "explanation": "a text, not a score"})
    assert judge_score(judged) == (0.75, "judge_scores.ruler")
    llm = Trajectory(trajectory_id="t", agent_id="a", steps=steps, judge_scores={
        "ruler": 0.75, "llm_listwise": {"score": None, "missing": "parse failure"}, "llm_pairwise": {"score": 0.25}})
    assert judge_score(llm) == (0.25, "judge_scores.llm_pairwise")  # the LLM judge first; a missing score skipped
    rule = Trajectory(trajectory_id="t", agent_id="a", steps=steps)
    assert judge_score(rule) == (pytest.approx(0.75), "rule judge: mean reasoning component")
    score, source = judge_score(Trajectory(trajectory_id="t", agent_id="a"))
    assert math.isnan(score) and source == "none"


def test_rank_correlation_by_hand():
    # ranks of y: 1 2 4 3; Spearman = 1 - 6 * (0 + 0 + 1 + 1) / (4 * 15) = 0.8
    assert rank_correlation([1, 2, 3, 4], [10, 20, 40, 30]) == pytest.approx(0.8)
    # ties share the average rank: x ranks 1.5 1.5 3 against 1 2 3 -> 1.5 / sqrt(1.5 * 2)
    assert rank_correlation([1, 1, 2], [1, 2, 3]) == pytest.approx(1.5 / math.sqrt(3.0))
    assert math.isnan(rank_correlation([1, 2], [3, 4]))
    assert math.isnan(rank_correlation([1, 1, 1], [1, 2, 3]))


# ------------------------------------------------------------------------------ per episode, per run


def _ledger(trades, fees, traded, resolutions=()) -> EpisodeLedger:
    n = len(fees)
    return EpisodeLedger(np.array(fees), np.array(traded), np.zeros(n), tuple(trades), 1, tuple(resolutions),
                         np.ones((n + 1, 3)))


def test_episode_metrics_combine_the_record_and_the_ledger():
    traj = _traj([(100.0, 10.0), (110.0, -11.0), (99.0, 9.9)], seed=3)
    m = episode_metrics(traj)
    assert (m.pnl, m.pnl_ratio, m.ticks, m.seed) == (pytest.approx(8.9), pytest.approx(0.089), 3, 3)
    assert m.sharpe == pytest.approx(math.sqrt(3) / 6 * math.sqrt(8760))
    # 100 110 99 108.9: 11 below the peak of 110, and still under it at the end: 2 ticks
    assert m.max_drawdown == pytest.approx(0.1) and m.drawdown_ticks == 2
    assert m.trades is None and m.fees is None and m.predictions is None  # no ledger: not guessed
    led = _ledger([_trade(30.0), _trade(-10.0)], [1.0, 0.5, 0.0], [100.0, 50.0, 0.0],
                  [Resolution("market-1", 2, 1, 0.8, 0.6, 10.0, 0.0)])
    m = episode_metrics(traj, led)
    assert (m.trades, m.win_rate, m.profit_factor, m.open_at_end) == (2, 0.5, pytest.approx(3.0), 1)
    assert m.fees == pytest.approx(1.5)
    # 150 USD over a mean equity of (100 + 110 + 99 + 108.9) / 4
    assert m.turnover == pytest.approx(150.0 / ((100 + 110 + 99 + 108.9) / 4))
    assert m.predictions.accuracy == 1.0


def test_run_metrics_pool_trades_and_ticks_and_average_ratios():
    a = _traj([(100.0, 10.0), (110.0, -11.0), (99.0, 9.9)], tid="a")
    b = _traj([(100.0, -50.0)], tid="b", final_status="bankrupt")
    ledgers = {"a": _ledger([_trade(30.0), _trade(-10.0)], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
               "b": _ledger([_trade(-20.0)], [3.0], [10.0])}
    rm = run_metrics([a, b], ledgers, name="r")
    assert rm.episodes == 2 and rm.statuses == {"bankrupt": 1, "completed": 1}
    assert rm.mean_pnl == pytest.approx((8.9 - 50.0) / 2)
    assert rm.trades == 3
    assert rm.win_rate == pytest.approx(1 / 3)  # pooled: 1 win out of 3 trades
    assert rm.profit_factor == pytest.approx(30.0 / 30.0)
    assert rm.mean_fees == pytest.approx((1.0 + 3.0) / 2)
    assert rm.sharpe == pytest.approx(math.sqrt(3) / 6 * math.sqrt(8760))  # b has one return: undefined, left out
    assert rm.worst_max_drawdown == pytest.approx(0.5)
    d = rm.to_dict()
    assert d["episodes_detail"][1]["sharpe"] is None  # NaN -> null in JSON


def test_run_metrics_without_ledgers_leave_the_trading_metrics_out():
    rm = run_metrics([_traj([(100.0, 1.0)])], notes={"t": "no replay: why"})
    assert rm.trades is None and rm.win_rate is None and rm.predictions is None
    assert rm.ledger_episodes == 0 and rm.ledger_notes == ["no replay: why"]


def test_to_jsonable():
    assert to_jsonable({"a": math.nan, "b": [math.inf, -math.inf, np.float64(1.5)], "c": np.arange(2)}) == {
        "a": None, "b": ["inf", "-inf", 1.5], "c": [0, 1]}
