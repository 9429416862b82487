"""The original's response format validation (`format_validator.py`): think tags, the action's JSON, the
reasoning's quality and the length score, gathered in `validate_response_format`.

Part of the port `babylon.quality` re-exports (docs/babylon.md ("The original's quality heuristics")).
Standard library only.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .keywords import _ANALYSIS, _DECISION, _MARKET, _RISK, _as_text, _clip

__all__ = [
    "REQUIRED_ACTION_FIELDS", "VALID_ACTION_TYPES", "FormatReport", "extract_action_json", "score_action_json",
    "score_length", "score_reasoning_quality", "validate_response_format", "validate_think_tags",
]

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
