"""Parse an LLM reply into reasoning plus one canonical action, leniently but without guessing.

Accepted layouts (the canonical one first):
1. `<think>reasoning</think>` then one JSON object: {"type": "buy_prediction", ...}
2. the original's `<thinking>…</thinking>` tag, or no tag at all (then the text before the JSON is
   the reasoning); code fences around the JSON are fine; the action may be nested under "action".
3. the original's `<decisions><decision action="buy" marketId="market-3" side="yes" amount="100"/>
   </decisions>` XML.
Legacy vocabularies (`buy_yes`, `open_long`, `marketId`, `direction`, …) are mapped by
`sim.normalize_action`. A missing field is an error, never a default; several actions in one reply
are an error, never "the first one". Parsing never raises: problems are returned as `errors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidActionError
from ..sim import Action, normalize_action
from ..trajectory import storable_value

__all__ = ["MAX_REPLY_CHARS", "ParsedReply", "canonical_reply", "parse_reply"]

MAX_REPLY_CHARS = 65_536
"""Replies longer than this are cut before parsing (and the cut is reported as a format error)."""

_THINK = re.compile(r"<(think|thinking)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<(think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking)>", re.IGNORECASE)
_DECISIONS = re.compile(r"<decisions>(.*?)</decisions>", re.IGNORECASE | re.DOTALL)
_DECISION = re.compile(r"<decision\b([^>]*?)/?>", re.IGNORECASE)
_ATTR = re.compile(r"""([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_MAX_JSON_STARTS = 200  # bound the JSON scan so a reply full of braces stays linear-time
_DECODER = json.JSONDecoder()  # stateless: one for every reply


@dataclass(frozen=True)
class ParsedReply:
    """The result of parsing one reply.

    Attributes:
        action: the canonical action, or None when the reply has no valid action (then the env
            executes a no-op and the format score is penalised).
        reasoning: the reasoning text (think block, or the prose before the action).
        errors: format errors, each a sentence saying what was expected.
        layout: "think+json", "thinking+json", "json", "decisions" or "none".
        raw_action: the action object as found in the reply, before normalisation.
        think_closed: the reply's think tags were balanced (or absent).
        num_actions: how many action objects the reply contained.
    """

    action: Action | None
    reasoning: str
    errors: tuple[str, ...] = field(default=())
    layout: str = "none"
    raw_action: dict | None = None
    think_closed: bool = True
    num_actions: int = 0

    @property
    def ok(self) -> bool:
        """A valid action was found and no format error was reported."""
        return self.action is not None and not self.errors


def canonical_reply(action: dict[str, Any], think: str | None = None) -> str:
    """The reply in the canonical layout, the first one `parse_reply` reads: `<think>think</think>`, a line break,
    then the action as one JSON object; with `think` None, the JSON alone (what the compact prompt style asks for).
    A value JSON cannot hold (a runner's Decimal, a datetime) is written as its `str`. Every writer of replies (the
    scripted and format-only models, the baselines, the JSON-only reply's rewrite, the original's runner) lays
    its replies out here."""
    body = json.dumps(action, default=str)
    return body if think is None else f"<think>{think}</think>\n{body}"


def _json_spans(text: str) -> list[tuple[int, int, dict]]:
    """Top-level JSON objects in `text` with their (start, end) offsets, in order.

    Objects nested inside another are skipped; at most `_MAX_JSON_STARTS` "{" are tried.
    """
    decoder = _DECODER
    found: list[tuple[int, int, dict]] = []
    pos, starts = 0, 0
    while starts < _MAX_JSON_STARTS:
        i = text.find("{", pos)
        if i < 0:
            break
        starts += 1
        try:
            obj, end = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError, ValueError):
            pos = i + 1
            continue
        if isinstance(obj, dict):
            # A "\\ud800" escape in the reply decodes to a lone surrogate no file can hold: U+FFFD.
            found.append((i, end, storable_value(obj)[0]))
        pos = end
    return found


def _json_objects(text: str) -> list[dict]:
    """Top-level JSON objects in `text`, in order (objects nested inside another are skipped)."""
    return [obj for _, _, obj in _json_spans(text)]


def _outside_json(text: str) -> str:
    """`text` with every top-level JSON object blanked out (same length, so offsets still hold).

    Think tags are looked for here: a "<think>" inside a JSON string (a post that quotes one, say) is
    data, not a tag, and must neither unbalance the reply nor open a second reasoning block.
    """
    first = text.find("{")
    if first < 0 or text.find("<", first) < 0:  # no "<" after a "{": no tag can sit inside an object
        return text
    spans = [(a, b) for a, b, _ in _json_spans(text) if "<" in text[a:b]]
    if not spans:
        return text
    parts, pos = [], 0
    for a, b in spans:
        parts += [text[pos:a], " " * (b - a)]
        pos = b
    parts.append(text[pos:])
    return "".join(parts)


def _action_dict(obj: dict) -> dict | None:
    """The action inside a JSON object: the object itself, or a dict under "action"/"decision"."""
    for key in ("action", "decision"):
        inner = obj.get(key)
        if isinstance(inner, dict):
            return inner
    if any(k in obj for k in ("type", "action", "action_type", "actionType")):
        return obj
    return None


def _decisions(text: str) -> list[dict] | None:
    block = _DECISIONS.search(text)
    if not block:
        return None
    out = []
    for match in _DECISION.finditer(block.group(1)):
        attrs = {k: (a if (a is not None and a != "") or b is None else b) for k, a, b in _ATTR.findall(match.group(1))}
        attrs = {k: v for k, v in attrs.items()}
        if "action" in attrs and "type" not in attrs:
            attrs["type"] = attrs.pop("action")
        out.append(attrs)
    return out


def parse_reply(text: str, *, think_required: bool = True,
                fixed: Mapping[str, Mapping[str, Any]] | None = None) -> ParsedReply:
    """Parse a reply. Never raises; see the module docstring for the accepted layouts.

    `think_required=False` is for prompts whose system prompt makes the `<think>` block optional (the compact
    prompt style): a bare JSON action is then canonical too, not a "legacy layout" format error. `fixed`: the
    fields the task sets, per kind (`sim.normalize_action`; the env's `fixed_stake` sets a bet's amount)."""
    if not isinstance(text, str):
        return ParsedReply(None, "", (f"the reply must be text, got {type(text).__name__}",))
    errors: list[str] = []
    if len(text) > MAX_REPLY_CHARS:
        errors.append(f"the reply is {len(text):,} characters; only the first {MAX_REPLY_CHARS:,} were read")
        text = text[:MAX_REPLY_CHARS]
    if not text.strip():
        return ParsedReply(None, "", ("the reply is empty; expected <think>...</think> then one JSON action",))

    # Reasoning: balanced think/thinking blocks; an unclosed tag is an error (its text still counts).
    # Tags are found outside JSON objects; the text itself is read from `text` at the same offsets.
    tagged = _outside_json(text)
    blocks = list(_THINK.finditer(tagged))
    opens, closes = len(_THINK_OPEN.findall(tagged)), len(_THINK_CLOSE.findall(tagged))
    think_closed = opens == closes
    tag = blocks[0].group(1).lower() if blocks else None
    if blocks:
        reasoning = "\n".join(text[b.start(2):b.end(2)].strip() for b in blocks)
        rest = text[blocks[-1].end():]
        if len(blocks) > 1:
            errors.append(f"found {len(blocks)} <think> blocks; expected one")
    elif opens:
        m = _THINK_OPEN.search(tagged)
        reasoning, rest = text[m.end():], text[m.end():]
    else:
        reasoning, rest = "", text
    if not think_closed:
        errors.append("unbalanced <think> tags; expected <think>...</think> before the action")

    # Action: the decisions XML, else JSON after the reasoning (else anywhere).
    decisions = _decisions(tagged)
    if decisions is not None:
        candidates, layout = decisions, "decisions"
        if not blocks and not opens:
            reasoning = _DECISIONS.sub("", text).strip()
    else:
        # Code fences around the JSON need no stripping: the scan starts at each "{". Stripping them
        # would also alter a "```" inside a JSON string (e.g. a post's message).
        objs = [d for d in (_action_dict(o) for o in _json_objects(rest)) if d is not None]
        if not objs and blocks:
            objs = [d for d in (_action_dict(o) for o in _json_objects(text)) if d is not None]
        candidates = objs
        layout = {"think": "think+json", "thinking": "thinking+json"}.get(tag or "", "json")
        if not blocks and not opens and objs:
            first = text.find("{")
            reasoning = text[:first].strip() if first > 0 else ""
    reasoning = reasoning.strip()

    if not candidates:
        errors.append('no action found; expected one JSON object such as {"type": "wait"} after </think>')
        return ParsedReply(None, reasoning, tuple(errors), "none", None, think_closed, 0)
    if len(candidates) > 1:
        errors.append(f"the reply contains {len(candidates)} actions; send exactly one (none was executed)")
        return ParsedReply(None, reasoning, tuple(errors), layout, candidates[0], think_closed, len(candidates))
    raw = candidates[0]
    try:
        action = normalize_action(raw, fixed=fixed)
    except InvalidActionError as exc:
        errors.append(f"invalid action: {exc}")
        return ParsedReply(None, reasoning, tuple(errors), layout, raw, think_closed, 1)
    if layout != "think+json" and (think_required or layout != "json" or reasoning):
        errors.append("legacy layout; the canonical reply is <think>...</think> then one JSON action"
                      + ("" if think_required else ", or the JSON action alone"))
    return ParsedReply(action, reasoning, tuple(errors), layout, raw, think_closed, 1)
