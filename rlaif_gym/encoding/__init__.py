"""Translation between the world and the outside: spaces, observation encoding, action decoding. No I/O."""

from .action import (
    ACTION_KINDS,
    BUY_FRACTIONS,
    SELL_FRACTIONS,
    action_nvec,
    decode_actions,
)
from .mask import action_masks, multidiscrete_mask, table_mask, valid_actions
from .observation import FeatureLayout, encode_observations, feature_layout

__all__ = [
    "ACTION_KINDS",
    "BUY_FRACTIONS",
    "SELL_FRACTIONS",
    "FeatureLayout",
    "action_masks",
    "action_nvec",
    "decode_actions",
    "encode_observations",
    "feature_layout",
    "multidiscrete_mask",
    "table_mask",
    "valid_actions",
]
