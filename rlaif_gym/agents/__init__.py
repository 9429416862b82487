"""Baseline agents for the numeric face: random, passive, informed (observation only) and oracle."""

from .baselines import BaselineAgent, InformedAgent, OracleAgent, PassiveAgent, RandomAgent

__all__ = ["BaselineAgent", "InformedAgent", "OracleAgent", "PassiveAgent", "RandomAgent"]
