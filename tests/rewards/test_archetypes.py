"""Tests of `rlaif_gym.rewards.archetypes`: weights, bonus rules, priority score, composite, rubrics.

Every bonus row (docs/babylon.md ("The original's archetypes")) is pinned with at least one positive
tier and one penalty. Every expected value is worked by hand in a comment. The rubric tests check
the fix of docs/babylon.md ("The original's defects", 11): a known archetype uses its own weights
and priority list, and a missing or malformed file raises.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlaif_gym.rewards import (
    ARCHETYPE_REWARD_WEIGHTS,
    ARCHETYPES,
    COMPONENT_NAMES,
    DEFAULT_WEIGHTS,
    BehaviorMetrics,
    RubricsError,
    TrajectoryRewardInputs,
    archetype_composite_reward,
    archetype_weights,
    behavior_score,
    calculate_archetype_behavior_bonus,
    canonical_metric_name,
    get_priority_metrics,
    get_rubric,
    load_rubrics,
    metric_range,
    metric_value,
    normalize_archetype,
    priority_weighted_score,
)
from rlaif_gym.rewards import archetypes as arch_mod

M = BehaviorMetrics
I = TrajectoryRewardInputs  # noqa: E741

# ------------------------------------------------------------------------------------------------
# Weights and names
# ------------------------------------------------------------------------------------------------

SPEC_TABLE = {
    "trader": (0.55, 0.20, 0.15, 0.10),
    "degen": (0.15, 0.15, 0.10, 0.60),
    "social-butterfly": (0.10, 0.20, 0.15, 0.55),
    "scammer": (0.35, 0.15, 0.20, 0.30),
    "researcher": (0.25, 0.25, 0.30, 0.20),
    "information-trader": (0.35, 0.20, 0.20, 0.25),
    "goody-twoshoes": (0.15, 0.25, 0.20, 0.40),
    "ass-kisser": (0.10, 0.20, 0.15, 0.55),
    "perps-trader": (0.50, 0.15, 0.20, 0.15),
    "super-predictor": (0.30, 0.20, 0.25, 0.25),
    "infosec": (0.25, 0.25, 0.30, 0.20),
    "liar": (0.20, 0.15, 0.25, 0.40),
    "default": (0.50, 0.25, 0.15, 0.10),
}


@pytest.mark.parametrize(("name", "row"), SPEC_TABLE.items())
def test_weight_table_matches_spec(name, row):
    w = ARCHETYPE_REWARD_WEIGHTS[name]
    assert (w["pnl"], w["format"], w["reasoning"], w["behavior"]) == row
    assert sum(w.values()) == pytest.approx(1.0)


def test_weight_table_shape():
    assert set(ARCHETYPE_REWARD_WEIGHTS) == set(SPEC_TABLE)
    assert len(ARCHETYPES) == 12 and "default" not in ARCHETYPES
    # rows use the component names of composite.py, and the default row equals DEFAULT_WEIGHTS
    for row in ARCHETYPE_REWARD_WEIGHTS.values():
        assert set(row) <= set(COMPONENT_NAMES)
    assert {k: DEFAULT_WEIGHTS[k] for k in ARCHETYPE_REWARD_WEIGHTS["default"]} == dict(
        ARCHETYPE_REWARD_WEIGHTS["default"]
    )
    with pytest.raises(TypeError):
        ARCHETYPE_REWARD_WEIGHTS["degen"]["pnl"] = 1.0  # type: ignore[index]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "default"),
        ("", "default"),
        ("   ", "default"),
        ("degen", "degen"),
        (" DEGEN ", "degen"),
        ("Social_Butterfly", "social-butterfly"),
        ("perps_trader", "perps-trader"),
        ("wizard", "default"),  # unknown -> default, explicitly
    ],
)
def test_normalize_archetype(raw, expected):
    assert normalize_archetype(raw) == expected


def test_normalize_archetype_strict():
    assert normalize_archetype("Degen", strict=True) == "degen"
    with pytest.raises(ValueError, match="unknown archetype"):
        normalize_archetype("wizard", strict=True)


def test_known_archetype_keeps_its_own_weights():
    # the original downgraded every archetype to "default" (defect 11)
    assert dict(archetype_weights("degen")) == {
        "pnl": 0.15,
        "format": 0.15,
        "reasoning": 0.10,
        "behavior": 0.60,
    }
    assert archetype_weights("DEGEN") is ARCHETYPE_REWARD_WEIGHTS["degen"]
    assert archetype_weights("wizard") is ARCHETYPE_REWARD_WEIGHTS["default"]


# ------------------------------------------------------------------------------------------------
# BehaviorMetrics
# ------------------------------------------------------------------------------------------------

SPEC_FIELDS = [
    "trades_executed",
    "profitable_trades",
    "win_rate",
    "total_pnl",
    "pnl_variance",
    "largest_win",
    "largest_loss",
    "markets_traded",
    "avg_position_size",
    "unique_users_interacted",
    "group_chats_joined",
    "dms_initiated",
    "posts_created",
    "comments_made",
    "mentions_given",
    "followers_gained",
    "reputation_delta",
    "positive_reactions",
    "information_spread",
    "research_actions",
    "predictions_made",
    "correct_predictions",
    "prediction_accuracy",
    "info_requests_sent",
    "info_shared",
    "actions_per_tick",
    "social_to_trade_ratio",
    "episode_length",
]


def test_behavior_metrics_fields_and_defaults():
    assert [f.name for f in fields(M)] == SPEC_FIELDS
    m = M()
    assert all(getattr(m, f) == 0 for f in SPEC_FIELDS)


def test_behavior_metrics_reject_non_finite():
    with pytest.raises(ValueError):
        M(win_rate=math.nan)
    with pytest.raises(ValueError):
        M(total_pnl=math.inf)


# ------------------------------------------------------------------------------------------------
# Behaviour bonus rows. Each case: (metrics, expected bonus, hand computation).
# ------------------------------------------------------------------------------------------------

BONUS_CASES = {
    "degen": [
        # .20+.15+.10+.05
        (
            M(trades_executed=20, pnl_variance=600, avg_position_size=600, largest_win=150),
            0.50,
        ),
        # .15+.08+.05+.05
        (
            M(trades_executed=10, pnl_variance=200, avg_position_size=300, largest_loss=-150),
            0.33,
        ),
        (M(trades_executed=5), 0.08),  # ≥5 tier
        (M(trades_executed=3), 0.0),  # between tiers: nothing
        (M(trades_executed=1), -0.15),  # <2: penalty
        (M(trades_executed=1, largest_win=100, largest_loss=-100), -0.15),  # 100 is not >100
    ],
    "social-butterfly": [
        # .20 + .15 + .10 + .08 = .53 -> clamp .50
        (
            M(
                unique_users_interacted=15,
                group_chats_joined=5,
                dms_initiated=10,
                posts_created=6,
                comments_made=4,
            ),
            0.50,
        ),
        # .12 + .08 + .05 + .04 = .29
        (M(unique_users_interacted=8, group_chats_joined=2, dms_initiated=3, posts_created=3), 0.29),
        (M(unique_users_interacted=3), 0.06),
        (M(unique_users_interacted=2), 0.0),
        (M(unique_users_interacted=1, social_to_trade_ratio=0.2, trades_executed=6), -0.25),  # -.15 -.10
        (M(unique_users_interacted=3, social_to_trade_ratio=0.2, trades_executed=5), 0.06),  # trades not >5
    ],
    "scammer": [
        # .10+.10+.15+.10
        (
            M(unique_users_interacted=5, dms_initiated=5, total_pnl=100, reputation_delta=5),
            0.45,
        ),
        (M(unique_users_interacted=3, dms_initiated=2, total_pnl=1), 0.20),  # 0 + .05 + .15 + 0
        (M(unique_users_interacted=1, total_pnl=0, reputation_delta=-30), -0.45),  # -.20 -.15 -.10
        (M(unique_users_interacted=2, total_pnl=-5, reputation_delta=-20), -0.15),  # 0 -.15 0
    ],
    "trader": [
        (M(win_rate=0.6, markets_traded=4, trades_executed=5), 0.30),  # .15 + .10 + .05
        (M(win_rate=0.5, markets_traded=2), 0.13),  # .08 + .05
        (M(win_rate=0.3, trades_executed=5, social_to_trade_ratio=2.0), -0.15),  # -.10 + .05 - .10
        (M(win_rate=0.3, trades_executed=4), 0.0),  # low win rate but too few trades to penalise
        (M(social_to_trade_ratio=1.0), 0.0),  # exactly 1 is not >1
    ],
    "researcher": [
        # .20+.20+.10
        (
            M(research_actions=10, prediction_accuracy=0.7, win_rate=0.6, trades_executed=10),
            0.50,
        ),
        (M(research_actions=5, prediction_accuracy=0.5), 0.22),  # .12 + .10
        (M(research_actions=2, win_rate=0.6, trades_executed=11), 0.06),  # .06; 11 trades > 10: no bonus
        (M(research_actions=1), 0.0),
        (M(research_actions=0), -0.15),
    ],
    "information-trader": [
        # .15 + .10 + .08 + .08 + .10 = .51 -> .50
        (
            M(
                social_to_trade_ratio=1.0,
                group_chats_joined=3,
                dms_initiated=3,
                info_requests_sent=3,
                total_pnl=1,
            ),
            0.50,
        ),
        (M(social_to_trade_ratio=0.5), 0.15),  # band is inclusive
        (M(social_to_trade_ratio=1.5, total_pnl=1), 0.25),  # .15 + .10
        (M(social_to_trade_ratio=4.0), -0.10),  # >3
        (M(social_to_trade_ratio=0.1, trades_executed=4), -0.10),  # <0.2 with >3 trades
        (M(social_to_trade_ratio=0.1, trades_executed=3), 0.0),
        (M(social_to_trade_ratio=2.0), 0.0),  # between 1.5 and 3
    ],
    "goody-twoshoes": [
        # .25 + .12 + .10 + .08 = .55 -> .50
        (M(reputation_delta=30, info_shared=5, positive_reactions=10, followers_gained=5), 0.50),
        (M(reputation_delta=10, info_shared=2, positive_reactions=3), 0.26),  # .15 + .06 + .05
        (M(), 0.05),  # reputation 0 is the ≥0 tier
        (M(reputation_delta=-1), -0.15),
    ],
    "ass-kisser": [
        # .30 + .15 + .08 + .05 = .58 -> .50
        (M(reputation_delta=50, followers_gained=10, comments_made=10, dms_initiated=5), 0.50),
        (M(reputation_delta=20, followers_gained=3, comments_made=5), 0.32),  # .20 + .08 + .04
        (M(reputation_delta=5), 0.10),
        (M(reputation_delta=4), 0.0),
        (M(reputation_delta=-1), -0.20),
    ],
    "perps-trader": [
        (M(win_rate=0.55, trades_executed=10, total_pnl=10), 0.35),  # .15 + .10 + .10
        (M(win_rate=0.5, trades_executed=5), 0.05),  # 0 + .05
        # -.15 + .05 - .10 - .15 = -.35
        (M(win_rate=0.3, trades_executed=5, pnl_variance=2000, total_pnl=-300), -0.35),
        (M(trades_executed=1), -0.10),  # <2 trades; win-rate penalty needs ≥5 trades
        (M(trades_executed=3, total_pnl=-200), 0.0),  # -200 is not < -200
    ],
    "super-predictor": [
        # .30 + .08 + .08 + .08 = .54 -> .50
        (M(prediction_accuracy=0.75, research_actions=3, predictions_made=5, total_pnl=1), 0.50),
        (M(prediction_accuracy=0.6, predictions_made=5), 0.26),  # .18 + .08
        (M(prediction_accuracy=0.5, predictions_made=1), 0.08),
        (M(prediction_accuracy=0.5, predictions_made=1, total_pnl=5), 0.08),  # acc < .55: no P&L bonus
        (M(prediction_accuracy=0.4, predictions_made=5), -0.12),  # -.20 + .08
        (M(), -0.15),  # no predictions
    ],
    "infosec": [
        (M(), 0.45),  # info ≤1 .15, loss 0 > -50 .15, variance 0 < 100 .10, dms 0 < 3 .05
        (M(research_actions=3), 0.50),  # .45 + .10 = .55 -> .50
        # -.10 - .15 + 0 + 0 + 0 = -.25
        (M(info_shared=5, largest_loss=-300, pnl_variance=100, dms_initiated=3), -0.25),
        # every rule in its gap
        (
            M(info_shared=3, largest_loss=-100, pnl_variance=100, dms_initiated=3),
            0.0,
        ),
    ],
    "liar": [
        # .20 + .12 + .15 + .08 = .55 -> .50
        (M(information_spread=10, unique_users_interacted=8, posts_created=5), 0.50),
        # .10+.06+.15+.04
        (
            M(information_spread=3, unique_users_interacted=3, reputation_delta=5, posts_created=2),
            0.35,
        ),
        (M(unique_users_interacted=1, reputation_delta=-21), -0.30),  # -.15 -.15
        (M(unique_users_interacted=2, reputation_delta=-20), 0.0),
    ],
}


def test_every_archetype_has_bonus_cases():
    assert set(BONUS_CASES) == set(ARCHETYPES)
    for name, cases in BONUS_CASES.items():
        assert any(v > 0 for _, v in cases), name
        assert any(v < 0 for _, v in cases), name


@pytest.mark.parametrize(
    ("archetype", "metrics", "expected"),
    [(a, m, v) for a, cases in BONUS_CASES.items() for m, v in cases],
    ids=[f"{a}-{i}" for a, cases in BONUS_CASES.items() for i in range(len(cases))],
)
def test_behavior_bonus_rows(archetype, metrics, expected):
    assert calculate_archetype_behavior_bonus(archetype, metrics) == pytest.approx(expected)


def test_behavior_bonus_default_and_unknown_are_zero():
    busy = M(trades_executed=50, reputation_delta=80, research_actions=20)
    assert calculate_archetype_behavior_bonus("default", busy) == 0.0
    assert calculate_archetype_behavior_bonus("wizard", busy) == 0.0
    assert calculate_archetype_behavior_bonus(None, busy) == 0.0
    assert calculate_archetype_behavior_bonus("Super_Predictor", M()) == pytest.approx(-0.15)


# ------------------------------------------------------------------------------------------------
# Priority-weighted score
# ------------------------------------------------------------------------------------------------


def test_priority_weighted_score_trader():
    # trader list: total_pnl, sharpe_ratio, win_rate, markets_traded, social_to_trade_ratio
    # weights 1, 1/2, 1/3, 1/4, 1/5 (sum 137/60)
    # values: (1400+1000)/6000 = 0.4; sharpe fixed 0 -> (0+1)/4 = 0.25; 0.5; 5/10 = 0.5; 1/5 = 0.2
    # sum = 0.4 + 0.125 + 1/6 + 0.125 + 0.04 = 257/300; score = (257/300) / (137/60) = 257/685
    m = M(total_pnl=1400, win_rate=0.5, markets_traded=5, social_to_trade_ratio=1.0)
    assert priority_weighted_score("trader", m) == pytest.approx(257 / 685)


def test_priority_weighted_score_default():
    # default list: total_pnl, win_rate, action_success_rate (= win_rate), episode_length
    # weights 1, 1/2, 1/3, 1/4 (sum 25/12); values 3000/6000 = .5, .8, .8, 25/50 = .5
    # sum = .5 + .4 + .8/3 + .125 = 31/24; score = (31/24) / (25/12) = 31/50 = 0.62
    m = M(total_pnl=2000, win_rate=0.8, episode_length=25)
    assert priority_weighted_score("default", m) == pytest.approx(0.62)
    assert priority_weighted_score("wizard", m) == pytest.approx(0.62)


def test_priority_weighted_score_uses_the_archetypes_own_list():
    # degen list: trades_executed, avg_position_size, largest_win, largest_loss, markets_traded,
    # actions_per_tick; weights sum 1 + 1/2 + ... + 1/6 = 49/20.
    # trades 50 -> 1; largest_loss 0 -> (0+2000)/2000 = 1 (weight 1/4); the rest 0.
    # score = (1 + 1/4) / (49/20) = 25/49. The default list would give (1000/6000)/(25/12) = 0.08.
    m = M(trades_executed=50)
    assert priority_weighted_score("degen", m) == pytest.approx(25 / 49)
    assert priority_weighted_score("default", m) == pytest.approx(0.08)


def test_priority_weighted_score_clamps_and_empty_list(monkeypatch):
    huge = M(total_pnl=1e9, win_rate=1.0, episode_length=1e6)
    assert priority_weighted_score("default", huge) == pytest.approx(1.0)
    monkeypatch.setattr(arch_mod, "get_priority_metrics", lambda archetype: ())
    assert priority_weighted_score("trader", huge) == 0.5


def test_metric_values_ranges_and_names():
    m = M(group_chats_joined=4, research_actions=7, win_rate=0.25)
    assert metric_value(m, "sharpe_ratio") == 0.0
    assert metric_value(m, "max_drawdown") == 0.0
    assert metric_value(m, "dm_response_rate") == 0.5
    assert metric_value(m, "news_consumed") == 0.0
    assert metric_value(m, "consistency_score") == 0.5
    assert metric_value(m, "group_messages_sent") == 4  # approximated by group_chats_joined
    assert metric_value(m, "market_data_queries") == 7  # approximated by research_actions
    assert metric_value(m, "action_success_rate") == 0.25  # approximated by win_rate
    with pytest.raises(KeyError):
        metric_value(m, "charisma")
    assert metric_range("total_pnl") == (-1000.0, 5000.0)
    assert metric_range("largest_loss") == (-2000.0, 0.0)
    assert metric_range("reputation_delta") == (-50.0, 100.0)
    assert metric_range("something_else") == (0.0, 100.0)
    assert canonical_metric_name("trading.totalPnL") == "total_pnl"
    assert canonical_metric_name("uniqueUsers") == "unique_users_interacted"
    assert canonical_metric_name("dms") == "dms_initiated"
    assert canonical_metric_name("behavior.actionSuccessRate") == "action_success_rate"
    assert canonical_metric_name("win_rate") == "win_rate"
    with pytest.raises(KeyError):
        canonical_metric_name("trading.charisma")


# ------------------------------------------------------------------------------------------------
# behavior_score and archetype_composite_reward
# ------------------------------------------------------------------------------------------------


def test_behavior_score_blend():
    # trader bonus: win .5 -> .08, markets 5 -> .10 => .18; priority 257/685 (see above)
    # 0.7*0.18 + 0.3*(257/685 - 0.5) = 0.126 - 0.0374453 = 0.0885547
    m = M(total_pnl=1400, win_rate=0.5, markets_traded=5, social_to_trade_ratio=1.0)
    assert behavior_score("trader", m) == pytest.approx(0.7 * 0.18 + 0.3 * (257 / 685 - 0.5))
    assert behavior_score("trader", m) == pytest.approx(0.0885547, abs=1e-7)


def test_archetype_composite_trader_no_metrics():
    # pnl_score 0.1; (0.1*.55 + .5*.20 + 1*.15 + 0*.10) = .055 + .1 + .15 = .305
    x = I(final_pnl=100, end_balance=10_100, format_score=0.5, reasoning_score=1.0)
    assert archetype_composite_reward(x, "trader") == pytest.approx(0.305)
    # one risky action: 0.1 - 0.3 = -0.2 -> -0.11 + 0.25 = 0.14
    xr = I(final_pnl=100, end_balance=10_100, format_score=0.5, reasoning_score=1.0, risky_actions_count=1)
    assert archetype_composite_reward(xr, "trader") == pytest.approx(0.14)


def test_archetype_composite_degen_damping_and_no_risk_penalty():
    # pnl -100 -> -0.1 * 0.3 = -0.03; risky actions ignored for degen
    # (-0.03*.15 + .5*.15 + 1*.10) = -0.0045 + 0.075 + 0.1 = 0.1705
    x = I(final_pnl=-100, end_balance=9_900, format_score=0.5, reasoning_score=1.0, risky_actions_count=2)
    assert archetype_composite_reward(x, "degen") == pytest.approx(0.1705)
    # the same inputs under default weights: pnl -0.1 - 0.6 = -0.7 -> -0.35 + .125 + .15 = -0.075
    assert archetype_composite_reward(x, "wizard") == pytest.approx(-0.075)


def test_archetype_composite_degen_with_metrics_uses_degen_everything():
    # bonus: trades ≥20 -> .20; priority 25/49 (degen list); behavior = .14 + .3*(25/49 - .5) = .1430612
    # composite: (0*.15 + .5*.15 + 1*.10 + .6*.1430612) = .075 + .1 + .0858367 = .2608367
    x = I(format_score=0.5, reasoning_score=1.0)
    m = M(trades_executed=50)
    expected_behavior = 0.7 * 0.20 + 0.3 * (25 / 49 - 0.5)
    assert behavior_score("degen", m) == pytest.approx(expected_behavior)
    assert archetype_composite_reward(x, "degen", m) == pytest.approx(0.175 + 0.6 * expected_behavior)
    assert archetype_composite_reward(x, "DEGEN", m) == pytest.approx(0.2608367, abs=1e-7)
    # under "default" the same trajectory scores differently (bonus 0, default priority list 0.08):
    # behavior = 0.3*(0.08 - 0.5) = -0.126; (0 + .125 + .15 - .0126) = 0.2624
    assert archetype_composite_reward(x, "default", m) == pytest.approx(0.2624)


def test_archetype_composite_social_butterfly():
    # pnl -0.1 * 0.5 = -0.05; one risky action: -0.05 - 0.3 = -0.35
    # (-0.35*.10 + .5*.20 + 1*.15) = -0.035 + 0.1 + 0.15 = 0.215
    x = I(final_pnl=-100, end_balance=9_900, format_score=0.5, reasoning_score=1.0, risky_actions_count=1)
    assert archetype_composite_reward(x, "social_butterfly") == pytest.approx(0.215)


def test_archetype_composite_unknown_uses_default_row():
    # (0.1*.5 + .5*.25 + 1*.15) = .05 + .125 + .15 = .325
    x = I(final_pnl=100, end_balance=10_100, format_score=0.5, reasoning_score=1.0)
    assert archetype_composite_reward(x, "wizard") == pytest.approx(0.325)
    assert archetype_composite_reward(x, None) == pytest.approx(0.325)


@pytest.mark.parametrize("archetype", [*ARCHETYPES, "default", "wizard"])
def test_archetype_composite_bankruptcy_is_minus_one(archetype):
    # every archetype, degen and social-butterfly included (the original let those two through with
    # a damped -3 / -5 inside the weighted average)
    x = I(final_pnl=-10_000, format_score=0.5, reasoning_score=1.0)
    rich = M(trades_executed=50, pnl_variance=1000, avg_position_size=900, largest_loss=-5000)
    assert archetype_composite_reward(x, archetype, rich) == -1.0


finite = st.floats(allow_nan=False, allow_infinity=False)
metrics_strategy = st.builds(M, **{name: finite for name in SPEC_FIELDS})


@st.composite
def reward_inputs(draw):
    total = draw(st.integers(0, 1000))
    return I(
        final_pnl=draw(finite),
        starting_balance=draw(finite),
        end_balance=draw(finite),
        risky_actions_count=draw(st.integers(0, 1000)),
        format_score=draw(finite),
        reasoning_score=draw(finite),
        total_actions=total,
        successful_actions=draw(st.integers(0, total)),
    )


archetype_names = st.sampled_from([*ARCHETYPES, "default", "wizard", None, "Social_Butterfly"])


@settings(max_examples=300, deadline=None)
@given(reward_inputs(), archetype_names, st.one_of(st.none(), metrics_strategy))
def test_archetype_composite_always_in_unit_interval(x, archetype, metrics):
    r = archetype_composite_reward(x, archetype, metrics)
    assert -1.0 <= r <= 1.0


@settings(max_examples=300, deadline=None)
@given(archetype_names, metrics_strategy)
def test_bonus_priority_behavior_ranges(archetype, metrics):
    assert -0.5 <= calculate_archetype_behavior_bonus(archetype, metrics) <= 0.5
    assert 0.0 <= priority_weighted_score(archetype, metrics) <= 1.0
    assert -0.5 <= behavior_score(archetype, metrics) <= 0.5


# ------------------------------------------------------------------------------------------------
# Rubrics resource (defect 11)
# ------------------------------------------------------------------------------------------------

SPEC_PRIORITY = {  # the original's priority lists, in its metric names
    "trader": ["totalPnL", "sharpeRatio", "winRate", "marketsTraded", "socialToTradeRatio"],
    "degen": [
        "tradesExecuted",
        "avgPositionSize",
        "largestWin",
        "largestLoss",
        "marketsTraded",
        "actionsPerTick",
    ],
    "social-butterfly": [
        "uniqueUsers",
        "groupChatsJoined",
        "dmsInitiated",
        "postsCreated",
        "commentsMade",
        "socialToTradeRatio",
        "followersGained",
    ],
    "scammer": [
        "totalPnL",
        "uniqueUsers",
        "reputationDelta",
        "dms",
        "informationSpread",
        "groupMessagesSent",
    ],
    "researcher": [
        "researchActions",
        "predictionAccuracy",
        "marketDataQueries",
        "newsConsumed",
        "winRate",
        "totalPnL",
    ],
    "information-trader": [
        "totalPnL",
        "groupChats",
        "dms",
        "socialToTradeRatio",
        "infoRequestsSent",
        "winRate",
    ],
    "goody-twoshoes": [
        "reputationDelta",
        "infoShared",
        "positiveReactions",
        "followers",
        "uniqueUsers",
        "comments",
    ],
    "ass-kisser": ["reputationDelta", "followers", "positiveReactions", "dms", "comments", "mentionsGiven"],
    "perps-trader": [
        "totalPnL",
        "maxDrawdown",
        "winRate",
        "sharpeRatio",
        "tradesExecuted",
        "socialToTradeRatio",
    ],
    "super-predictor": [
        "predictionAccuracy",
        "winRate",
        "totalPnL",
        "researchActions",
        "predictionsMade",
        "correctPredictions",
    ],
    "infosec": ["maxDrawdown", "winRate", "infoShared", "dmResponseRate", "consistencyScore", "totalPnL"],
    "liar": [
        "informationSpread",
        "uniqueUsers",
        "reputationDelta",
        "postsCreated",
        "groupMessagesSent",
        "dms",
    ],
}
SPEC_DEFAULT_PRIORITY = [
    "trading.totalPnL",
    "trading.winRate",
    "behavior.actionSuccessRate",
    "behavior.episodeLength",
]


@pytest.mark.parametrize("archetype", ARCHETYPES)
def test_priority_lists_match_spec(archetype):
    expected = tuple(canonical_metric_name(n) for n in SPEC_PRIORITY[archetype])
    assert get_priority_metrics(archetype) == expected


def test_default_priority_list_and_unknown():
    expected = tuple(canonical_metric_name(n) for n in SPEC_DEFAULT_PRIORITY)
    assert expected == ("total_pnl", "win_rate", "action_success_rate", "episode_length")
    assert get_priority_metrics("default") == expected
    assert get_priority_metrics("wizard") == expected
    assert get_priority_metrics("degen") != expected


def test_packaged_rubrics():
    rubrics = load_rubrics()
    assert sorted(rubrics.available_archetypes) == sorted(ARCHETYPES)
    texts = [*rubrics.rubrics.values(), rubrics.default_rubric]
    assert len(set(texts)) == 13
    for text in texts:
        for band in ("0.8–1.0", "0.6–0.8", "0.4–0.6", "0.0–0.4"):
            assert band in text
        assert "RELATIVE" in text
    assert get_rubric("degen") == rubrics.rubrics["degen"]
    assert get_rubric("Perps_Trader") == rubrics.rubrics["perps-trader"]
    assert get_rubric("wizard") == rubrics.default_rubric


def test_rubrics_are_package_data():
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())
    assert "rewards/data/*.json" in data["tool"]["setuptools"]["package-data"]["rlaif_gym"]


def test_missing_packaged_file_raises_instead_of_falling_back(monkeypatch):
    monkeypatch.setattr(arch_mod, "RUBRICS_RESOURCE", "data/no_such_rubrics.json")
    with pytest.raises(RubricsError, match="missing"):
        get_priority_metrics("degen")
    with pytest.raises(RubricsError):
        priority_weighted_score("degen", M())
    with pytest.raises(RubricsError):
        archetype_composite_reward(I(), "degen", M())


def _valid_payload() -> dict:
    return json.loads(
        json.dumps(
            {
                "rubrics": dict(load_rubrics().rubrics),
                "priorityMetrics": {a: list(v) for a, v in load_rubrics().priority_metrics.items()},
                "defaults": {"rubric": "x", "priorityMetrics": ["total_pnl"]},
                "availableArchetypes": list(ARCHETYPES),
            }
        )
    )


def _broken(mutate):
    data = _valid_payload()
    mutate(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        _broken(lambda d: d["rubrics"].pop("degen")),
        _broken(lambda d: d["priorityMetrics"].update(degen=["charisma"])),
        _broken(lambda d: d["priorityMetrics"].update(degen="total_pnl")),
        _broken(lambda d: d["availableArchetypes"].pop()),
        _broken(lambda d: d.pop("defaults")),
        _broken(lambda d: d["defaults"].pop("rubric")),
        _broken(lambda d: d["rubrics"].update(degen="")),
        _broken(lambda d: d.update(extra=1)),
    ],
    ids=[
        "bad-json",
        "not-object",
        "missing-rubric",
        "unknown-metric",
        "metrics-not-list",
        "missing-archetype",
        "no-defaults",
        "no-default-rubric",
        "empty-rubric",
        "extra-key",
    ],
)
def test_malformed_file_raises(tmp_path, text):
    path = tmp_path / "rubrics.json"
    path.write_text(text)
    with pytest.raises(RubricsError, match="malformed"):
        load_rubrics(path)


def test_valid_custom_file_and_missing_path(tmp_path):
    path = tmp_path / "rubrics.json"
    path.write_text(json.dumps(_valid_payload()))
    assert load_rubrics(path).default_priority_metrics == ("total_pnl",)
    with pytest.raises(RubricsError, match="cannot read"):
        load_rubrics(tmp_path / "absent.json")
