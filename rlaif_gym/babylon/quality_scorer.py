"""The original's QualityScorer (`quality_scorer.py`): length penalties, the execution score, the total and
`score_response`, and the archetype's quality bonus.

Part of the port `babylon.quality` re-exports (docs/babylon.md ("The original's quality heuristics")).
Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .format_validator import _parse_think, validate_response_format
from .keywords import _as_float, _as_text, _clip

__all__ = [
    "LengthPenalties", "QualityScore", "archetype_quality_bonus", "combined_format_score", "execution_score",
    "length_penalties", "quality_total", "score_response",
]


@dataclass(frozen=True)
class LengthPenalties:
    """The QualityScorer's length penalties.

    Attributes:
        thinking: in [-0.5, 0].
        response: in [-0.4, 0].
        combined: ``max(-1, 0.6*thinking + 0.4*response)``, in [-0.46, 0].
    """

    thinking: float
    response: float
    combined: float


def _thinking_penalty(length: int) -> float:
    if length < 30:
        return -0.5
    if length < 100:
        return -0.3
    if length < 150:
        return -0.1
    if length <= 600:
        return 0.0
    if length <= 1000:
        return -0.1
    return -0.2


def _response_penalty(length: int) -> float:
    if length < 50:
        return -0.4
    if length < 150:
        return -0.2
    if length <= 1000:
        return 0.0
    if length <= 2000:
        return -0.1
    return -0.2


def length_penalties(thinking: str, response: str) -> LengthPenalties:
    """The QualityScorer's length penalties (docs/babylon.md ("The original's quality heuristics")).

    Thinking (stripped length): < 30 → -0.5; < 100 → -0.3; < 150 → -0.1; ≤ 600 → 0; ≤ 1000 → -0.1;
    above → -0.2. Response (raw length): < 50 → -0.4; < 150 → -0.2; ≤ 1000 → 0; ≤ 2000 → -0.1;
    above → -0.2. Combined: ``max(-1, 0.6*thinking + 0.4*response)``.

    Args:
        thinking: the think-tag contents (the original passed their stripped length).
        response: the whole reply.

    Returns:
        The three penalties; a non-string argument counts as empty.
    """
    think = _thinking_penalty(len(_as_text(thinking).strip()))
    resp = _response_penalty(len(_as_text(response)))
    return LengthPenalties(thinking=think, response=resp, combined=max(-1.0, 0.6 * think + 0.4 * resp))


def _is_active(action_type: str | None) -> bool:
    return action_type not in (None, "wait")


def execution_score(
    has_valid_action: bool,
    action_type: str | None,
    *,
    executed: bool = False,
    success: bool = False,
    pnl: float = 0.0,
) -> float:
    """The QualityScorer's execution score.

    When the action was executed: ``0.5 + clip(bonus, -0.3, 0.3)`` where the bonus on success is
    +0.1, plus ``min(0.2, pnl/1000)`` if pnl > 0 or -0.1 if pnl < -100, plus 0.05 for a non-wait
    action; on failure it is -0.1. Without execution: 0.6 for a valid non-wait action, 0.5 for a
    valid wait (or typeless) action, 0.2 for an invalid one.

    "Non-wait" means ``action_type not in (None, "wait")`` on both paths (the original's executed
    path saw only typed actions).

    Args:
        has_valid_action: `FormatReport.has_valid_action`.
        action_type: the lower-cased action type, or None.
        executed: the action was run by an executor (the original ran it only when given a scenario).
        success: the executor reported success.
        pnl: the executor's P&L for the action, USD (non-numbers count as 0).

    Returns:
        A score in [0.2, 0.8].
    """
    if executed:
        value = _as_float(pnl, 0.0)
        if success:
            bonus = 0.1
            if value > 0:
                bonus += min(0.2, value / 1000)
            elif value < -100:
                bonus -= 0.1
            if _is_active(action_type):
                bonus += 0.05
        else:
            bonus = -0.1
        return 0.5 + _clip(bonus, -0.3, 0.3)
    if has_valid_action:
        return 0.6 if _is_active(action_type) else 0.5
    return 0.2


def quality_total(fmt: float, rsn: float, exec_score: float, length_penalty: float) -> float:
    """The QualityScorer's total: ``clip01(.4 fmt + .3 rsn + .2 exec + .1 length_penalty)``.

    Args:
        fmt: the format validator's format score, in [0, 1].
        rsn: the format validator's reasoning score, in [0, 1].
        exec_score: `execution_score`.
        length_penalty: `LengthPenalties.combined` (≤ 0, so it only subtracts).

    Returns:
        A score in [0, 1]; NaN anywhere gives 0.0.
    """
    values = [_as_float(v, math.nan) for v in (fmt, rsn, exec_score, length_penalty)]
    return _clip(0.4 * values[0] + 0.3 * values[1] + 0.2 * values[2] + 0.1 * values[3], 0.0, 1.0)


def combined_format_score(fmt: float, length_penalty: float) -> float:
    """Format with the length penalty folded in: ``max(0, fmt + 0.5 * length_penalty)``.

    The original passed this, not the raw format score, to its rewards.

    Args:
        fmt: the format validator's format score.
        length_penalty: `LengthPenalties.combined`.

    Returns:
        A score >= 0 (at most `fmt`); NaN gives 0.0.
    """
    value = _as_float(fmt, math.nan) + 0.5 * _as_float(length_penalty, math.nan)
    return 0.0 if math.isnan(value) else max(0.0, value)


@dataclass(frozen=True)
class QualityScore:
    """The QualityScorer's verdict on one reply.

    Attributes:
        format_score: `FormatReport.format_score`, in [0, 1].
        reasoning_score: `FormatReport.reasoning_score`, in [0, 1].
        execution_score: `execution_score`, in [0.2, 0.8].
        length_penalty: `LengthPenalties.combined`, in [-0.46, 0].
        has_thinking: a well-formed think pair exists.
        has_valid_action: parsed JSON with a known action type.
        action_type: the lower-cased action type, or None.
        thinking_length: stripped length of the think contents.
        response_length: length of the reply.
        issues: `FormatReport.issues`.
    """

    format_score: float = 0.0
    reasoning_score: float = 0.0
    execution_score: float = 0.0
    length_penalty: float = 0.0
    has_thinking: bool = False
    has_valid_action: bool = False
    action_type: str | None = None
    thinking_length: int = 0
    response_length: int = 0
    issues: tuple[str, ...] = ()

    @property
    def total_score(self) -> float:
        """`quality_total` of this score's parts."""
        return quality_total(
            self.format_score, self.reasoning_score, self.execution_score, self.length_penalty
        )

    @property
    def combined_format_score(self) -> float:
        """`combined_format_score` of this score's parts."""
        return combined_format_score(self.format_score, self.length_penalty)


def score_response(
    response: str, *, executed: bool = False, success: bool = False, pnl: float = 0.0
) -> QualityScore:
    """Score one reply as the original's ``score_response`` did, minus the executor call.

    The original could run the action through its ``ActionExecutor``; this pure version takes the
    execution's outcome instead (`executed`, `success`, `pnl`).

    Args:
        response: the LLM's raw reply.
        executed: see `execution_score`.
        success: see `execution_score`.
        pnl: see `execution_score`.

    Returns:
        The `QualityScore`.
    """
    text = response if isinstance(response, str) else ""
    report = validate_response_format(text)
    think = _parse_think(text)
    penalties = length_penalties(think.content, text)
    return QualityScore(
        format_score=report.format_score,
        reasoning_score=report.reasoning_score,
        execution_score=execution_score(
            report.has_valid_action, report.action_type, executed=executed, success=success, pnl=pnl
        ),
        length_penalty=penalties.combined,
        has_thinking=report.has_thinking,
        has_valid_action=report.has_valid_action,
        action_type=report.action_type,
        thinking_length=report.thinking_length,
        response_length=len(text),
        issues=report.issues,
    )


def archetype_quality_bonus(archetype: str | None, quality: QualityScore) -> float:
    """The QualityScorer's archetype bonus, matched on the lower-cased name.

    Described in docs/babylon.md ("The original's quality heuristics").

    * "degen": +0.2 for a valid action, +0.2 for a non-wait action, +0.1 for thinking;
    * "analyst" / "researcher": ``0.4 * reasoning`` + 0.1 if thinking is longer than 150
      characters + 0.1 for a valid action;
    * "influencer" / "social-butterfly": ``0.3 * format`` + 0.1 for thinking + 0.1 if the length
      penalty is above -0.2;
    * anything else (None included): ``0.2 * total`` + 0.1 for a valid action *and* thinking.

    Args:
        archetype: the agent's archetype.
        quality: the reply's `QualityScore`.

    Returns:
        A bonus in [0, 0.6] (the analyst row is the largest).
    """
    name = archetype.lower() if isinstance(archetype, str) else ""
    if name == "degen":
        return (
            (0.2 if quality.has_valid_action else 0.0)
            + (0.2 if _is_active(quality.action_type) else 0.0)
            + (0.1 if quality.has_thinking else 0.0)
        )
    if name in ("analyst", "researcher"):
        return (
            _clip(quality.reasoning_score, 0.0, 1.0) * 0.4
            + (0.1 if quality.thinking_length > 150 else 0.0)
            + (0.1 if quality.has_valid_action else 0.0)
        )
    if name in ("influencer", "social-butterfly"):
        return (
            _clip(quality.format_score, 0.0, 1.0) * 0.3
            + (0.1 if quality.has_thinking else 0.0)
            + (0.1 if quality.length_penalty > -0.2 else 0.0)
        )
    return quality.total_score * 0.2 + (0.1 if quality.has_valid_action and quality.has_thinking else 0.0)
