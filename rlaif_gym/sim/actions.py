"""The canonical action schema, the legacy aliases, and the batched form the engine executes.

One schema (docs/world.md): `wait`, `buy_prediction`, `sell_prediction`, `open_perp`, `close_perp`,
`create_post`, `send_dm`, `join_group`. `normalize_action` accepts the original system's
vocabularies (`buy`, `buy_yes`, `open_long`, `marketId`, `direction`, ...;
docs/babylon.md ("The original's action vocabularies")) and maps them onto it; it never guesses a
missing required field. `batch_actions` resolves ids against the current state and produces an
`ActionBatch`, the array form the engine applies to a batch of worlds.

A well-formed action the world refuses is not an exception: the engine reports an `ErrorCode` and
leaves that world's state unchanged.
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
    "ACTION_TYPES",
    "Action",
    "ActionBatch",
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

_REQUIRED: dict[str, tuple[str, ...]] = {
    "wait": (),
    "buy_prediction": ("market", "outcome", "amount"),
    "sell_prediction": ("market", "outcome", "shares"),
    "open_perp": ("ticker", "side", "size"),
    "close_perp": (),  # ticker or position_id, checked below
    "join_group": ("group",),
    "create_post": ("content",),
    "send_dm": ("recipient", "content"),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {"open_perp": ("leverage",), "close_perp": ("ticker", "position_id")}
_NUMERIC = {"amount", "shares", "size", "leverage"}


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


def normalize_action(data: Mapping[str, Any]) -> Action:
    """Map a dict in the canonical schema or any legacy vocabulary onto an `Action`.

    Args:
        data: e.g. {"action": "buy_yes", "marketId": "market-3", "amount": 100}. The type may be
            under "type", "action", "action_type" or "actionType"; parameters may be top-level or
            nested under "parameters"/"params"/"data".

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
    missing = [f for f in _REQUIRED[kind] if f not in values]
    if missing:
        raise InvalidActionError(f"{kind} needs {', '.join(missing)}; got fields {sorted(params)}")
    if kind == "close_perp" and "ticker" not in values and "position_id" not in values:
        raise InvalidActionError("close_perp needs a ticker or a position_id")
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
    become a pre_error so that the step reports them without changing the state. None is a wait.
    """
    if action is None or action.type == "wait":
        return ResolvedAction.wait()
    kind = ActionType[action.type.upper()]
    target, side, amount, lev, code = 0, 0, 0.0, 1.0, ErrorCode.OK
    if kind in (ActionType.BUY_PREDICTION, ActionType.SELL_PREDICTION):
        target, code = _lookup_market(state, b, action.market or "")
        side = 0 if action.outcome == "YES" else 1
        amount = float(action.amount if kind == ActionType.BUY_PREDICTION else action.shares)
    elif kind in (ActionType.OPEN_PERP, ActionType.CLOSE_PERP):
        tickers = list(PERP_TICKERS[: params.num_perps])
        if action.ticker is not None:
            target = _lookup_name(action.ticker, tickers, "perp")
        else:
            ref = (action.position_id or "").lower().removeprefix("pos-")
            serials = state.pos_serial[b]
            target = next((t for t in range(params.num_perps)
                           if ref.isdigit() and state.pos_side[b, t] != 0 and serials[t] == int(ref)), -1)
            code = ErrorCode.OK if target >= 0 else ErrorCode.UNKNOWN_POSITION
        if target < 0 and code == ErrorCode.OK:
            code = ErrorCode.UNKNOWN_TICKER
        side = 0 if action.side in (None, "LONG") else 1
        amount = float(action.size or 0.0)
        lev = float(action.leverage if action.leverage is not None else 1.0)
    elif kind == ActionType.JOIN_GROUP:
        target = _lookup_name(action.group or "", [n for n, _ in GROUP_NAMES[: params.num_groups]], "group")
        code = ErrorCode.OK if target >= 0 else ErrorCode.UNKNOWN_GROUP
    elif kind in (ActionType.CREATE_POST, ActionType.SEND_DM):
        if not (action.content or "").strip():
            code = ErrorCode.EMPTY_CONTENT
        if kind == ActionType.SEND_DM:
            names = [NPC_ROSTER[i % len(NPC_ROSTER)][0] for i in range(params.num_npcs)]
            target = _lookup_name(action.recipient or "", names, "agent")
            if target < 0:  # the display name the prompt's feed shows ("Satoshi Nakamotoe")
                target = _lookup_name(action.recipient or "", [npc_name(i) for i in range(params.num_npcs)],
                                      "agent")
            if target < 0 and code == ErrorCode.OK:
                code = ErrorCode.UNKNOWN_RECIPIENT
    return ResolvedAction(kind, max(target, 0), side, amount, lev, code, float(target), 0.0)
