"""Strict parsing of judge verdicts: the exact JSON object that the template asks for, or `VerdictParseError`.

Accepted envelope: the reply is one JSON object. It may be wrapped in a single Markdown code fence
(```json ... ```), and a leading ``<think>...</think>`` block from a reasoning model is dropped.
Anything else fails: prose around the object, a second object, duplicate keys, unknown keys,
NaN/Infinity, a score that is a string, a boolean or outside [0, 1], or a listwise verdict that
misses, repeats or invents a trajectory id. A malformed verdict is never read as 0. The judge
records it and marks the score missing.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from ..errors import VerdictParseError
from ..trajectory import storable_value

__all__ = ["AbsoluteVerdict", "ListwiseVerdict", "PairwiseVerdict", "parse_absolute", "parse_listwise",
           "parse_pairwise", "parse_verdict", "verdict_constraint", "verdict_gbnf"]

VERDICT_REASONING_CHARS = 300
"""The longest reasoning a constrained verdict may write, in characters (the grammar's bound: a small model that
never closes its string still ends its verdict)."""
_VERDICT_ROOTS = {
    "absolute": 'root ::= "{\\"reasoning\\": \\"" text "\\", \\"score\\": " score "}"',
    "pairwise": 'root ::= "{\\"reasoning\\": \\"" text "\\", \\"winner\\": \\"" ( "A" | "B" | "tie" ) "\\"}"',
}

_FENCE = re.compile(r"\A```(?:json|JSON)?[ \t]*\n(.*)\n[ \t]*```\Z", re.S)
_THINK = re.compile(r"\A\s*<think>.*?</think>\s*", re.S)


@dataclass(frozen=True)
class AbsoluteVerdict:
    """One trajectory's score in [0, 1], with the judge's reasons."""

    score: float
    reasoning: str
    strengths: tuple[str, ...] = ()
    weaknesses: tuple[str, ...] = ()


@dataclass(frozen=True)
class ListwiseVerdict:
    """Scores in [0, 1] by trajectory label, with an explanation of each."""

    scores: dict[str, float]
    explanations: dict[str, str]


@dataclass(frozen=True)
class PairwiseVerdict:
    """Which of the two shown trajectories won: "A", "B" or "tie"."""

    winner: str
    reasoning: str


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a verdict")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _object(text: str, mode: str) -> dict[str, Any]:
    body = _THINK.sub("", text, count=1).strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body.startswith("{"):
        raise VerdictParseError(mode, "the reply is not a JSON object", text)
    try:
        value = json.loads(body, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise VerdictParseError(mode, f"the reply is not valid JSON ({exc})", text) from None
    if not isinstance(value, dict):
        raise VerdictParseError(mode, "the reply is not a JSON object", text)
    # A "\\ud800" escape decodes to a lone surrogate that no file or tape can hold: U+FFFD (the raw
    # reply, kept on the tape, still shows what the judge wrote).
    return storable_value(value)[0]


def _keys(obj: dict[str, Any], required: set[str], optional: set[str], mode: str, text: str, where: str = "") -> None:
    missing = sorted(required - set(obj))
    extra = sorted(set(obj) - required - optional)
    if missing:
        raise VerdictParseError(mode, f"{where}missing key(s) {missing}", text)
    if extra:
        raise VerdictParseError(mode, f"{where}unexpected key(s) {extra}", text)


def _score(value: Any, mode: str, text: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VerdictParseError(mode, f"{where} must be a number, got {value!r}", text)
    if not 0.0 <= value <= 1.0:
        raise VerdictParseError(mode, f"{where} must be in [0, 1], got {value!r}", text)
    return float(value)


def _text(value: Any, mode: str, text: str, where: str) -> str:
    if not isinstance(value, str):
        raise VerdictParseError(mode, f"{where} must be a string, got {type(value).__name__}", text)
    return value


def _phrases(value: Any, mode: str, text: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise VerdictParseError(mode, f"{where} must be a list of strings", text)
    return tuple(value)


def parse_absolute(text: str) -> AbsoluteVerdict:
    """``{"score", "reasoning", "strengths"?, "weaknesses"?}`` -> `AbsoluteVerdict`; else `VerdictParseError`."""
    obj = _object(text, "absolute")
    _keys(obj, {"score", "reasoning"}, {"strengths", "weaknesses"}, "absolute", text)
    return AbsoluteVerdict(
        score=_score(obj["score"], "absolute", text, "score"),
        reasoning=_text(obj["reasoning"], "absolute", text, "reasoning"),
        strengths=_phrases(obj.get("strengths", []), "absolute", text, "strengths"),
        weaknesses=_phrases(obj.get("weaknesses", []), "absolute", text, "weaknesses"),
    )


def parse_listwise(text: str, labels: tuple[str, ...]) -> ListwiseVerdict:
    """``{"scores": [{"trajectory_id", "explanation", "score"}, ...]}`` covering each label exactly once."""
    obj = _object(text, "listwise")
    _keys(obj, {"scores"}, set(), "listwise", text)
    entries = obj["scores"]
    if not isinstance(entries, list):
        raise VerdictParseError("listwise", "scores must be a list", text)
    scores: dict[str, float] = {}
    explanations: dict[str, str] = {}
    for n, entry in enumerate(entries):
        where = f"scores[{n}]"
        if not isinstance(entry, dict):
            raise VerdictParseError("listwise", f"{where} must be an object", text)
        _keys(entry, {"trajectory_id", "score"}, {"explanation"}, "listwise", text, f"{where}: ")
        label = entry["trajectory_id"]
        if label not in labels:
            raise VerdictParseError("listwise", f"{where} names an unknown trajectory {label!r} "
                                    f"(expected one of {list(labels)})", text)
        if label in scores:
            raise VerdictParseError("listwise", f"{where} scores {label!r} a second time", text)
        scores[label] = _score(entry["score"], "listwise", text, f"{where}.score")
        explanations[label] = _text(entry.get("explanation", ""), "listwise", text, f"{where}.explanation")
    missing = [label for label in labels if label not in scores]
    if missing:
        raise VerdictParseError("listwise", f"no score for {missing}", text)
    return ListwiseVerdict(scores, explanations)


def parse_pairwise(text: str) -> PairwiseVerdict:
    """``{"winner": "A" | "B" | "tie", "reasoning"}`` -> `PairwiseVerdict`; else `VerdictParseError`."""
    obj = _object(text, "pairwise")
    _keys(obj, {"winner", "reasoning"}, set(), "pairwise", text)
    winner = obj["winner"]
    if winner not in ("A", "B", "tie"):
        raise VerdictParseError("pairwise", f'winner must be "A", "B" or "tie", got {winner!r}', text)
    return PairwiseVerdict(winner, _text(obj["reasoning"], "pairwise", text, "reasoning"))


def parse_verdict(mode: str, text: str, labels: tuple[str, ...] = ()) -> AbsoluteVerdict | ListwiseVerdict | \
        PairwiseVerdict:
    """Parse a reply for `mode` ("absolute", "listwise" with its labels, or "pairwise")."""
    if mode == "absolute":
        return parse_absolute(text)
    if mode == "listwise":
        return parse_listwise(text, labels)
    if mode == "pairwise":
        return parse_pairwise(text)
    raise ValueError(f"unknown judge mode {mode!r}")


def verdict_gbnf(mode: str) -> str:
    """The GBNF grammar (llama.cpp's `grammar` field) of a verdict in `mode`: the very object `parse_verdict` accepts,
    reasoning first (at most `VERDICT_REASONING_CHARS` characters, no quote, backslash or control character), then
    the score in [0, 1] with at most two decimals (absolute) or the winner (pairwise). A listwise verdict names
    labels the grammar would have to know, so it has none: `ConfigError`."""
    from ..errors import ConfigError

    if mode not in _VERDICT_ROOTS:
        raise ConfigError(f"a constrained verdict is absolute or pairwise, got mode {mode!r}: judge listwise "
                          "without constrain")
    lines = [_VERDICT_ROOTS[mode], f'text ::= [^"\\\\\\x00-\\x1F]{{1,{VERDICT_REASONING_CHARS}}}']
    if mode == "absolute":
        lines.append('score ::= "0." [0-9] [0-9]? | "0" | "1" | "1.0"')
    return "\n".join(lines) + "\n"


def verdict_constraint(mode: str) -> dict[str, Any]:
    """The request fields that constrain a verdict in `mode` on llama.cpp (`OpenAIChatClient(extra_body=...)`), to
    go with `JudgeConfig(constrain="gbnf")`."""
    return {"grammar": verdict_gbnf(mode)}
