"""The original system's reward helpers, with its defects fixed (the port; `rewards.original` forwards to it).

This module's one job is to reproduce the original's trajectory- and tick-level reward formulas
(docs/babylon.md ("The original's reward formulas", "The original's ranking helpers")) as plain
functions over plain numbers, so that rewards computed here can be compared with the original's.
The envs do not call them: their `reward_scheme="original"` is `rewards.composite.RewardFunction`
over the step's transition. Everything here is pure (no I/O, no global state) and every *reward* it
returns lies in [-1, 1]. `relative_scores` is the one helper the new design uses (the LLM judge's
health checks); `rlaif_gym.rewards` exports it.

Fixes relative to the original (docs/babylon.md ("The original's defects", 7 and 9)):

- Bankruptcy (end balance ≤ 0 USD) is -1.0, never the original's unclipped -10.0.
- The risk penalty (0.5 per risky action) is applied in both composite paths; the original skipped
  it in the legacy path.
- The composite path is chosen explicitly by ``mode``; ``"auto"`` keeps the original's fragile rule
  ("format or reasoning non-zero") for compatibility.
- ``calculate_risk_reward`` matches ``buy``/``long``/``open`` as whole tokens of the action type,
  so ``"buyer_info"`` or ``"belong"`` are not risky.
- ``relative_scores`` gives tied rewards equal scores (average rank).
- The original's ``pairwise_preferences_to_scores`` (a win rate presented as Bradley–Terry) is kept
  under its own name; the real maximum-likelihood fit, ``bradley_terry_scores``, is
  `rewards.bradley_terry`'s (this package sits below `rewards` and does not import it).
- ``RewardNormalizer`` starts its Welford M2 accumulator at 0, so its std is the sample std.

Standard library and numpy only (below `rewards`, which forwards these names).

Example:
    >>> inputs = TrajectoryRewardInputs(final_pnl=100.0, end_balance=10_100.0,
    ...                                 format_score=0.5, reasoning_score=1.0)
    >>> round(composite_reward(inputs), 10)
    0.4
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

__all__ = [
    "BANKRUPTCY_REWARD",
    "DEFAULT_LEGACY_WEIGHTS",
    "PNL_SCALE",
    "RISKY_ACTION_TOKENS",
    "RISK_EXPOSURE_THRESHOLD",
    "RISK_PENALTY",
    "RewardNormalizer",
    "TrajectoryRewardInputs",
    "action_quality_reward",
    "calculate_pnl_reward",
    "calculate_risk_reward",
    "clip",
    "composite_reward",
    "efficiency_reward",
    "is_bankrupt",
    "pairwise_preferences_to_scores",
    "pnl_reward",
    "ranking_to_scores",
    "relative_scores",
    "risk_adjusted_reward",
]

BANKRUPTCY_REWARD: float = -1.0
"""Reward for an episode that ends with a balance ≤ 0 USD. The original returned -10.0 (unclipped)."""

PNL_SCALE: float = 10.0
"""``calculate_pnl_reward`` multiplies the fractional return by this, so a 10% return saturates at +1."""

RISK_EXPOSURE_THRESHOLD: float = 0.80
"""Exposure (a fraction in [0, 1]) above which adding to a position is risky."""

RISK_PENALTY: float = 0.5
"""Penalty per risky action, subtracted from the P&L term of ``composite_reward`` (both paths)."""

RISKY_ACTION_TOKENS: frozenset[str] = frozenset({"buy", "long", "open"})
"""Whole tokens of an action type that mark it as adding exposure."""

DEFAULT_LEGACY_WEIGHTS: tuple[float, float, float, float] = (0.4, 0.3, 0.15, 0.15)
"""Legacy-path weights (pnl, risk-adjusted, efficiency, action quality) used when all four are 0."""

_COUNT_FIELDS = (
    "risky_actions_count",
    "num_steps",
    "trades_executed",
    "successful_trades",
    "total_actions",
    "successful_actions",
)


def clip(x: float, lo: float = -1.0, hi: float = 1.0) -> float:
    """Clamp ``x`` to [lo, hi] (default [-1, 1], the range of every reward here).

    Unlike the original's ``max(-1, min(1, x))``, which silently turns NaN into +1, a NaN raises.

    Args:
        x: the value to clamp; ±inf clamp to the bounds.
        lo: lower bound.
        hi: upper bound.

    Returns:
        ``x`` limited to [lo, hi], as a Python float.

    Raises:
        ValueError: ``x`` is NaN.
    """
    x = float(x)
    if math.isnan(x):
        raise ValueError("clip() got NaN; a reward input is undefined (check for 0/0 upstream)")
    return max(lo, min(hi, x))


@dataclass(frozen=True)
class TrajectoryRewardInputs:
    """The numbers a trajectory (or a single tick) reward is computed from.

    The formulas that read them: docs/babylon.md ("The original's reward formulas").

    Money is in USD; counts are non-negative integers. Validated on construction so that a NaN
    never reaches a comparison, where it would silently take the "else" branch.

    Attributes:
        final_pnl: profit and loss over the episode (or the tick), USD.
        starting_balance: balance at the start, USD.
        end_balance: balance at the end, USD. When equal to ``starting_balance`` the composite uses
            ``starting_balance + final_pnl`` instead (the original's rule).
        pnl_variance: variance of the P&L samples, USD².
        max_drawdown: largest peak-to-trough fall of the balance, USD.
        max_exposure: largest exposure reached, a fraction in [0, 1].
        risky_actions_count: actions that added exposure above the risk threshold.
        format_score: response-format score, in [-1, 0.5] for the original's XML check.
        reasoning_score: reasoning quality, in [0, 1].
        num_steps: steps in the trajectory.
        trades_executed: trades attempted.
        successful_trades: trades that succeeded (≤ ``trades_executed``).
        total_actions: actions taken.
        successful_actions: actions that succeeded (≤ ``total_actions``).
    """

    final_pnl: float = 0.0
    starting_balance: float = 10_000.0
    end_balance: float = 10_000.0
    pnl_variance: float = 0.0
    max_drawdown: float = 0.0
    max_exposure: float = 0.0
    risky_actions_count: int = 0
    format_score: float = 0.0
    reasoning_score: float = 0.0
    num_steps: int = 0
    trades_executed: int = 0
    successful_trades: int = 0
    total_actions: int = 0
    successful_actions: int = 0

    def __post_init__(self) -> None:
        """Reject NaN/inf values, negative or non-integer counts, and more successes than attempts."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _COUNT_FIELDS:
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                    raise ValueError(f"TrajectoryRewardInputs.{f.name} must be an integer ≥ 0, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"TrajectoryRewardInputs.{f.name} must be a finite number, got {value!r}")
        if self.successful_actions > self.total_actions:
            raise ValueError(
                f"successful_actions ({self.successful_actions}) > total_actions ({self.total_actions})"
            )
        if self.successful_trades > self.trades_executed:
            raise ValueError(
                f"successful_trades ({self.successful_trades}) > trades_executed ({self.trades_executed})"
            )


# --------------------------------------------------------------------------------------------------
# Primitive rewards
# --------------------------------------------------------------------------------------------------


def calculate_pnl_reward(start: float, end: float) -> float:
    """Return on the starting balance, scaled x10 and clipped: a 10% gain is +1, a 10% loss -1.

    Args:
        start: starting balance, USD.
        end: ending balance, USD.

    Returns:
        ``BANKRUPTCY_REWARD`` (-1.0) when ``end ≤ 0`` (the original returned -10.0); 0.0 when
        ``start ≤ 0`` (no meaningful return); otherwise ``clip(10 * (end - start) / start)``.
    """
    if end <= 0:
        return BANKRUPTCY_REWARD
    if start <= 0:
        return 0.0
    return clip(PNL_SCALE * (end - start) / start)


def _action_tokens(action_type: str) -> set[str]:
    """Split an action type into lowercase tokens at ``_``, ``-``, spaces and camelCase humps."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", action_type)
    return {t for t in re.split(r"[^a-z0-9]+", spaced.lower()) if t}


def calculate_risk_reward(exposure: float, action_type: str | None) -> float:
    """-0.5 for adding exposure (a buy, long or open) when exposure is already above 80%.

    The action type is split into tokens (snake_case, kebab-case, camelCase), and it is risky when a
    token is exactly ``buy``, ``long`` or ``open``: ``"buy_prediction"``, ``"open_perp"`` and
    ``"open_long"`` are risky, ``"buyer_info"`` and ``"belong"`` are not. The original used substring
    matching (docs/babylon.md ("The original's defects", 8)).

    Args:
        exposure: current exposure as a fraction in [0, 1] (the original used open positions / 10).
        action_type: the action's type; ``None`` or empty is not risky.

    Returns:
        ``-RISK_PENALTY`` (-0.5) when ``exposure > 0.80`` and the action adds exposure, else 0.0.

    Raises:
        ValueError: ``exposure`` is NaN.
    """
    if math.isnan(exposure):
        raise ValueError("calculate_risk_reward() got exposure=NaN")
    if not action_type or exposure <= RISK_EXPOSURE_THRESHOLD:
        return 0.0
    return -RISK_PENALTY if _action_tokens(action_type) & RISKY_ACTION_TOKENS else 0.0


def pnl_reward(inputs: TrajectoryRewardInputs) -> float:
    """Unscaled return ``clip(final_pnl / starting_balance)``; 0.0 when the start is ≤ 0 USD.

    Note there is no x10 here (unlike ``calculate_pnl_reward``): this is the legacy path's P&L term.
    """
    if inputs.starting_balance <= 0:
        return 0.0
    return clip(inputs.final_pnl / inputs.starting_balance)


def risk_adjusted_reward(inputs: TrajectoryRewardInputs) -> float:
    """``pnl_reward`` divided by the P&L std and reduced by the drawdown, clipped to [-1, 1].

    Steps: ``b = pnl_reward``; if ``pnl_variance > 0`` then ``b = clip(b / sqrt(pnl_variance))``; if
    ``max_drawdown > 0`` (and the start is > 0) then ``b -= 0.5 * max_drawdown / starting_balance``.
    The start guard is ours: the original divided by a zero start.
    """
    b = pnl_reward(inputs)
    if inputs.pnl_variance > 0:
        b = clip(b / math.sqrt(inputs.pnl_variance))
    if inputs.max_drawdown > 0 and inputs.starting_balance > 0:
        b -= 0.5 * inputs.max_drawdown / inputs.starting_balance
    return clip(b)


def efficiency_reward(inputs: TrajectoryRewardInputs) -> float:
    """P&L per action: ``clip(pnl_reward / ln(1 + total_actions))``; ``pnl_reward`` if no actions."""
    base = pnl_reward(inputs)
    if inputs.total_actions > 0:
        return clip(base / math.log1p(inputs.total_actions))
    return base


def action_quality_reward(inputs: TrajectoryRewardInputs) -> float:
    """Share of actions that succeeded, in [0, 1]; 0.5 (neutral) when there were no actions."""
    if inputs.total_actions > 0:
        return inputs.successful_actions / inputs.total_actions
    return 0.5


def is_bankrupt(inputs: TrajectoryRewardInputs) -> bool:
    """True when the effective end balance (see ``composite_reward`` step 1) is ≤ 0 USD."""
    return _effective_end(inputs) <= 0


def _effective_end(inputs: TrajectoryRewardInputs) -> float:
    """``end_balance``, or ``starting_balance + final_pnl`` when the end equals the start (original rule)."""
    if inputs.end_balance != inputs.starting_balance:
        return inputs.end_balance
    return inputs.starting_balance + inputs.final_pnl


def _check_weights(**weights: float) -> None:
    for name, w in weights.items():
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"composite_reward: {name} must be a finite number ≥ 0, got {w!r}")


def _weighted_mean(pairs: Sequence[tuple[float, float]]) -> float:
    """Σ w·x / Σ w for non-negative weights, computed so finite inputs never give NaN; 0 if Σw = 0.

    Weights are normalised before multiplying, so each term is at most |x| and a sum of finite
    terms can overflow to ±inf (which clips) but never reach inf - inf.
    """
    top = max(w for w, _ in pairs)
    if top <= 0:
        return 0.0
    scaled = [(w / top, x) for w, x in pairs]
    total_w = sum(w for w, _ in scaled)
    return sum((w / total_w) * x for w, x in scaled)


# --------------------------------------------------------------------------------------------------
# Composite
# --------------------------------------------------------------------------------------------------


def composite_reward(
    inputs: TrajectoryRewardInputs,
    pnl_weight: float = 0.5,
    format_weight: float = 0.3,
    reasoning_weight: float = 0.2,
    risk_weight: float = 0.0,
    efficiency_weight: float = 0.0,
    quality_weight: float = 0.0,
    *,
    mode: Literal["auto", "quality", "legacy"] = "auto",
) -> float:
    """The original's composite reward (docs/babylon.md ("The original's reward formulas")), always in [-1, 1].

    1. ``pnl_score = calculate_pnl_reward(start, end)``, with ``end = starting_balance + final_pnl``
       when ``end_balance == starting_balance``.
    2. Bankruptcy (that end ≤ 0 USD) returns ``BANKRUPTCY_REWARD`` = -1.0 in every mode. The
       original returned an unclipped -10.0, outside the range of every other reward.
    3. The risk penalty ``0.5 * risky_actions_count`` is subtracted from the P&L term, in *both*
       paths (the original skipped it in the legacy path).
    4. Quality path: ``clip((pnl_score*pnl_w + format*fmt_w + reasoning*rsn_w) / (pnl_w+fmt_w+rsn_w))``,
       or 0 when those weights sum to 0.
    5. Legacy path: ``clip((w1*(pnl_reward - penalty) + w2*risk_adjusted + w3*efficiency +
       w4*action_quality) / Σw)`` with ``(w1..w4) = (pnl_w, risk_w, eff_w, qual_w)``, or
       ``DEFAULT_LEGACY_WEIGHTS`` (0.4, 0.3, 0.15, 0.15) when all four are 0. The legacy P&L term is
       the unscaled ``pnl_reward``, not the x10 ``pnl_score``.

    Args:
        inputs: the trajectory or tick numbers.
        pnl_weight: weight of the P&L term (both paths).
        format_weight: weight of ``format_score`` (quality path).
        reasoning_weight: weight of ``reasoning_score`` (quality path).
        risk_weight: weight of ``risk_adjusted_reward`` (legacy path).
        efficiency_weight: weight of ``efficiency_reward`` (legacy path).
        quality_weight: weight of ``action_quality_reward`` (legacy path).
        mode: which path to take. ``"quality"`` or ``"legacy"`` choose one explicitly; ``"auto"``
            keeps the original's rule (quality when ``format_score`` or ``reasoning_score`` is
            non-zero, else legacy), which flips paths when a format score happens to be exactly 0.

    Returns:
        The reward, in [-1, 1].

    Raises:
        ValueError: a weight is negative or not finite, or ``mode`` is unknown.
    """
    _check_weights(
        pnl_weight=pnl_weight,
        format_weight=format_weight,
        reasoning_weight=reasoning_weight,
        risk_weight=risk_weight,
        efficiency_weight=efficiency_weight,
        quality_weight=quality_weight,
    )
    if mode not in ("auto", "quality", "legacy"):
        raise ValueError(f"composite_reward: mode must be 'auto', 'quality' or 'legacy', got {mode!r}")
    if is_bankrupt(inputs):
        return BANKRUPTCY_REWARD
    penalty = RISK_PENALTY * inputs.risky_actions_count
    if mode == "auto":
        mode = "quality" if (inputs.format_score != 0 or inputs.reasoning_score != 0) else "legacy"

    if mode == "quality":
        pnl_score = calculate_pnl_reward(inputs.starting_balance, _effective_end(inputs)) - penalty
        return clip(
            _weighted_mean(
                [
                    (pnl_weight, pnl_score),
                    (format_weight, inputs.format_score),
                    (reasoning_weight, inputs.reasoning_score),
                ]
            )
        )

    weights = (pnl_weight, risk_weight, efficiency_weight, quality_weight)
    if all(w == 0 for w in weights):
        weights = DEFAULT_LEGACY_WEIGHTS
    terms = (
        pnl_reward(inputs) - penalty,
        risk_adjusted_reward(inputs),
        efficiency_reward(inputs),
        action_quality_reward(inputs),
    )
    return clip(_weighted_mean(list(zip(weights, terms, strict=True))))


# --------------------------------------------------------------------------------------------------
# Ranking helpers
# --------------------------------------------------------------------------------------------------


def relative_scores(rewards: Sequence[float]) -> list[float]:
    """Group-relative scores in [0, 1]: the rank of each reward divided by ``n - 1``.

    Tied rewards share the average of their ranks, so equal rewards get equal scores (the original
    broke ties by index: defect 9). The lowest reward scores 0 and the highest 1 when
    all differ; a group where every reward is equal scores 0.5 throughout.

    Args:
        rewards: one reward per member of the group (any scale; ±inf allowed).

    Returns:
        One score per reward, in input order; all 0.5 when there are fewer than 2.

    Raises:
        ValueError: a reward is NaN (it cannot be ranked).
    """
    arr = np.asarray(list(rewards), dtype=np.float64)
    n = arr.size
    if n < 2:
        return [0.5] * n
    if np.isnan(arr).any():
        raise ValueError("relative_scores() got NaN; NaN rewards cannot be ranked")
    order = np.argsort(arr, kind="stable")
    ordered = arr[order]
    ranks = np.empty(n, dtype=np.float64)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and ordered[j + 1] == ordered[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0
        i = j + 1
    return [float(r) for r in ranks / (n - 1)]


def ranking_to_scores(ranks: Sequence[int]) -> list[float]:
    """Scores in [0, 1] from 1-based ranks (1 = best): ``(n - rank) / (n - 1)``.

    Args:
        ranks: the rank of each item, 1..n; ties are allowed and keep equal scores.

    Returns:
        One score per item; all 0.5 when there are fewer than 2.

    Raises:
        ValueError: a rank is outside 1..n (the original returned scores outside [0, 1]).
    """
    ranks = list(ranks)
    n = len(ranks)
    if n < 2:
        return [0.5] * n
    for r in ranks:
        if not 1 <= r <= n:
            raise ValueError(f"ranking_to_scores(): rank {r!r} is outside 1..{n}")
    return [(n - r) / (n - 1) for r in ranks]


def pairwise_preferences_to_scores(n: int, preferences: Iterable[tuple[int, int]]) -> list[float]:
    """The original's pairwise scorer: each item's **win rate**, not a Bradley–Terry fit.

    ``score_i = wins_i / comparisons_i``. It ignores how strong the opponents were, so beating the
    best item counts the same as beating the worst; use `rewards.bradley_terry_scores` for that. Kept for
    compatibility with the original's numbers.

    Args:
        n: number of items.
        preferences: ``(winner, loser)`` index pairs. An out-of-range index is ignored on its own
            side only (the other side's count still changes), as in the original.

    Returns:
        One score in [0, 1] per item; 0.5 for an item never compared, and all 0.5 when ``n < 2`` or
        there are no preferences.
    """
    prefs = list(preferences)
    if n < 2 or not prefs:
        return [0.5] * max(n, 0)
    wins = [0] * n
    comparisons = [0] * n
    for winner, loser in prefs:
        if 0 <= winner < n:
            wins[winner] += 1
            comparisons[winner] += 1
        if 0 <= loser < n:
            comparisons[loser] += 1
    return [w / c if c else 0.5 for w, c in zip(wins, comparisons, strict=True)]


# --------------------------------------------------------------------------------------------------
# Normalizer
# --------------------------------------------------------------------------------------------------


class RewardNormalizer:
    """Running standardisation of rewards with Welford's algorithm: ``(r - mean) / std``.

    Welford's M2 accumulator starts at 0, so ``std`` is exactly the sample standard deviation
    (ddof=1) of the rewards seen. The original started it at 1.0, which biased the std upward
    (docs/babylon.md ("The original's defects", 9)).

    Args:
        eps: added to the variance before the square root, so a constant stream does not divide by 0.
    """

    def __init__(self, eps: float = 1e-8) -> None:
        """Start empty: mean 0, M2 0, count 0."""
        self.eps = float(eps)
        self._mean = 0.0
        self._m2 = 0.0
        self.count = 0

    @property
    def mean(self) -> float:
        """Mean of the rewards seen so far (0.0 before any)."""
        return self._mean

    @property
    def variance(self) -> float:
        """Sample variance (ddof=1) of the rewards seen, reward units²; 1.0 before two rewards."""
        if self.count < 2:
            return 1.0
        return self._m2 / (self.count - 1)

    @property
    def std(self) -> float:
        """Sample standard deviation (ddof=1), without ``eps``; 1.0 before two rewards."""
        return math.sqrt(self.variance)

    def update(self, reward: float) -> None:
        """Add one reward to the running statistics.

        Raises:
            ValueError: the reward is NaN or infinite (it would poison every later statistic).
        """
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"RewardNormalizer.update() got a non-finite reward {reward!r}")
        self.count += 1
        delta = reward - self._mean
        self._mean += delta / self.count
        self._m2 += delta * (reward - self._mean)

    def normalize(self, reward: float) -> float:
        """``(reward - mean) / sqrt(variance + eps)``; the reward unchanged before two updates."""
        if self.count < 2:
            return float(reward)
        return (float(reward) - self._mean) / math.sqrt(self.variance + self.eps)

    def update_batch(self, rewards: Iterable[float]) -> None:
        """``update`` each reward in order."""
        for r in rewards:
            self.update(r)

    def normalize_batch(self, rewards: Iterable[float]) -> list[float]:
        """``normalize`` each reward with the current statistics (does not update them)."""
        return [self.normalize(r) for r in rewards]
