"""Typed errors for rlaif_gym: every message says what was expected, what arrived and how to fix it.

Standard library only (layer L0), so every layer may raise them.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DependencyNotInstalled",
    "InvalidActionError",
    "RLAIFError",
    "ResetNeeded",
]


class RLAIFError(Exception):
    """Base class of every error raised by rlaif_gym."""


class ConfigError(RLAIFError, ValueError):
    """A configuration value or key is invalid (raised when the config is built, never mid-episode)."""


class InvalidActionError(RLAIFError, ValueError):
    """An action is outside the declared action space (a *malformed* action, not a failed trade).

    A well-formed trade that the world refuses (insufficient cash, unknown market, ...) is not an
    exception: it is reported in ``info["feedback"]`` and leaves the state unchanged.
    """


class ResetNeeded(RLAIFError, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended."""


class DependencyNotInstalled(RLAIFError, ImportError):
    """An optional dependency is missing; the message names the pip extra that provides it."""
