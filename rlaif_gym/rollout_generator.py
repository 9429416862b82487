"""The original training package's `rollout_generator` API, as a thin layer over the real text env.

Code written for the original Babylon `rollout_generator` module runs with a changed import line:

    from rlaif_gym.rollout_generator import (AgentRunner, AgentTickData, FastRolloutGenerator,
                                             RolloutConfig, RolloutQualityValidator, RolloutResult)

    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=50, parallel_agents=4))
    results = await generator.generate_parallel_rollouts([(runner, "agent-1"), ...],
                                                         lambda: gym.make("RLAIF-Text-v0"))
    RolloutQualityValidator.print_quality_report(results)

Same names and signatures: `AgentTickData` (with `get_full_context()`), `RolloutConfig`,
`RolloutResult`, the `AgentRunner` protocol (`async run_tick(agent_id, observation, env_state) ->
AgentTickData`), `FastRolloutGenerator.generate_rollout(agent, agent_id, simulation)` and
`.generate_parallel_rollouts(agents, simulation_factory)`, and `RolloutQualityValidator` with
`validate_rollout` and `print_quality_report`. `LLMCall`, `Action` and `EnvironmentState` are
re-exported (rlaif_gym's schema models, with the original's field names). `LLMAgentRunner` (an
addition) turns any rlaif_gym `LLMAgent`, scripted or OpenAI-compatible, into an `AgentRunner`.

There is no second engine and no second reward path: each tick is one `RLAIFTextEnv.step(reply)`,
and the tick's reward, feedback and `pnl_delta` are the env's. The tick quality checks and the
rollout validation are `rlaif_gym.rollout.quality`'s, the same ones the rollout collector reports.

Behaviour that differs from the original (docs/babylon.md ("The original system", "The original's defects")):

* **The simulation is an rlaif_gym env.** `simulation` (and what `simulation_factory` returns) may
  be a text env (`RLAIFTextEnv`, `gym.make("RLAIF-Text-v0")`, with or without wrappers), a numeric
  `RLAIFEnv` (replaced by the text face of the same config), an `RLAIFEnvConfig` or mapping, an env
  id, or None (defaults). The original's duck-typed camelCase engine
  (`initialize/isComplete/getGameState/performAction/advanceTick`, which matched no Python engine)
  is refused with `ConfigError`.
* **Episodes start from a seed.** `generate_rollout` resets the env with `seed=` (default
  `RolloutConfig.seed`); the original drove an already-initialised engine wherever it stood.
  `generate_parallel_rollouts` gives every agent the same seed, so one batch compares agents on one
  scenario (one `scenarioId`, one window, one `group_id`), and calls `simulation_factory` inside the
  concurrency limit (the original called `simulation.initialize()` without awaiting it).
* **`parallel_agents` is honoured**: at most that many rollouts are in flight at once (the original
  ignored it and started every agent together).
* **What is executed.** The env executes and judges one reply per tick: the response of the tick's
  last successful LLM call with purpose "action" (else its last successful call). A tick without
  LLM calls has its `action` rendered as a canonical reply (`<think>reasoning</think>` + JSON); a
  tick with neither waits. The reply parser reads the canonical layout and the original's
  `<thinking>` / `<decisions>` layouts and action vocabularies. After the step `tick.action` is the
  action the env executed (type "invalid" when the reply held none); if the runner had returned a
  different action, a warning says so and `tick.feedback["agent_action"]` keeps the runner's.
* **The reward covers the full transition.** `tick.reward` is the env's step reward: the action,
  then the tick's price moves, resolutions and mark-to-market (the original scored the action's
  feedback before `advanceTick`, so price moves were never rewarded), with the rule judge's format
  and reasoning scores instead of the `<decisions>`-XML heuristics.
* **`pnl_delta` is filled**: `tick.feedback` is `{"success", "error", "result": {"pnl_delta"},
  "pnl_delta", "reward_components", "format_errors"}`, with `pnl_delta` the change in equity over
  the whole transition (USD); the original read a `pnl_delta` nothing produced, so its P&L term was
  always 0.
* **Every tick field is filled**: `tick_number`, `timestamp` (simulated ms of the tick, never the
  wall clock), `environment_state` (the real pre-action account: equity as balance, P&L against
  starting cash, open positions; the original always saw 10000 / 0 / 0), `reasoning_chain` (the
  calls' reasoning and the reply's think text; never filled in the original), `feedback`, `reward`.
* **The trajectory** is rlaif_gym's `Trajectory` (camelCase aliases of the original's layout) with
  `successful_trades` and `failed_trades` filled; `trades_executed` counts successful trades;
  `final_pnl` / `final_balance` are the equity after the last transition (the original took the last
  tick's pre-action state). `trajectory_id` is `{run_name}-{agent_id}-s{seed}` (a duplicate agent id
  in one batch gets `-{index}`): deterministic, so a rerun replaces rather than duplicates a stored
  row; the original's `rollout-<agent>-<ms>` could collide and never repeat. `window_id` is the
  current UTC hour (`%Y-%m-%dT%H:00`, as the original) taken once per batch, or
  `RolloutConfig.window_id`.
* **Failures are data.** An exception in `run_tick` or a policy call that failed for good ends that
  rollout with `final_status="failed"` and the error recorded; the result is returned (marked invalid
  by the validator) instead of being logged and dropped. Errors of the sinks (the database) raise.
* **One place for quality thresholds.** `quality_score` and `RolloutQualityValidator.validate_rollout`
  both come from `rlaif_gym.rollout.quality.validate_trajectory` (at least 5 ticks, an LLM call on every
  step and calls >= ticks, non-empty system prompt, user prompt and response, mean tick quality >= 0.5,
  not failed); the original had two inconsistent sets. The per-tick check (`min_llm_calls_per_tick`,
  `require_action`, non-blank responses) still only warns, and its warnings are kept in
  `RolloutResult.tick_warnings`. `print_quality_report` survives an empty list and zero ticks (the
  original divided by zero) and also returns its summary.
* **`database_url`** writes each trajectory, as it finishes, to the original `trajectories` table
  through `rlaif_gym.storage.SqlTrajectorySink` (any SQLAlchemy URL; `postgresql://` uses psycopg 3;
  one transaction per trajectory; the `[sql]` extra). `sink=` adds any other `TrajectorySink`.
* `fast_forward` is accepted and has no effect (nothing here waits); `max_ticks_per_agent` is capped by
  the env's `num_ticks`; a synchronous `run_tick` is accepted too; `get_full_context` serialises values
  JSON cannot (the original raised).

A compatibility face, like the CLI.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from .agents.llm import LLMAgent
from .config import RLAIFEnvConfig
from .encoding.reply import canonical_reply
from .encoding.view import TickView
from .envs import RLAIFEnv, RLAIFTextEnv
from .errors import ConfigError, InvalidActionError
from .llm import LLMError
from .llm.recording import TokenBudget
from .rollout import TrajectorySink, build_trajectory, call_seed, summarize_quality, validate_trajectory
from .sim import normalize_action
from .trajectory import (
    Action,
    EnvironmentState,
    Feedback,
    LLMCall,
    Observation,
    Trajectory,
    TrajectoryStep,
    sim_timestamp_ms,
)

__all__ = [
    "Action",
    "AgentRunner",
    "AgentTickData",
    "EnvironmentState",
    "FastRolloutGenerator",
    "LLMAgentRunner",
    "LLMCall",
    "RolloutConfig",
    "RolloutQualityValidator",
    "RolloutResult",
]

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ data


@dataclass
class AgentTickData:
    """Everything an agent did in one tick: what it saw, every LLM call, the action, the feedback.

    An `AgentRunner` returns one; the generator then fills `tick_number`, `timestamp` (simulated
    ms), `environment_state` (the pre-action account), `action` (what the env executed),
    `feedback`, `reward` and `reasoning_chain`.
    """

    tick_number: int
    timestamp: int
    observation: dict
    environment_state: EnvironmentState
    llm_calls: list[LLMCall] = field(default_factory=list)
    reasoning_chain: str = ""
    action: Action | None = None
    feedback: dict = field(default_factory=dict)
    reward: float = 0.0

    def get_full_context(self) -> str:
        """The whole tick as text: observation, each LLM call, the action and the feedback."""
        parts = [f"=== OBSERVATION (Tick {self.tick_number}) ===", json.dumps(self.observation, indent=2, default=str)]
        for i, call in enumerate(self.llm_calls, 1):
            parts.append(f"\n=== LLM CALL {i} ({call.purpose}) ===")
            parts.append(f"System: {call.system_prompt}")
            parts.append(f"User: {call.user_prompt}")
            parts.append(f"Response: {call.response}")
            if call.reasoning:
                parts.append(f"Reasoning: {call.reasoning}")
        if self.action:
            parts.append("\n=== ACTION ===")
            parts.append(f"Type: {self.action.action_type}")
            parts.append(f"Parameters: {json.dumps(self.action.parameters, default=str)}")
            if self.action.reasoning:
                parts.append(f"Reasoning: {self.action.reasoning}")
        if self.feedback:
            parts.append("\n=== FEEDBACK ===")
            parts.append(json.dumps(self.feedback, indent=2, default=str))
            parts.append(f"Reward: {self.reward}")
        return "\n".join(parts)


@dataclass
class RolloutConfig:
    """How rollouts run (the original's fields first; the rest are rlaif_gym's).

    Attributes:
        fast_forward: accepted for compatibility; nothing waits, so it has no effect.
        parallel_agents: rollouts in flight at once in `generate_parallel_rollouts`.
        max_ticks_per_agent: ticks per rollout (capped by the env's `num_ticks`).
        min_llm_calls_per_tick: the per-tick check warns below this many calls.
        require_action: the per-tick check warns when a tick executed no action.
        database_url: when set, every trajectory is also written to this SQL database in the
            original `trajectories` layout (e.g. "sqlite:///runs.db", "postgresql://user@host/db").
        seed: env seed of each rollout (every agent of a parallel batch gets the same one).
        run_name: prefix of trajectory ids.
        window_id: the trajectories' window; None uses the current UTC hour, as the original.
    """

    fast_forward: bool = True
    parallel_agents: int = 4
    max_ticks_per_agent: int = 100
    min_llm_calls_per_tick: int = 1
    require_action: bool = True
    database_url: str = ""
    seed: int = 0
    run_name: str = "rollout"
    window_id: str | None = None

    def __post_init__(self) -> None:
        if self.parallel_agents < 1:
            raise ConfigError(f"parallel_agents must be >= 1, got {self.parallel_agents}")
        if self.max_ticks_per_agent < 1:
            raise ConfigError(f"max_ticks_per_agent must be >= 1, got {self.max_ticks_per_agent}")
        if self.min_llm_calls_per_tick < 0:
            raise ConfigError(f"min_llm_calls_per_tick must be >= 0, got {self.min_llm_calls_per_tick}")


@dataclass
class RolloutResult:
    """One rollout: counts, totals, the quality score and the trajectory.

    Attributes:
        total_duration_ms, avg_tick_duration_ms: wall-clock milliseconds.
        total_llm_calls: successful and failed calls.
        total_reward: sum of the step rewards.
        final_pnl: equity after the last transition minus starting cash, USD.
        quality_score: mean tick quality in [0, 1] (`rlaif_gym.rollout.quality`).
        trajectory: the recorded episode (None only if nothing could be recorded).
        ticks: the filled `AgentTickData` of every tick (rlaif_gym addition).
        tick_warnings: the per-tick check's warnings (rlaif_gym addition).
    """

    agent_id: str
    trajectory_id: str
    ticks_completed: int
    total_duration_ms: int
    avg_tick_duration_ms: float
    total_llm_calls: int
    total_reward: float
    final_pnl: float
    quality_score: float
    trajectory: Trajectory | None = None
    ticks: list[AgentTickData] = field(default_factory=list)
    tick_warnings: list[str] = field(default_factory=list)


@runtime_checkable
class AgentRunner(Protocol):
    """An agent: given the tick's observation and account state, return what it did this tick."""

    async def run_tick(self, agent_id: str, observation: dict, env_state: EnvironmentState) -> AgentTickData:
        """Run one tick and return its data (LLM calls, and optionally the action)."""
        ...


class LLMAgentRunner:
    """An `AgentRunner` for any rlaif_gym `LLMAgent` (scripted or OpenAI-compatible).

    One policy call per tick on the tick's system prompt and prompt (`observation["system_prompt"]`,
    `observation["prompt"]`), with the per-call seed derived from `seed` and the tick. The reply is
    left for the env to parse, judge and execute.
    """

    def __init__(self, agent: LLMAgent, seed: int = 0) -> None:
        self.agent = agent
        self.seed = seed

    def describe(self) -> dict[str, Any]:
        """The wrapped agent's description (no secrets)."""
        return self.agent.describe()

    async def run_tick(self, agent_id: str, observation: dict, env_state: EnvironmentState) -> AgentTickData:
        """One recorded policy call. Raises `LLMError` (with `.record`) when the call fails for good."""
        tick = int(observation.get("tick", 0))
        _, record = await self.agent.act(observation["system_prompt"], observation["prompt"],
                                         seed=call_seed(self.seed, 0, tick), call_id=f"{agent_id}-t{tick}")
        return AgentTickData(tick_number=tick, timestamp=int(observation.get("time", 0)), observation=observation,
                             environment_state=env_state, llm_calls=[record])


# ----------------------------------------------------------------------------------- generator


def _current_window() -> str:
    """The original's window id: the current UTC hour."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:00")


def _text_env(simulation: Any) -> tuple[gym.Env, RLAIFTextEnv, bool]:
    """(env to step, its RLAIFTextEnv, whether this module created it and must close it)."""
    if simulation is None or isinstance(simulation, (RLAIFEnvConfig, Mapping)):
        env = RLAIFTextEnv(config=simulation)
        return env, env, True
    if isinstance(simulation, str):
        env = gym.make(simulation, disable_env_checker=True)
        if not isinstance(env.unwrapped, RLAIFTextEnv):
            env.close()
            raise ConfigError(f"env id {simulation!r} is not a text env; use 'RLAIF-Text-v0'")
        return env, env.unwrapped, True
    if isinstance(simulation, gym.Env):
        base = simulation.unwrapped
        if isinstance(base, RLAIFTextEnv):
            return simulation, base, False
        if isinstance(base, RLAIFEnv):  # the numeric face: run the text face of the same world and config
            env = RLAIFTextEnv(config=base.config)
            return env, env, True
    raise ConfigError(
        f"simulation must be an rlaif_gym env (gym.make('RLAIF-Text-v0') or RLAIFTextEnv, or an RLAIFEnv), an "
        f"RLAIFEnvConfig or mapping, an env id or None; got {type(simulation).__name__}. The original's camelCase "
        "SimulationEngine (initialize/isComplete/getGameState/performAction/advanceTick) is not supported: "
        "rlaif_gym has one engine, the env"
    )


def _env_state(view: TickView, starting_cash: float) -> EnvironmentState:
    """The account before the tick's action (docs/babylon.md ("The original's observation"), with real values)."""
    positions = sum((m.held_yes > 0) + (m.held_no > 0) for m in view.markets) + sum(p.side is not None
                                                                                   for p in view.perps)
    return EnvironmentState(agent_balance=view.equity, agent_pnl=view.equity - starting_cash,
                            open_positions=int(positions), active_markets=len(view.markets), cash=view.cash,
                            tick=view.tick)


def _observation(view: TickView, prompt: str, system: str) -> dict[str, Any]:
    """The original's observation keys from the public view, plus the prompts.

    The keys: docs/babylon.md ("The original's observation").
    """
    data = view.to_dict()
    return {
        "tick": view.tick,
        "time": sim_timestamp_ms(view.tick),
        "markets": data["markets"],
        "perpetuals": data["perps"],
        "news": data["news"][:5],
        "posts": data["posts"][:10],
        "tips": data["tips"],
        "groups": [{"name": name, "joined": joined} for name, joined in view.groups],
        "portfolio": {"cash": view.cash, "equity": view.equity, "realizedPnL": view.realized_pnl,
                      "feesPaid": view.fees_paid, "exposureRatio": view.exposure_ratio},
        "prompt": prompt,
        "system_prompt": system,
    }


def _canonical(action: Action) -> dict[str, Any] | None:
    """The runner's action in the canonical schema, or None when it does not normalise."""
    try:
        return normalize_action({**action.parameters, "type": action.action_type}).to_dict()
    except InvalidActionError:
        return None


def _reply(tick: AgentTickData) -> tuple[str, LLMCall | None]:
    """The text the env executes this tick, and the LLM call it came from (see the module docstring)."""
    answered = [c for c in tick.llm_calls if c.error is None and c.response.strip()]
    if answered:
        call = ([c for c in answered if c.purpose == "action"] or answered)[-1]
        return call.response, call
    if tick.action is not None:
        reasoning = tick.action.reasoning or tick.reasoning_chain or None
        return canonical_reply({**tick.action.parameters, "type": tick.action.action_type}, reasoning), None
    return canonical_reply({"type": "wait"}), None


def _reasoning_chain(tick: AgentTickData, reply_reasoning: str) -> str:
    parts: list[str] = []
    for text in [*(c.reasoning for c in tick.llm_calls), tick.action.reasoning if tick.action else None,
                 reply_reasoning]:
        if text and text.strip() and text.strip() not in parts:
            parts.append(text.strip())
    return "\n\n".join(parts)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class FastRolloutGenerator:
    """Run `AgentRunner`s through the text env and record complete rollouts (see the module docstring).

    Args:
        config: the `RolloutConfig` (defaults when None).
        sink: any `TrajectorySink` (e.g. `JsonlStore`) that also receives each trajectory.
    """

    def __init__(self, config: RolloutConfig | None = None, *, sink: TrajectorySink | None = None) -> None:
        self.config = config or RolloutConfig()
        self.rollouts_generated = 0
        self.total_ticks = 0
        self.start_time: float | None = None
        self.sinks: list[TrajectorySink] = [] if sink is None else [sink]
        if self.config.database_url:
            from .storage.sql import SqlTrajectorySink

            self.sinks.append(SqlTrajectorySink(self.config.database_url))

    async def generate_rollout(self, agent: AgentRunner, agent_id: str, simulation: Any = None, *,
                               seed: int | None = None, trajectory_id: str | None = None) -> RolloutResult:
        """One rollout of `agent` through `simulation`, from `reset(seed=seed)` (default `config.seed`)."""
        return await self._rollout(agent, agent_id, simulation, seed=self.config.seed if seed is None else seed,
                                   trajectory_id=trajectory_id, window_id=self.config.window_id or _current_window())

    async def generate_parallel_rollouts(self, agents: Sequence[tuple[AgentRunner, str]],
                                         simulation_factory: Callable[[], Any]) -> list[RolloutResult]:
        """One rollout per `(agent, agent_id)`, at most `config.parallel_agents` at once, in input order.

        Every rollout runs on a fresh `simulation_factory()` env reset with `config.seed`, so the batch
        is one group on one scenario. Failed rollouts are returned too (final_status "failed").
        """
        pairs = list(agents)
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], str)):
                raise ConfigError(f"agents must be (agent, agent_id) pairs; item {i} is {pair!r}")
        self.start_time = time.time()
        ticks_before = self.total_ticks
        seed, window = self.config.seed, self.config.window_id or _current_window()
        group_id = f"{self.config.run_name}-s{seed}"
        counts = Counter(agent_id for _, agent_id in pairs)
        slots = asyncio.Semaphore(self.config.parallel_agents)

        async def one(index: int, agent: AgentRunner, agent_id: str) -> RolloutResult:
            async with slots:
                simulation = await _maybe_await(simulation_factory())
                tid = f"{self.config.run_name}-{agent_id}-s{seed}" + (f"-{index}" if counts[agent_id] > 1 else "")
                return await self._rollout(agent, agent_id, simulation, seed=seed, trajectory_id=tid,
                                           window_id=window, group=(group_id, index), close=True)

        outcomes = await asyncio.gather(*(one(i, a, aid) for i, (a, aid) in enumerate(pairs)),
                                        return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:  # episode failures are results; what lands here is infrastructure (a sink, the factory)
            raise errors[0]
        elapsed = max(time.time() - self.start_time, 1e-9)
        ticks = self.total_ticks - ticks_before
        logger.info("parallel rollouts: %d agents, %d ticks in %.1f s (%.1f ticks/s)", len(pairs), ticks, elapsed,
                    ticks / elapsed)
        return list(outcomes)  # type: ignore[arg-type]

    # -- one rollout ---------------------------------------------------------------------------

    async def _rollout(self, agent: AgentRunner, agent_id: str, simulation: Any, *, seed: int,
                       trajectory_id: str | None, window_id: str, group: tuple[str, int] | None = None,
                       close: bool = False) -> RolloutResult:
        env, base, owned = _text_env(simulation)
        config = base.config
        tid = trajectory_id or f"{self.config.run_name}-{agent_id}-s{seed}"
        ticks: list[AgentTickData] = []
        steps: list[TrajectoryStep] = []
        warnings: list[str] = []
        errors: list[str] = []
        failed_calls: list[LLMCall] = []
        durations: list[float] = []
        status = "completed"
        budget = TokenBudget()
        wall0 = time.perf_counter()
        try:
            prompt, info = env.reset(seed=seed)
            system = info["system_prompt"]
            for t in range(min(self.config.max_ticks_per_agent, config.num_ticks)):
                t0 = time.perf_counter()
                view = base.view
                before = _env_state(view, config.starting_cash)
                observation = _observation(view, prompt, system)
                numeric = base.numeric_observation.tolist()
                try:
                    tick = await _maybe_await(agent.run_tick(agent_id, observation, before))
                except LLMError as exc:
                    if getattr(exc, "record", None) is not None:
                        failed_calls.append(exc.record)  # type: ignore[attr-defined]
                    errors.append(f"tick {t}: policy call failed after {exc.attempts} attempt(s): {exc.type}: {exc}")
                    status = "failed"
                    break
                if not isinstance(tick, AgentTickData):
                    raise TypeError(f"run_tick must return AgentTickData, got {type(tick).__name__}")
                tick.tick_number, tick.timestamp = t, sim_timestamp_ms(view.tick)
                tick.environment_state = before
                tick.observation = tick.observation or observation
                for c in tick.llm_calls:
                    budget.take(c)
                reply, call = _reply(tick)
                next_prompt, reward, terminated, truncated, info = env.step(reply)
                self._absorb(tick, call, info, reward, warnings)
                steps.append(self._step(tick, prompt, numeric, info))
                ticks.append(tick)
                durations.append(time.perf_counter() - t0)
                prompt = next_prompt
                if terminated:
                    status = "bankrupt"
                    break
                if truncated:
                    break
        except Exception as exc:  # a bad rollout is data: record it and return it
            status = "failed"
            errors.append(f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=3).strip().splitlines()[-1]}")
            logger.error("rollout %s of %s failed: %s", tid, agent_id, exc)
        finally:
            if owned or close:
                env.close()
        traj = self._trajectory(tid, agent, agent_id, seed, window_id, group, base, steps, failed_calls, errors,
                                status, time.perf_counter() - wall0)
        for sink in self.sinks:
            sink.append(traj)
        self.rollouts_generated += 1
        self.total_ticks += len(steps)
        result = RolloutResult(
            agent_id=agent_id, trajectory_id=tid, ticks_completed=len(steps),
            total_duration_ms=int(1000 * (time.perf_counter() - wall0)),
            avg_tick_duration_ms=1000 * sum(durations) / len(durations) if durations else 0.0,
            total_llm_calls=sum(len(s.llm_calls) for s in steps) + len(failed_calls),
            total_reward=traj.total_reward, final_pnl=traj.final_pnl,
            quality_score=float(traj.quality["quality_score"]), trajectory=traj, ticks=ticks, tick_warnings=warnings,
        )
        logger.info("rollout %s: %d ticks, quality %.2f, status %s", tid, len(steps), result.quality_score, status)
        return result

    def _absorb(self, tick: AgentTickData, call: LLMCall | None, info: dict[str, Any], reward: float,
                warnings: list[str]) -> None:
        """Fill the tick from the env's step (executed action, feedback, reward) and run the tick check."""
        parsed = info["parsed_action"]
        feedback = info["feedback"]
        own = tick.action
        if call is not None:
            call.action_type = parsed["type"] if parsed else None
        executed = Action(
            action_type=parsed["type"] if parsed else "invalid",
            parameters={k: v for k, v in (parsed or {}).items() if k != "type"},
            success=feedback["success"], error=feedback["error"],
            reasoning=info["reasoning"] or (own.reasoning if own else None), result={"pnl_delta": info["pnl_delta"]},
        )
        tick.feedback = {
            "success": feedback["success"], "error": feedback["error"], "result": {"pnl_delta": info["pnl_delta"]},
            "pnl_delta": info["pnl_delta"], "reward_components": dict(info["reward_components"]),
            "format_errors": list(info["format_errors"]),
        }
        found: list[str] = []
        if own is not None and call is not None and _canonical(own) != parsed:
            tick.feedback["agent_action"] = own.to_dict()
            found.append(f"action mismatch: tick {tick.tick_number}: the runner returned {own.action_type} but its "
                         f"reply executes {parsed['type'] if parsed else 'no action'}")
        tick.action = executed
        tick.reward = reward
        tick.reasoning_chain = _reasoning_chain(tick, info["reasoning"])
        # The original's per-tick check (`_validate_tick_quality`): a warning, never a reason to drop the tick.
        n, calls, needed = tick.tick_number, len(tick.llm_calls), self.config.min_llm_calls_per_tick
        if calls < needed:
            found.append(f"too few LLM calls: tick {n} has {calls} < min_llm_calls_per_tick {needed}")
        if self.config.require_action and parsed is None:
            found.append(f"no action: tick {n} executed none ({'; '.join(info['format_errors']) or 'no reply'})")
        if any(not c.response.strip() for c in tick.llm_calls):
            found.append(f"empty response: tick {n}")
        for warning in found:
            logger.warning("tick quality check: %s", warning)
        warnings.extend(found)

    @staticmethod
    def _step(tick: AgentTickData, prompt: str, numeric: list[float], info: dict[str, Any]) -> TrajectoryStep:
        fb = tick.feedback
        return TrajectoryStep(
            step_number=tick.tick_number, timestamp=tick.timestamp, environment_state=tick.environment_state,
            llm_calls=list(tick.llm_calls), action=tick.action, reward=tick.reward,
            observation=Observation(text=prompt, numeric=numeric),
            feedback=Feedback(success=fb["success"], error=fb["error"], pnl_delta=fb["pnl_delta"], **info["fill"]),
            reward_components=fb["reward_components"], format_errors=fb["format_errors"], judge=info["judge"],
        )

    def _trajectory(self, tid: str, agent: Any, agent_id: str, seed: int, window_id: str,
                    group: tuple[str, int] | None, base: RLAIFTextEnv, steps: list[TrajectoryStep],
                    failed_calls: list[LLMCall], errors: list[str], status: str, wall_s: float) -> Trajectory:
        describe = getattr(agent, "describe", None)
        return build_trajectory(
            trajectory_id=tid, agent_id=agent_id, window_id=window_id, env_seed=seed,
            group_id=group[0] if group else None, group_index=group[1] if group else None, steps=steps,
            failed_calls=failed_calls, errors=errors, status=status, wall_s=wall_s, config=base.config,
            env_id="RLAIF-Text-v0", reward_weights=base.reward_weights,
            agent={"name": agent_id, "runner": type(agent).__name__, **(describe() if callable(describe) else {})},
        )


# ----------------------------------------------------------------------------------- validation


class RolloutQualityValidator:
    """The original's rollout validation, with its thresholds taken from `rlaif_gym.rollout.quality`."""

    @staticmethod
    def validate_rollout(result: RolloutResult) -> tuple[bool, list[str]]:
        """`(is_valid, issues)` of one rollout; every issue is "kind: detail"."""
        if result.trajectory is None:
            return False, ["No trajectory data"]
        report = validate_trajectory(result.trajectory)
        return report.valid, list(report.issues)

    @staticmethod
    def print_quality_report(results: list[RolloutResult]) -> dict[str, Any]:
        """Print the batch's quality report (valid share, ticks, calls, quality, top issue kinds); return it."""
        reports = []
        for result in results:
            if result.trajectory is None:
                reports.append({"valid": False, "quality_score": result.quality_score,
                                "issues": ["No trajectory data"]})
            else:
                reports.append(validate_trajectory(result.trajectory).to_dict())
        summary = summarize_quality(reports)
        total = len(results)
        ticks = sum(r.ticks_completed for r in results)
        calls = sum(r.total_llm_calls for r in results)
        issues = [issue for r in reports for issue in r["issues"]]
        summary.update(total_ticks=ticks, total_llm_calls=calls, llm_calls_per_tick=calls / ticks if ticks else 0.0)
        print("\n" + "=" * 60)
        print("  ROLLOUT QUALITY REPORT")
        print("=" * 60)
        share = 100.0 * summary["valid"] / total if total else 0.0
        print(f"\nValid rollouts: {summary['valid']}/{total} ({share:.1f}%)")
        print(f"Total ticks: {ticks}")
        print(f"Total LLM calls: {calls}")
        print(f"Average quality score: {summary['mean_quality']:.2f}")
        print(f"LLM calls per tick: {summary['llm_calls_per_tick']:.1f}")
        if issues:
            print(f"\nIssues found ({len(issues)} total):")
            for kind, count in summary["top_issues"]:
                print(f"  - {kind}: {count}")
        print("=" * 60 + "\n")
        return summary
