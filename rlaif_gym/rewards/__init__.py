"""Reward components and the composite reward: raw named components, weighted in exactly one place."""

from .components import pnl_component, risk_component
from .composite import COMPONENT_NAMES, DEFAULT_WEIGHTS, combine_components

__all__ = ["COMPONENT_NAMES", "DEFAULT_WEIGHTS", "combine_components", "pnl_component", "risk_component"]
