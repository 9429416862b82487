"""The original training package's `rlaif_env` module: `RLAIFEnv`, `RLAIFEnvConfig` and the Babylon aliases.

Code written against the original Babylon training package imports these four names from its
`rlaif_env` module; with rlaif_gym it imports them from here instead:

    from rlaif_gym.rlaif_env import RLAIFEnv, RLAIFEnvConfig, BabylonRLAIFEnv, BabylonEnvConfig

They are the same objects as `rlaif_gym.RLAIFEnv` / `rlaif_gym.RLAIFEnvConfig` (this module only
re-exports them; there is no second environment).

Behaviour that differs from the original (docs/babylon.md ("The original's Atropos env", "The original's defects")):

* **`RLAIFEnv` is a Gymnasium environment over a live, seeded world**, not an Atropos `BaseEnv`
  that re-scores trajectories stored in PostgreSQL. The original had no `gymnasium.Env` at all; its
  "env" loaded old episodes and asked a model to continue them. Here `reset(seed)` / `step(action)`
  run the market world, and every step's reward covers the whole transition (the action and the
  tick that follows). `RLAIFTextEnv` (`RLAIF-Text-v0`) is the face for LLM policies.
* **`RLAIFEnvConfig` configures the world** (ticks, cash, markets, fees, reward weights,
  archetype, ...). The original's Atropos fields (`database_url`, `lookback_hours`,
  `min_agents_per_window`, `min_actions_per_trajectory`, `max_steps_per_trajectory`, the legacy
  judge fields, `scoring_rubric`, `scoring_mode`) do not exist; an unknown key raises `ConfigError`
  with a suggestion instead of being ignored.
* **The database side is kept by layout, not by this class**: `rlaif-gym rollout --db URL` and
  `rlaif_gym.storage.SqlTrajectorySink` write the original `trajectories` table (quoted camelCase
  columns), so the original Atropos env can still load rlaif_gym trajectories with its own query.
* `BabylonRLAIFEnv` and `BabylonEnvConfig` are plain aliases of `RLAIFEnv` and `RLAIFEnvConfig`,
  as in the original.

A compatibility face, like the CLI: it imports `rlaif_gym.envs` and `rlaif_gym.config`.
"""

from __future__ import annotations

from .config import RLAIFEnvConfig
from .envs import RLAIFEnv

__all__ = ["BabylonEnvConfig", "BabylonRLAIFEnv", "RLAIFEnv", "RLAIFEnvConfig"]

BabylonRLAIFEnv = RLAIFEnv
"""Alias of `RLAIFEnv`, the original's name for it."""
BabylonEnvConfig = RLAIFEnvConfig
"""Alias of `RLAIFEnvConfig`, the original's name for it."""
