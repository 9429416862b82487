"""Constrained decoding for the canonical reply: a GBNF grammar and a JSON schema, both built from the action schema.

Why: a small model does not follow the reply format on its own; a server that constrains decoding
(llama.cpp's `grammar`, vLLM's `guided_json`, OpenAI's `response_format`) makes every reply
well-formed. The grammar and the schema are *generated* from `sim.ActionType` and the field sets
`sim.normalize_action` checks, and each action type's field combinations are kept only when
`normalize_action` itself accepts them, so the constraint and the parser cannot drift apart
(tests/encoding/test_grammar.py samples the grammar and parses every sample with `parse_reply`).

Two reply shapes:
* **GBNF** (`reply_gbnf`): exactly the canonical text, `<think>reasoning</think>` + newline + one
  JSON action written the way `json.dumps` writes it, e.g. `{"type": "wait"}`.
* **JSON schema** (`reply_json_schema`): servers that constrain to JSON only cannot produce the think
  tag, so the reply is `{"reasoning": "...", "action": {...}}`; `canonical_reply_from_json` turns it
  into the canonical text before the env scores it (the raw JSON stays in the call record).

Lengths are bounded (characters, not tokens) so that a constrained reply always ends: with
`max_tokens >= reply_max_chars(...)` a reply can never be cut off, because every token is at least one
character.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, InvalidActionError
from ..sim import ACTION_TYPES, normalize_action

# The field sets normalize_action checks, per canonical type (required, optional, numeric). They are
# private to the sim; reading them here (instead of copying them) is what keeps the grammar in step.
from ..sim.actions import _NUMERIC, _OPTIONAL, _REQUIRED
from ..trajectory import storable_value

__all__ = [
    "CONSTRAIN_MODES",
    "GrammarLimits",
    "action_variants",
    "canonical_reply_from_json",
    "constraint_body",
    "reply_gbnf",
    "reply_json_schema",
    "reply_max_chars",
]

CONSTRAIN_MODES: tuple[str, ...] = ("gbnf", "guided_json", "response_format")
"""How a constraint is sent: llama.cpp's `grammar` field, vLLM's `guided_json`, OpenAI's `response_format`."""

_CHOICES: dict[str, tuple[str, ...]] = {"outcome": ("YES", "NO"), "side": ("LONG", "SHORT")}
_TEXT_FIELDS = frozenset({"content"})
_ID_CHARS = "A-Za-z0-9 ._:-"  # ids and names: market-3, BTCAI, agent-2, Alpha Insiders, group-0
# Free text is any JSON string character except the quote, the backslash (no escapes), control
# characters, "<" and the backtick: a constrained post stays plain text, with no tag-like or
# code-fence markup for a downstream reader to trip on (parse_reply itself ignores both inside JSON).
_TEXT_CLASS_GBNF = '^"\\\\<`\\x00-\\x1f'
_TEXT_PATTERN = '^[^"\\\\<`\\x00-\\x1f]+$'
_THINK_CLOSE = "</think>\n"
_TAG = re.compile(r"<(/?think)", re.IGNORECASE)


@dataclass(frozen=True)
class GrammarLimits:
    """Length bounds, in characters, that make every constrained reply finite.

    Attributes:
        think_chars: the reasoning inside <think>...</think> (at least 1 character).
        id_chars: ids and names (market, ticker, recipient, group, position_id).
        text_chars: free text (post and DM content).
        int_digits: digits before the decimal point of a number (no leading zero; 2 decimals at most).
    """

    think_chars: int = 600
    id_chars: int = 40
    text_chars: int = 280
    int_digits: int = 7

    def __post_init__(self) -> None:
        for name in ("think_chars", "id_chars", "text_chars", "int_digits"):
            if getattr(self, name) < 1:
                raise ConfigError(f"GrammarLimits.{name} must be >= 1, got {getattr(self, name)}")


def _example_value(field: str) -> Any:
    if field in _NUMERIC:
        return 2.0
    if field in _CHOICES:
        return _CHOICES[field][0]
    return "x"


def action_variants() -> dict[str, list[tuple[str, ...]]]:
    """Per action type, the field lists (required first, then a subset of the optional ones) that
    `normalize_action` accepts, in the order the grammar writes them.

    Every subset of the optional fields is tried against `normalize_action` itself; e.g. close_perp
    gets [ticker], [position_id] and [ticker, position_id] but not the empty list.
    """
    out: dict[str, list[tuple[str, ...]]] = {}
    for kind in ACTION_TYPES:
        required, optional = _REQUIRED[kind], _OPTIONAL.get(kind, ())
        variants = []
        for r in range(len(optional) + 1):
            for extra in itertools.combinations(optional, r):
                fields = (*required, *extra)
                try:
                    normalize_action({"type": kind, **{f: _example_value(f) for f in fields}})
                except InvalidActionError:
                    continue
                variants.append(fields)
        if not variants:
            raise RuntimeError(f"no field combination of {kind!r} passes normalize_action; the grammar would omit it")
        out[kind] = variants
    return out


def _rule(name: str) -> str:
    return name.replace("_", "-")


def _gbnf_literal(text: str) -> str:
    return json.dumps(text)  # a GBNF literal uses JSON's string escapes


def _value_rule(field: str) -> str:
    if field in _NUMERIC:
        return "number"
    if field in _CHOICES:
        return _rule(field)
    return "text" if field in _TEXT_FIELDS else "id"


def reply_gbnf(limits: GrammarLimits | None = None) -> str:
    """The GBNF grammar of the canonical reply (llama.cpp, and servers built on it).

    `root ::= "<think>" think "</think>\\n" action`; `action` has one alternative per action type and
    accepted field combination, each the exact `json.dumps` layout of the action.
    """
    lim = limits or GrammarLimits()
    variants = action_variants()
    lines = [
        "# The canonical rlaif_gym reply: <think>reasoning</think>, a newline, one JSON action.",
        "# Generated by rlaif_gym.encoding.grammar from the action schema; do not edit by hand.",
        f'root ::= "<think>" think {_gbnf_literal(_THINK_CLOSE)} action',
        f"think ::= [^<]{{1,{lim.think_chars}}}",
        "action ::= " + " | ".join(_rule(k) for k in ACTION_TYPES),
    ]
    for kind in ACTION_TYPES:
        alts = []
        for fields in variants[kind]:
            parts = [_gbnf_literal('{"type": ' + json.dumps(kind))]
            for f in fields:
                parts += [_gbnf_literal(f', "{f}": '), _value_rule(f)]
            parts.append(_gbnf_literal("}"))
            alts.append(" ".join(_merge_literals(parts)))
        lines.append(f"{_rule(kind)} ::= " + " | ".join(f"( {a} )" if len(alts) > 1 else a for a in alts))
    for field, values in _CHOICES.items():
        lines.append(f"{_rule(field)} ::= " + " | ".join(_gbnf_literal(json.dumps(v)) for v in values))
    lines += [
        f"number ::= [1-9] [0-9]{{0,{lim.int_digits - 1}}} (\".\" [0-9]{{1,2}})?",
        f'id ::= "\\"" [{_ID_CHARS}]{{1,{lim.id_chars}}} "\\""',
        f'text ::= "\\"" [{_TEXT_CLASS_GBNF}]{{1,{lim.text_chars}}} "\\""',
    ]
    return "\n".join(lines) + "\n"


def _merge_literals(parts: list[str]) -> list[str]:
    """Join adjacent string literals ("a" "b" -> "ab") so the grammar stays readable."""
    out: list[str] = []
    for p in parts:
        if out and p.startswith('"') and out[-1].startswith('"'):
            out[-1] = _gbnf_literal(json.loads(out[-1]) + json.loads(p))
        else:
            out.append(p)
    return out


def _value_max_chars(field: str, lim: GrammarLimits) -> int:
    if field in _NUMERIC:
        return lim.int_digits + 3
    if field in _CHOICES:
        return 2 + max(len(v) for v in _CHOICES[field])
    return 2 + (lim.text_chars if field in _TEXT_FIELDS else lim.id_chars)


def reply_max_chars(limits: GrammarLimits | None = None) -> int:
    """The longest reply `reply_gbnf(limits)` accepts, in characters.

    A `max_tokens` of at least this can never cut a constrained reply short.
    """
    lim = limits or GrammarLimits()
    longest = 0
    for kind, variants in action_variants().items():
        for fields in variants:
            skeleton = json.dumps({"type": kind, **dict.fromkeys(fields, 0)})
            longest = max(longest, len(skeleton) + sum(_value_max_chars(f, lim) - 1 for f in fields))
    return len("<think>") + lim.think_chars + len(_THINK_CLOSE) + longest


def _schema_value(field: str, lim: GrammarLimits) -> dict[str, Any]:
    if field in _NUMERIC:
        # Integers: a JSON "number" admits exponents (1e999 overflows to inf, which the parser refuses),
        # and llama.cpp's schema converter ignores number bounds.
        return {"type": "integer", "minimum": 1, "maximum": 10**lim.int_digits - 1}
    if field in _CHOICES:
        return {"type": "string", "enum": list(_CHOICES[field])}
    if field in _TEXT_FIELDS:
        return {"type": "string", "minLength": 1, "maxLength": lim.text_chars, "pattern": _TEXT_PATTERN}
    return {"type": "string", "minLength": 1, "maxLength": lim.id_chars, "pattern": f"^[{_ID_CHARS}]+$"}


def reply_json_schema(limits: GrammarLimits | None = None) -> dict[str, Any]:
    """The JSON schema of the JSON-only reply `{"reasoning": str, "action": {...}}` (guided_json,
    response_format). Every property is required and no others are allowed (OpenAI strict mode)."""
    lim = limits or GrammarLimits()
    branches = []
    for kind, variants in action_variants().items():
        for fields in variants:
            props: dict[str, Any] = {"type": {"type": "string", "enum": [kind]}}
            props.update({f: _schema_value(f, lim) for f in fields})
            branches.append({"type": "object", "properties": props, "required": list(props),
                             "additionalProperties": False})
    return {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string", "minLength": 1, "maxLength": lim.think_chars},
            "action": {"anyOf": branches},
        },
        "required": ["reasoning", "action"],
        "additionalProperties": False,
    }


def constraint_body(mode: str, limits: GrammarLimits | None = None) -> dict[str, Any]:
    """The request fields (for the OpenAI client's `extra_body`) that constrain a reply in `mode`.

    Args:
        mode: "gbnf" -> {"grammar": GBNF} (llama.cpp); "guided_json" -> {"guided_json": schema} (vLLM);
            "response_format" -> OpenAI structured outputs with the JSON schema (OpenAI, vLLM, others).
    """
    if mode == "gbnf":
        return {"grammar": reply_gbnf(limits)}
    if mode == "guided_json":
        return {"guided_json": reply_json_schema(limits)}
    if mode == "response_format":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "rlaif_gym_reply", "strict": True, "schema": reply_json_schema(limits)}}}
    raise ConfigError(f"unknown constrain mode {mode!r}; expected one of {', '.join(CONSTRAIN_MODES)} (or None for "
                      "no constraint)")


def canonical_reply_from_json(text: str) -> str:
    """The canonical reply for a JSON-only reply `{"reasoning": ..., "action": {...}}`.

    Anything else (a server that ignored the constraint, a cut-off reply) comes back unchanged, so
    the env scores what the model really wrote.
    """
    try:
        # strict=False: raw newlines inside strings are fine (llama.cpp's schema grammar lets a model write them)
        obj = json.loads(text, strict=False)
    except (json.JSONDecodeError, TypeError, ValueError):
        return text
    obj = storable_value(obj)[0]  # a "\\ud800" escape decodes to a lone surrogate no file can hold: U+FFFD
    if not (isinstance(obj, dict) and isinstance(obj.get("reasoning"), str) and isinstance(obj.get("action"), dict)):
        return text
    reasoning = _TAG.sub(r"‹\1", obj["reasoning"])  # a think tag inside the reasoning must not open a block
    return f"<think>{reasoning}</think>\n{json.dumps(obj['action'])}"
