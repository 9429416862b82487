"""The multi-agent Babylon world as a PettingZoo `ParallelEnv` (the `[pettingzoo]` extra).

    from rlaif_gym.integrations.pettingzoo import parallel_env
    env = parallel_env(num_agents=3)                  # numeric face; face="text" for LLM agents
    observations, infos = env.reset(seed=0)
    while env.agents:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        observations, rewards, terminations, truncations, infos = env.step(actions)

Every agent trades in the same markets: orders execute one agent after another within a tick, in a
random order per tick drawn from the world's own counter-based stream (`rlaif_gym.sim.multi`), so
one agent's large order moves the price the next agent pays and every agent sees. The env passes
PettingZoo's `parallel_api_test` and `parallel_seed_test`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import RLAIFEnvConfig
from ..envs.multi_agent import RLAIFMultiAgentEnv
from ..errors import DependencyNotInstalled, install_hint

try:
    from pettingzoo import ParallelEnv
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled("rlaif_gym.integrations.pettingzoo needs PettingZoo: "
                                 + install_hint("pettingzoo")) from exc

__all__ = ["RLAIFParallelEnv", "parallel_env"]


class RLAIFParallelEnv(RLAIFMultiAgentEnv, ParallelEnv):
    """`RLAIFMultiAgentEnv` registered as a PettingZoo `ParallelEnv` (see its docstring for the API).

    PettingZoo's optional global `state()` is left unimplemented: the world state holds the hidden
    truth (`env.world`, for analysis only).
    """

    metadata = RLAIFMultiAgentEnv.metadata


def parallel_env(config: RLAIFEnvConfig | Mapping[str, Any] | None = None, num_agents: int = 2,
                 face: str = "numeric", **overrides: Any) -> RLAIFParallelEnv:
    """A PettingZoo parallel env of `num_agents` traders in one world (`face`: "numeric" or "text")."""
    return RLAIFParallelEnv(config, num_agents=num_agents, face=face, **overrides)
