"""The Babylon-style world core: batched numpy arrays, numpy and the standard library only.

Nothing here imports gymnasium, pydantic or any LLM code (a test walks the imports).
"""

from .actions import (
    ACTION_TYPES,
    Action,
    ActionBatch,
    ActionType,
    ErrorCode,
    ResolvedAction,
    error_message,
    normalize_action,
)
from .engine import (
    StepOutcome,
    equity,
    exposure,
    liquidation_value,
    npc_behaviours,
    reset,
    resolve_action,
    share_value,
    step,
    truth_potential,
    unrealized_pnl,
)
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
from .state import FEED_LENGTH, GROUND_TRUTH_FIELDS, WorldState

__all__ = [
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
    "Action",
    "ActionBatch",
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
