"""Tests of `rlaif_gym.babylon.rewards` (and `rewards.bradley_terry_scores`): every formula pinned by hand.

The formulas: docs/babylon.md ("The original's reward formulas", "The original's ranking helpers").
Each expected value is computed by hand in a comment next to the assertion. The fixes of the
original's defects (docs/babylon.md ("The original's defects", 7 and 9): bankruptcy -1, risk penalty
in both paths, explicit mode, token matching, tie-aware ranks, Bradley–Terry, unbiased normalizer)
are tested against what the original would have produced.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlaif_gym.babylon.rewards import (
    BANKRUPTCY_REWARD,
    RewardNormalizer,
    TrajectoryRewardInputs,
    action_quality_reward,
    calculate_pnl_reward,
    calculate_risk_reward,
    clip,
    composite_reward,
    efficiency_reward,
    is_bankrupt,
    pairwise_preferences_to_scores,
    pnl_reward,
    ranking_to_scores,
    relative_scores,
    risk_adjusted_reward,
)
from rlaif_gym.rewards import bradley_terry_scores

I = TrajectoryRewardInputs  # noqa: E741  (short alias for readability of the worked examples)


# ------------------------------------------------------------------------------------------------
# clip and inputs
# ------------------------------------------------------------------------------------------------


def test_clip():
    assert clip(0.3) == 0.3
    assert clip(2.0) == 1.0
    assert clip(-3.0) == -1.0
    assert clip(math.inf) == 1.0
    assert clip(-math.inf) == -1.0
    assert clip(0.7, 0.0, 0.5) == 0.5
    with pytest.raises(ValueError, match="NaN"):
        clip(math.nan)  # the original's max(-1, min(1, nan)) silently gave +1


def test_inputs_defaults_match_spec_5_1():
    x = I()
    assert (x.final_pnl, x.starting_balance, x.end_balance, x.pnl_variance, x.max_drawdown) == (
        0,
        10_000,
        10_000,
        0,
        0,
    )
    assert (x.max_exposure, x.risky_actions_count, x.format_score, x.reasoning_score) == (0, 0, 0, 0)
    assert (x.num_steps, x.trades_executed, x.successful_trades, x.total_actions, x.successful_actions) == (
        0,
        0,
        0,
        0,
        0,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"final_pnl": math.nan},
        {"end_balance": math.inf},
        {"risky_actions_count": -1},
        {"total_actions": 1.5},
        {"total_actions": 1, "successful_actions": 2},
        {"trades_executed": 0, "successful_trades": 1},
    ],
)
def test_inputs_reject_invalid_values(kwargs):
    with pytest.raises(ValueError):
        I(**kwargs)


def test_inputs_are_frozen():
    with pytest.raises(AttributeError):
        I().final_pnl = 1.0  # type: ignore[misc]


def test_inputs_accept_numpy_numbers():
    x = I(final_pnl=np.float64(5.0), total_actions=np.int64(2), successful_actions=np.int64(1))
    assert action_quality_reward(x) == 0.5


# ------------------------------------------------------------------------------------------------
# Primitive rewards
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (10_000, 11_000, 1.0),  # 10 * 1000/10000 = 1.0: a 10% return saturates
        (10_000, 10_050, 0.05),  # 10 * 50/10000 = 0.05
        (10_000, 9_900, -0.1),  # 10 * -100/10000 = -0.1
        (10_000, 12_000, 1.0),  # 10 * 0.2 = 2 -> clip 1
        (10_000, 5_000, -1.0),  # 10 * -0.5 = -5 -> clip -1
        (10_000, 0.0, -1.0),  # bankruptcy: -1 (the original returned -10)
        (10_000, -50.0, -1.0),  # bankruptcy
        (0.0, 100.0, 0.0),  # no meaningful return on a zero start
        (-10.0, 100.0, 0.0),
    ],
)
def test_calculate_pnl_reward(start, end, expected):
    assert calculate_pnl_reward(start, end) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("exposure", "action", "expected"),
    [
        (0.9, "buy", -0.5),
        (0.9, "buy_prediction", -0.5),
        (0.9, "open_perp", -0.5),
        (0.9, "open_long", -0.5),
        (0.9, "buy_yes", -0.5),
        (0.9, "BUY", -0.5),
        (0.9, "openPerp", -0.5),  # camelCase humps are token boundaries
        (0.9, "go-long", -0.5),
        (0.81, "buy", -0.5),
        (0.9, "buyer_info", 0.0),  # substring match in the original: -0.5
        (0.9, "belong", 0.0),  # substring match in the original: -0.5
        (0.9, "reopen", 0.0),
        (0.9, "sell", 0.0),
        (0.9, "close_perp", 0.0),
        (0.9, "wait", 0.0),
        (0.9, "", 0.0),
        (0.9, None, 0.0),
        (0.8, "buy", 0.0),  # strictly above 80%
        (0.1, "buy", 0.0),
    ],
)
def test_calculate_risk_reward_tokens(exposure, action, expected):
    assert calculate_risk_reward(exposure, action) == expected


def test_calculate_risk_reward_rejects_nan():
    with pytest.raises(ValueError):
        calculate_risk_reward(math.nan, "buy")


def test_pnl_reward():
    assert pnl_reward(I(final_pnl=500)) == pytest.approx(0.05)  # 500/10000, no x10
    assert pnl_reward(I(final_pnl=20_000)) == 1.0  # 2 -> clip 1
    assert pnl_reward(I(final_pnl=500, starting_balance=0)) == 0.0


def test_risk_adjusted_reward():
    # b = 1000/10000 = 0.1; /sqrt(4) = 0.05; - 0.5*200/10000 = 0.05 - 0.01 = 0.04
    assert risk_adjusted_reward(I(final_pnl=1000, pnl_variance=4, max_drawdown=200)) == pytest.approx(0.04)
    # no variance: b = 0.1; - 0.5*5000/10000 = 0.1 - 0.25 = -0.15
    assert risk_adjusted_reward(I(final_pnl=1000, max_drawdown=5000)) == pytest.approx(-0.15)
    # variance only: 0.1 / sqrt(0.0001) = 0.1/0.01 = 10 -> clip 1
    assert risk_adjusted_reward(I(final_pnl=1000, pnl_variance=0.0001)) == 1.0
    # a zero start gives 0 and skips the drawdown division (the original divided by 0)
    assert risk_adjusted_reward(I(final_pnl=10, starting_balance=0, max_drawdown=5)) == 0.0


def test_efficiency_reward():
    # 0.1 / ln(1+3) = 0.1 / 1.3862944 = 0.0721348
    assert efficiency_reward(I(final_pnl=1000, total_actions=3)) == pytest.approx(0.1 / math.log(4))
    assert efficiency_reward(I(final_pnl=1000, total_actions=3)) == pytest.approx(0.0721348, abs=1e-7)
    assert efficiency_reward(I(final_pnl=1000)) == pytest.approx(0.1)  # no actions: pnl_reward


def test_action_quality_reward():
    assert action_quality_reward(I(total_actions=4, successful_actions=3)) == 0.75
    assert action_quality_reward(I()) == 0.5


# ------------------------------------------------------------------------------------------------
# composite_reward, and the per-tick worked examples (a) to (c)
# ------------------------------------------------------------------------------------------------


def test_worked_example_b_buy_with_profit_is_0_40():
    # worked example (b): pnl_delta=+100 on 10000 -> pnl_score = 10*100/10000 = 0.1;
    # (0.1*0.5 + 0.5*0.3 + 1.0*0.2) / 1.0 = 0.05 + 0.15 + 0.2 = 0.40
    x = I(
        final_pnl=100,
        starting_balance=10_000,
        end_balance=10_100,
        format_score=0.5,
        reasoning_score=1.0,
        total_actions=1,
        successful_actions=1,
    )
    assert composite_reward(x) == pytest.approx(0.40)


def test_worked_example_a_no_action():
    # worked example (a): fmt=-1, rsn = 0.5 + 0.2*0.1 = 0.52, pnl 0:
    # (0*0.5 - 1*0.3 + 0.52*0.2) / 1 = -0.3 + 0.104 = -0.196
    x = I(format_score=-1.0, reasoning_score=0.52)
    assert composite_reward(x) == pytest.approx(-0.196)


@pytest.mark.parametrize(
    "x",
    [
        I(final_pnl=-10_000, end_balance=0.0, format_score=0.5, reasoning_score=1.0),
        I(final_pnl=-10_000),  # end == start, so the end is start + final_pnl = 0
        I(final_pnl=-12_000, end_balance=-2_000),  # auto -> legacy path: still -1
    ],
)
def test_worked_example_c_bankruptcy_is_minus_one(x):
    # worked example (c): end balance <= 0 -> -1.0 (our fix; the original returned an unclipped -10)
    assert is_bankrupt(x)
    for mode in ("auto", "quality", "legacy"):
        assert composite_reward(x, mode=mode) == BANKRUPTCY_REWARD == -1.0


def test_risk_penalty_in_quality_path():
    # pnl_score = 0.1 - 0.5*1 = -0.4; (-0.4*0.5 + 0.5*0.3 + 1*0.2) = -0.2 + 0.15 + 0.2 = 0.15
    x = I(final_pnl=100, end_balance=10_100, format_score=0.5, reasoning_score=1.0, risky_actions_count=1)
    assert composite_reward(x) == pytest.approx(0.15)


def test_risk_penalty_in_legacy_path():
    # legacy with default weights (0.5, 0, 0, 0): pnl_reward = 500/10000 = 0.05.
    assert composite_reward(I(final_pnl=500)) == pytest.approx(0.05)
    # one risky action: (0.05 - 0.5) * 0.5 / 0.5 = -0.45 (the original ignored it: 0.05)
    assert composite_reward(I(final_pnl=500, risky_actions_count=1)) == pytest.approx(-0.45)


def test_legacy_default_weights_when_all_legacy_weights_are_zero():
    # pnl_reward = 0.1; risk_adjusted = 0.1/2 - 0.5*200/10000 = 0.04; efficiency = 0.1/ln 4 = 0.0721348;
    # action_quality = 2/3. 0.4*0.1 + 0.3*0.04 + 0.15*0.0721348 + 0.15*0.6666667
    #   = 0.04 + 0.012 + 0.0108202 + 0.1 = 0.1628202
    x = I(final_pnl=1000, pnl_variance=4, max_drawdown=200, total_actions=3, successful_actions=2)
    assert composite_reward(x, pnl_weight=0) == pytest.approx(0.1628202, abs=1e-7)
    # explicit legacy weights (0, 0, 0, 1): just the action quality 2/3
    assert composite_reward(x, pnl_weight=0, quality_weight=1) == pytest.approx(2 / 3)


def test_mode_selects_the_path_explicitly():
    x = I(final_pnl=100)  # fmt = rsn = 0
    # auto keeps the original rule: both zero -> legacy: pnl_reward = 0.01 (* 0.5 / 0.5)
    assert composite_reward(x) == pytest.approx(0.01)
    assert composite_reward(x, mode="legacy") == pytest.approx(0.01)
    # quality: pnl_score = 10*100/10000 = 0.1; 0.1*0.5 / (0.5+0.3+0.2) = 0.05
    assert composite_reward(x, mode="quality") == pytest.approx(0.05)
    # legacy ignores format and reasoning even when they are non-zero: 0.01 again
    y = I(final_pnl=100, format_score=0.5, reasoning_score=1.0)
    assert composite_reward(y, mode="legacy") == pytest.approx(0.01)
    assert composite_reward(y, mode="auto") == composite_reward(y, mode="quality")


def test_composite_weights():
    x = I(final_pnl=100, format_score=0.5, reasoning_score=1.0)
    assert composite_reward(x, pnl_weight=0, format_weight=0, reasoning_weight=0) == 0.0
    # renormalised: (0.1*1 + 0.5*1) / 2 = 0.3
    assert composite_reward(x, pnl_weight=1, format_weight=1, reasoning_weight=0) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        composite_reward(x, pnl_weight=-0.1)
    with pytest.raises(ValueError):
        composite_reward(x, format_weight=math.nan)
    with pytest.raises(ValueError):
        composite_reward(x, mode="fancy")  # type: ignore[arg-type]


def test_composite_is_clipped():
    # pnl_score 1.0 (20% gain), fmt 5 (outside its documented range): 0.5 + 1.5 + 0.2 = 2.2 -> 1
    assert composite_reward(I(final_pnl=2000, format_score=5.0, reasoning_score=1.0)) == 1.0
    # 4 risky actions: pnl_score 0 - 2 = -2; -1 - 0.3 + 0 = -1.3 -> -1
    assert composite_reward(I(format_score=-1.0, reasoning_score=0.0, risky_actions_count=4)) == -1.0


finite = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def reward_inputs(draw):
    total = draw(st.integers(0, 10_000))
    trades = draw(st.integers(0, 10_000))
    return I(
        final_pnl=draw(finite),
        starting_balance=draw(finite),
        end_balance=draw(finite),
        pnl_variance=draw(finite),
        max_drawdown=draw(finite),
        max_exposure=draw(finite),
        risky_actions_count=draw(st.integers(0, 1000)),
        format_score=draw(finite),
        reasoning_score=draw(finite),
        num_steps=draw(st.integers(0, 10_000)),
        trades_executed=trades,
        successful_trades=draw(st.integers(0, trades)),
        total_actions=total,
        successful_actions=draw(st.integers(0, total)),
    )


weight = st.floats(0.0, 1e6)


@settings(max_examples=300, deadline=None)
@given(
    reward_inputs(), st.lists(weight, min_size=6, max_size=6), st.sampled_from(["auto", "quality", "legacy"])
)
def test_composite_always_in_unit_interval(x, w, mode):
    r = composite_reward(x, *w, mode=mode)
    assert -1.0 <= r <= 1.0
    assert not math.isnan(r)


# ------------------------------------------------------------------------------------------------
# Ranking helpers
# ------------------------------------------------------------------------------------------------


def test_relative_scores_distinct():
    # sorted order 1 < 2 < 3 -> ranks (2, 0, 1) / 2
    assert relative_scores([3.0, 1.0, 2.0]) == [1.0, 0.0, 0.5]


def test_relative_scores_ties_share_average_rank():
    # ranks 0, (1+2)/2, (1+2)/2, 3 over n-1 = 3 -> 0, 0.5, 0.5, 1 (the original gave 1/3 and 2/3)
    assert relative_scores([1.0, 2.0, 2.0, 3.0]) == pytest.approx([0.0, 0.5, 0.5, 1.0])
    # ties at the top: ranks 0, 1, (2+3)/2 = 2.5, 2.5 over 3 -> 0, 1/3, 5/6, 5/6
    assert relative_scores([0.0, 1.0, 4.0, 4.0]) == pytest.approx([0.0, 1 / 3, 5 / 6, 5 / 6])
    assert relative_scores([5.0, 5.0, 5.0]) == [0.5, 0.5, 0.5]


def test_relative_scores_small_groups_and_nan():
    assert relative_scores([7.0]) == [0.5]
    assert relative_scores([]) == []
    with pytest.raises(ValueError):
        relative_scores([1.0, math.nan])


@given(st.lists(st.floats(allow_nan=False), max_size=30))
def test_relative_scores_bounded_and_order_preserving(rewards):
    s = relative_scores(rewards)
    assert len(s) == len(rewards)
    assert all(0.0 <= v <= 1.0 for v in s)
    for i, ri in enumerate(rewards):
        for j, rj in enumerate(rewards):
            if ri < rj:
                assert s[i] < s[j]
            elif ri == rj:
                assert s[i] == s[j]


def test_ranking_to_scores():
    assert ranking_to_scores([1, 2, 3]) == [1.0, 0.5, 0.0]  # (3-r)/2
    assert ranking_to_scores([2, 1]) == [0.0, 1.0]
    assert ranking_to_scores([1, 1, 3]) == [1.0, 1.0, 0.0]
    assert ranking_to_scores([1]) == [0.5]
    with pytest.raises(ValueError):
        ranking_to_scores([0, 1])
    with pytest.raises(ValueError):
        ranking_to_scores([1, 3])


def test_pairwise_preferences_is_a_win_rate():
    # wins (2, 1, 0), comparisons (2, 2, 2)
    assert pairwise_preferences_to_scores(3, [(0, 1), (0, 2), (1, 2)]) == [1.0, 0.5, 0.0]
    assert pairwise_preferences_to_scores(3, [(0, 1)]) == [1.0, 0.0, 0.5]  # item 2 never compared
    assert pairwise_preferences_to_scores(2, [(0, 5)]) == [1.0, 0.5]  # out-of-range ignored per side
    assert pairwise_preferences_to_scores(2, []) == [0.5, 0.5]
    assert pairwise_preferences_to_scores(1, [(0, 0)]) == [0.5]


def test_bradley_terry_transitive_order():
    s = bradley_terry_scores(3, [(0, 1), (1, 2), (0, 2)])
    assert s[0] > s[1] > s[2]
    # the data are symmetric under i -> 2-i with wins<->losses, so s1 is average and s0 + s2 = 1
    assert s[1] == pytest.approx(0.5, abs=1e-8)
    assert s[0] + s[2] == pytest.approx(1.0, abs=1e-8)


def test_bradley_terry_accounts_for_opponent_strength():
    # 2 is strong (beats 3 six times); 3 is weak.
    # Item 0 goes 2-1 against strong 2 (win rate 2/3); item 1 goes 3-1 against weak 3 (win rate 3/4).
    prefs = [(0, 2), (0, 2), (2, 0), (1, 3), (1, 3), (1, 3), (3, 1)] + [(2, 3)] * 6
    win_rate = pairwise_preferences_to_scores(4, prefs)
    assert win_rate[1] > win_rate[0]  # 0.75 > 0.667: win rate prefers 1
    bt = bradley_terry_scores(4, prefs)
    assert bt[0] > bt[1]  # BT prefers 0, who did well against a strong opponent
    assert bt[0] > bt[2] > bt[3]


def test_bradley_terry_equal_win_rates_split_by_opponent():
    # 0 beat strong 2 once, 1 beat weak 3 once: both win rate 1.0, BT ranks 0 above 1
    prefs = [(0, 2), (1, 3)] + [(2, 3)] * 3
    assert pairwise_preferences_to_scores(4, prefs)[:2] == [1.0, 1.0]
    bt = bradley_terry_scores(4, prefs)
    assert bt[0] > bt[1]


def test_bradley_terry_is_the_map_estimate():
    # Two items, 0 beat 1 once, prior 0.5. By symmetry log p1 = -log p0, so the returned score is
    # s = p0/(p0+1) (beating the reference). The stationarity condition for item 0 is
    #   wins + prior = P(0 beats 1) + 2*prior*p0/(p0+1),   i.e.   1.5 = p0²/(p0²+1) + s
    s0, s1 = bradley_terry_scores(2, [(0, 1)], prior=0.5)
    p0 = s0 / (1 - s0)
    assert pytest.approx(p0**2 / (p0**2 + 1) + s0, abs=1e-9) == 1.5
    assert s0 + s1 == pytest.approx(1.0)


def test_bradley_terry_unbeaten_item_stays_finite_and_edge_cases():
    s = bradley_terry_scores(2, [(0, 1)] * 50, prior=0.01)
    assert 0.5 < s[0] < 1.0 and math.isfinite(s[0])
    assert bradley_terry_scores(3, []) == [0.5, 0.5, 0.5]
    assert bradley_terry_scores(1, [(0, 0)]) == [0.5]
    # a larger prior shrinks toward 0.5
    assert bradley_terry_scores(2, [(0, 1)], prior=5.0)[0] < bradley_terry_scores(2, [(0, 1)], prior=0.5)[0]
    with pytest.raises(ValueError):
        bradley_terry_scores(2, [(0, 2)])
    with pytest.raises(ValueError):
        bradley_terry_scores(2, [(1, 1)])
    with pytest.raises(ValueError):
        bradley_terry_scores(2, [(0, 1)], prior=0.0)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 6).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(
                st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1]),
                max_size=30,
            ),
        )
    )
)
def test_bradley_terry_scores_are_probabilities(case):
    n, prefs = case
    s = bradley_terry_scores(n, prefs)
    assert len(s) == n
    assert all(0.0 <= v <= 1.0 for v in s)


# ------------------------------------------------------------------------------------------------
# RewardNormalizer
# ------------------------------------------------------------------------------------------------


def test_normalizer_std_is_the_sample_std():
    norm = RewardNormalizer()
    norm.update_batch([1.0, 2.0, 3.0, 4.0])
    # mean 2.5; M2 = 2.25 + 0.25 + 0.25 + 2.25 = 5; var = 5/3; std = 1.2909944
    assert norm.mean == pytest.approx(2.5)
    assert norm.std == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert norm.std == pytest.approx(math.sqrt(5 / 3))
    # the original started M2 at 1: sqrt(6/3) = 1.414..., which is not the sample std
    assert norm.std != pytest.approx(math.sqrt(6 / 3))
    # (4 - 2.5) / sqrt(5/3 + 1e-8) = 1.1618950
    assert norm.normalize(4.0) == pytest.approx(1.5 / math.sqrt(5 / 3))
    assert norm.normalize_batch([2.5, 1.0]) == pytest.approx([0.0, -1.5 / math.sqrt(5 / 3)])
    assert norm.count == 4


def test_normalizer_identity_before_two_updates():
    norm = RewardNormalizer()
    assert norm.normalize(3.0) == 3.0
    norm.update(10.0)
    assert norm.normalize(3.0) == 3.0
    assert norm.mean == 10.0
    assert norm.std == 1.0


def test_normalizer_matches_numpy_on_a_stream():
    rng = np.random.default_rng(0)
    xs = rng.normal(3.0, 2.0, size=500)
    norm = RewardNormalizer()
    for x in xs:
        norm.update(x)
    assert norm.mean == pytest.approx(xs.mean())
    assert norm.std == pytest.approx(xs.std(ddof=1))


def test_normalizer_rejects_non_finite():
    norm = RewardNormalizer()
    with pytest.raises(ValueError):
        norm.update(math.nan)
    with pytest.raises(ValueError):
        norm.update(math.inf)
    assert norm.count == 0
