"""RLlib integration: env creators that take a plain config dict, registered with Ray Tune.

Ray workers do not see Gymnasium's registry, so RLlib finds envs through
`ray.tune.registry.register_env`. `register()` registers

* `"RLAIF-v0"`: `RLAIFEnv` (numeric face) from `env_config`, validated strictly by
  `RLAIFEnvConfig` (an unknown key raises `ConfigError` with a "did you mean" hint);
* `"RLAIF-MultiAgent-v0"`: `RLAIFRLlibMultiAgentEnv`, the multi-agent world as an RLlib
  `MultiAgentEnv`; `env_config` takes the config fields plus `num_agents` (default 2).

    from ray.rllib.algorithms.ppo import PPOConfig
    from rlaif_gym.integrations import rllib
    rllib.register()
    config = PPOConfig().environment("RLAIF-v0", env_config={"num_ticks": 48})
    algo = config.build_algo()
    algo.train()

Needs the `[rllib]` extra. RLlib pins `gymnasium==1.2.2` in its own `ray[rllib]` extra; ours installs
RLlib's dependencies without that pin, and the tests train PPO with the project's gymnasium.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import RLAIFEnvConfig
from ..envs import RLAIFEnv
from ..envs.multi_agent import RLAIFMultiAgentEnv
from ..errors import ConfigError, DependencyNotInstalled, install_hint

try:
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from ray.tune.registry import register_env
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled("rlaif_gym.integrations.rllib needs Ray RLlib: " + install_hint("rllib")) from exc

__all__ = ["ENV_NAME", "MULTI_AGENT_ENV_NAME", "RLAIFRLlibMultiAgentEnv", "env_creator", "multi_agent_env_creator",
           "register"]

ENV_NAME = "RLAIF-v0"
"""The Tune registry name of the single-agent numeric env."""
MULTI_AGENT_ENV_NAME = "RLAIF-MultiAgent-v0"
"""The Tune registry name of the multi-agent env."""


def _plain(env_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """RLlib passes an `EnvContext` (a dict with worker attributes); keep only its items."""
    if env_config is None:
        return {}
    if not isinstance(env_config, Mapping):
        raise ConfigError(f"env_config must be a mapping of RLAIFEnvConfig fields, got {type(env_config).__name__}")
    return dict(env_config.items())


def env_creator(env_config: Mapping[str, Any] | None = None) -> RLAIFEnv:
    """`RLAIF-v0` from a plain dict of `RLAIFEnvConfig` fields (strict: unknown keys raise `ConfigError`)."""
    return RLAIFEnv(RLAIFEnvConfig(**_plain(env_config)))


class RLAIFRLlibMultiAgentEnv(MultiAgentEnv):
    """The multi-agent world (`RLAIFMultiAgentEnv`, numeric face) as an RLlib `MultiAgentEnv`.

    Args:
        config: `RLAIFEnvConfig` fields plus `num_agents` (default 2), as a plain dict.

    Agents are `trader_0` ... with the numeric face's Box observation and MultiDiscrete action.
    A bankrupt agent is terminated alone; the episode ends (`"__all__"`) when no agent is left,
    as a truncation at `num_ticks` or a termination if every agent went bankrupt.
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        cfg = _plain(config)
        num_agents = int(cfg.pop("num_agents", 2))
        self.env = RLAIFMultiAgentEnv(RLAIFEnvConfig(**cfg), num_agents=num_agents, face="numeric")
        self.possible_agents = list(self.env.possible_agents)
        self.agents: list[str] = []
        self.observation_spaces = dict(self.env.observation_spaces)
        self.action_spaces = dict(self.env.action_spaces)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new world; returns (observations, infos) keyed by agent."""
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        return obs, infos

    def step(self, action_dict: Mapping[str, Any]):
        """Step the live agents; adds RLlib's `"__all__"` flags."""
        obs, rewards, terms, truncs, infos = self.env.step(action_dict)
        self.agents = list(self.env.agents)
        done = not self.agents
        terms["__all__"] = done and not any(truncs.values())
        truncs["__all__"] = done and any(truncs.values())
        return obs, rewards, terms, truncs, infos


def multi_agent_env_creator(env_config: Mapping[str, Any] | None = None) -> RLAIFRLlibMultiAgentEnv:
    """The multi-agent env from a plain dict (`RLAIFEnvConfig` fields plus `num_agents`)."""
    return RLAIFRLlibMultiAgentEnv(env_config)


def register() -> None:
    """Register `RLAIF-v0` and `RLAIF-MultiAgent-v0` with Ray Tune (idempotent; call before building)."""
    register_env(ENV_NAME, env_creator)
    register_env(MULTI_AGENT_ENV_NAME, multi_agent_env_creator)
