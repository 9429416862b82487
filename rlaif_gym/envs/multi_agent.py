"""`RLAIFMultiAgentEnv`: several learning traders in one Babylon world, numeric or text face.

The parallel multi-agent API of PettingZoo (`reset`/`step` with dicts keyed by agent, `agents`,
`possible_agents`, `observation_space(agent)`, `action_space(agent)`), implemented without
importing PettingZoo; `rlaif_gym.integrations.pettingzoo.parallel_env()` adds the PettingZoo base
class and `rlaif_gym.integrations.rllib` the RLlib `MultiAgentEnv` adapter.

All agents trade in the same prediction-market pools and perps, next to the NPCs: one agent's order
moves the price the others pay and see (docs/world.md). Execution within a tick is sequential in a
random order per tick (see `rlaif_gym.sim.multi` for the fairness rule); each agent then has its own
account, observation, reward and episode end.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from .. import sim
from ..config import RLAIFEnvConfig
from ..encoding import action_nvec, decode_actions, encode_observations, feature_layout
from ..encoding.prompt import PROMPT_CHARSET, render_prompt, shown_view, system_prompt
from ..encoding.view import build_view
from ..errors import ConfigError, InvalidActionError, ResetNeeded
from ..judge.rules import RuleJudge
from ..rewards.composite import RewardFunction
from ..sim.multi import Accounts, agent_order, step_agents
from .behavior import BehaviorTracker
from .core import check_numeric_action, compiled_backend, world_params
from .glue import check_archetype, check_reply, decode_reply, step_feedback, step_info
from .snapshot import EnvSnapshot
from .text_env import MAX_PROMPT_CHARS, MAX_REPLY_SAMPLE_CHARS, describe_outcome

__all__ = ["RLAIFMultiAgentEnv"]


class RLAIFMultiAgentEnv:
    """N traders sharing one world of `RLAIF-v0` (numeric face) or `RLAIF-Text-v0` (text face).

    Args:
        config: an `RLAIFEnvConfig`, a mapping or None; `overrides` are config fields. The world,
            reward weights and episode length are the single-agent env's; with an `archetype`, every
            agent is paid the `behavior` component of its own episode, as the single env pays it.
            The backend runs the multi-agent tick as it runs the single env's step: compiled, or as Python.
        num_agents: learning agents, named `trader_0` .. `trader_{N-1}`.
        face: `"numeric"` (Box observation, MultiDiscrete action, as `RLAIF-v0`) or `"text"`
            (prompt in, reply out, as `RLAIF-Text-v0`, with the rule judge's format and reasoning
            components).

    Each agent starts with `starting_cash`; its reward is the single env's composite over its own
    transition (pnl over the whole tick, risk of its own action, and for the text face the rule
    judge on its own reply). An agent is terminated when bankrupt (reward -1) and removed from
    `agents`; every agent is truncated at `num_ticks`. An agent missing from the actions dict waits.

    Info per agent: the single env's keys (`reward_components`, `pnl_delta`, `equity`, `cash`,
    `feedback`, `tick`, `fill`), plus `order` (its execution position this tick, 0 = first) and, as
    before `fill` existed here, `filled_shares` / `filled_usd` (`fill["shares"]` / `fill["usd"]`); the
    text face adds `parsed_action`, `format_errors`, `reasoning` and `judge`, and `system_prompt` at reset.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "rlaif_multi_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, config: RLAIFEnvConfig | Mapping[str, Any] | None = None, num_agents: int = 2,
                 face: str = "numeric", render_mode: str | None = None, **overrides: Any) -> None:
        if render_mode is not None:
            raise ValueError("the multi-agent env does not render; render a single RLAIF-v0 env instead")
        if face not in ("numeric", "text"):
            raise ConfigError(f"face must be 'numeric' or 'text', got {face!r}")
        if not 1 <= int(num_agents) <= 64:
            raise ConfigError(f"num_agents must be in [1, 64], got {num_agents!r}")
        self.config = RLAIFEnvConfig.from_any(config, **overrides)
        archetype = check_archetype(self.config.archetype)
        self.compiled = compiled_backend(self.config.backend)
        self.face = face
        self.render_mode = None
        self.params = world_params(self.config)
        self.layout = feature_layout(self.params)
        self.nvec = action_nvec(self.params)
        self.reward_fn = RewardFunction.from_config(self.config, archetype)
        self.weights = self.reward_fn.weights
        self.possible_agents: list[str] = [f"trader_{i}" for i in range(int(num_agents))]
        self._behavior = {a: BehaviorTracker(archetype) for a in self.possible_agents} if archetype else None
        self.agents: list[str] = []
        self._index = {name: i for i, name in enumerate(self.possible_agents)}
        if face == "numeric":
            obs_space = lambda: spaces.Box(self.layout.low, self.layout.high, dtype=np.float32)  # noqa: E731
            act_space = lambda: spaces.MultiDiscrete(self.nvec)  # noqa: E731
        else:
            obs_space = lambda: spaces.Text(MAX_PROMPT_CHARS, min_length=1, charset=PROMPT_CHARSET)  # noqa: E731
            act_space = lambda: spaces.Text(MAX_REPLY_SAMPLE_CHARS, min_length=0, charset=PROMPT_CHARSET)  # noqa: E731
        # One space object per agent, created once (PettingZoo requires the same object every call).
        self.observation_spaces = {a: obs_space() for a in self.possible_agents}
        self.action_spaces = {a: act_space() for a in self.possible_agents}
        self.system_prompt = system_prompt(self.params, self.config.prompt_style) if face == "text" else None
        # The compact system prompt makes <think> optional: a bare JSON action is canonical there.
        self.judge = RuleJudge(think_required=self.config.prompt_style != "compact") if face == "text" else None
        self.world: sim.WorldState | None = None  # the shared world (ground truth included; not for policies)
        self.accounts: Accounts | None = None
        self._np_random: np.random.Generator | None = None
        self._views: dict[str, Any] = {}
        self._prompts: dict[str, str] = {}

    # -- PettingZoo parallel API -------------------------------------------------------------

    def observation_space(self, agent: str) -> spaces.Space:
        """The observation space of `agent` (the same object on every call)."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        """The action space of `agent` (the same object on every call)."""
        return self.action_spaces[agent]

    @property
    def num_agents(self) -> int:
        """Agents still trading."""
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        """All agents of the world."""
        return len(self.possible_agents)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new world; every agent gets a fresh account. Returns (observations, infos).

        `options` is accepted and ignored: PettingZoo's API requires `reset` to take any options (its
        `parallel_api_test` passes some), and the world comes from the config at construction and the
        seed. (The single-agent Gymnasium faces refuse options instead; see `check_reset_options`.)
        """
        if seed is not None or self._np_random is None:
            self._np_random, _ = seeding.np_random(seed)
        self.world = sim.reset(self.params, sim.draw_keys(self._np_random, 1), compiled=self.compiled)
        self.accounts = Accounts.fresh(self.world, len(self.possible_agents))
        self.agents = list(self.possible_agents)
        self._views, self._prompts = {}, {}
        for tracker in (self._behavior or {}).values():
            tracker.reset()
        obs, infos = {}, {}
        for agent in self.agents:
            obs[agent] = self._observe(agent, None)
            self._load(agent)
            infos[agent] = {"equity": float(sim.equity(self.world, self.params)[0]), "cash": float(self.world.cash[0]),
                            "tick": 0}
            if self.face == "text":
                infos[agent]["system_prompt"] = self.system_prompt
        return obs, infos

    def step(self, actions: Mapping[str, Any]):
        """Execute every live agent's action (in this tick's random order), then advance the world one tick."""
        if self.world is None:
            raise ResetNeeded("call reset() before step()")
        if not self.agents:
            raise ResetNeeded("every agent is done (bankrupt or num_ticks); call reset() to start a new episode")
        unknown = set(actions) - set(self.possible_agents)
        if unknown:
            raise InvalidActionError(f"actions for unknown agents {sorted(unknown)}; agents are {self.possible_agents}")
        live = list(self.agents)
        batches, parsed, verdicts, before, potential = [], {}, {}, {}, {}
        for agent in self.possible_agents:
            self._load(agent)
            if agent in live and agent in actions:
                batch, parsed[agent], verdicts[agent] = self._decode(agent, actions[agent])
            else:
                batch = sim.ActionBatch.waits(1)
            batches.append(batch)
            if self._behavior is not None:
                before[agent] = BehaviorTracker.snapshot(self.world)  # its own account in the shared world
            if self.reward_fn.mark == "truth":
                potential[agent] = sim.truth_potential(self.world, self.params)
        order = agent_order(self.world, len(self.possible_agents))
        outcomes = step_agents(self.world, self.accounts, batches, self.params, order, compiled=self.compiled)
        position = np.argsort(order[0])
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        truncated = bool(self.world.tick[0] >= self.params.num_ticks)
        for agent in live:
            i = self._index[agent]
            out = outcomes[i]
            self._load(agent)
            verdict = verdicts.get(agent)
            behavior = None
            if self._behavior is not None:
                behavior = np.array([self._behavior[agent].update(before[agent], self.world, batches[i], out)])
            gain = sim.truth_potential(self.world, self.params) - potential[agent] if potential else None
            components = self.reward_fn.components(
                out, format_score=None if verdict is None else np.array([verdict.format]),
                reasoning=None if verdict is None else np.array([verdict.reasoning]), behavior=behavior,
                truth_gain=gain,
            )
            bankrupt = bool(out.bankrupt[0])
            rewards[agent] = float(self.reward_fn.combine(components, out.bankrupt)[0])
            terms[agent], truncs[agent] = bankrupt, truncated and not bankrupt
            p = parsed.get(agent)
            line = None
            if self.face == "text":
                line = describe_outcome(p.action, p, out) if p is not None else "You waited (no action was sent)."
            obs[agent] = self._observe(agent, line)
            info = step_info(components, out, self.world, step_feedback(out, 0, p))
            info.update(order=int(position[i]), filled_shares=info["fill"]["shares"], filled_usd=info["fill"]["usd"])
            if self.face == "text" and p is not None:
                info.update(parsed_action=p.action.to_dict() if p.action else None, format_errors=list(p.errors),
                            reasoning=p.reasoning, judge=verdicts[agent].details)
            infos[agent] = info
        self.agents = [a for a in live if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        """Nothing to release."""

    def render(self) -> None:
        """No rendering; render a single RLAIF-v0 env for a dashboard."""
        return None

    # -- state fork ---------------------------------------------------------------------------

    def get_state(self) -> EnvSnapshot:
        """A snapshot of the episode (world, accounts, live agents, generator, prompts), deep copies, in the
        single env's `EnvSnapshot` (its `fields` hold the multi-agent bookkeeping); for `set_state` and `fork`."""
        if self.world is None:
            raise ResetNeeded("call reset() before get_state()")
        fields = {"face": self.face, "agents_all": self.possible_agents, "accounts": self.accounts,
                  "agents": self.agents, "views": self._views, "prompts": self._prompts, "behavior": self._behavior}
        return EnvSnapshot(env_class=type(self), config=self.config, world=self.world.copy(),
                           np_random=copy.deepcopy(self._np_random), np_random_seed=None,
                           fields=copy.deepcopy(fields))

    def set_state(self, snapshot: EnvSnapshot) -> None:
        """Continue from a `get_state()` snapshot of an env with the same config, face and agents (the snapshot
        itself is not modified, so it can seed any number of branches)."""
        if not isinstance(snapshot, EnvSnapshot) or not issubclass(snapshot.env_class, RLAIFMultiAgentEnv):
            raise ConfigError(f"set_state expects the EnvSnapshot that a multi-agent env's get_state() returned, got "
                              f"{type(snapshot).__name__}")
        f = snapshot.fields
        if (snapshot.config, f["face"], f["agents_all"]) != (self.config, self.face, self.possible_agents):
            raise ConfigError("this snapshot comes from a multi-agent env with another config, face or agent list")
        f = copy.deepcopy(f)
        self.world, self._np_random = snapshot.world.copy(), copy.deepcopy(snapshot.np_random)
        self.accounts, self.agents = f["accounts"], f["agents"]
        self._views, self._prompts, self._behavior = f["views"], f["prompts"], f["behavior"]

    def fork(self, k: int) -> list[RLAIFMultiAgentEnv]:
        """`k` independent copies of this episode at the current tick (GRPO groups for every agent)."""
        snapshot = self.get_state()
        branches = []
        for _ in range(k):
            env = type(self)(self.config, num_agents=len(self.possible_agents), face=self.face)
            env.set_state(snapshot)
            branches.append(env)
        return branches

    # -- helpers ------------------------------------------------------------------------------

    def _load(self, agent: str) -> None:
        self.accounts.load(self.world, self._index[agent])

    def _observe(self, agent: str, last_feedback: str | None):
        self._load(agent)
        if self.face == "numeric":
            return encode_observations(self.world, self.params, self.layout)[0]
        view = build_view(self.world, self.params, 0)
        self._views[agent] = view
        self._prompts[agent] = render_prompt(view, last_feedback, self.config.prompt_style)
        return self._prompts[agent]

    def _decode(self, agent: str, action: Any):
        """(ActionBatch, parsed reply or None, judge verdict or None) for one agent's action; its account is loaded."""
        if self.face == "text":
            parsed, row = decode_reply(check_reply(action, f"{agent}: the text face's action"), self.world,
                                       self.params, think_required=self.judge.think_required,
                                       fixed_stake=self.config.fixed_stake)
            verdict = self.judge.score(parsed, shown_view(self._views[agent], self.config.prompt_style),
                                       self._prompts[agent])
            return sim.ActionBatch.from_rows([row]), parsed, verdict
        ints = check_numeric_action(action, self.nvec, f"{agent}: ")  # the single env's check, shared
        return decode_actions(ints[None, :], self.world, self.params, self.config.numeric_perp_leverage), None, None
