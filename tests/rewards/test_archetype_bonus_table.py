"""The behaviour bonus as a rule table (`rlaif_gym.rewards.archetypes._BONUS_RULES`) pinned to the old code.

`calculate_archetype_behavior_bonus` was twelve functions of if/elif runs; it is now one data table
evaluated by one function. Before the change, the table was compared with a frozen copy of the old
functions on 20,000 hypothesis examples, 40,000 seeded random metrics and 100,000 seeded metrics for
each archetype: every bonus was the same float, bit for bit. GOLDEN below was generated then, by the
old implementation, on metrics picked so that every tier of every rule (and no tier), and the upper
clamp, is hit at least once; the old code is gone, the values stay.
"""

from __future__ import annotations

import pytest

from rlaif_gym.rewards.archetypes import (
    ARCHETYPES,
    BEHAVIOR_BONUS_LIMIT,
    BehaviorMetrics,
    calculate_archetype_behavior_bonus,
)

M = BehaviorMetrics

# (archetype, metrics, the old code's bonus): generated from the old if/elif implementation, not by hand.
GOLDEN = [
    ("degen", M(), -0.15),
    ("degen", M(trades_executed=35, largest_loss=1000, pnl_variance=500.000000001), 0.39999999999999997),
    ("degen", M(pnl_variance=59, avg_position_size=1152.0196115272875, largest_win=-598.9601644930176,
        trades_executed=3), 0.15000000000000002),
    ("degen", M(trades_executed=7, pnl_variance=201), 0.16),
    ("degen", M(trades_executed=14, pnl_variance=-1885.9658152742393, largest_win=42, avg_position_size=500), 0.2),
    ("social-butterfly", M(), -0.15),
    ("social-butterfly", M(trades_executed=0.600000001, posts_created=19, group_chats_joined=10,
        unique_users_interacted=1001, dms_initiated=36, comments_made=8), 0.5),
    ("social-butterfly", M(dms_initiated=3.999999999, unique_users_interacted=2,
        trades_executed=2952.415428742859), -0.05),
    ("social-butterfly", M(trades_executed=-0.599486691133888, posts_created=5,
        unique_users_interacted=8.000000001), 0.16),
    ("social-butterfly", M(social_to_trade_ratio=-202, trades_executed=27, unique_users_interacted=4,
        group_chats_joined=4, dms_initiated=100, comments_made=39, posts_created=15), 0.22),
    ("scammer", M(), -0.35),
    ("scammer", M(unique_users_interacted=58, dms_initiated=2643.307123930471, total_pnl=26,
        reputation_delta=1), 0.44999999999999996),
    ("scammer", M(reputation_delta=-201, dms_initiated=4), -0.4),
    ("scammer", M(unique_users_interacted=2.5), -0.15),
    ("trader", M(), 0.0),
    ("trader", M(social_to_trade_ratio=46, win_rate=1.8257668154170634, trades_executed=38, markets_traded=50), 0.2),
    ("trader", M(markets_traded=3, trades_executed=39), 0.0),
    ("trader", M(win_rate=0.550000001, trades_executed=-201), 0.08),
    ("researcher", M(), -0.15),
    ("researcher", M(win_rate=3, research_actions=2194.9774283263514, prediction_accuracy=27), 0.5),
    ("researcher", M(trades_executed=200, prediction_accuracy=0.5, research_actions=-0.5856313905152015), 0.1),
    ("researcher", M(research_actions=2), 0.06),
    ("researcher", M(research_actions=9), 0.12),
    ("information-trader", M(), 0.0),
    ("information-trader", M(group_chats_joined=12, info_requests_sent=51, total_pnl=0.45,
        social_to_trade_ratio=0.699999999, dms_initiated=2468.165492640258, trades_executed=0.600000001), 0.5),
    ("information-trader", M(trades_executed=20), -0.1),
    ("information-trader", M(social_to_trade_ratio=51), -0.1),
    ("goody-twoshoes", M(), 0.05),
    ("goody-twoshoes", M(info_shared=784.4436859073553, positive_reactions=47, followers_gained=33,
        reputation_delta=52), 0.5),
    ("goody-twoshoes", M(reputation_delta=22, positive_reactions=5), 0.2),
    ("goody-twoshoes", M(info_shared=2.000000001, reputation_delta=-123.37109000024248, followers_gained=-200), -0.09),
    ("ass-kisser", M(), 0.0),
    ("ass-kisser", M(reputation_delta=50, followers_gained=45, comments_made=20, dms_initiated=34), 0.5),
    ("ass-kisser", M(comments_made=8, reputation_delta=42, followers_gained=9), 0.32),
    ("ass-kisser", M(reputation_delta=-20.999999999), -0.2),
    ("ass-kisser", M(reputation_delta=5), 0.1),
    ("perps-trader", M(), -0.1),
    ("perps-trader", M(pnl_variance=1550.4926431337663, trades_executed=1574.0935157014528,
        total_pnl=1.3134599251080115), -0.04999999999999999),
    ("perps-trader", M(pnl_variance=32, trades_executed=5, win_rate=5,
        total_pnl=-1741.3066268392706), 0.05000000000000002),
    ("perps-trader", M(trades_executed=3), 0.0),
    ("super-predictor", M(), -0.15),
    ("super-predictor", M(total_pnl=1714.6217081138402, research_actions=3, prediction_accuracy=2,
        predictions_made=10), 0.5),
    ("super-predictor", M(prediction_accuracy=0.5, total_pnl=-0.55, predictions_made=-0.45), 0.08),
    ("super-predictor", M(predictions_made=11), -0.12000000000000001),
    ("super-predictor", M(prediction_accuracy=0.6), 0.03),
    ("infosec", M(), 0.45),
    ("infosec", M(largest_loss=-594.4756920270652, info_shared=100, research_actions=16, pnl_variance=324.6349614837891,
        dms_initiated=20.000000001), -0.15),
    ("infosec", M(dms_initiated=-0.30000000000000004, research_actions=-0.997583039902718,
        info_shared=1.5977950865285702, largest_loss=-50.000000001), 0.15000000000000002),
    ("infosec", M(research_actions=999.999999999), 0.5),
    ("liar", M(), 0.0),
    ("liar", M(unique_users_interacted=45, information_spread=500, posts_created=50), 0.5),
    ("liar", M(posts_created=-0.5, information_spread=6, reputation_delta=-0.55, unique_users_interacted=6), 0.16),
    ("liar", M(unique_users_interacted=2.5, posts_created=3.999999999, reputation_delta=1), 0.19),
    ("liar", M(reputation_delta=-712.2223709459554), -0.3),
]


def test_golden_covers_every_archetype():
    assert {a for a, _, _ in GOLDEN} == set(ARCHETYPES)
    assert any(v == BEHAVIOR_BONUS_LIMIT for _, _, v in GOLDEN)  # clamped (no row's penalties reach -0.5)


@pytest.mark.parametrize(("archetype", "metrics", "expected"), GOLDEN,
                         ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(GOLDEN)])
def test_bonus_is_the_old_codes_bit_for_bit(archetype, metrics, expected):
    assert calculate_archetype_behavior_bonus(archetype, metrics) == expected
