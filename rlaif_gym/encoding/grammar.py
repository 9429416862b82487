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

Per tick (`TickIds`, `constraint_body(..., ids=...)`): the grammar and the schema above admit any id.
Built from the ids one tick's prompt shows, they admit only what the world can act on now: the open
markets, the held (market, outcome) pairs for a sale, the perps without a position for `open_perp`,
the open positions for `close_perp`, the groups not yet joined, the NPCs the feed shows (as
`agent-<k>`), leverage within the cap the system prompt states, and post text that is not blank. A
reply in the per-tick grammar is then refused only for its amount (`sim.actions.AMOUNT_ERRORS`: cash,
shares, margin, the minimum order), never as `unknown market`, ticker, group, position or recipient. An action type
with nothing to act on (no shares held: no `sell_prediction`) is left out for that tick.

Lengths are bounded (characters, not tokens) so that a constrained reply always ends: with
`max_tokens >= reply_max_chars(...)` a reply can never be cut off, because every token is at least one
character.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import ConfigError, InvalidActionError
from ..sim import ACTION_SPECS, ACTION_TYPES, SPEC_OF, normalize_action

# The field sets normalize_action checks, per canonical type (required, optional, numeric), read from the action
# declarations; reading them here (instead of copying them) is what keeps the grammar in step.
from ..sim.actions import _NUMERIC, _OPTIONAL, _REQUIRED
from ..trajectory import storable_value
from .reply import canonical_reply
from .view import npc_name

__all__ = [
    "CONSTRAIN_MODES",
    "THINK_MODES",
    "GrammarLimits",
    "TickIds",
    "action_variants",
    "canonical_reply_from_json",
    "constraint_body",
    "reply_gbnf",
    "reply_json_schema",
    "reply_max_chars",
    "tick_gbnf",
    "tick_json_schema",
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
    gets [ticker], [position_id] and [ticker, position_id] but not the empty list. The result is
    cached per content of the sim's field tables (the per-tick grammar asks for it on every call).
    """
    key = (tuple((k, tuple(v)) for k, v in _REQUIRED.items()), tuple((k, tuple(v)) for k, v in _OPTIONAL.items()),
           tuple(sorted(_NUMERIC)))
    return {kind: list(v) for kind, v in _variants(key).items()}


@lru_cache(maxsize=8)
def _variants(key: tuple) -> dict[str, tuple[tuple[str, ...], ...]]:
    out: dict[str, tuple[tuple[str, ...], ...]] = {}
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
        out[kind] = tuple(variants)
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


THINK_MODES: tuple[str, ...] = ("required", "optional", "never")
"""Where a grammar puts the `<think>` block: before every action (the full prompt style's canonical reply), before
an action or not (the compact style's system prompt makes it optional), or never (a JSON-only reply)."""


def _gbnf_head(title: str, origin: str, lim: GrammarLimits, kinds, think: str = "required") -> list[str]:
    """The grammar's comment lines, root, think and action rules (one action rule per kind in `kinds`)."""
    if think not in THINK_MODES:
        raise ConfigError(f"think must be one of {', '.join(map(repr, THINK_MODES))}, got {think!r}")
    block = f'"<think>" think {_gbnf_literal(_THINK_CLOSE)}'
    root = {"required": f"{block} action", "optional": f"( {block} )? action", "never": "action"}[think]
    return [
        f"# {title}",
        f"# {origin}; do not edit by hand.",
        f"root ::= {root}",
        *([f"think ::= [^<]{{1,{lim.think_chars}}}"] if think != "never" else []),
        "action ::= " + " | ".join(_rule(k) for k in kinds),
    ]


def reply_gbnf(limits: GrammarLimits | None = None) -> str:
    """The GBNF grammar of the canonical reply (llama.cpp, and servers built on it).

    `root ::= "<think>" think "</think>\\n" action`; `action` has one alternative per action type and
    accepted field combination, each the exact `json.dumps` layout of the action.
    """
    lim = limits or GrammarLimits()
    variants = action_variants()
    lines = _gbnf_head("The canonical rlaif_gym reply: <think>reasoning</think>, a newline, one JSON action.",
                       "Generated by rlaif_gym.encoding.grammar from the action schema", lim, ACTION_TYPES)
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


def _reply_schema(branches: list[dict[str, Any]], lim: GrammarLimits) -> dict[str, Any]:
    """The reply object: bounded reasoning and one of the action `branches`."""
    return {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string", "minLength": 1, "maxLength": lim.think_chars},
            "action": {"anyOf": branches},
        },
        "required": ["reasoning", "action"],
        "additionalProperties": False,
    }


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
    return _reply_schema(branches, lim)


# -- per tick: only the ids the prompt shows -------------------------------------------------------------------

_SECTION = re.compile(r"^## (.+)$", re.MULTILINE)
_MARKET_LINE = re.compile(r'^- (market-\d+)(?: ".*?")?: YES ', re.MULTILINE)  # the compact style has no question
_HELD = re.compile(r"You hold [\d,.]+ (YES|NO) \(cost")
_PERP_LINE = re.compile(r"^- ([A-Z]+) \$", re.MULTILINE)
_POSITION = re.compile(r"Your position (pos-\d+): (LONG|SHORT) ")
_UNJOINED_GROUP = re.compile(r"^- (.+?): not joined \(", re.MULTILINE)
_POST_AUTHOR = re.compile(r"^- \[t\d+\] @(.+?) \(", re.MULTILINE)
_LEVERAGE_CAP = re.compile(r"leverage 1-(\d+(?:\.\d+)?)x")
_STAKE_RULE = re.compile(r"^Every bet stakes \d+(?:\.\d+)?% of cash; write no amount\.$", re.MULTILINE)  # stake_rule
_NPC_IDS = {npc_name(k): k for k in range(64)}  # display name -> index (WorldParams caps num_npcs at 64)
# A post's first character: printable ASCII that is not blank (content that strips to "" is refused
# as empty) and not one of the characters free text excludes anyway.
_TEXT_FIRST_GBNF = "\\x21\\x23-\\x3b\\x3d-\\x5b\\x5d-\\x5f\\x61-\\x7e"
_TEXT_FIRST_PATTERN = "^[\\x21\\x23-\\x3b\\x3d-\\x5b\\x5d-\\x5f\\x61-\\x7e][^\"\\\\<`\\x00-\\x1f]*$"


@dataclass(frozen=True)
class TickIds:
    """What one tick's prompt lets the agent act on: the ids a per-tick constraint admits.

    Attributes:
        markets: open prediction markets ("market-7"), for `buy_prediction`.
        held: (market, outcome) pairs with shares held, for `sell_prediction`.
        tickers: perps without an open position, for `open_perp`.
        positions: open perp positions as (ticker, position_id), for `close_perp`.
        groups: group chats not joined yet, for `join_group`.
        recipients: NPCs the prompt names, as their ids ("agent-3"); the constraint also offers their
            display names ("Vitalik Butterin"), which `send_dm` resolves as well.
        max_leverage: the leverage cap the system prompt states (None: not stated, any leverage >= 1).
        fixed_stake: the system prompt states the `fixed_stake` rule (`encoding.prompt.stake_rule`): a bet names
            its market and side only, so the constraint writes no amount.
    """

    markets: tuple[str, ...] = ()
    held: tuple[tuple[str, str], ...] = ()
    tickers: tuple[str, ...] = ()
    positions: tuple[tuple[str, str], ...] = ()
    groups: tuple[str, ...] = ()
    recipients: tuple[str, ...] = ()
    max_leverage: float | None = None
    fixed_stake: bool = False

    @classmethod
    def from_prompt(cls, prompt: str, system_prompt: str | None = None) -> TickIds | None:
        """The ids a rendered tick prompt (`encoding.prompt.render_prompt`, either style) shows; None for any
        other text.

        Reads the sections the prompt renders from its `TickView`: markets and held shares, perps and
        open positions, group chats and whether they are joined, the social feed's authors. The leverage
        cap comes from `system_prompt` when given. tests/encoding/test_tick_grammar.py checks that
        this reading agrees with the view the prompt was rendered from.
        """
        sections = _sections(prompt)
        if not {"Prediction markets", "Perpetual futures", "Group chats"} <= sections.keys():
            return None
        markets, held = [], []
        for line in sections["Prediction markets"].splitlines():
            m = _MARKET_LINE.match(line)
            if m:
                markets.append(m.group(1))
                held += [(m.group(1), outcome) for outcome in _HELD.findall(line)]
        tickers, positions = [], []
        for line in sections["Perpetual futures"].splitlines():
            m = _PERP_LINE.match(line)
            if not m:
                continue
            pos = _POSITION.search(line)
            if pos:
                positions.append((m.group(1), pos.group(1)))
            else:
                tickers.append(m.group(1))
        groups = _UNJOINED_GROUP.findall(sections["Group chats"])
        authors = dict.fromkeys(_POST_AUTHOR.findall(sections.get("Social feed", "")))
        recipients = sorted({f"agent-{_NPC_IDS[a]}" for a in authors if a in _NPC_IDS},
                            key=lambda r: int(r.split("-")[1]))
        cap = _LEVERAGE_CAP.search(system_prompt or "")
        return cls(tuple(markets), tuple(held), tuple(tickers), tuple(positions), tuple(groups), tuple(recipients),
                   float(cap.group(1)) if cap else None, bool(_STAKE_RULE.search(system_prompt or "")))

    def rows(self) -> dict[str, list[dict[str, tuple[str, ...]]]]:
        """Per action type, the allowed values of its id and choice fields: a list of rows, each row a
        field -> values map whose product is allowed (a sale's market and outcome go together, as do a
        closed position's ticker and id). A type with no row has nothing to act on this tick. Each type's
        rows are those of what its declaration says the prompt offers it (`sim.ActionSpec.prompt_ids`)."""
        both_outcomes, both_sides = _CHOICES["outcome"], _CHOICES["side"]
        sold: dict[str, list[str]] = {}
        for market, outcome in self.held:
            sold.setdefault(market, []).append(outcome)
        offered: dict[str | None, list[dict[str, tuple[str, ...]]]] = {
            None: [{}],
            "open_markets": [{"market": self.markets, "outcome": both_outcomes}] if self.markets else [],
            "held_shares": [{"market": (m,), "outcome": tuple(o)} for m, o in sold.items()],
            "free_perps": [{"ticker": self.tickers, "side": both_sides}] if self.tickers else [],
            "open_positions": [{"ticker": (t,), "position_id": (p,)} for t, p in self.positions],
            "unjoined_groups": [{"group": self.groups}] if self.groups else [],
            # Each NPC by its id and by the name the feed shows (the engine resolves both).
            "feed_npcs": [{"recipient": (*self.recipients, *(npc_name(int(r.split("-")[1])) for r in self.recipients))}]
            if self.recipients else [],
        }
        return {spec.name: offered[spec.prompt_ids] for spec in ACTION_SPECS}

    def leverage_cap(self) -> int | None:
        """The largest whole leverage the constraint writes (the cap, rounded down), None without a cap."""
        return None if self.max_leverage is None else max(1, math.floor(self.max_leverage))


def _sections(prompt: str) -> dict[str, str]:
    heads = list(_SECTION.finditer(prompt))
    return {h.group(1).split(" (", 1)[0]: prompt[h.end():heads[i + 1].start() if i + 1 < len(heads) else len(prompt)]
            for i, h in enumerate(heads)}


def _tick_alternatives(ids: TickIds) -> dict[str, list[dict[str, tuple[str, ...]]]]:
    """Per action type, one entry per (field variant, row): the variant's fields mapped to their allowed
    values (id and choice fields) or to () (numbers and free text). Duplicates are dropped."""
    rows = ids.rows()
    out: dict[str, list[dict[str, tuple[str, ...]]]] = {}
    for kind, variants in action_variants().items():
        seen, alts = set(), []
        for fields in variants:
            if ids.fixed_stake and kind == "buy_prediction":
                fields = tuple(f for f in fields if f != "amount")  # the task sets it (`fixed_stake`)
            for row in rows[kind]:
                alt = {}
                for f in fields:
                    if f in _NUMERIC or f in _TEXT_FIELDS:
                        alt[f] = ()
                    elif f in row:
                        alt[f] = row[f]
                    else:
                        raise RuntimeError(f"no per-tick values for the field {f!r} of {kind!r}: its "
                                           f"ActionSpec.prompt_ids ({SPEC_OF[kind].prompt_ids!r}) offers no such ids")
                key = json.dumps(alt)
                if key not in seen:
                    seen.add(key)
                    alts.append(alt)
        if alts:
            out[kind] = alts
    return out


def _leverage_gbnf(cap: int) -> str:
    if cap <= 1:
        return '"1"'
    whole = " | ".join(f'"{k}"' for k in range(1, cap))
    return f'( {whole} ) ("." [0-9]{{1,2}})? | "{cap}"'


def _tick_value_gbnf(field: str, values: tuple[str, ...], ids: TickIds) -> str:
    if field == "leverage" and ids.leverage_cap() is not None:
        return "leverage"
    if field in _NUMERIC:
        return "number"
    if field in _TEXT_FIELDS:
        return "text"
    return "( " + " | ".join(_gbnf_literal(json.dumps(v)) for v in values) + " )" if len(values) > 1 \
        else _gbnf_literal(json.dumps(values[0]))


def tick_gbnf(ids: TickIds, limits: GrammarLimits | None = None, *, think: str = "required") -> str:
    """The GBNF grammar of a reply that acts only on `ids` (see the module docstring).

    Same layout as `reply_gbnf`: `<think>reasoning</think>`, a newline, one JSON action as
    `json.dumps` writes it; ids, outcomes and sides are literals, post text starts with a visible
    character, leverage stays within the cap. `think` (`THINK_MODES`): the think block before every action
    (default), optional, or never (a JSON-only reply, as the format-only teacher writes it). Under the
    `fixed_stake` rule (`ids.fixed_stake`) a bet has no amount.
    """
    lim = limits or GrammarLimits()
    alternatives = _tick_alternatives(ids)
    lines = _gbnf_head("The canonical rlaif_gym reply for one tick: only the ids its prompt shows.",
                       "Generated by rlaif_gym.encoding.grammar.tick_gbnf", lim, alternatives, think)
    for kind, alts in alternatives.items():
        bodies = []
        for alt in alts:
            parts = [_gbnf_literal('{"type": ' + json.dumps(kind))]
            for f, values in alt.items():
                parts += [_gbnf_literal(f', "{f}": '), _tick_value_gbnf(f, values, ids)]
            parts.append(_gbnf_literal("}"))
            bodies.append(" ".join(_merge_literals(parts)))
        lines.append(f"{_rule(kind)} ::= " + " | ".join(f"( {b} )" if len(bodies) > 1 else b for b in bodies))
    lines.append(f"number ::= [1-9] [0-9]{{0,{lim.int_digits - 1}}} (\".\" [0-9]{{1,2}})?")
    if ids.leverage_cap() is not None:
        lines.append(f"leverage ::= {_leverage_gbnf(ids.leverage_cap())}")
    lines.append(f'text ::= "\\"" [{_TEXT_FIRST_GBNF}] [{_TEXT_CLASS_GBNF}]{{0,{lim.text_chars - 1}}} "\\""')
    return "\n".join(lines) + "\n"


def tick_json_schema(ids: TickIds, limits: GrammarLimits | None = None) -> dict[str, Any]:
    """`reply_json_schema` for one tick: ids and choices as enums of what `ids` allows (see `tick_gbnf`)."""
    lim = limits or GrammarLimits()
    cap = ids.leverage_cap()
    branches = []
    for kind, alts in _tick_alternatives(ids).items():
        for alt in alts:
            props: dict[str, Any] = {"type": {"type": "string", "enum": [kind]}}
            for f, values in alt.items():
                if f == "leverage" and cap is not None:
                    props[f] = {"type": "integer", "minimum": 1, "maximum": cap}
                elif f in _TEXT_FIELDS:
                    props[f] = {"type": "string", "minLength": 1, "maxLength": lim.text_chars,
                                "pattern": _TEXT_FIRST_PATTERN}
                elif f in _NUMERIC:
                    props[f] = _schema_value(f, lim)
                else:
                    props[f] = {"type": "string", "enum": list(values)}
            branches.append({"type": "object", "properties": props, "required": list(props),
                             "additionalProperties": False})
    return _reply_schema(branches, lim)


def constraint_body(mode: str, limits: GrammarLimits | None = None, ids: TickIds | None = None) -> dict[str, Any]:
    """The request fields (for the OpenAI client's `extra_body`) that constrain a reply in `mode`.

    Args:
        mode: "gbnf" -> {"grammar": GBNF} (llama.cpp); "guided_json" -> {"guided_json": schema} (vLLM);
            "response_format" -> OpenAI structured outputs with the JSON schema (OpenAI, vLLM, others).
        limits: length bounds.
        ids: one tick's ids (`TickIds.from_prompt`): the per-tick grammar or schema; None: any id.
    """
    if mode == "gbnf":
        return {"grammar": reply_gbnf(limits) if ids is None else tick_gbnf(ids, limits)}
    if mode in ("guided_json", "response_format"):
        schema = reply_json_schema(limits) if ids is None else tick_json_schema(ids, limits)
        if mode == "guided_json":
            return {"guided_json": schema}
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "rlaif_gym_reply", "strict": True, "schema": schema}}}
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
    return canonical_reply(obj["action"], reasoning)
