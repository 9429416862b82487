"""The Babylon-style world core: a batch of worlds as numpy arrays, and the rules that reset and step them.

The rules are written once, per world (`sim.rules`): compiled by numba, or run as Python where it is missing and
for ``backend="numpy"``. Nothing here imports gymnasium, pydantic or any LLM code (a test walks the imports).
"""

from .accounting import equity, exposure, liquidation_value, share_value, truth_potential, unrealized_pnl
from .actions import (
    ACTION_SPECS,
    ACTION_TYPES,
    SPEC_OF,
    TRADE_TYPES,
    Action,
    ActionBatch,
    ActionSpec,
    ActionType,
    ErrorCode,
    ResolvedAction,
    error_message,
    normalize_action,
    resolve_action,
)
from .constants import npc_behaviours
from .packing import StepOutcome
from .params import (
    GROUP_NAMES,
    NEWS_SOURCES,
    NPC_NAMES,
    NPC_ROSTER,
    PERP_TICKERS,
    POST_HONESTY,
    QUESTIONS,
    NpcBehaviour,
    WorldParams,
    npc_name,
)
from .pricing import buy_shares, sell_proceeds, yes_price
from .rng import draw_keys
from .rules import reset, step
from .state import FEED_LENGTH, GROUND_TRUTH_FIELDS, WorldState

__all__ = [
    "ACTION_SPECS",
    "ACTION_TYPES",
    "FEED_LENGTH",
    "GROUND_TRUTH_FIELDS",
    "GROUP_NAMES",
    "NEWS_SOURCES",
    "NPC_NAMES",
    "NPC_ROSTER",
    "PERP_TICKERS",
    "POST_HONESTY",
    "QUESTIONS",
    "SPEC_OF",
    "TRADE_TYPES",
    "Action",
    "ActionBatch",
    "ActionSpec",
    "ActionType",
    "ErrorCode",
    "NpcBehaviour",
    "ResolvedAction",
    "StepOutcome",
    "WorldParams",
    "WorldState",
    "buy_shares",
    "draw_keys",
    "equity",
    "error_message",
    "exposure",
    "liquidation_value",
    "normalize_action",
    "npc_behaviours",
    "npc_name",
    "reset",
    "resolve_action",
    "sell_proceeds",
    "share_value",
    "step",
    "truth_potential",
    "unrealized_pnl",
    "yes_price",
]
