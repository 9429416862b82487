"""The canonical action schema, each kind declared once, the legacy aliases, and the batched form the rules execute.

One schema (docs/world.md): `wait`, `buy_prediction`, `sell_prediction`, `open_perp`, `close_perp`,
`join_group`, `create_post`, `send_dm`. Each kind is one `ActionSpec` in `ACTION_SPECS`: its fields, its
example, and how the numeric face and a tick's prompt offer it; the faces derive from it (docs/layout.md,
"Adding an action kind"). `normalize_action` accepts the original system's vocabularies (`buy`, `buy_yes`,
`open_long`, `marketId`, `direction`, ...; docs/babylon.md ("The original's action vocabularies")) and maps
them onto the schema; it never guesses a missing required field. `resolve_action` looks ids up in the current
state and gives one row of an `ActionBatch`, the array form the rules apply to a batch of worlds.

A well-formed action the world refuses is not an exception: the rules report an `ErrorCode` and
leave that world's state unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np

from ..errors import InvalidActionError
from .params import GROUP_NAMES, NPC_ROSTER, PERP_TICKERS, WorldParams, npc_name
from .state import WorldState

__all__ = [
    "ACTION_SPECS",
    "ACTION_TYPES",
    "AMOUNT_ERRORS",
    "NUMERIC_SIZES",
    "NUMERIC_TARGETS",
    "PROMPT_IDS",
    "SPEC_OF",
    "TRADE_TYPES",
    "Action",
    "ActionBatch",
    "ActionSpec",
    "ActionType",
    "ErrorCode",
    "ResolvedAction",
    "error_message",
    "normalize_action",
    "resolve_action",
]


class ActionType(IntEnum):
    """Canonical action types; the integer is the code used in `ActionBatch.kind`."""

    WAIT = 0
    BUY_PREDICTION = 1
    SELL_PREDICTION = 2
    OPEN_PERP = 3
    CLOSE_PERP = 4
    JOIN_GROUP = 5
    CREATE_POST = 6
    SEND_DM = 7


ACTION_TYPES: tuple[str, ...] = tuple(t.name.lower() for t in ActionType)


class ErrorCode(IntEnum):
    """Why an action failed. `error_message` turns a code plus two numbers into a sentence."""

    OK = 0
    UNKNOWN_MARKET = 1
    BELOW_MIN_ORDER = 2
    INSUFFICIENT_CASH = 3
    NO_SHARES = 4
    INSUFFICIENT_SHARES = 5
    UNKNOWN_TICKER = 6
    POSITION_EXISTS = 7
    LEVERAGE_ABOVE_CAP = 8
    LEVERAGE_BELOW_ONE = 9
    INSUFFICIENT_MARGIN = 10
    NO_POSITION = 11
    UNKNOWN_GROUP = 12
    ALREADY_MEMBER = 13
    EMPTY_CONTENT = 14
    UNKNOWN_RECIPIENT = 15
    MARKET_CLOSED = 16
    NOT_A_NUMBER = 17
    PROCEEDS_BELOW_FEE = 18
    UNKNOWN_POSITION = 19
    INVALID_REPLY = 20


_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.OK: "",
    ErrorCode.UNKNOWN_MARKET: "unknown market (slot {a:.0f}); use a market id shown in the observation",
    ErrorCode.BELOW_MIN_ORDER: "order of {a:.4g} is below the minimum of {b:.4g}",
    ErrorCode.INSUFFICIENT_CASH: "insufficient cash: the order needs ${a:,.2f} but cash is ${b:,.2f}",
    ErrorCode.NO_SHARES: "no shares of that outcome are held in this market",
    ErrorCode.INSUFFICIENT_SHARES: "cannot sell {a:,.4f} shares: only {b:,.4f} are held",
    ErrorCode.UNKNOWN_TICKER: "unknown perp ticker (index {a:.0f})",
    ErrorCode.POSITION_EXISTS: "a position on this ticker is already open; close it first",
    ErrorCode.LEVERAGE_ABOVE_CAP: "leverage {a:.4g}x is above the cap of {b:.4g}x",
    ErrorCode.LEVERAGE_BELOW_ONE: "leverage {a:.4g}x is below 1x",
    ErrorCode.INSUFFICIENT_MARGIN: "insufficient cash for margin and fee: need ${a:,.2f}, cash is ${b:,.2f}",
    ErrorCode.NO_POSITION: "no open position on this ticker (it may have been closed or liquidated)",
    ErrorCode.UNKNOWN_GROUP: "unknown group chat (index {a:.0f})",
    ErrorCode.ALREADY_MEMBER: "already a member of this group chat",
    ErrorCode.EMPTY_CONTENT: "content must be non-empty text",
    ErrorCode.UNKNOWN_RECIPIENT: "unknown recipient; use an NPC's name as the feed shows it, or its id such as agent-0",
    ErrorCode.MARKET_CLOSED: "that market has already resolved; trade the markets listed now",
    ErrorCode.NOT_A_NUMBER: "amount must be a finite positive number",
    ErrorCode.PROCEEDS_BELOW_FEE: "sale proceeds ${a:,.4f} would not cover the ${b:,.2f} fee",
    ErrorCode.UNKNOWN_POSITION: "unknown position id",
    ErrorCode.INVALID_REPLY: "the reply has no executable action (see the format errors)",
}


AMOUNT_ERRORS: frozenset[ErrorCode] = frozenset({
    ErrorCode.BELOW_MIN_ORDER, ErrorCode.INSUFFICIENT_CASH, ErrorCode.INSUFFICIENT_SHARES,
    ErrorCode.INSUFFICIENT_MARGIN, ErrorCode.PROCEEDS_BELOW_FEE})
"""The refusals an action's amount alone decides, its ids, choices and leverage being fine: the only ones a reply
in one tick's constrained grammar can meet (`encoding.grammar.TickIds`; tests/encoding/test_tick_grammar.py)."""


def error_message(code: int, a: float = 0.0, b: float = 0.0) -> str:
    """Human-readable reason for a failed action ('' for success)."""
    return _MESSAGES[ErrorCode(int(code))].format(a=float(a), b=float(b))


@dataclass(frozen=True)
class Action:
    """One action in the canonical schema. Only the fields its type needs are set.

    Attributes:
        type: one of `ACTION_TYPES`.
        market: prediction market id (e.g. "market-7") or slot index as text.
        outcome: "YES" or "NO".
        amount: USD to spend (buy_prediction).
        shares: shares to sell (sell_prediction).
        ticker: perp ticker (open_perp, close_perp).
        side: "LONG" or "SHORT" (open_perp).
        size: USD notional (open_perp).
        leverage: 1 to the configured cap (open_perp; default 1).
        position_id: perp position id (close_perp, alternative to ticker).
        content: post or DM text.
        recipient: NPC id for send_dm (e.g. "agent-3").
        group: group chat id (e.g. "group-0") or name.
    """

    type: str
    market: str | None = None
    outcome: str | None = None
    amount: float | None = None
    shares: float | None = None
    ticker: str | None = None
    side: str | None = None
    size: float | None = None
    leverage: float | None = None
    position_id: str | None = None
    content: str | None = None
    recipient: str | None = None
    group: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The action as a JSON-able dict without unset fields."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


# Legacy type names → (canonical type, implied fields).
_TYPE_ALIASES: dict[str, tuple[str, dict[str, str]]] = {
    "buy": ("buy_prediction", {}),
    "buy_shares": ("buy_prediction", {}),
    "buyshares": ("buy_prediction", {}),
    "predict": ("buy_prediction", {}),
    "bet": ("buy_prediction", {}),
    "buy_yes": ("buy_prediction", {"outcome": "YES"}),
    "buy_no": ("buy_prediction", {"outcome": "NO"}),
    "sell": ("sell_prediction", {}),
    "sell_shares": ("sell_prediction", {}),
    "sellshares": ("sell_prediction", {}),
    "open_long": ("open_perp", {"side": "LONG"}),
    "open_short": ("open_perp", {"side": "SHORT"}),
    "long": ("open_perp", {"side": "LONG"}),
    "short": ("open_perp", {"side": "SHORT"}),
    "openposition": ("open_perp", {}),
    "open_position": ("open_perp", {}),
    "close_position": ("close_perp", {}),
    "closeposition": ("close_perp", {}),
    "close": ("close_perp", {}),
    "hold": ("wait", {}),
    "noop": ("wait", {}),
    "post": ("create_post", {}),
    "createpost": ("create_post", {}),
    "dm": ("send_dm", {}),
    "direct_message": ("send_dm", {}),
    "send_message": ("send_dm", {}),
    "join_group_chat": ("join_group", {}),
    "joingroup": ("join_group", {}),
}

# Field aliases per canonical field (first match wins; camelCase and snake_case both accepted).
_FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "market": ("market", "marketId", "market_id", "marketid"),
    "outcome": ("outcome",),
    "amount": ("amount", "usd", "quantity"),
    "shares": ("shares", "quantity", "amount"),
    "ticker": ("ticker", "symbol", "perp"),
    "side": ("side", "direction"),
    "size": ("size", "notional", "amount"),
    "leverage": ("leverage", "lev"),
    "position_id": ("position_id", "positionId", "positionid"),
    "content": ("content", "text", "message", "body"),
    "recipient": ("recipient", "recipientId", "recipient_id", "targetUserId", "toUserId", "userId"),
    "group": ("group", "groupId", "group_id", "groupid"),
}

_NUMERIC = frozenset({"amount", "shares", "size", "leverage"})
"""The canonical fields that hold numbers (the rest are ids, choices and text)."""

NUMERIC_TARGETS: tuple[str, ...] = ("market", "perp", "group")
"""What a numeric action's target indexes, per `ActionSpec.numeric_target`: a market slot, a perp or a group chat."""
NUMERIC_SIZES: tuple[str, ...] = ("equity", "leveraged", "held")
"""How a numeric action's size bucket becomes its amount, per `ActionSpec.numeric_size`: a fraction of equity (USD),
that times the numeric face's perp leverage (USD notional), or a fraction of the shares held on the action's side of
its target market."""
PROMPT_IDS: tuple[str, ...] = ("open_markets", "held_shares", "free_perps", "open_positions", "unjoined_groups",
                               "feed_npcs")
"""What a tick's prompt shows an action kind may act on, per `ActionSpec.prompt_ids` (`encoding.grammar.TickIds`)."""


@dataclass(frozen=True)
class ActionSpec:
    """One action kind, declared once: its reply fields, its numeric encoding and what a prompt offers it.

    Everything outside the world's rules reads this declaration rather than a list of kinds of its own:
    `normalize_action` and `resolve_action` (fields), the system prompt (`example`), the reply grammar and schema
    (fields; `prompt_ids` for one tick's), the numeric face's space, decoder and masks and SB3's action table
    (`numeric_*`). What the kind does is its handler in `sim.rules` (docs/layout.md, "Adding an action kind").

    Attributes:
        kind: its `ActionType` (the code in `ActionBatch.kind`).
        required: canonical fields a reply must give.
        optional: canonical fields it may give.
        one_of: of the optional fields, at least one must be given (close_perp: a ticker or a position id).
        example: the system prompt's example of the fields, written as `json.dumps` writes them.
        unit: the example's note, e.g. "amount in USD" ("" for none).
        numeric: whether the numeric face (`RLAIF-v0`) offers it; a kind that needs free text does not.
        numeric_target: what its target index means (`NUMERIC_TARGETS`), None when it reads no target.
        numeric_size: how its size bucket becomes the amount (`NUMERIC_SIZES`), None when it reads no size.
        numeric_side: whether it reads the side (0 YES / LONG, 1 NO / SHORT).
        prompt_ids: what one tick's constraint admits as its ids (`PROMPT_IDS`), None when it takes no id.
        trade: whether it trades (moves cash into or out of shares or positions): what the metrics, the
            judge's summaries and the records count as a trade.
    """

    kind: ActionType
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()
    example: Mapping[str, Any] = field(default_factory=dict)
    unit: str = ""
    numeric: bool = True
    numeric_target: str | None = None
    numeric_size: str | None = None
    numeric_side: bool = False
    prompt_ids: str | None = None
    trade: bool = False

    @property
    def name(self) -> str:
        """The canonical type name, e.g. "buy_prediction"."""
        return self.kind.name.lower()

    def __post_init__(self) -> None:
        fields = (*self.required, *self.optional)
        problems = [f"unknown field {f!r}" for f in fields if f not in _FIELD_ALIASES]
        problems += [f"one_of names {f!r}, not an optional field" for f in self.one_of if f not in self.optional]
        problems += [f"example field {f!r} is not one of its fields" for f in self.example if f not in fields]
        if self.numeric_target not in (None, *NUMERIC_TARGETS):
            problems.append(f"numeric_target {self.numeric_target!r} is not one of {NUMERIC_TARGETS}")
        if self.numeric_size not in (None, *NUMERIC_SIZES):
            problems.append(f"numeric_size {self.numeric_size!r} is not one of {NUMERIC_SIZES}")
        if self.numeric_size == "held" and self.numeric_target != "market":
            problems.append("numeric_size 'held' reads the shares of a market: numeric_target must be 'market'")
        if self.prompt_ids not in (None, *PROMPT_IDS):
            problems.append(f"prompt_ids {self.prompt_ids!r} is not one of {PROMPT_IDS}")
        if problems:
            raise ValueError(f"ActionSpec {self.kind.name}: " + "; ".join(problems))


ACTION_SPECS: tuple[ActionSpec, ...] = (
    ActionSpec(ActionType.WAIT),
    ActionSpec(ActionType.BUY_PREDICTION, ("market", "outcome", "amount"),
               example={"market": "market-3", "outcome": "YES", "amount": 250}, unit="amount in USD",
               numeric_target="market", numeric_size="equity", numeric_side=True, prompt_ids="open_markets",
               trade=True),
    ActionSpec(ActionType.SELL_PREDICTION, ("market", "outcome", "shares"),
               example={"market": "market-3", "outcome": "YES", "shares": 100},
               numeric_target="market", numeric_size="held", numeric_side=True, prompt_ids="held_shares", trade=True),
    ActionSpec(ActionType.OPEN_PERP, ("ticker", "side", "size"), ("leverage",),
               example={"ticker": "BTCAI", "side": "LONG", "size": 1000, "leverage": 2}, unit="size in USD",
               numeric_target="perp", numeric_size="leveraged", numeric_side=True, prompt_ids="free_perps", trade=True),
    ActionSpec(ActionType.CLOSE_PERP, (), ("ticker", "position_id"), one_of=("ticker", "position_id"),
               example={"ticker": "BTCAI"}, numeric_target="perp", prompt_ids="open_positions", trade=True),
    ActionSpec(ActionType.JOIN_GROUP, ("group",), example={"group": "Alpha Insiders"}, numeric_target="group",
               prompt_ids="unjoined_groups"),
    ActionSpec(ActionType.CREATE_POST, ("content",), example={"content": "..."}, numeric=False),
    ActionSpec(ActionType.SEND_DM, ("recipient", "content"), example={"recipient": "agent-2", "content": "..."},
               numeric=False, prompt_ids="feed_npcs"),
)
"""Every action kind's declaration, in `ActionType` order (a test holds the two to each other)."""
SPEC_OF: dict[str, ActionSpec] = {spec.name: spec for spec in ACTION_SPECS}
"""The declaration of each canonical type name."""
TRADE_TYPES: frozenset[str] = frozenset(spec.name for spec in ACTION_SPECS if spec.trade)
"""The canonical type names of the kinds that trade (`ActionSpec.trade`)."""
if [spec.kind for spec in ACTION_SPECS] != list(ActionType):
    raise RuntimeError("ACTION_SPECS must declare every ActionType once, in ActionType order")

_REQUIRED: dict[str, tuple[str, ...]] = {spec.name: spec.required for spec in ACTION_SPECS}
_OPTIONAL: dict[str, tuple[str, ...]] = {spec.name: spec.optional for spec in ACTION_SPECS if spec.optional}


def _shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` for an error message, cut to `limit` characters (a reply may send a megabyte as a field)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _canonical_type(raw: Any) -> tuple[str, dict[str, str]]:
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidActionError(f"action type must be a non-empty string, got {_shown(raw)}")
    name = raw.strip().lower().replace("-", "_").replace(" ", "_")
    if name in ACTION_TYPES:
        return name, {}
    if name in _TYPE_ALIASES:
        return _TYPE_ALIASES[name]
    known = ", ".join(ACTION_TYPES)
    raise InvalidActionError(f"unknown action type {_shown(raw)}; expected one of: {known} (or a legacy alias)")


def _to_number(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidActionError(f"{name} must be a number, got a boolean")
    try:
        number = float(str(value).replace(",", "").replace("$", "").strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidActionError(f"{name} must be a number, got {_shown(value)}") from None
    if not math.isfinite(number):
        raise InvalidActionError(f"{name} must be finite, got {_shown(value)}")
    return number


def _normalise_side(kind: str, value: Any) -> str:
    text = str(value).strip().upper()
    if kind in ("buy_prediction", "sell_prediction"):
        mapping = {"YES": "YES", "Y": "YES", "TRUE": "YES", "NO": "NO", "N": "NO", "FALSE": "NO"}
        expected = "YES or NO"
    else:
        mapping = {"LONG": "LONG", "BUY": "LONG", "SHORT": "SHORT", "SELL": "SHORT"}
        expected = "LONG or SHORT"
    if text not in mapping:
        field = "outcome" if "prediction" in kind else "side"
        raise InvalidActionError(f"{field} must be {expected}, got {_shown(value)}")
    return mapping[text]


def normalize_action(data: Mapping[str, Any], *, fixed: Mapping[str, Mapping[str, Any]] | None = None) -> Action:
    """Map a dict in the canonical schema or any legacy vocabulary onto an `Action`.

    Args:
        data: e.g. {"action": "buy_yes", "marketId": "market-3", "amount": 100}. The type may be
            under "type", "action", "action_type" or "actionType"; parameters may be top-level or
            nested under "parameters"/"params"/"data".
        fixed: values a task sets rather than the reply, per canonical kind (e.g. `{"buy_prediction":
            {"amount": 500.0}}`, the env's `fixed_stake` rule): they fill the field when the reply leaves it
            out and replace what the reply wrote, so no reply can change them.

    Raises:
        InvalidActionError: unknown type, a missing required field, or a field of the wrong kind.
            The message names the field and the accepted values.
    """
    if not isinstance(data, Mapping):
        raise InvalidActionError(f"an action must be a JSON object, got {type(data).__name__}")
    raw_type = next((data[k] for k in ("type", "action", "action_type", "actionType") if k in data), None)
    if raw_type is None:
        raise InvalidActionError('the action has no "type" (or "action") field')
    kind, implied = _canonical_type(raw_type)
    params: dict[str, Any] = dict(data)
    for nest in ("parameters", "params", "data"):
        if isinstance(data.get(nest), Mapping):
            params.update(data[nest])
    # In a perp action, "side" may carry long/short; in a prediction action it may carry yes/no.
    if kind in ("buy_prediction", "sell_prediction") and "outcome" not in params and "side" in params:
        params["outcome"] = params["side"]
    wanted = _REQUIRED[kind] + _OPTIONAL.get(kind, ())
    values: dict[str, Any] = dict(implied)
    for fname in wanted:
        if fname in values:
            continue
        for alias in _FIELD_ALIASES[fname]:
            if alias in params and params[alias] is not None:
                values[fname] = params[alias]
                break
    values.update((fixed or {}).get(kind, {}))
    missing = [f for f in _REQUIRED[kind] if f not in values]
    if missing:
        raise InvalidActionError(f"{kind} needs {', '.join(missing)}; got fields {sorted(params)}")
    one_of = SPEC_OF[kind].one_of
    if one_of and not any(f in values for f in one_of):
        raise InvalidActionError(f"{kind} needs {' or '.join(f'a {f}' for f in one_of)}")
    for fname in list(values):
        if fname in _NUMERIC:
            values[fname] = _to_number(fname, values[fname])
        elif fname in ("outcome", "side"):
            values[fname] = _normalise_side(kind, values[fname])
        else:
            values[fname] = str(values[fname]).strip()
    return Action(type=kind, **values)


class ResolvedAction(NamedTuple):
    """One world's row of an `ActionBatch`: a canonical action with its ids looked up in the state.

    What `resolve_action` returns. It is a tuple, so code that unpacks or indexes the eight fields
    keeps working; the fields are `ActionBatch`'s of the same names.
    """

    kind: int
    target: int
    side: int
    amount: float
    leverage: float
    pre_error: int
    pre_a: float
    pre_b: float

    @classmethod
    def wait(cls) -> ResolvedAction:
        """The row of a `wait` (and of no action at all): nothing happens, nothing fails."""
        return cls(ActionType.WAIT, 0, 0, 0.0, 1.0, ErrorCode.OK, 0.0, 0.0)

    @classmethod
    def invalid_reply(cls) -> ResolvedAction:
        """The row of a text-face reply without an executable action: a wait the engine reports as
        failed with `ErrorCode.INVALID_REPLY` (the reply's format errors say why)."""
        return cls(ActionType.WAIT, 0, 0, 0.0, 1.0, ErrorCode.INVALID_REPLY, 0.0, 0.0)


@dataclass
class ActionBatch:
    """One action per world, as arrays the engine applies in one vectorised pass.

    Attributes:
        kind: `ActionType` code per world.
        target: market slot, perp index, group index or NPC index, depending on `kind`.
        side: 0 for YES/LONG, 1 for NO/SHORT.
        amount: USD for buys, shares for sells, USD notional for perps.
        leverage: perp leverage.
        pre_error: an `ErrorCode` found while decoding (unknown id, empty content, ...); the engine
            reports it as a failure and changes nothing in that world.
        pre_a, pre_b: the numbers quoted in the pre_error message.
    """

    kind: np.ndarray
    target: np.ndarray
    side: np.ndarray
    amount: np.ndarray
    leverage: np.ndarray
    pre_error: np.ndarray
    pre_a: np.ndarray = field(default=None)  # type: ignore[assignment]
    pre_b: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        n = len(self.kind)
        if self.pre_a is None:
            self.pre_a = np.zeros(n)
        if self.pre_b is None:
            self.pre_b = np.zeros(n)

    @classmethod
    def waits(cls, n: int) -> ActionBatch:
        """A batch in which every world waits."""
        return cls(
            kind=np.zeros(n, np.int64), target=np.zeros(n, np.int64), side=np.zeros(n, np.int64),
            amount=np.zeros(n), leverage=np.ones(n), pre_error=np.zeros(n, np.int64),
        )

    @classmethod
    def from_actions(cls, actions: Sequence[Action | None], resolve) -> ActionBatch:
        """Build a batch from canonical actions; `resolve(world, action)` gives the `ResolvedAction` per world.

        See `resolve_action`, which looks ids up in the state.
        """
        return cls.from_rows([resolve(b, a) for b, a in enumerate(actions)])

    @classmethod
    def from_rows(cls, rows: Sequence[ResolvedAction]) -> ActionBatch:
        """Build a batch from one `ResolvedAction` (or 8-tuple in its order) per world."""
        cols = list(zip(*rows, strict=True)) if rows else [()] * 8
        return cls(
            kind=np.asarray(cols[0], np.int64), target=np.asarray(cols[1], np.int64),
            side=np.asarray(cols[2], np.int64), amount=np.asarray(cols[3], np.float64),
            leverage=np.asarray(cols[4], np.float64), pre_error=np.asarray(cols[5], np.int64),
            pre_a=np.asarray(cols[6], np.float64), pre_b=np.asarray(cols[7], np.float64),
        )


# ---------------------------------------------------------------------------------------------
# Canonical actions → batch rows (id lookup against the current state)


def _lookup_market(state: WorldState, b: int, ref: str) -> tuple[int, int]:
    """(slot, error) for a market reference: "market-<serial>", a bare serial, or "slot:<i>"."""
    text = ref.strip().lower()
    if text.startswith("slot:"):
        slot = int(text[5:]) if text[5:].isdigit() else -1
        return (slot, ErrorCode.OK) if 0 <= slot < state.pm_serial.shape[1] else (slot, ErrorCode.UNKNOWN_MARKET)
    digits = text.removeprefix("market-").removeprefix("market").removeprefix("#").strip()
    if not digits.isdigit():
        return -1, ErrorCode.UNKNOWN_MARKET
    serial = int(digits)
    hits = np.nonzero(state.pm_serial[b] == serial)[0]
    if len(hits):
        return int(hits[0]), ErrorCode.OK
    return -1, ErrorCode.MARKET_CLOSED if serial < state.next_serial[b] else ErrorCode.UNKNOWN_MARKET


def _lookup_name(ref: str, names: list[str], prefix: str) -> int:
    text = ref.strip().lower()
    for i, name in enumerate(names):
        if text in (name.lower(), f"{prefix}-{i}", f"{prefix}{i}", str(i)):
            return i
    return -1


def resolve_action(state: WorldState, params: WorldParams, b: int, action: Action | None) -> ResolvedAction:
    """Turn a canonical action for world `b` into an `ActionBatch` row, looking ids up in the state.

    Returns a `ResolvedAction` (kind, target, side, amount, leverage, pre_error, pre_a, pre_b); unknown ids
    become a pre_error so that the step reports them without changing the state. None is a wait. The row is
    read from the fields the kind declares (`ActionSpec`), never from its name: the target from its market,
    ticker or position id, group or recipient; the side from its outcome or side; the amount from its amount,
    shares or size.
    """
    if action is None or action.type == "wait":
        return ResolvedAction.wait()
    spec = SPEC_OF[action.type]
    fields = (*spec.required, *spec.optional)
    target, code = 0, ErrorCode.OK
    if "market" in fields:
        target, code = _lookup_market(state, b, action.market or "")
    elif "ticker" in fields or "position_id" in fields:
        target, code = _lookup_perp(state, params, b, action)
    elif "group" in fields:
        target = _lookup_name(action.group or "", [n for n, _ in GROUP_NAMES[: params.num_groups]], "group")
        code = ErrorCode.OK if target >= 0 else ErrorCode.UNKNOWN_GROUP
    if "content" in fields and not (action.content or "").strip():
        code = ErrorCode.EMPTY_CONTENT
    if "recipient" in fields:
        target = _lookup_recipient(params, action.recipient or "")
        if target < 0 and code == ErrorCode.OK:
            code = ErrorCode.UNKNOWN_RECIPIENT
    side = 0
    if "outcome" in fields:
        side = 0 if action.outcome == "YES" else 1
    elif "side" in fields:
        side = 0 if action.side in (None, "LONG") else 1
    amount = next((float(getattr(action, f) or 0.0) for f in ("amount", "shares", "size") if f in fields), 0.0)
    lev = float(action.leverage) if "leverage" in fields and action.leverage is not None else 1.0
    return ResolvedAction(spec.kind, max(target, 0), side, amount, lev, code, float(target), 0.0)


def _lookup_perp(state: WorldState, params: WorldParams, b: int, action: Action) -> tuple[int, int]:
    """(perp index, error) for an action's ticker, or else its position id ("pos-<serial>" of an open position)."""
    if action.ticker is not None:
        target = _lookup_name(action.ticker, list(PERP_TICKERS[: params.num_perps]), "perp")
        return target, ErrorCode.OK if target >= 0 else ErrorCode.UNKNOWN_TICKER
    ref = (action.position_id or "").lower().removeprefix("pos-")
    serials = state.pos_serial[b]
    target = next((t for t in range(params.num_perps)
                   if ref.isdigit() and state.pos_side[b, t] != 0 and serials[t] == int(ref)), -1)
    return target, ErrorCode.OK if target >= 0 else ErrorCode.UNKNOWN_POSITION


def _lookup_recipient(params: WorldParams, ref: str) -> int:
    """An NPC's index from its id ("agent-3"), its roster name or the display name the prompt's feed shows."""
    names = [NPC_ROSTER[i % len(NPC_ROSTER)][0] for i in range(params.num_npcs)]
    target = _lookup_name(ref, names, "agent")
    if target < 0:  # the display name the prompt's feed shows ("Satoshi Nakamotoe")
        target = _lookup_name(ref, [npc_name(i) for i in range(params.num_npcs)], "agent")
    return target
