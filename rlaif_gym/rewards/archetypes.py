"""The original's archetype machinery (docs/babylon.md ("The original's archetypes")): weights, bonuses, rubrics.

This module's one job is to score how well a trajectory fits a named behavioural archetype
("degen", "trader", "social-butterfly", ...) and blend that into the original's archetype composite
reward. It holds:

- ``ARCHETYPE_REWARD_WEIGHTS``: the table of (pnl, format, reasoning, behavior) weights,
  each row checked to sum to 1 at import.
- ``calculate_archetype_behavior_bonus``: the rule table, in [-0.5, 0.5].
- ``priority_weighted_score``: the harmonic-weighted, min-max-normalised metric score, in [0, 1].
- ``behavior_score`` and ``archetype_composite_reward``: the blend and composite.
- The rubrics and priority-metric lists, loaded from the package resource ``data/rubrics.json``.

Fixes relative to the original (docs/babylon.md ("The original's defects", 11)): the rubric file is
a package resource, read with ``importlib.resources``. A missing or malformed file raises
``RubricsError`` instead of silently falling back to defaults, and a known archetype always uses its
own weights and priority list. The original downgraded every archetype to "default". Only an
*unknown* archetype maps to "default", explicitly, in ``normalize_archetype``.

Metric names. The original's rubric file names metrics in camelCase, sometimes with a group prefix
(``trading.totalPnL``) and sometimes in a short form (``uniqueUsers``, ``dms``). Here every metric
has one snake_case name: the ``BehaviorMetrics`` field name where there is one, else the name in
``UNAVAILABLE_METRIC_VALUES`` or ``APPROXIMATED_METRICS``. ``ORIGINAL_METRIC_NAMES`` is the full
mapping and ``canonical_metric_name`` applies it; ``rubrics.json`` already uses the snake_case names.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..babylon.rewards import (
    BANKRUPTCY_REWARD,
    TrajectoryRewardInputs,
    _effective_end,
    _weighted_mean,
    calculate_pnl_reward,
    clip,
    is_bankrupt,
)
from ..errors import RLAIFError

__all__ = [
    "APPROXIMATED_METRICS",
    "ARCHETYPES",
    "ARCHETYPE_REWARD_WEIGHTS",
    "ARCHETYPE_RISK_PENALTY_MULTIPLIER",
    "BEHAVIOR_BONUS_LIMIT",
    "BONUS_EXCELLENT",
    "BONUS_EXCEPTIONAL",
    "BONUS_FAIR",
    "BONUS_GOOD",
    "BONUS_MINIMAL",
    "BONUS_MINOR",
    "BONUS_MODERATE",
    "BONUS_OUTSTANDING",
    "BONUS_SLIGHT",
    "BONUS_STRONG",
    "BONUS_TINY",
    "DEFAULT_ARCHETYPE",
    "DEFAULT_METRIC_RANGE",
    "LOSS_DAMPING",
    "METRIC_RANGES",
    "ORIGINAL_METRIC_NAMES",
    "PENALTY_CRITICAL",
    "PENALTY_MODERATE",
    "PENALTY_SEVERE",
    "RUBRICS_RESOURCE",
    "UNAVAILABLE_METRIC_VALUES",
    "BehaviorMetrics",
    "RubricSet",
    "RubricsError",
    "archetype_composite_reward",
    "archetype_weights",
    "behavior_score",
    "calculate_archetype_behavior_bonus",
    "canonical_metric_name",
    "get_priority_metrics",
    "get_rubric",
    "load_rubrics",
    "metric_range",
    "metric_value",
    "normalize_archetype",
    "priority_weighted_score",
]

DEFAULT_ARCHETYPE = "default"

# --------------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------------


def _row(pnl: float, fmt: float, rsn: float, beh: float) -> Mapping[str, float]:
    return MappingProxyType({"pnl": pnl, "format": fmt, "reasoning": rsn, "behavior": beh})


ARCHETYPE_REWARD_WEIGHTS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "trader": _row(0.55, 0.20, 0.15, 0.10),
        "degen": _row(0.15, 0.15, 0.10, 0.60),
        "social-butterfly": _row(0.10, 0.20, 0.15, 0.55),
        "scammer": _row(0.35, 0.15, 0.20, 0.30),
        "researcher": _row(0.25, 0.25, 0.30, 0.20),
        "information-trader": _row(0.35, 0.20, 0.20, 0.25),
        "goody-twoshoes": _row(0.15, 0.25, 0.20, 0.40),
        "ass-kisser": _row(0.10, 0.20, 0.15, 0.55),
        "perps-trader": _row(0.50, 0.15, 0.20, 0.15),
        "super-predictor": _row(0.30, 0.20, 0.25, 0.25),
        "infosec": _row(0.25, 0.25, 0.30, 0.20),
        "liar": _row(0.20, 0.15, 0.25, 0.40),
        DEFAULT_ARCHETYPE: _row(0.50, 0.25, 0.15, 0.10),
    }
)
"""archetype -> {pnl, format, reasoning, behavior} weights (the component names of ``composite.py``)."""

ARCHETYPES: tuple[str, ...] = tuple(a for a in ARCHETYPE_REWARD_WEIGHTS if a != DEFAULT_ARCHETYPE)
"""The 12 named archetypes (``default`` excluded), in table order."""


def _validate_weight_table() -> None:
    """Each row must have the four components, non-negative, summing to 1 (checked at import)."""
    for name, row in ARCHETYPE_REWARD_WEIGHTS.items():
        if set(row) != {"pnl", "format", "reasoning", "behavior"}:
            raise ValueError(f"ARCHETYPE_REWARD_WEIGHTS[{name!r}] has keys {sorted(row)}")
        if any(w < 0 for w in row.values()) or not math.isclose(sum(row.values()), 1.0, abs_tol=1e-9):
            raise ValueError(f"ARCHETYPE_REWARD_WEIGHTS[{name!r}] must be ≥ 0 and sum to 1, got {dict(row)}")


_validate_weight_table()

ARCHETYPE_RISK_PENALTY_MULTIPLIER: float = 0.3
"""Penalty per risky action in ``archetype_composite_reward`` (the legacy composite uses 0.5)."""

LOSS_DAMPING: Mapping[str, float] = MappingProxyType({"degen": 0.3, "social-butterfly": 0.5})
"""Negative P&L scores are multiplied by this for archetypes that are not meant to care about losses."""


def normalize_archetype(archetype: str | None, *, strict: bool = False) -> str:
    """Canonical archetype name: lowercase, stripped, ``_`` -> ``-``; unknown or blank -> "default".

    The mapping of an unknown name to "default" is explicit here, and only here: a *known* name
    always keeps its own weights, rubric and priority metrics.

    Args:
        archetype: a name such as ``"Social_Butterfly"``; ``None`` or blank means "default".
        strict: raise on an unknown name instead of mapping it to "default".

    Returns:
        A key of ``ARCHETYPE_REWARD_WEIGHTS``.

    Raises:
        ValueError: ``strict`` is set and the name is not a known archetype.
    """
    if archetype is None or not archetype.strip():
        return DEFAULT_ARCHETYPE
    name = archetype.strip().lower().replace("_", "-")
    if name in ARCHETYPE_REWARD_WEIGHTS:
        return name
    if strict:
        raise ValueError(f"unknown archetype {archetype!r}; known: {', '.join(ARCHETYPE_REWARD_WEIGHTS)}")
    return DEFAULT_ARCHETYPE


def archetype_weights(archetype: str | None) -> Mapping[str, float]:
    """The (pnl, format, reasoning, behavior) weight row of an archetype (after ``normalize_archetype``)."""
    return ARCHETYPE_REWARD_WEIGHTS[normalize_archetype(archetype)]


# --------------------------------------------------------------------------------------------------
# Behaviour metrics
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BehaviorMetrics:
    """Per-trajectory behaviour statistics the archetype scores read (docs/babylon.md ("The original's archetypes")).

    Counts are per episode; money is USD; rates and accuracies are fractions in [0, 1]. Every field
    defaults to 0. Validated on construction: a NaN would silently fail every threshold.

    Attributes:
        trades_executed: trades (and predictions) made.
        profitable_trades: trades with a positive P&L.
        win_rate: profitable_trades / trades_executed.
        total_pnl: episode P&L, USD.
        pnl_variance: population variance of the per-trade P&L samples, USD².
        largest_win: best single-trade P&L, USD (≥ 0).
        largest_loss: worst single-trade P&L, USD (≤ 0).
        markets_traded: distinct markets traded.
        avg_position_size: mean trade size, USD.
        unique_users_interacted: distinct users messaged, commented on or mentioned.
        group_chats_joined: group chats joined or created.
        dms_initiated: direct messages sent.
        posts_created: posts written.
        comments_made: comments or replies written.
        mentions_given: mentions of other users.
        followers_gained: followers gained over the episode (may be negative).
        reputation_delta: reputation change over the episode (may be negative).
        positive_reactions: positive reactions received.
        information_spread: how far the agent's information travelled (reshares, citations).
        research_actions: research / analyze / query actions.
        predictions_made: predictions (predict / bet / forecast).
        correct_predictions: predictions that resolved correctly.
        prediction_accuracy: correct_predictions / predictions_made.
        info_requests_sent: requests for information sent to others.
        info_shared: pieces of information shared with others.
        actions_per_tick: (trade + social actions) / episode_length.
        social_to_trade_ratio: social actions / trades (social actions when there are no trades).
        episode_length: ticks in the episode.
    """

    trades_executed: int = 0
    profitable_trades: int = 0
    win_rate: float = 0.0
    total_pnl: float = 0.0
    pnl_variance: float = 0.0
    largest_win: float = 0.0
    largest_loss: float = 0.0
    markets_traded: int = 0
    avg_position_size: float = 0.0
    unique_users_interacted: int = 0
    group_chats_joined: int = 0
    dms_initiated: int = 0
    posts_created: int = 0
    comments_made: int = 0
    mentions_given: int = 0
    followers_gained: int = 0
    reputation_delta: float = 0.0
    positive_reactions: int = 0
    information_spread: int = 0
    research_actions: int = 0
    predictions_made: int = 0
    correct_predictions: int = 0
    prediction_accuracy: float = 0.0
    info_requests_sent: int = 0
    info_shared: int = 0
    actions_per_tick: float = 0.0
    social_to_trade_ratio: float = 0.0
    episode_length: int = 0

    def __post_init__(self) -> None:
        """Reject values that are not finite real numbers."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"BehaviorMetrics.{f.name} must be a finite number, got {value!r}")


_BEHAVIOR_FIELDS: frozenset[str] = frozenset(f.name for f in fields(BehaviorMetrics))

# --------------------------------------------------------------------------------------------------
# Behaviour bonus
# --------------------------------------------------------------------------------------------------

BONUS_EXCEPTIONAL = 0.30
BONUS_OUTSTANDING = 0.25
BONUS_EXCELLENT = 0.20
BONUS_STRONG = 0.18
BONUS_GOOD = 0.15
BONUS_FAIR = 0.12
BONUS_MODERATE = 0.10
BONUS_SLIGHT = 0.08
BONUS_MINIMAL = 0.06
BONUS_MINOR = 0.05
BONUS_TINY = 0.04
PENALTY_MODERATE = -0.10
PENALTY_SEVERE = -0.15
PENALTY_CRITICAL = -0.20
BEHAVIOR_BONUS_LIMIT = 0.5
"""The bonus is clamped to [-BEHAVIOR_BONUS_LIMIT, +BEHAVIOR_BONUS_LIMIT]."""


# The original's rule table, one row per archetype. A row is a sequence of rules; a rule is its tiers,
# tried top-down as the original's if/elif: the first tier whose condition holds contributes its bonus,
# and the contributions of a row's rules add up, in table order. A condition is ``metric op threshold``,
# several joined by `` and ``, or ``else`` (always holds); a metric is a `BehaviorMetrics` field or one
# of `_DERIVED_METRICS`. A rule with an ``or`` is two tiers with the same bonus.
_BONUS_RULES: Mapping[str, tuple[tuple[tuple[str, float], ...], ...]] = MappingProxyType(
    {
        "degen": (
            (("trades_executed >= 20", BONUS_EXCELLENT), ("trades_executed >= 10", BONUS_GOOD),
             ("trades_executed >= 5", BONUS_SLIGHT), ("trades_executed < 2", PENALTY_SEVERE)),
            (("pnl_variance > 500", BONUS_GOOD), ("pnl_variance > 100", BONUS_SLIGHT)),
            (("avg_position_size > 500", BONUS_MODERATE), ("avg_position_size > 200", BONUS_MINOR)),
            (("abs_largest_win > 100", BONUS_MINOR), ("abs_largest_loss > 100", BONUS_MINOR)),
        ),
        "social-butterfly": (
            (("unique_users_interacted >= 15", BONUS_EXCELLENT), ("unique_users_interacted >= 8", BONUS_FAIR),
             ("unique_users_interacted >= 3", BONUS_MINIMAL), ("unique_users_interacted < 2", PENALTY_SEVERE)),
            (("group_chats_joined >= 5", BONUS_GOOD), ("group_chats_joined >= 2", BONUS_SLIGHT)),
            (("dms_initiated >= 10", BONUS_MODERATE), ("dms_initiated >= 3", BONUS_MINOR)),
            (("posts_and_comments >= 10", BONUS_SLIGHT), ("posts_and_comments >= 3", BONUS_TINY)),
            (("social_to_trade_ratio < 0.5 and trades_executed > 5", PENALTY_MODERATE),),
        ),
        "scammer": (
            (("unique_users_interacted >= 5", BONUS_MODERATE), ("unique_users_interacted < 2", PENALTY_CRITICAL)),
            (("dms_initiated >= 5", BONUS_MODERATE), ("dms_initiated >= 2", BONUS_MINOR)),
            (("total_pnl > 0", BONUS_GOOD), ("else", PENALTY_SEVERE)),
            (("reputation_delta > 0", BONUS_MODERATE), ("reputation_delta < -20", PENALTY_MODERATE)),
        ),
        "trader": (
            (("win_rate >= 0.60", BONUS_GOOD), ("win_rate >= 0.50", BONUS_SLIGHT),
             ("win_rate < 0.40 and trades_executed >= 5", PENALTY_MODERATE)),
            (("markets_traded >= 4", BONUS_MODERATE), ("markets_traded >= 2", BONUS_MINOR)),
            (("social_to_trade_ratio > 1", PENALTY_MODERATE),),
            (("trades_executed >= 5", BONUS_MINOR),),
        ),
        "researcher": (
            (("research_actions >= 10", BONUS_EXCELLENT), ("research_actions >= 5", BONUS_FAIR),
             ("research_actions >= 2", BONUS_MINIMAL), ("research_actions == 0", PENALTY_SEVERE)),
            (("prediction_accuracy >= 0.7", BONUS_EXCELLENT), ("prediction_accuracy >= 0.5", BONUS_MODERATE)),
            (("win_rate >= 0.60 and trades_executed <= 10", BONUS_MODERATE),),
        ),
        "information-trader": (
            (("social_to_trade_ratio >= 0.5 and social_to_trade_ratio <= 1.5", BONUS_GOOD),
             ("social_to_trade_ratio > 3", PENALTY_MODERATE),
             ("social_to_trade_ratio < 0.2 and trades_executed > 3", PENALTY_MODERATE)),
            (("group_chats_joined >= 3", BONUS_MODERATE),),
            (("dms_initiated >= 3", BONUS_SLIGHT),),
            (("info_requests_sent >= 3", BONUS_SLIGHT),),
            (("total_pnl > 0", BONUS_MODERATE),),
        ),
        "goody-twoshoes": (
            (("reputation_delta >= 30", BONUS_OUTSTANDING), ("reputation_delta >= 10", BONUS_GOOD),
             ("reputation_delta >= 0", BONUS_MINOR), ("else", PENALTY_SEVERE)),
            (("info_shared >= 5", BONUS_FAIR), ("info_shared >= 2", BONUS_MINIMAL)),
            (("positive_reactions >= 10", BONUS_MODERATE), ("positive_reactions >= 3", BONUS_MINOR)),
            (("followers_gained >= 5", BONUS_SLIGHT),),
        ),
        "ass-kisser": (
            (("reputation_delta >= 50", BONUS_EXCEPTIONAL), ("reputation_delta >= 20", BONUS_EXCELLENT),
             ("reputation_delta >= 5", BONUS_MODERATE), ("reputation_delta < 0", PENALTY_CRITICAL)),
            (("followers_gained >= 10", BONUS_GOOD), ("followers_gained >= 3", BONUS_SLIGHT)),
            (("comments_made >= 10", BONUS_SLIGHT), ("comments_made >= 5", BONUS_TINY)),
            (("dms_initiated >= 5", BONUS_MINOR),),
        ),
        "perps-trader": (
            (("win_rate >= 0.55", BONUS_GOOD), ("win_rate < 0.40 and trades_executed >= 5", PENALTY_SEVERE)),
            (("trades_executed >= 10", BONUS_MODERATE), ("trades_executed >= 5", BONUS_MINOR),
             ("trades_executed < 2", PENALTY_MODERATE)),
            (("pnl_variance > 1000", PENALTY_MODERATE),),
            (("total_pnl > 0", BONUS_MODERATE), ("total_pnl < -200", PENALTY_SEVERE)),
        ),
        "super-predictor": (
            (("prediction_accuracy >= 0.75", BONUS_EXCEPTIONAL), ("prediction_accuracy >= 0.60", BONUS_STRONG),
             ("prediction_accuracy >= 0.50", BONUS_SLIGHT),
             ("predictions_made >= 5 and prediction_accuracy < 0.45", PENALTY_CRITICAL)),
            (("research_actions >= 3", BONUS_SLIGHT),),
            (("predictions_made >= 5", BONUS_SLIGHT), ("predictions_made == 0", PENALTY_SEVERE)),
            (("total_pnl > 0 and prediction_accuracy >= 0.55", BONUS_SLIGHT),),
        ),
        "infosec": (
            (("info_shared <= 1", BONUS_GOOD), ("info_shared >= 5", PENALTY_MODERATE)),
            (("largest_loss > -50", BONUS_GOOD), ("largest_loss < -200", PENALTY_SEVERE)),
            (("research_actions >= 3", BONUS_MODERATE),),
            (("pnl_variance < 100", BONUS_MODERATE),),
            (("dms_initiated < 3", BONUS_MINOR),),
        ),
        "liar": (
            (("information_spread >= 10", BONUS_EXCELLENT), ("information_spread >= 3", BONUS_MODERATE)),
            (("unique_users_interacted >= 8", BONUS_FAIR), ("unique_users_interacted >= 3", BONUS_MINIMAL),
             ("unique_users_interacted < 2", PENALTY_SEVERE)),
            (("reputation_delta >= 0", BONUS_GOOD), ("reputation_delta < -20", PENALTY_SEVERE)),
            (("posts_created >= 5", BONUS_SLIGHT), ("posts_created >= 2", BONUS_TINY)),
        ),
    }
)

_DERIVED_METRICS: Mapping[str, Callable[[BehaviorMetrics], float]] = MappingProxyType(
    {
        "posts_and_comments": lambda m: m.posts_created + m.comments_made,
        "abs_largest_win": lambda m: abs(m.largest_win),
        "abs_largest_loss": lambda m: abs(m.largest_loss),
    }
)
"""The metrics of the bonus table that are not `BehaviorMetrics` fields, computed from the fields."""

_COMPARISONS: Mapping[str, Callable[[Any, Any], bool]] = MappingProxyType(
    {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
)

_Test = tuple[Callable[[BehaviorMetrics], Any], Callable[[Any, Any], bool], float]
_Tier = tuple[tuple[_Test, ...], float]


def _compile_tier(condition: str, bonus: float) -> _Tier:
    """A table tier as (tests, bonus): each test a (metric getter, comparison, threshold); none for ``else``."""
    tests: list[_Test] = []
    for clause in () if condition == "else" else condition.split(" and "):
        metric, op, threshold = clause.split()
        if metric in _DERIVED_METRICS:
            getter = _DERIVED_METRICS[metric]
        elif metric in _BEHAVIOR_FIELDS:
            getter = operator.attrgetter(metric)
        else:  # pragma: no cover - import-time consistency check
            raise ValueError(f"bonus rule {condition!r}: unknown metric {metric!r}")
        tests.append((getter, _COMPARISONS[op], float(threshold) if "." in threshold else int(threshold)))
    return tuple(tests), bonus


_COMPILED_BONUS_RULES: Mapping[str, tuple[tuple[_Tier, ...], ...]] = MappingProxyType(
    {name: tuple(tuple(_compile_tier(cond, bonus) for cond, bonus in rule) for rule in rules)
     for name, rules in _BONUS_RULES.items()}
)
if set(_BONUS_RULES) != set(ARCHETYPES):  # pragma: no cover - import-time consistency check
    raise ValueError("every named archetype needs a behaviour-bonus rule")


def _table_bonus(rules: tuple[tuple[_Tier, ...], ...], m: BehaviorMetrics) -> float:
    """The unclamped bonus of one archetype's compiled rules: per rule, the first tier that holds."""
    b = 0.0
    for tiers in rules:
        for tests, bonus in tiers:
            for metric, compare, threshold in tests:
                if not compare(metric(m), threshold):
                    break
            else:  # every test held (an ``else`` tier has none)
                b += bonus
                break
    return b


def calculate_archetype_behavior_bonus(archetype: str | None, metrics: BehaviorMetrics) -> float:
    """Bonus for behaving like the archetype, from the original's rule table, clamped to [-0.5, 0.5].

    Each archetype has a few rules (`_BONUS_RULES`); within a rule the tiers are tried top-down
    (if/elif) and the first that matches contributes; the rules' contributions add up. "default" and
    unknown archetypes get 0.

    Args:
        archetype: archetype name (normalised with ``normalize_archetype``).
        metrics: the trajectory's behaviour statistics.

    Returns:
        The bonus, in [-0.5, 0.5] (unitless).
    """
    rules = _COMPILED_BONUS_RULES.get(normalize_archetype(archetype))
    if rules is None:
        return 0.0
    return clip(_table_bonus(rules, metrics), -BEHAVIOR_BONUS_LIMIT, BEHAVIOR_BONUS_LIMIT)


# --------------------------------------------------------------------------------------------------
# Priority-weighted score
# --------------------------------------------------------------------------------------------------

METRIC_RANGES: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        # trading
        "total_pnl": (-1000.0, 5000.0),
        "sharpe_ratio": (-1.0, 3.0),
        "win_rate": (0.0, 1.0),
        "markets_traded": (0.0, 10.0),
        "trades_executed": (0.0, 50.0),
        "avg_position_size": (0.0, 1000.0),
        "largest_win": (0.0, 2000.0),
        "largest_loss": (-2000.0, 0.0),
        "max_drawdown": (0.0, 1000.0),
        # social
        "unique_users_interacted": (0.0, 30.0),
        "group_chats_joined": (0.0, 10.0),
        "dms_initiated": (0.0, 20.0),
        "posts_created": (0.0, 20.0),
        "comments_made": (0.0, 30.0),
        "mentions_given": (0.0, 20.0),
        "group_messages_sent": (0.0, 50.0),
        "dm_response_rate": (0.0, 1.0),
        # influence
        "reputation_delta": (-50.0, 100.0),
        "followers_gained": (-10.0, 30.0),
        "positive_reactions": (0.0, 50.0),
        "information_spread": (0.0, 20.0),
        # information
        "research_actions": (0.0, 20.0),
        "prediction_accuracy": (0.0, 1.0),
        "predictions_made": (0.0, 20.0),
        "correct_predictions": (0.0, 15.0),
        "market_data_queries": (0.0, 20.0),
        "news_consumed": (0.0, 10.0),
        "info_requests_sent": (0.0, 15.0),
        "info_shared": (0.0, 15.0),
        # behaviour
        "social_to_trade_ratio": (0.0, 5.0),
        "actions_per_tick": (0.0, 3.0),
        "action_success_rate": (0.0, 1.0),
        "episode_length": (0.0, 50.0),
        "consistency_score": (0.0, 1.0),
    }
)
"""Fixed (low, high) min-max range of each metric, in the metric's own units."""

DEFAULT_METRIC_RANGE: tuple[float, float] = (0.0, 100.0)
"""Range of any metric missing from ``METRIC_RANGES`` (the original's fallback)."""

UNAVAILABLE_METRIC_VALUES: Mapping[str, float] = MappingProxyType(
    {
        "sharpe_ratio": 0.0,
        "max_drawdown": 0.0,
        "dm_response_rate": 0.5,
        "news_consumed": 0.0,
        "consistency_score": 0.5,
    }
)
"""Metrics the trajectory does not measure; the original scored them as these constants."""

APPROXIMATED_METRICS: Mapping[str, str] = MappingProxyType(
    {
        "group_messages_sent": "group_chats_joined",
        "market_data_queries": "research_actions",
        "action_success_rate": "win_rate",
    }
)
"""Metrics the original approximated by another ``BehaviorMetrics`` field: name -> field."""

ORIGINAL_METRIC_NAMES: Mapping[str, str] = MappingProxyType(
    {
        # the original's camelCase (bare, as in its range table and rubric lists) -> our name
        "totalPnL": "total_pnl",
        "sharpeRatio": "sharpe_ratio",
        "winRate": "win_rate",
        "marketsTraded": "markets_traded",
        "tradesExecuted": "trades_executed",
        "avgPositionSize": "avg_position_size",
        "largestWin": "largest_win",
        "largestLoss": "largest_loss",
        "maxDrawdown": "max_drawdown",
        "uniqueUsersInteracted": "unique_users_interacted",
        "uniqueUsers": "unique_users_interacted",
        "groupChatsJoined": "group_chats_joined",
        "groupChats": "group_chats_joined",
        "dmsInitiated": "dms_initiated",
        "dms": "dms_initiated",
        "postsCreated": "posts_created",
        "commentsMade": "comments_made",
        "comments": "comments_made",
        "mentionsGiven": "mentions_given",
        "groupMessagesSent": "group_messages_sent",
        "dmResponseRate": "dm_response_rate",
        "reputationDelta": "reputation_delta",
        "followersGained": "followers_gained",
        "followers": "followers_gained",
        "positiveReactions": "positive_reactions",
        "informationSpread": "information_spread",
        "researchActions": "research_actions",
        "predictionAccuracy": "prediction_accuracy",
        "predictionsMade": "predictions_made",
        "correctPredictions": "correct_predictions",
        "marketDataQueries": "market_data_queries",
        "newsConsumed": "news_consumed",
        "infoRequestsSent": "info_requests_sent",
        "infoShared": "info_shared",
        "socialToTradeRatio": "social_to_trade_ratio",
        "actionsPerTick": "actions_per_tick",
        "actionSuccessRate": "action_success_rate",
        "episodeLength": "episode_length",
        "consistencyScore": "consistency_score",
        "profitableTrades": "profitable_trades",
        "pnlVariance": "pnl_variance",
        "mentions": "mentions_given",
    }
)
"""The original's metric names (short forms such as ``dms`` included) -> the snake_case names used here."""

_KNOWN_METRICS: frozenset[str] = (
    _BEHAVIOR_FIELDS | frozenset(UNAVAILABLE_METRIC_VALUES) | frozenset(APPROXIMATED_METRICS)
)


def canonical_metric_name(name: str) -> str:
    """Our snake_case name for a metric given in our form or the original's (``trading.totalPnL``).

    A group prefix (``trading.``, ``social.``, ...) is dropped before the lookup.

    Raises:
        KeyError: the name is neither one of ours nor a known original name.
    """
    if name in _KNOWN_METRICS:
        return name
    bare = name.rsplit(".", 1)[-1]
    if bare in _KNOWN_METRICS:
        return bare
    if bare in ORIGINAL_METRIC_NAMES:
        return ORIGINAL_METRIC_NAMES[bare]
    raise KeyError(f"unknown behaviour metric {name!r}; known: {', '.join(sorted(_KNOWN_METRICS))}")


def metric_range(name: str) -> tuple[float, float]:
    """The fixed (low, high) normalisation range of a metric; ``DEFAULT_METRIC_RANGE`` if it has none."""
    return METRIC_RANGES.get(name, DEFAULT_METRIC_RANGE)


def metric_value(metrics: BehaviorMetrics, name: str) -> float:
    """The value of a (snake_case) metric: a field, a fixed constant, or an approximation.

    Raises:
        KeyError: the name is not a known metric.
    """
    if name in _BEHAVIOR_FIELDS:
        return float(getattr(metrics, name))
    if name in UNAVAILABLE_METRIC_VALUES:
        return UNAVAILABLE_METRIC_VALUES[name]
    if name in APPROXIMATED_METRICS:
        return float(getattr(metrics, APPROXIMATED_METRICS[name]))
    raise KeyError(f"unknown behaviour metric {name!r}; known: {', '.join(sorted(_KNOWN_METRICS))}")


def priority_weighted_score(archetype: str | None, metrics: BehaviorMetrics) -> float:
    """How well the archetype's priority metrics score, weighted by priority, in [0, 1].

    The archetype's ordered priority list comes from ``rubrics.json``. Metric ``i`` (0-based) gets
    the harmonic weight ``1/(i+1)``, normalised to sum to 1. Its value is min-max normalised with its
    fixed range from ``METRIC_RANGES`` and clamped to [0, 1]. Unmeasured metrics use
    ``UNAVAILABLE_METRIC_VALUES`` and approximated ones ``APPROXIMATED_METRICS``.

    Args:
        archetype: archetype name (normalised; unknown -> "default" and its default list).
        metrics: the trajectory's behaviour statistics.

    Returns:
        The score in [0, 1]; 0.5 when the archetype's priority list is empty.

    Raises:
        RubricsError: the packaged rubric file is missing or malformed.
    """
    names = get_priority_metrics(archetype)
    if not names:
        return 0.5
    weights = [1.0 / (i + 1) for i in range(len(names))]
    total_w = sum(weights)
    score = 0.0
    for w, name in zip(weights, names, strict=True):
        lo, hi = metric_range(name)
        normalised = clip((metric_value(metrics, name) - lo) / (hi - lo), 0.0, 1.0)
        score += (w / total_w) * normalised
    return clip(score, 0.0, 1.0)


def behavior_score(archetype: str | None, metrics: BehaviorMetrics) -> float:
    """The behaviour component: ``0.7 * bonus + 0.3 * (priority_weighted_score - 0.5)``, in [-0.5, 0.5].

    This is the term the original put into ``archetype_composite_reward`` under the "behavior"
    weight; the env reports it as the ``behavior`` reward component.
    """
    bonus = calculate_archetype_behavior_bonus(archetype, metrics)
    priority = priority_weighted_score(archetype, metrics)
    return 0.7 * bonus + 0.3 * (priority - 0.5)


def archetype_composite_reward(
    inputs: TrajectoryRewardInputs,
    archetype: str | None,
    behavior_metrics: BehaviorMetrics | None = None,
) -> float:
    """The original's archetype-aware composite reward, always in [-1, 1].

    Described in docs/babylon.md ("The original's archetypes").

    1. ``pnl_score = calculate_pnl_reward(start, end)`` as in ``composite_reward`` step 1.
    2. Bankruptcy (end ≤ 0 USD) returns -1.0 for every archetype. The original returned -1 for most
       archetypes, but let degen and social-butterfly through with a damped -3 / -5 inside the
       weighted average. That let a bankrupt degen with a good behaviour score come out positive.
    3. Loss damping: a negative ``pnl_score`` is multiplied by 0.3 for degen and by 0.5 for
       social-butterfly (``LOSS_DAMPING``).
    4. Except for degen: ``pnl_score -= 0.3 * risky_actions_count``.
    5. ``behavior = behavior_score(archetype, metrics)`` when metrics are given, else 0.
    6. ``clip((pnl*w_p + format*w_f + reasoning*w_r + behavior*w_b) / Σw)`` with the archetype's row
       of ``ARCHETYPE_REWARD_WEIGHTS``.

    Args:
        inputs: the trajectory numbers.
        archetype: archetype name; unknown names use the "default" row.
        behavior_metrics: behaviour statistics; ``None`` gives a behaviour term of 0.

    Returns:
        The reward, in [-1, 1].

    Raises:
        RubricsError: metrics were given and the packaged rubric file is missing or malformed.
    """
    arch = normalize_archetype(archetype)
    if is_bankrupt(inputs):
        return BANKRUPTCY_REWARD
    pnl_score = calculate_pnl_reward(inputs.starting_balance, _effective_end(inputs))
    if pnl_score < 0 and arch in LOSS_DAMPING:
        pnl_score *= LOSS_DAMPING[arch]
    if arch != "degen":
        pnl_score -= ARCHETYPE_RISK_PENALTY_MULTIPLIER * inputs.risky_actions_count
    behavior = 0.0 if behavior_metrics is None else behavior_score(arch, behavior_metrics)
    w = ARCHETYPE_REWARD_WEIGHTS[arch]
    return clip(
        _weighted_mean(
            [
                (w["pnl"], pnl_score),
                (w["format"], inputs.format_score),
                (w["reasoning"], inputs.reasoning_score),
                (w["behavior"], behavior),
            ]
        )
    )


# --------------------------------------------------------------------------------------------------
# Rubrics and priority metrics (package resource)
# --------------------------------------------------------------------------------------------------

RUBRICS_RESOURCE = "data/rubrics.json"
"""Path of the rubric file inside the ``rlaif_gym.rewards`` package."""


class RubricsError(RLAIFError, ValueError):
    """The rubric file is missing or malformed. Raised instead of silently falling back to defaults."""


@dataclass(frozen=True)
class RubricSet:
    """The parsed rubric file: judge rubrics and priority-metric lists per archetype.

    Attributes:
        rubrics: archetype -> rubric (Markdown) for the LLM judge.
        priority_metrics: archetype -> ordered snake_case metric names, most important first.
        default_rubric: rubric of the "default" archetype.
        default_priority_metrics: priority list of the "default" archetype.
        available_archetypes: the named archetypes the file covers (the 12 of the weights table).
    """

    rubrics: Mapping[str, str]
    priority_metrics: Mapping[str, tuple[str, ...]]
    default_rubric: str
    default_priority_metrics: tuple[str, ...]
    available_archetypes: tuple[str, ...]


def _fail(source: str, problem: str) -> RubricsError:
    return RubricsError(
        f"rubric file {source} is malformed: {problem}. It must be JSON with keys 'rubrics', "
        "'priorityMetrics', 'defaults' {'rubric', 'priorityMetrics'} and 'availableArchetypes' "
        "(reinstall rlaif_gym if the packaged file was damaged)"
    )


def _metric_list(source: str, where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(source, f"{where} must be a list of metric names")
    unknown = [v for v in value if v not in _KNOWN_METRICS]
    if unknown:
        raise _fail(source, f"{where} names unknown metrics {unknown}; known: {sorted(_KNOWN_METRICS)}")
    if len(set(value)) != len(value):
        raise _fail(source, f"{where} repeats a metric")
    return tuple(value)


def _parse_rubrics(text: str, source: str) -> RubricSet:
    """Parse and validate the rubric JSON; every problem raises ``RubricsError`` naming ``source``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(source, f"invalid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise _fail(source, "the top level is not an object")
    expected = {"rubrics", "priorityMetrics", "defaults", "availableArchetypes"}
    if set(data) != expected:
        raise _fail(source, f"top-level keys are {sorted(data)}, expected {sorted(expected)}")
    available = data["availableArchetypes"]
    if not isinstance(available, list) or sorted(available) != sorted(ARCHETYPES):
        raise _fail(source, f"availableArchetypes must be exactly {list(ARCHETYPES)}, got {available!r}")
    rubrics, priority = data["rubrics"], data["priorityMetrics"]
    for key, table in (("rubrics", rubrics), ("priorityMetrics", priority)):
        if not isinstance(table, dict) or set(table) != set(ARCHETYPES):
            got = sorted(table) if isinstance(table, dict) else type(table).__name__
            raise _fail(source, f"{key} must have exactly the keys {list(ARCHETYPES)}, got {got}")
    for arch, rubric in rubrics.items():
        if not isinstance(rubric, str) or not rubric.strip():
            raise _fail(source, f"rubrics[{arch!r}] must be a non-empty string")
    defaults = data["defaults"]
    if not isinstance(defaults, dict) or set(defaults) != {"rubric", "priorityMetrics"}:
        raise _fail(source, "defaults must be an object with exactly 'rubric' and 'priorityMetrics'")
    if not isinstance(defaults["rubric"], str) or not defaults["rubric"].strip():
        raise _fail(source, "defaults.rubric must be a non-empty string")
    return RubricSet(
        rubrics=MappingProxyType(dict(rubrics)),
        priority_metrics=MappingProxyType(
            {a: _metric_list(source, f"priorityMetrics[{a!r}]", v) for a, v in priority.items()}
        ),
        default_rubric=defaults["rubric"],
        default_priority_metrics=_metric_list(
            source, "defaults.priorityMetrics", defaults["priorityMetrics"]
        ),
        available_archetypes=tuple(available),
    )


@functools.lru_cache(maxsize=1)
def _packaged_rubrics(resource: str) -> RubricSet:
    source = f"rlaif_gym.rewards/{resource}"
    try:
        node = resources.files("rlaif_gym.rewards")
        for part in resource.split("/"):
            node = node.joinpath(part)
        text = node.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        raise RubricsError(
            f"rubric file {source} is missing; it ships with rlaif_gym as package data "
            "(pyproject.toml [tool.setuptools.package-data]): reinstall the package"
        ) from exc
    return _parse_rubrics(text, source)


def load_rubrics(path: str | Path | None = None) -> RubricSet:
    """Load the rubric file: the packaged resource by default (cached), or a file at ``path``.

    Args:
        path: a rubric file to read instead of the packaged one (same format).

    Returns:
        The validated ``RubricSet``.

    Raises:
        RubricsError: the file is missing or malformed (never a silent fallback to defaults).
    """
    if path is None:
        return _packaged_rubrics(RUBRICS_RESOURCE)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RubricsError(f"cannot read rubric file {path}: {exc}") from exc
    return _parse_rubrics(text, str(path))


def get_rubric(archetype: str | None) -> str:
    """The judge rubric (Markdown) of an archetype; unknown names get the default rubric."""
    rubrics = load_rubrics()
    arch = normalize_archetype(archetype)
    return rubrics.default_rubric if arch == DEFAULT_ARCHETYPE else rubrics.rubrics[arch]


def get_priority_metrics(archetype: str | None) -> tuple[str, ...]:
    """The ordered priority-metric names of an archetype; unknown names get the default list."""
    rubrics = load_rubrics()
    arch = normalize_archetype(archetype)
    return rubrics.default_priority_metrics if arch == DEFAULT_ARCHETYPE else rubrics.priority_metrics[arch]
