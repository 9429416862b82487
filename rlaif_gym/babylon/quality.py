r"""The original Babylon quality heuristics, reproduced as pure functions for comparability.

Design note. This module (`judge.legacy` forwards to it, for old imports) ports three files of
the original training pipeline (`quality_utils.py`, `format_validator.py`, `quality_scorer.py`;
docs/babylon.md ("The original's quality heuristics")) so that scores produced in rlaif_gym can be
set beside the original's, number for number. It is *not* the judge that rlaif_gym trains with: the
hardened rule judge is `judge.rules.RuleJudge`, which is free to change the rules; this module is not.

Only three defects of the original (docs/babylon.md ("The original's defects", 5 and 8)) are fixed
here, and each fix is documented on the function it touches:

1. every keyword list is matched on word boundaries (regex ``\b``) instead of as substrings, so
   "long" no longer matches "belong", "buy" not "buyer", "sell" not "seller"; a multi-word phrase
   ("need more data") matches as a phrase, with any run of whitespace between its words;
2. directional alignment takes the action's side into account (a SHORT perp or a NO prediction is
   bearish);
3. the unreachable -0.5 tier of `validate_xml_structure` is made reachable.

Everything else, the odd parts included (a lone hyphen counts as "structure", a sentence is a
". "-separated chunk, ``fmt`` lives in [-1, 0.5] while the other scores live in [0, 1]), is kept.

Every function is pure and deterministic, and never raises on any string input (empty, a megabyte,
any unicode, broken JSON): it returns the documented worst score instead. Two regexes of the original
that go quadratic on adversarial input (the think-tag extraction and the list-marker search) are
replaced by linear equivalents that give the same answers.

Standard library only (layer L2, below `judge`, which forwards these names).
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from types import MappingProxyType
from typing import Literal

__all__ = [
    "ANALYSIS_TERMS",
    "BEARISH_WORDS",
    "BULLISH_WORDS",
    "CONCLUSION_MARKERS",
    "DECISION_TERMS",
    "MARKET_TERMS",
    "REQUIRED_ACTION_FIELDS",
    "RISK_TERMS",
    "TICK_QUALITY_WEIGHTS",
    "VALID_ACTION_TYPES",
    "WAIT_WORDS",
    "DifficultyTick",
    "FormatReport",
    "LengthPenalties",
    "QualityScore",
    "TrajectoryDifficulty",
    "archetype_quality_bonus",
    "assess_trajectory_difficulty",
    "calculate_detailed_tick_quality",
    "calculate_tick_quality_score",
    "calculate_trajectory_quality_score",
    "check_reasoning_action_alignment",
    "check_reasoning_coherence",
    "combined_format_score",
    "execution_score",
    "extract_action_json",
    "length_penalties",
    "quality_total",
    "score_action_json",
    "score_length",
    "score_reasoning_quality",
    "score_response",
    "validate_response_format",
    "validate_think_tags",
    "validate_xml_structure",
]

# ---------------------------------------------------------------------------------------------
# Keyword lists (verbatim from the original) and word-boundary matching
# ---------------------------------------------------------------------------------------------

BULLISH_WORDS: tuple[str, ...] = ("bullish", "buy", "long", "upward", "positive", "opportunity", "moon")
BEARISH_WORDS: tuple[str, ...] = ("bearish", "sell", "short", "downward", "negative", "avoid", "dump")
WAIT_WORDS: tuple[str, ...] = ("wait", "hold", "unclear", "uncertain", "need more data", "observing")
_EXPOSURE_WORDS: tuple[str, ...] = ("exposure",)
_PNL_WORDS: tuple[str, ...] = ("pnl", "profit", "loss")
CONCLUSION_MARKERS: tuple[str, ...] = (
    "therefore", "conclusion", "decision", "recommend", "suggest", "final", "result", "action:", "execute",
)
ANALYSIS_TERMS: tuple[str, ...] = (
    "price", "volume", "trend", "momentum", "bullish", "bearish", "risk", "position", "market",
    "funding", "probability", "sentiment", "support", "resistance", "breakout", "consolidation",
)
DECISION_TERMS: tuple[str, ...] = (
    "because", "therefore", "since", "given", "considering", "based on", "due to", "hence", "thus",
    "consequently",
)
RISK_TERMS: tuple[str, ...] = (
    "risk", "downside", "stop", "loss", "careful", "conservative", "exposure", "hedge", "limit",
    "protect", "cautious",
)
MARKET_TERMS: tuple[str, ...] = ("btc", "eth", "bitcoin", "ethereum", "crypto", "stock", "market")


def _term_pattern(term: str) -> str:
    r"""The regex for `term` as a whole word or phrase.

    ``\b`` is put only on an end that is a word character: "action:" becomes ``\baction:`` (a
    trailing ``\b`` after ":" would demand a letter next, the opposite of what is meant). The words of
    a phrase are joined by ``\s+`` so that a line break inside "need more data" still counts.
    """
    body = r"\s+".join(re.escape(word) for word in term.split())
    lead = r"\b" if re.match(r"\w", term) else ""
    trail = r"\b" if re.search(r"\w\Z", term) else ""
    return lead + body + trail


class _Terms:
    """One keyword list compiled into a single alternation, scanned once per text.

    One pass instead of one search per term is 10 to 25 times faster on long text. Counting the
    distinct terms among the alternation's non-overlapping matches equals searching term by term as
    long as no two terms of a list share a word (then no match can hide another);
    `tests/babylon/test_babylon_quality.py` checks that for every list.
    """

    def __init__(self, terms: Iterable[str]) -> None:
        ordered = sorted(set(terms), key=lambda t: (-len(t), t))  # any fixed order will do
        self.pattern = re.compile("|".join(f"(?:{_term_pattern(t)})" for t in ordered))

    def count(self, lowered: str) -> int:
        """How many distinct terms occur at least once (the original counted terms, not occurrences)."""
        return len({" ".join(m.group().split()) for m in self.pattern.finditer(lowered)})

    def any(self, lowered: str) -> bool:
        """Whether any term occurs."""
        return self.pattern.search(lowered) is not None


_BULLISH = _Terms(BULLISH_WORDS)
_BEARISH = _Terms(BEARISH_WORDS)
_WAIT = _Terms(WAIT_WORDS)
_EXPOSURE = _Terms(_EXPOSURE_WORDS)
_PNL = _Terms(_PNL_WORDS)
_CONCLUSION = _Terms(CONCLUSION_MARKERS)
_ANALYSIS = _Terms(ANALYSIS_TERMS)
_DECISION = _Terms(DECISION_TERMS)
_RISK = _Terms(RISK_TERMS)
_MARKET = _Terms(MARKET_TERMS)


def _clip(x: float, lo: float, hi: float) -> float:
    """Clamp to [lo, hi]; NaN maps to `lo`, the worst score, instead of leaking through min/max."""
    if math.isnan(x):
        return lo
    return max(lo, min(hi, x))


def _as_float(value: object, default: float) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return default


def _as_text(value: object) -> str:
    """`value` if it is a string, else "" (the original skipped falsy reasoning and responses)."""
    return value if isinstance(value, str) else ""


# ---------------------------------------------------------------------------------------------
# Tick quality (quality_utils.py)
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Response format validation (format_validator.py)
# ---------------------------------------------------------------------------------------------

VALID_ACTION_TYPES: frozenset[str] = frozenset({
    "buy", "sell", "open_perp", "close_perp", "wait", "trade", "predict", "post", "create_post",
    "send_dm", "dm", "research", "analyze",
})
"""Action types the original's format validator accepted.

Described in docs/babylon.md ("The original's action vocabularies").
"""

REQUIRED_ACTION_FIELDS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "buy": ("market", "amount"),
    "sell": ("market", "amount"),
    "open_perp": ("ticker", "size", "direction"),
    "close_perp": ("ticker", "size"),
    "wait": (),
    "trade": ("market",),
    "predict": ("market",),
    "post": ("content",),
    "create_post": ("content",),
    "send_dm": ("recipient",),
    "dm": ("recipient",),
    "research": (),
    "analyze": (),
})
"""Keys each action type must carry; an unknown type requires none.

Described in docs/babylon.md ("The original's action vocabularies").
"""

_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FLAT_JSON = re.compile(r"\{[^{}]*\}")
_NUMBER = re.compile(r"\d+\.?\d*%?")


@dataclass(frozen=True)
class _ThinkParse:
    content: str  # the contents of every well-formed pair, joined by "\n"
    length: int  # len(content.strip()), what the original called thinking_length
    has_open: bool
    has_close: bool
    paired: bool
    issues: tuple[str, ...]


def _parse_think(response: str) -> _ThinkParse:
    """The original's think-tag analysis, with ``findall(<think>(.*?)</think>)`` done in linear time.

    The regex re-scans to the end of the text from every unclosed ``<think>``, which is quadratic on
    "</think>" followed by many "<think>". The scan below gives the same pairs: from the current
    position, take the next open tag and the first close tag after it; when that open tag has no
    close after it, neither has any later one, and the scan stops.
    """
    opens = [m.span() for m in _THINK_OPEN.finditer(response)]
    closes = [m.span() for m in _THINK_CLOSE.finditer(response)]
    close_starts = [s for s, _ in closes]
    issues: list[str] = []
    if len(opens) != len(closes):
        issues.append(f"Mismatched tags: {len(opens)} open, {len(closes)} close")

    pieces: list[str] = []
    position = 0
    for open_start, open_end in opens:
        if open_start < position:  # inside the pair just taken
            continue
        j = bisect.bisect_left(close_starts, open_end)
        if j == len(closes):
            break
        pieces.append(response[open_end : closes[j][0]])
        position = closes[j][1]

    content = "\n".join(pieces)
    length = len(content.strip())
    if pieces:
        if length < 10:
            issues.append("Thinking content is too short")
    elif opens and closes:
        issues.append("Tags found but content extraction failed")
    if len(opens) > 1:
        issues.append("Multiple think tag pairs detected")
    if opens and closes and closes[0][0] < opens[0][0]:
        issues.append("Closing tag before opening tag")
    return _ThinkParse(content, length, bool(opens), bool(closes), bool(pieces), tuple(issues))


def _think_score(think: _ThinkParse) -> float:
    if not think.has_open and not think.has_close:
        return 0.0
    if not think.paired:
        return 0.2
    score = 0.5
    if think.length >= 50:
        score += 0.2
    if think.length >= 100:
        score += 0.15
    if think.length > 1000:
        score -= 0.1
    score -= 0.1 * len(think.issues)
    return _clip(score, 0.0, 1.0)


def validate_think_tags(response: str) -> tuple[float, tuple[str, ...]]:
    """Score the ``<think>…</think>`` part of a reply.

    0.0 with no tag at all; 0.2 when tags exist but no well-formed pair does; otherwise
    ``clip01(0.5 + 0.2*[len >= 50] + 0.15*[len >= 100] - 0.1*[len > 1000] - 0.1*#issues)`` where
    ``len`` is the stripped length of the contents of every pair, joined by newlines. Tags are
    case-insensitive. Issues: mismatched open/close counts, content shorter than 10 characters, more
    than one open tag, the first close before the first open, and "tags found but content extraction
    failed". No keyword list is involved, so no defect fix applies.

    Args:
        response: the LLM's raw reply.

    Returns:
        ``(score, issues)`` with score in [0, 1]. Non-string input scores 0.0.
    """
    if not isinstance(response, str):
        return 0.0, ()
    think = _parse_think(response)
    return _think_score(think), think.issues


@dataclass(frozen=True)
class _ActionParse:
    raw: str
    found: bool
    parsed: dict[str, object] | None
    action_type: str | None
    known: bool
    has_required: bool
    issues: tuple[str, ...]

    @property
    def is_valid(self) -> bool:
        return self.found and self.parsed is not None and self.known


def _parse_action(response: str) -> _ActionParse:
    # The original cut at `response.lower().rfind("</think>")`; lower() can change the length of some
    # non-ASCII text and shift that cut, so the position comes from the case-insensitive regex on
    # the original string instead.
    closes = list(_THINK_CLOSE.finditer(response))
    after = response[closes[-1].end() :].strip() if closes else response
    match = _FLAT_JSON.search(after) or _FLAT_JSON.search(response)
    if match is None:
        return _ActionParse("", False, None, None, False, False, ("No JSON object found in response",))
    raw = match.group()
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, and int() over the digit limit
        return _ActionParse(raw, True, None, None, False, False, (f"JSON parse error: {str(e)[:50]}",))
    if not isinstance(parsed, dict):  # cannot happen for "{...}", kept as a guard
        return _ActionParse(raw, True, None, None, False, False, ("JSON is not an object",))
    value = parsed.get("action")
    if not value:
        return _ActionParse(raw, True, parsed, None, False, False, ("JSON missing 'action' field",))
    action_type = str(value).lower()
    known = action_type in VALID_ACTION_TYPES
    has_required = all(key in parsed for key in REQUIRED_ACTION_FIELDS.get(action_type, ()))
    issues = []
    if not known:
        issues.append(f"Unknown action type: {action_type}")
    if not has_required:
        issues.append(f"Missing required fields for {action_type}")
    return _ActionParse(raw, True, parsed, action_type, known, has_required, tuple(issues))


def _action_score(action: _ActionParse) -> float:
    if not action.found:
        return 0.0
    if action.parsed is None:
        return 0.2
    score = 0.4 + (0.3 if action.known else 0.0) + (0.2 if action.has_required else 0.0)
    return _clip(score - 0.1 * len(action.issues), 0.0, 1.0)


def extract_action_json(response: str) -> tuple[dict[str, object] | None, tuple[str, ...]]:
    """Find and parse the reply's action JSON the way the original did.

    The object is the first *flat* ``{…}`` (no nested braces) after the last ``</think>``
    (case-insensitive), or, when there is none there, the first one anywhere in the reply. It is
    not checked for a known action type here; see `score_action_json`.

    Args:
        response: the LLM's raw reply.

    Returns:
        ``(parsed, issues)``: the parsed dict, or None when nothing was found or it does not parse
        (the issues say which), and the original's issue strings.
    """
    if not isinstance(response, str):
        return None, ("No JSON object found in response",)
    action = _parse_action(response)
    return action.parsed, action.issues


def score_action_json(response: str) -> float:
    """Score the reply's action JSON: ``clip01(0.4 + 0.3*known + 0.2*required - 0.1*#issues)``.

    0.0 when no flat ``{…}`` is found, 0.2 when it does not parse. ``known``: the lower-cased
    ``"action"`` value is in `VALID_ACTION_TYPES`; ``required``: every key of
    `REQUIRED_ACTION_FIELDS` for that type is present (an unknown type requires none, as in the
    original, so ``{"action": "fly"}`` scores 0.4 + 0.2 - 0.1 = 0.5). Issues: unknown type, missing
    fields, or no ``"action"`` key at all (0.4 - 0.1 = 0.3).

    Args:
        response: the LLM's raw reply.

    Returns:
        A score in [0, 1].
    """
    if not isinstance(response, str):
        return 0.0
    return _action_score(_parse_action(response))


def _reasoning_analysis(think_text: str) -> tuple[float, tuple[str, ...]]:
    if not think_text:
        return 0.0, ()
    lowered = think_text.lower()
    analysis = _ANALYSIS.count(lowered)
    has_decision = _DECISION.any(lowered)
    has_risk = _RISK.any(lowered)
    numbers = len(_NUMBER.findall(think_text))
    score = min(0.3, 0.03 * analysis)
    score += 0.2 if has_decision else 0.0
    score += 0.2 if has_risk else 0.0
    score += 0.15 if numbers > 2 else 0.1 if numbers > 0 else 0.0
    score += 0.15 if _MARKET.any(lowered) else 0.0
    issues = []
    if analysis < 2:
        issues.append("Limited market analysis vocabulary")
    if not has_decision:
        issues.append("No decision justification phrases")
    return _clip(score, 0.0, 1.0), tuple(issues)


def score_reasoning_quality(think_text: str) -> float:
    r"""Score the vocabulary of the think block.

    The sum of, clamped to [0, 1]:

    * ``min(0.3, 0.03 * #distinct ANALYSIS_TERMS present)``;
    * +0.2 if any `DECISION_TERMS` phrase is present;
    * +0.2 if any `RISK_TERMS` word is present;
    * +0.15 if there are more than 2 numbers (regex ``\d+\.?\d*%?``), +0.1 if at least one;
    * +0.15 if any `MARKET_TERMS` word is present.

    The maximum is therefore 0.3 + 0.2 + 0.2 + 0.15 + 0.15 = 1.0.

    Defect fixed (docs/babylon.md ("The original's defects", 8)): every term list matches on word
    boundaries ("stop" no longer fires in "nonstop", "eth" in "method", "since" in "sincere");
    "based on" and "due to" match as phrases.

    Args:
        think_text: the contents of the think tags (not the whole reply).

    Returns:
        A score in [0, 1]; 0.0 for empty text.
    """
    if not isinstance(think_text, str):
        return 0.0
    return _reasoning_analysis(think_text)[0]


def score_length(response: str, thinking: str | None = None) -> float:
    """Score the reply's length: ``1 - .4[total<30] - .2[total>2000] - .2[think<50] - .1[think>1000]``.

    ``total`` is ``len(response)``; ``think`` is ``len(thinking)`` *unstripped*, as the original
    measured it here (the think-tag score uses the stripped length). The result is floored at 0.

    Args:
        response: the LLM's raw reply.
        thinking: the think-tag contents; None extracts them from `response`.

    Returns:
        A score in [0, 1].
    """
    if not isinstance(response, str):
        return 0.0
    if thinking is None:
        thinking = _parse_think(response).content
    total, think = len(response), len(_as_text(thinking))
    score = 1.0
    score -= 0.4 if total < 30 else 0.0
    score -= 0.2 if total > 2000 else 0.0
    score -= 0.2 if think < 50 else 0.0
    score -= 0.1 if think > 1000 else 0.0
    return max(0.0, score)


@dataclass(frozen=True)
class FormatReport:
    """The format validator's verdict on one reply (the original's FormatValidationResult, flattened).

    Attributes:
        think_score: `validate_think_tags`, in [0, 1].
        action_score: `score_action_json`, in [0, 1].
        length_score: `score_length`, in [0, 1].
        reasoning_score: `score_reasoning_quality` of the think contents, in [0, 1].
        is_valid: a well-formed think pair with no think issue, a parsed JSON with a known action
            type, and a reply of at least 30 characters.
        issues: think issues, then action issues, then reasoning issues (the original's order).
        has_thinking: at least one well-formed think pair.
        has_valid_action: parsed JSON with a known action type.
        action_type: the lower-cased ``"action"`` value, or None.
        thinking_length: stripped length of the think contents.
        format_score: ``.35 think + .35 action + .15 length + .15 reasoning``, computed, not passed.
    """

    think_score: float
    action_score: float
    length_score: float
    reasoning_score: float
    is_valid: bool
    issues: tuple[str, ...]
    has_thinking: bool = False
    has_valid_action: bool = False
    action_type: str | None = None
    thinking_length: int = 0
    format_score: float = field(init=False)

    def __post_init__(self) -> None:
        """Derive `format_score` so that it can never disagree with the four parts."""
        fmt = 0.35 * self.think_score + 0.35 * self.action_score + 0.15 * self.length_score
        object.__setattr__(self, "format_score", fmt + 0.15 * self.reasoning_score)


def validate_response_format(response: str) -> FormatReport:
    """Run every format-validator check on one reply, as the original's ``validate_response_format``.

    The word-boundary fix of `score_reasoning_quality` applies.

    Args:
        response: the LLM's raw reply.

    Returns:
        The `FormatReport`; every score is 0.0 and ``is_valid`` False for non-string input.
    """
    if not isinstance(response, str):
        response = ""
    think = _parse_think(response)
    action = _parse_action(response)
    reasoning, reasoning_issues = _reasoning_analysis(think.content)
    think_valid = think.paired and not think.issues
    return FormatReport(
        think_score=_think_score(think),
        action_score=_action_score(action),
        length_score=score_length(response, think.content),
        reasoning_score=reasoning,
        is_valid=think_valid and action.is_valid and len(response) >= 30,
        issues=think.issues + action.issues + reasoning_issues,
        has_thinking=think.paired,
        has_valid_action=action.is_valid,
        action_type=action.action_type,
        thinking_length=think.length,
    )


# ---------------------------------------------------------------------------------------------
# QualityScorer (quality_scorer.py)
# ---------------------------------------------------------------------------------------------


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
