"""Reward components and the composite reward: raw named components, weighted in exactly one place."""

from .components import pnl_component, risk_component
from .composite import COMPONENT_NAMES, DEFAULT_WEIGHTS, composite_reward

__all__ = ["COMPONENT_NAMES", "DEFAULT_WEIGHTS", "composite_reward", "pnl_component", "risk_component"]
