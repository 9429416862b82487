"""Where rlaif-gym keeps what it builds on a machine (compiled kernels, converted models): one user-level cache.

`user_cache_dir()` is ``$RLAIF_GYM_CACHE``, else ``$XDG_CACHE_HOME/rlaif-gym``, else ``~/.cache/rlaif-gym``.
Standard library only, so the sim's compiled kernels and the integrations share it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "user_cache_dir"]

CACHE_ENV = "RLAIF_GYM_CACHE"
"""Environment variable that moves the cache (e.g. to a shared or larger disk)."""


def user_cache_dir() -> Path:
    """The cache root (not created here)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlaif-gym"
