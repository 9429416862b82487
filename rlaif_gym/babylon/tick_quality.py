"""The original's tick quality (`quality_utils.py`): XML structure, reasoning-action alignment, coherence,
the detailed and weighted tick scores, the trajectory score and the difficulty assessment.

Part of the port `babylon.quality` re-exports (docs/babylon.md ("The original's quality heuristics")).
Standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from types import MappingProxyType
from typing import Literal

from .keywords import _BEARISH, _BULLISH, _CONCLUSION, _EXPOSURE, _PNL, _WAIT, _as_float, _as_text, _clip

__all__ = [
    "TICK_QUALITY_WEIGHTS", "DifficultyTick", "TrajectoryDifficulty", "assess_trajectory_difficulty",
    "calculate_detailed_tick_quality", "calculate_tick_quality_score", "calculate_trajectory_quality_score",
    "check_reasoning_action_alignment", "check_reasoning_coherence", "validate_xml_structure",
]

_DECISION_ELEMENT = re.compile(r"<decision[\s/>]")
_TICKER_ATTR = re.compile(r"ticker=\"[^\"]+\"|ticker='[^']+'")
_MARKET_ATTR = re.compile(r"marketId=\"[^\"]+\"|marketId='[^']+'")
_AMOUNT_ATTR = re.compile(r"amount=\"[^\"]+\"|amount='[^']+'")


def validate_xml_structure(response: str) -> float:
    """Score the original's ``<decisions><decision ticker=… amount=…/></decisions>`` output format.

    Tiers, first match wins:

    * -1.0: empty, or ``<decisions>`` or ``</decisions>`` is missing;
    * -0.5: the wrapper holds no ``<decision`` *element*, i.e. ``<decision`` followed by whitespace,
      ``/`` or ``>``;
    * -0.2: no non-empty ``ticker="…"`` / ``marketId="…"`` together with a non-empty ``amount="…"``
      (single or double quotes, case-sensitive, anywhere in the response);
    * +0.5: otherwise.

    Defect fixed (docs/babylon.md ("The original's defects", 8)): the original tested for the
    substring ``<decision``, which ``<decisions>`` itself contains, so its -0.5 tier could never
    fire. Requiring the element form makes it reachable: ``<decisions></decisions>`` now scores -0.5
    rather than -0.2. The tier was kept rather than dropped because it separates "wrapper with
    nothing in it" from "decision without arguments", which is what the original meant to do.

    Args:
        response: the LLM's raw reply.

    Returns:
        One of -1.0, -0.5, -0.2, 0.5. Non-string input scores -1.0.
    """
    if not isinstance(response, str) or not response:
        return -1.0
    if "<decisions>" not in response or "</decisions>" not in response:
        return -1.0
    if not _DECISION_ELEMENT.search(response):
        return -0.5
    has_target = _TICKER_ATTR.search(response) or _MARKET_ATTR.search(response)
    if not has_target or not _AMOUNT_ATTR.search(response):
        return -0.2
    return 0.5


Direction = Literal["bullish", "bearish", "wait", "other"]

_BUY_LIKE = frozenset({"buy", "buy_prediction", "open_perp", "long"})
_SELL_LIKE = frozenset({"sell", "sell_prediction", "close_perp", "short"})
_WAIT_TYPES = frozenset({"wait", "hold"})
# Which action types a side flips, and which side flips them: a prediction trade is bearish on NO,
# a perp trade on SHORT. A side from the other family (a perp with "NO") is ignored.
_PREDICTION_TYPES = frozenset({"buy", "sell", "buy_prediction", "sell_prediction"})
_PERP_TYPES = frozenset({"open_perp", "close_perp"})


def _action_direction(action_type: str, side: object) -> Direction:
    """The market view an action expresses, the side included."""
    kind = action_type.lower()
    if kind in _WAIT_TYPES:
        return "wait"
    if kind in _BUY_LIKE:
        direction: Direction = "bullish"
    elif kind in _SELL_LIKE:
        direction = "bearish"
    else:
        return "other"
    s = side.upper() if isinstance(side, str) else None
    flips = (kind in _PREDICTION_TYPES and s == "NO") or (kind in _PERP_TYPES and s == "SHORT")
    if flips:
        direction = "bearish" if direction == "bullish" else "bullish"
    return direction


def check_reasoning_action_alignment(text: str, action_type: str | None, side: str | None = None) -> float:
    """Score whether the reasoning argues for the action taken, plus a "financial literacy" bonus.

    ``min(1, base + bonus)`` where:

    * bonus: +0.15 if "exposure" occurs, +0.15 if any of "pnl", "profit", "loss" occurs;
    * base, from the counts of distinct bullish, bearish and wait words (`BULLISH_WORDS`, ...):
      a bullish action scores 0.7 if bullish > bearish, 0.0 if bearish > bullish, else 0.4; a
      bearish action mirrors that; wait/hold scores 0.7 if any wait word occurs, else 0.5; any
      other action type scores 0.5.

    With no action (``action_type is None``) or no text the result is 0.5 and no bonus is added.

    Defects fixed (docs/babylon.md ("The original's defects", 8)):

    * words match on word boundaries, not as substrings: "I belong here" has no bullish hit, "the
      buyer" no buy hit, "seller" no sell hit. A side effect of the fix is that inflected forms no
      longer count either ("losses" is not "loss", "waiting" is not "wait");
    * the side decides the direction. Bullish: buy, buy_prediction, open_perp, long. Bearish:
      sell, sell_prediction, close_perp, short. Then side "NO" flips buy/sell/buy_prediction/
      sell_prediction and side "SHORT" flips open_perp/close_perp. So ``open_perp`` SHORT and
      ``buy_prediction`` NO are bearish (the original called every open_perp bullish), closing a
      LONG perp stays sell-like, and closing a SHORT perp (buying it back) is buy-like. ``side=None``
      gives the original's behaviour. The side is case-insensitive; an unknown side is ignored.

    The literacy bonus still rewards keyword stuffing (defect 8); that is left as it was, for
    comparability.

    Args:
        text: all the reasoning of the tick, joined.
        action_type: the action's type as the original named it, or None when there was no action.
        side: "YES"/"NO" for a prediction trade, "LONG"/"SHORT" for a perp trade, or None.

    Returns:
        A score in [0, 1].
    """
    if action_type is None or not isinstance(text, str) or not text:
        return 0.5
    lowered = text.lower()
    bonus = 0.0
    if _EXPOSURE.any(lowered):
        bonus += 0.15
    if _PNL.any(lowered):
        bonus += 0.15

    direction = _action_direction(str(action_type), side)
    score = 0.5
    if direction in ("bullish", "bearish"):
        bull = _BULLISH.count(lowered)
        bear = _BEARISH.count(lowered)
        agree, disagree = (bull, bear) if direction == "bullish" else (bear, bull)
        score = 0.7 if agree > disagree else 0.0 if disagree > agree else 0.4
    elif direction == "wait":
        score = 0.7 if _WAIT.any(lowered) else 0.5
    return min(1.0, score + bonus)


# A digit run followed by one of ".):" exists exactly when a single digit is followed by one, so the
# original's `\d+[\.\):]` is replaced by `\d[.):]`, which cannot backtrack quadratically on a long
# run of digits.
_STRUCTURE = re.compile(r"\d[.):]|[-*•]")
_NUMBER_IN_TEXT = re.compile(r"\$?\d+(?:\.\d+)?(?:%|k|K|M)?")


def check_reasoning_coherence(text: str) -> float:
    """Score how "structured" a piece of reasoning looks, by surface features only.

    The sum of these terms, clamped to [0, 1]:

    * +0.25 if it has a list or structure character: a digit followed by ".", ")" or ":", or any
      "-", "*" or "•" (so a hyphenated word counts, as in the original);
    * +0.25 if it has a conclusion marker (`CONCLUSION_MARKERS`);
    * +0.2 if ``text.split(". ")`` gives 2 to 10 parts, +0.1 if more than 10;
    * with more than 10 whitespace-separated words: +0.15 if the unique-word ratio is above 0.4,
      else -0.1; with 10 or fewer words: +0.1;
    * +0.15 if it contains a number.

    A text shorter than 20 characters scores 0.1 outright.

    Defect fixed (docs/babylon.md ("The original's defects", 8)): conclusion markers match on word
    boundaries, so "decision" no longer fires inside "indecisions" or the tag ``<decisions>``, nor
    "final" inside "finally".

    Args:
        text: the reasoning to score.

    Returns:
        A score in [0, 1].
    """
    if not isinstance(text, str) or len(text) < 20:
        return 0.1
    score = 0.0
    if _STRUCTURE.search(text):
        score += 0.25
    if _CONCLUSION.any(text.lower()):
        score += 0.25
    sentences = text.split(". ")
    if 2 <= len(sentences) <= 10:
        score += 0.2
    elif len(sentences) > 10:
        score += 0.1
    words = text.lower().split()
    if len(words) > 10:
        score += 0.15 if len(set(words)) / len(words) > 0.4 else -0.1
    else:
        score += 0.1
    if _NUMBER_IN_TEXT.search(text):
        score += 0.15
    return _clip(score, 0.0, 1.0)


def _joined_tick_text(
    responses: Sequence[str | None],
    reasonings: Sequence[str | None],
    action_type: str | None,
    action_reasoning: str | None,
) -> str:
    parts: list[str] = []
    for reasoning, response in zip_longest(reasonings or (), responses or ()):
        parts.extend(t for t in (_as_text(reasoning), _as_text(response)) if t)
    if action_type is not None and _as_text(action_reasoning):
        parts.append(_as_text(action_reasoning))
    return " ".join(parts)


def calculate_detailed_tick_quality(
    responses: Sequence[str | None],
    reasonings: Sequence[str | None],
    action_type: str | None,
    side: str | None = None,
    action_reasoning: str | None = None,
) -> tuple[float, float]:
    """The (format, reasoning) pair the original fed into every per-tick reward.

    The per-tick reward: docs/babylon.md ("The original's reward formulas").

    * ``fmt`` = `validate_xml_structure` of the **last** response, or 0.0 when there are no
      responses or the last one is empty;
    * ``rsn`` = ``min(1, alignment + 0.2 * coherence)`` over the space-joined text of, for each
      LLM call in order, its reasoning then its response, followed by ``action_reasoning`` when
      there is an action; 0.0 when that text is empty.

    The original took LLM call records; here call ``i`` is ``(reasonings[i], responses[i])``, and
    the shorter list is padded with None. The original's ``feedback`` and ``archetype`` arguments
    were unused and are dropped. The fixes of `check_reasoning_action_alignment` and
    `validate_xml_structure` apply.

    Args:
        responses: each LLM call's response text, in call order.
        reasonings: each LLM call's separate reasoning text (None when it had none).
        action_type: the tick's action type, or None when the agent took no action.
        side: the action's side ("YES"/"NO"/"LONG"/"SHORT"), or None.
        action_reasoning: the reasoning attached to the action itself.

    Returns:
        ``(fmt, rsn)`` with fmt in {-1.0, -0.5, -0.2, 0.0, 0.5} and rsn in [0, 1].
    """
    fmt = 0.0
    if responses:
        last = _as_text(responses[-1])
        if last:
            fmt = validate_xml_structure(last)
    full = _joined_tick_text(responses, reasonings, action_type, action_reasoning)
    if not full:
        return fmt, 0.0
    rsn = check_reasoning_action_alignment(full, action_type, side) + 0.2 * check_reasoning_coherence(full)
    return fmt, min(1.0, rsn)


TICK_QUALITY_WEIGHTS: Mapping[str, Mapping[str, float]] = MappingProxyType({
    name: MappingProxyType(dict(zip(("llm_calls", "reasoning", "action", "feedback"), row, strict=True)))
    for name, row in {
        "researcher": (0.30, 0.45, 0.15, 0.10),
        "information-trader": (0.30, 0.40, 0.20, 0.10),
        "super-predictor": (0.30, 0.40, 0.20, 0.10),
        "trader": (0.30, 0.20, 0.40, 0.10),
        "degen": (0.20, 0.15, 0.55, 0.10),
        "perps-trader": (0.25, 0.20, 0.45, 0.10),
        "social-butterfly": (0.35, 0.25, 0.25, 0.15),
        "ass-kisser": (0.35, 0.30, 0.20, 0.15),
        "goody-twoshoes": (0.35, 0.30, 0.20, 0.15),
        "scammer": (0.25, 0.40, 0.25, 0.10),
        "liar": (0.25, 0.40, 0.25, 0.10),
        "infosec": (0.30, 0.30, 0.30, 0.10),
        "default": (0.40, 0.30, 0.20, 0.10),
    }.items()
})
"""The original's ARCHETYPE_WEIGHTS quality table: 13 rows, each summing to 1.

Described in docs/babylon.md ("The original's quality heuristics").
"""


def calculate_tick_quality_score(
    responses: Sequence[str | None],
    reasonings: Sequence[str | None],
    action_type: str | None,
    side: str | None = None,
    action_reasoning: str | None = None,
    *,
    action_success: bool = False,
    action_error: str | None = None,
    feedback: Mapping[str, object] | None = None,
    archetype: str | None = None,
) -> float:
    """One tick's quality in [0, 1], the number the original's rollout validation thresholded.

    ``clip01(w_llm * (fmt + 1)/1.5 + w_rsn * rsn + w_action * action + w_feedback * feedback)`` with
    ``(fmt, rsn)`` from `calculate_detailed_tick_quality`, ``action`` = 1.0 on success, 0.25 when
    there is an error, 0.5 otherwise, 0.0 with no action, and ``feedback`` = 1.0 when the feedback
    mapping is non-empty, else 0.0. The weights are the `TICK_QUALITY_WEIGHTS` row of `archetype`
    (exact, case-sensitive key, as in the original), the "default" row when it is unknown or None.
    Note that a tick with no LLM call gets fmt 0, i.e. a normalized format of 2/3.

    Args:
        responses: see `calculate_detailed_tick_quality`.
        reasonings: see `calculate_detailed_tick_quality`.
        action_type: see `calculate_detailed_tick_quality`.
        side: see `calculate_detailed_tick_quality`.
        action_reasoning: see `calculate_detailed_tick_quality`.
        action_success: the engine reported success for the action.
        action_error: the engine's error message, if any.
        feedback: the raw feedback the engine returned (the original gave wait ticks ``{}``).
        archetype: the agent's archetype name.

    Returns:
        A score in [0, 1].
    """
    weights = TICK_QUALITY_WEIGHTS.get(archetype or "default", TICK_QUALITY_WEIGHTS["default"])
    fmt, rsn = calculate_detailed_tick_quality(responses, reasonings, action_type, side, action_reasoning)
    action_score = 0.0
    if action_type is not None:
        action_score = 1.0 if action_success else 0.25 if action_error else 0.5
    feedback_score = 1.0 if feedback else 0.0
    total = (
        (fmt + 1.0) / 1.5 * weights["llm_calls"]
        + rsn * weights["reasoning"]
        + action_score * weights["action"]
        + feedback_score * weights["feedback"]
    )
    return _clip(total, 0.0, 1.0)


def calculate_trajectory_quality_score(tick_scores: Sequence[float]) -> float:
    """The mean of the tick quality scores, 0.0 for an empty trajectory (as in the original).

    Args:
        tick_scores: `calculate_tick_quality_score` of each tick.

    Returns:
        A score in [0, 1] when every tick score is (NaN maps to 0).
    """
    if not tick_scores:
        return 0.0
    return _clip(sum(tick_scores) / len(tick_scores), 0.0, 1.0)


CurriculumLevel = Literal["easy", "medium", "hard"]


@dataclass(frozen=True)
class DifficultyTick:
    """What `assess_trajectory_difficulty` reads from one tick (the original read its tick records).

    Attributes:
        action_type: the action's type, or None when there was none.
        leverage: the action's ``leverage`` parameter, any value ``float(str(x))`` can read
            (default 1, as the original's ``params.get("leverage", 1)``).
        amount: the action's ``amount`` parameter, read the same way (default 0). The original read
            only ``amount``, never ``size``.
        reasoning_chars: characters of reasoning in the tick: every LLM call's reasoning plus the
            action's reasoning.
    """

    action_type: str | None = None
    leverage: object = 1
    amount: object = 0
    reasoning_chars: int = 0


@dataclass(frozen=True)
class TrajectoryDifficulty:
    """A trajectory's curriculum difficulty.

    Attributes:
        level: "hard" for score >= 0.6, "medium" for >= 0.3, else "easy".
        score: in [0, 1], higher is harder.
        reasons: human-readable reasons, ("Standard complexity",) when none stood out.
    """

    level: CurriculumLevel
    score: float
    reasons: tuple[str, ...]


def _parsed_param(value: object) -> float | None:
    try:
        return float(str(value))
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None


def _non_negative(value: object) -> float:
    x = _as_float(value, 0.0)
    return 0.0 if math.isnan(x) or x < 0 else x


def assess_trajectory_difficulty(ticks: Sequence[DifficultyTick]) -> TrajectoryDifficulty:
    """Grade a trajectory for the curriculum, as the original did.

    Described in docs/babylon.md ("The original's quality heuristics").

    The sum of, capped at 1:

    * +0.2 for more than 20 ticks, +0.1 for more than 10;
    * +0.2 for 4 or more distinct action types, +0.1 for 2 or more;
    * complex actions (leverage > 1, and separately amount > 1000, each counts once): +0.2 for 3 or
      more, +0.1 for 1 or more;
    * reversals, counted between consecutive actions (ticks without one are skipped): "buy"/"long"
      then "sell"/"short" or the reverse; +0.2 for 2 or more, +0.1 for 1. Action names are compared
      exactly, as in the original, so ``buy_prediction`` or ``open_perp`` never reverse;
    * average reasoning characters per tick: +0.2 above 200, +0.1 above 100.

    Args:
        ticks: one `DifficultyTick` per tick, in order.

    Returns:
        The level, the score and the reasons. An empty trajectory is ("easy", 0.0,
        ("Empty trajectory",)).
    """
    if not ticks:
        return TrajectoryDifficulty(level="easy", score=0.0, reasons=("Empty trajectory",))
    reasons: list[str] = []
    score = 0.0
    n = len(ticks)
    if n > 20:
        score += 0.2
        reasons.append(f"Long trajectory ({n} ticks)")
    elif n > 10:
        score += 0.1

    kinds = {t.action_type for t in ticks if t.action_type is not None}
    if len(kinds) >= 4:
        score += 0.2
        reasons.append(f"High action diversity ({len(kinds)} types)")
    elif len(kinds) >= 2:
        score += 0.1

    complex_actions = 0
    for t in ticks:
        if t.action_type is None:
            continue
        leverage = _parsed_param(t.leverage)
        if leverage is not None and leverage > 1:
            complex_actions += 1
        amount = _parsed_param(t.amount)
        if amount is not None and amount > 1000:
            complex_actions += 1
    if complex_actions >= 3:
        score += 0.2
        reasons.append(f"Complex action parameters ({complex_actions})")
    elif complex_actions >= 1:
        score += 0.1

    reversals = 0
    previous: str | None = None
    for t in ticks:
        if t.action_type is None:
            continue
        current = t.action_type
        if previous and (
            (previous in ("buy", "long") and current in ("sell", "short"))
            or (previous in ("sell", "short") and current in ("buy", "long"))
        ):
            reversals += 1
        previous = current
    if reversals >= 2:
        score += 0.2
        reasons.append(f"Multiple reversals ({reversals})")
    elif reversals >= 1:
        score += 0.1

    average = sum(_non_negative(t.reasoning_chars) for t in ticks) / n
    if average > 200:
        score += 0.2
        reasons.append(f"Deep reasoning required (avg {average:.0f} chars)")
    elif average > 100:
        score += 0.1

    score = min(score, 1.0)
    level: CurriculumLevel = "hard" if score >= 0.6 else "medium" if score >= 0.3 else "easy"
    return TrajectoryDifficulty(level=level, score=score, reasons=tuple(reasons) or ("Standard complexity",))
