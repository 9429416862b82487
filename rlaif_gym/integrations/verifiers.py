"""The text env as a `verifiers` v1 environment (the `[verifiers]` extra; verifiers 0.4).

verifiers resolves plugins by id to an installed top-level module, so the wheel ships a two-line
module, `rlaif_gym_verifiers`, that re-exports this one: its id is `rlaif-gym-verifiers`.

    vf-eval rlaif-gym-verifiers -n 4 -r 2 --model my-model --client.base-url http://127.0.0.1:8000/v1 \\
        --env.taskset.config.num-ticks 5 --no-push --no-rich

* `RLAIFTaskset` (config `RLAIFTasksetConfig`): one `RLAIFTask` per seed, or per fork point. A fork
  point is a seed plus the replies that lead from `reset(seed)` to it (`fork_at` plays the offline
  scripted policy for that many ticks; `forks` lists points, e.g. `fork_point(trajectory, step)` of a
  stored episode). Each task's prompt is the env's prompt at that tick; its system prompt is the env's.
* `RLAIFEnvironment`: one episode per rollout. The env plays the run's user: each model reply is
  the tick's action, the next prompt is the next user turn, and the episode's end ends the exchange.
  The first rollout of a task builds its start state and keeps `env.get_state()`; the task's other
  rollouts (a GRPO group, `-r n`) start from that snapshot with `set_state`.
* `RLAIFTask.score`: the env's reward components, summed over the episode, as the trace's rewards,
  each with its coefficient as the weight (skill scheme), so `trace.reward` is the episode return.
  Under `reward_scheme="original"`, whose per-step clip does not split, the return is one reward
  `env_return` and the components are metrics. Judges plugged in `taskset.task.judges` run after.
* `RLAIFJudge`: our trajectory judge (`rlaif_gym.llm_judge`, absolute mode: its packaged template,
  the archetype rubric, strict verdict parsing) as a verifiers `Judge` plugin. A malformed verdict
  raises: the judge's reward stays None and the trace carries the error; never a 0.
* `RLAIFChatHarness`: one chat call per tick through the rollout's interception endpoint, run
  in-process (the built-in harnesses install a program with `uv`, which needs the network).
  `history="tick"` (the default) sends the system prompt and this tick's prompt, as
  `RolloutCollector` does; `history="full"` sends the whole conversation.
* `trace_to_trajectory` / `trajectory_to_trace`: verifiers traces to our trajectory schema and
  back. A trajectory survives the round trip exactly; a trace keeps its messages, model calls,
  rewards, task and info.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from .. import sim
from .._version import __version__
from ..config import RLAIFEnvConfig
from ..envs.decisions import WAIT_REPLY, decision_points
from ..envs.inputs import check_seed
from ..envs.rlaif_env import EnvSnapshot
from ..envs.text_env import RLAIFTextEnv, warm_up
from ..errors import ConfigError, DependencyNotInstalled, install_hint
from ..llm import ScriptedLLM
from ..llm_judge import load_template, parse_absolute, render_messages, trajectory_data
from ..rewards.archetypes import DEFAULT_ARCHETYPE, load_rubrics, normalize_archetype
from ..rollout import build_trajectory
from ..rollout.collector import account_before
from ..trajectory import LLMCall, LLMCallError, Trajectory, TrajectoryStep, step_record

try:
    import openai
    import verifiers.v1 as vf
    from verifiers.v1.dialects.chat import message_to_wire, parse_message
    from verifiers.v1.utils.trace_store import read_episodes
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled("rlaif_gym.integrations.verifiers needs verifiers 0.4: "
                                 + install_hint("verifiers")) from exc

__all__ = [
    "ENV_ID",
    "INFO_KEY",
    "TASKSET_ID",
    "RLAIFChatHarness",
    "RLAIFChatHarnessConfig",
    "RLAIFEnvironment",
    "RLAIFEnvironmentConfig",
    "RLAIFFork",
    "RLAIFJudge",
    "RLAIFJudgeConfig",
    "RLAIFTask",
    "RLAIFTaskData",
    "RLAIFTaskset",
    "RLAIFTasksetConfig",
    "fork_point",
    "load_environment",
    "read_traces",
    "trace_to_trajectory",
    "traces_to_trajectories",
    "trajectory_to_trace",
]

TASKSET_ID = "rlaif-gym-verifiers"
"""The plugin id verifiers resolves (to the `rlaif_gym_verifiers` module) for the taskset, env,
harness and judge alike."""
ENV_ID = "RLAIF-Text-v0"
INFO_KEY = "rlaif_gym"
"""`trace.info[INFO_KEY]`: the episode as our schema records it (header and steps, no LLM calls:
those are the trace's own messages and model calls)."""
INFO_VERSION = 1
_SCRIPTED = ScriptedLLM()


# -- tasks --------------------------------------------------------------------------------------------


def _seed(value: object) -> int:
    """A task's seed, checked as the OpenEnv server and the TRL adapter check one (`rlaif_gym.envs.inputs`);
    the decimal text of one is accepted too, as verifiers' command line passes it."""
    seed = check_seed(value, "seed", strings=True)
    if seed is None:
        raise ConfigError("seed must be an integer in [0, 2**63 - 1], got None; every task needs a seed")
    return seed


Seed = Annotated[int, BeforeValidator(_seed)]
"""An int field that refuses what `check_seed` refuses (1.5, True, -1, "abc"), rather than converting it."""


class RLAIFFork(BaseModel):
    """A fork point: the state reached from `reset(seed)` by playing `replies`, one per tick."""

    seed: Seed
    replies: list[str] = Field(default_factory=list)


class RLAIFTaskData(vf.TaskData):
    """One task: a seed, the env config overrides and the replies from reset to the task's start."""

    seed: Seed
    """The `reset(seed=...)` of the episode."""
    env_config: dict[str, Any] = Field(default_factory=dict)
    """`RLAIFEnvConfig` overrides (JSON form)."""
    fork_replies: list[str] = Field(default_factory=list)
    """Replies played from reset to the start of the task (empty: the task starts at reset)."""
    horizon: int | None = Field(None, ge=1)
    """Ticks a rollout plays from the start (None: to the end of the episode)."""
    decisions: int | None = Field(None, ge=1)
    """Ticks of the horizon the model answers (None: all); a clean wait plays the rest."""


class RLAIFTask(vf.Task[RLAIFTaskData, vf.State, vf.TaskConfig]):
    """An episode of the text env from the task's start state; scored with the env's own reward."""

    @property
    def key(self) -> str:
        """Stable identity: seed, config and fork replies (not the load position)."""
        d = self.data
        ident = json.dumps({"seed": d.seed, "config": d.env_config, "fork": d.fork_replies, "horizon": d.horizon,
                            "decisions": d.decisions}, sort_keys=True)
        return hashlib.sha256(ident.encode()).hexdigest()

    def make_env(self) -> RLAIFTextEnv:
        """A text env at the task's start: `reset(seed)`, then the fork replies replayed."""
        env = RLAIFTextEnv(self.data.env_config)
        env.reset(seed=self.data.seed)
        for reply in self.data.fork_replies:
            _, _, terminated, truncated, _ = env.step(reply)
            if terminated or truncated:
                raise ValueError(f"fork of seed {self.data.seed} ends the episode after "
                                 f"{len(self.data.fork_replies)} replies; fork at an earlier tick")
        return env

    async def score(self, trace: vf.Trace, runtime: Any = None) -> None:
        """The env's reward components as rewards (see the module docstring), then verifiers' hooks and judges."""
        if not self.scoring_deferred and isinstance(trace.info.get(INFO_KEY), Mapping):
            _record_env_rewards(trace, trace.info[INFO_KEY])
        await super().score(trace, runtime)


class RLAIFTasksetConfig(vf.TasksetConfig):
    """Which episodes the taskset holds (`--env.taskset.*`)."""

    num_tasks: int = Field(8, ge=1)
    """Tasks from consecutive seeds `seed`, `seed + 1`, ... (ignored when `seeds` is set)."""
    seed: Seed = 0
    """The first seed."""
    seeds: list[Seed] | None = None
    """Explicit seeds, one task each."""
    fork_at: int = Field(0, ge=0)
    """Ticks the offline scripted policy plays from reset before each seed's task starts."""
    forks: list[RLAIFFork] = Field(default_factory=list)
    """Extra tasks at explicit fork points (seed + replies), after the seed tasks."""
    decision_points: bool = False
    """Start each seed's task at a decision point (`rlaif_gym.envs.decisions`): after a seeded start, the
    first tick where a market resolves within `resolves_within` ticks and the prompt names it (a seed whose
    episode has none gives no task). Replaces `fork_at`."""
    resolves_within: int = Field(12, ge=1)
    """Decision points: the market resolves within this many ticks."""
    min_evidence: int = Field(1, ge=0)
    """Decision points: at least this many feed items of the prompt name the market."""
    horizon: int | None = Field(None, ge=1)
    """Ticks each rollout plays (None: to the end of the episode)."""
    decisions: int | None = Field(None, ge=1)
    """Ticks of the horizon the model answers (None: all; 1 with decision points: a single decision); a clean
    wait plays the rest."""
    config: RLAIFEnvConfig = Field(default_factory=RLAIFEnvConfig)
    """The env config (`--env.taskset.config.num-ticks 5`, ...)."""


def _scripted_reply(prompt: str) -> str:
    return _SCRIPTED.reply(prompt)


class RLAIFTaskset(vf.Taskset[RLAIFTask, RLAIFTasksetConfig]):
    """Seeds and fork points of `RLAIF-Text-v0` as verifiers tasks (see `RLAIFTasksetConfig`)."""

    def load(self) -> list[RLAIFTask]:
        """One task per seed (after `fork_at` scripted ticks), then one per explicit fork.

        It plays one tick first (`warm_up`), so the compiled kernels are loaded (or compiled, on a machine's
        first run) before verifiers starts a rollout and its timeouts."""
        cfg = self.config
        overrides = cfg.config.model_dump(mode="json", exclude_defaults=True)
        warm_up(overrides)
        seeds = cfg.seeds if cfg.seeds is not None else [cfg.seed + i for i in range(cfg.num_tasks)]
        if cfg.decision_points:
            found = decision_points(seeds, cfg.config, resolves_within=cfg.resolves_within,
                                    min_evidence=cfg.min_evidence, horizon=cfg.horizon or 1)
            points = [RLAIFFork(seed=p.seed, replies=list(p.replies)) for p in found]
        else:
            points = [RLAIFFork(seed=s, replies=self._scripted_prefix(s, overrides)) for s in seeds]
        return [self._task(p, overrides) for p in [*points, *cfg.forks]]

    def _scripted_prefix(self, seed: int, overrides: dict[str, Any]) -> list[str]:
        if not self.config.fork_at:
            return []
        env = RLAIFTextEnv(overrides)
        prompt, _ = env.reset(seed=seed)
        replies = []
        for _ in range(self.config.fork_at):
            replies.append(_scripted_reply(prompt))
            prompt, _, terminated, truncated, _ = env.step(replies[-1])
            if terminated or truncated:
                raise ValueError(f"fork_at={self.config.fork_at} ends the episode of seed {seed}; "
                                 "fork at an earlier tick or raise config.num_ticks")
        return replies

    def _task(self, point: RLAIFFork, overrides: dict[str, Any]) -> RLAIFTask:
        probe = RLAIFTask(RLAIFTaskData(seed=point.seed, env_config=overrides, fork_replies=point.replies,
                                        horizon=self.config.horizon, decisions=self.config.decisions),
                          self.config.task)
        env = probe.make_env()
        tick = len(point.replies)
        name = f"seed-{point.seed}" + (f"@tick-{tick}" if tick else "")
        return probe.with_data(name=name, id=name, prompt=env._prompt, system_prompt=env.system_prompt)


# -- the harness --------------------------------------------------------------------------------------


class RLAIFChatHarnessConfig(vf.HarnessConfig):
    """How each tick's chat request is built."""

    history: Literal["tick", "full"] = "tick"
    """`tick`: system prompt + this tick's prompt (each prompt is self-contained, as in
    `RolloutCollector`); `full`: the whole conversation so far."""


class RLAIFChatHarness(vf.Harness[RLAIFChatHarnessConfig]):
    """One chat completion per segment, in-process, through the rollout's interception endpoint.

    verifiers records the exchange (messages, `ModelCall`, usage) at the endpoint; nothing runs in
    the runtime box, so the local subprocess runtime suffices.
    """

    APPENDS_SYSTEM_PROMPT: ClassVar[bool] = True
    SUPPORTS_RESUME: ClassVar[bool] = True
    EXECUTES_CODE: ClassVar[bool] = False
    NEEDS_CONTAINER: ClassVar[bool] = False

    async def launch(self, ctx: Any, trace: vf.Trace, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData, tool_interception_url: str | None = None,
                     ) -> vf.ProgramResult:
        """Send the segment's conversation once; the reply is the segment's answer."""
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages.extend(message_to_wire(m) for m in prompt or [])
        async with openai.AsyncOpenAI(base_url=endpoint, api_key=secret) as client:
            completion = await client.chat.completions.create(model=ctx.model, messages=messages)
        return vf.ProgramResult(exit_code=0, stdout=completion.choices[0].message.content or "", stderr="")

    async def resume(self, ctx: Any, trace: vf.Trace, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData, messages: vf.Messages,
                     tool_interception_url: str | None = None) -> vf.ProgramResult:
        """The next tick: only its prompt (`history="tick"`), or the whole conversation (`"full"`)."""
        if self.config.history == "full":
            return await super().resume(ctx, trace, runtime, endpoint, secret, mcp_urls, data, messages)
        return await self.launch(ctx, trace, runtime, endpoint, secret, mcp_urls,
                                 data.model_copy(update={"prompt": list(messages)}))


# -- the judge ----------------------------------------------------------------------------------------


class RLAIFJudgeConfig(vf.JudgeConfig):
    """The judge endpoint (`model`, `base_url`, `api_key_var`, `sampling`) and what it reads."""

    archetype: str | None = None
    """Judge every episode as this archetype (None: the episode's own, else "default")."""
    max_steps: int = Field(20, ge=1)
    """The last this many steps are shown."""
    reasoning_chars: int = Field(400, ge=0)
    """Each shown step's reasoning is cut to this many characters."""


class RLAIFJudge(vf.Judge[float, RLAIFJudgeConfig]):
    """`rlaif_gym.llm_judge`'s absolute-mode trajectory judge as a verifiers judge plugin.

    Plug it with `taskset.task.judges = [{id = "rlaif-gym-verifiers", name = "llm_judge", model = ...,
    base_url = ...}]`. It reads the episode from the trace (`trace_to_trajectory`), asks once and
    returns the verdict's score in [0, 1]. The call is recorded on the trace
    (`trace.info["judge_calls"]`, `trace.extra_usage`).
    """

    def build_messages(self, **fields: Any) -> vf.Messages:
        """The judge prompt for `fields["trajectory"]`: packaged template, rubric, fenced episode data."""
        trajectory: Trajectory = fields["trajectory"]
        rubrics = load_rubrics()
        arch = normalize_archetype(self.config.archetype or trajectory.archetype)
        if arch == DEFAULT_ARCHETYPE:
            rubric, priority = rubrics.default_rubric, rubrics.default_priority_metrics
        else:
            rubric, priority = rubrics.rubrics[arch], rubrics.priority_metrics[arch]
        data = trajectory_data(trajectory, archetype=arch, priority=priority, max_steps=self.config.max_steps,
                               reasoning_chars=self.config.reasoning_chars)
        messages = render_messages(load_template("absolute"), archetype=arch, rubric=rubric, data=data)
        return [parse_message(m) for m in messages]

    def parse(self, response: vf.JudgeResponse[float]) -> float:
        """The verdict's score; raises `VerdictParseError` on anything but a valid verdict."""
        return parse_absolute(response.text).score

    async def score(self, task: vf.TaskData, trace: vf.Trace) -> float:
        """Judge the trace's episode."""
        result = await self.evaluate(trace=trace, trajectory=trace_to_trajectory(trace))
        return float(result.parsed)


# -- the environment ----------------------------------------------------------------------------------


class RLAIFEnvironmentConfig(vf.EnvConfig):
    """The env's one seat, `agent` (`--env.agent.*`). Its runtime defaults to the local subprocess:
    the in-process harness runs nothing in it."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class RLAIFEnvironment(vf.Env[RLAIFEnvironmentConfig]):
    """One text-env episode per rollout, the env playing the user (see the module docstring)."""

    def __init__(self, config: RLAIFEnvironmentConfig) -> None:
        super().__init__(config)
        self._starts: dict[str, EnvSnapshot] = {}

    def start_env(self, task: RLAIFTask) -> RLAIFTextEnv:
        """A text env at the task's start: from the task's snapshot when one of its rollouts made it."""
        snapshot = self._starts.get(task.key)
        if snapshot is None:
            env = task.make_env()
            self._starts[task.key] = env.get_state()
            return env
        env = RLAIFTextEnv(snapshot.config)
        env.set_state(snapshot)
        return env

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        """Play the episode: reply -> `env.step` -> next prompt, until it terminates or truncates."""
        if not isinstance(task, RLAIFTask):
            raise TypeError(f"RLAIFEnvironment plays RLAIFTask tasks, got {type(task).__name__}")
        env = self.start_env(task)
        config = env.config
        account = _account(env)
        fn = env.reward_function
        record: dict[str, Any] = {
            "version": INFO_VERSION, "env_id": ENV_ID, "seed": task.data.seed, "fork_tick": len(task.data.fork_replies),
            "config": config.model_dump(mode="json"), "package_version": __version__,
            "reward_weights": env.reward_weights, "scheme": fn.scheme, "coefficients": dict(fn.coefficients),
            "status": "running", "steps": [],
        }
        horizon, decisions = task.data.horizon, task.data.decisions

        def play(reply: str) -> tuple[str, bool]:
            nonlocal account
            t = len(record["steps"])
            before = account_before(env, account, config)
            prompt, numeric = env.prompt, env.numeric_observation.tolist()
            next_prompt, reward, terminated, truncated, info = env.step(reply)
            account = info
            step = step_record(t, before, LLMCall(model=""), prompt, numeric, reward, info)
            record["steps"].append(step.model_dump(mode="json", exclude={"llm_calls"}))
            if terminated or truncated:
                record["status"] = "terminated" if terminated else "truncated"
            elif horizon is not None and len(record["steps"]) >= horizon:
                record["status"] = "horizon"
            return next_prompt, record["status"] != "running"

        async with agents.agent.interaction(task) as interaction:
            interaction.trace.info[INFO_KEY] = record
            segment = await interaction.turn()
            while not segment.terminated:
                next_prompt, ended = play(_reply_text(segment))
                if not ended and decisions is not None and len(record["steps"]) >= decisions:
                    record["continued"] = 0
                    while not ended:  # the model's decisions are made: a clean wait plays out the horizon
                        _, ended = play(WAIT_REPLY)
                        record["continued"] += 1
                if ended:
                    break
                segment = await interaction.turn(next_prompt)
            else:
                record["status"] = "stopped"


def _account(env: RLAIFTextEnv) -> dict[str, float]:
    state = env.state
    return {"equity": float(sim.equity(state, env.params)[0]), "cash": float(state.cash[0])}


def _reply_text(segment: Any) -> str:
    """The segment's reply exactly as sampled (`Segment.last_reply` strips it)."""
    for message in reversed(segment.messages):
        if message.role == "assistant":
            return message.content or ""
    return segment.last_reply


def _record_env_rewards(trace: vf.Trace, record: Mapping[str, Any]) -> None:
    steps = record.get("steps") or []
    names = sorted({name for s in steps for name in s.get("reward_components", {})})
    sums = {name: math.fsum(s["reward_components"].get(name, 0.0) for s in steps) for name in names}
    episode_return = math.fsum(s["reward"] for s in steps)
    if record.get("scheme") == "skill":
        for name in names:
            trace.record_reward(name, sums[name], record["coefficients"][name])
    else:
        trace.record_reward("env_return", episode_return, 1.0)
        trace.record_metrics(sums)
    trace.record_metric("episode_return", episode_return)
    trace.record_metric("episode_length", len(steps))
    if steps:
        last = steps[-1]
        trace.record_metric("final_pnl", last["environment_state"]["agent_pnl"] + last["feedback"]["pnl_delta"])


def load_environment(**taskset: Any) -> RLAIFEnvironment:
    """This env through verifiers' own loader, e.g. `load_environment(num_tasks=2, config={"num_ticks": 3})`.

    Raises:
        ConfigError: a taskset option or env config field that is unknown or out of its bound, one line per
            problem, naming the option (e.g. ``taskset.config: ... market_duration_max ...``).
    """
    try:
        config = vf.resolve_env_config({"taskset": {"id": TASKSET_ID, **taskset}})
    except ValidationError as exc:
        raise ConfigError(_friendly(exc)) from None
    return vf.load_environment(config)


def _friendly(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "taskset"
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "invalid rlaif-gym-verifiers options: " + "; ".join(parts)


def fork_point(trajectory: Trajectory, step: int) -> RLAIFFork:
    """The fork point before `step` of a stored episode: its seed and the replies of its first `step` steps."""
    if trajectory.seed is None:
        raise ValueError(f"trajectory {trajectory.trajectory_id} records no seed; it cannot be replayed")
    if not 0 <= step <= len(trajectory.steps):
        raise ValueError(f"step must be in [0, {len(trajectory.steps)}], got {step}")
    return RLAIFFork(seed=trajectory.seed, replies=[s.llm_calls[0].response for s in trajectory.steps[:step]])


# -- traces <-> trajectories ---------------------------------------------------------------------------

def _wire(message: Any) -> dict[str, Any]:
    return {"role": message.role, "content": message.content if isinstance(message.content, str)
            else message_to_wire(message).get("content")}


def _path(trace: vf.Trace, node: int) -> list[int]:
    out: list[int] = []
    cur: int | None = node
    while cur is not None:
        out.append(cur)
        cur = trace.nodes[cur].parent
    return out[::-1]


def _llm_call(trace: vf.Trace, node_id: int, call: Any, index: int) -> LLMCall:
    """Our record of one model call of a trace: its request (the path to the reply) and the reply."""
    node = trace.nodes[node_id]
    request = [_wire(trace.nodes[i].message) for i in _path(trace, node_id)[:-1]]
    system = next((m["content"] for m in request if m["role"] == "system"), "")
    user = next((m["content"] for m in reversed(request) if m["role"] == "user"), "")
    sampling = call.sampling if call is not None and call.sampling is not None else None
    usage = call.usage if call is not None else None
    error = call.error if call is not None else None
    completion_ids = [t for t, m in zip(node.token_ids, node.mask, strict=False) if m] or None
    return LLMCall(
        call_id=f"{trace.id}-{index}", model=(call.model if call is not None and call.model else "")
        or (trace.agent.config.model or ""), system_prompt=system or "", user_prompt=user or "", messages=request,
        response=node.message.content or "", temperature=sampling.temperature if sampling else None,
        max_tokens=sampling.max_tokens if sampling else None, top_p=sampling.top_p if sampling else None,
        latency_ms=call.time.duration * 1000.0 if call is not None and call.time.end else None,
        prompt_tokens=usage.input_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
        total_tokens=usage.total_tokens if usage else None, finish_reason=call.finish_reason if call else None,
        completion_token_ids=completion_ids, completion_logprobs=list(node.logprobs) or None,
        error=LLMCallError(type=error.type, message=error.message, status_code=error.status_code) if error else None,
    )


def trace_to_trajectory(trace: vf.Trace) -> Trajectory:
    """Our trajectory record of a trace that `RLAIFEnvironment` played (or `trajectory_to_trace` made).

    The steps come from `trace.info["rlaif_gym"]`; each step's LLM call from the trace's i-th sampled
    reply, its request path and its `ModelCall`. The trajectory's group is the task (`trace.task.key`):
    the rollouts of one task are one GRPO group. Raises `ValueError` for a trace without that record.
    """
    record = trace.info.get(INFO_KEY)
    if not isinstance(record, Mapping) or "steps" not in record:
        raise ValueError(f"trace {trace.id} has no trace.info[{INFO_KEY!r}]: it was not played by RLAIFEnvironment")
    by_node = {c.node: c for c in trace.calls if c.node is not None}
    replies = [i for i, n in enumerate(trace.nodes) if n.sampled]
    steps = []
    for t, raw in enumerate(record["steps"]):
        raw = dict(raw)
        extra = raw.pop("llm_call", None)
        call = _llm_call(trace, replies[t], by_node.get(replies[t]), t) if t < len(replies) else LLMCall(model="")
        if extra is not None:
            call = LLMCall.model_validate({**call.model_dump(), **extra})
        step = TrajectoryStep.model_validate(raw)
        call.action_type = step.action.action_type if step.action and step.action.action_type != "invalid" else None
        if extra is not None and "action_type" in extra:
            call.action_type = extra["action_type"]
        step.llm_calls = [call]
        steps.append(step)
    header = record.get("trajectory")
    if header is not None:  # a trajectory that went through trajectory_to_trace: its own header, exactly
        return Trajectory.model_validate({**header, "steps": [s.model_dump() for s in steps]})
    config = RLAIFEnvConfig.model_validate(record["config"])
    errors = [f"{e.type}: {e.message}" for e in trace.errors]
    status = "error" if trace.errors else record.get("status", "completed")
    traj = build_trajectory(
        trajectory_id=trace.id, agent_id=trace.agent.config.model or "verifiers", window_id="verifiers",
        env_seed=record["seed"], group_id=trace.task.key, group_index=None, steps=steps, failed_calls=[],
        errors=errors, status=status, wall_s=trace.timing.agent.duration, config=config, env_id=record["env_id"],
        reward_weights=record["reward_weights"],
        agent={"kind": "verifiers", "name": trace.agent.name, "model": trace.agent.config.model,
               "harness": trace.agent.config.harness.id if trace.agent.config.harness else None},
    )
    components = set(record.get("coefficients", {})) | {"env_return"}
    traj.judge_scores = {name: r.score for name, r in trace.rewards.items() if r is not None and name not in components}
    return traj


def _node(trace: vf.Trace, parent: int | None, message: Any, *, sampled: bool = False) -> int:
    if not sampled:
        for i, n in enumerate(trace.nodes):
            if n.parent == parent and not n.sampled and n.message == message:
                return i
    trace.nodes.append(vf.MessageNode(parent=parent, message=message, sampled=sampled, timestamp=0.0))
    return len(trace.nodes) - 1


def _finish_reason(value: str | None) -> str | None:
    return value if value in ("stop", "length", "tool_calls") else None


def trajectory_to_trace(trajectory: Trajectory, *, task_type: str = "RLAIFTask") -> vf.Trace:
    """A verifiers trace of a trajectory (e.g. one `RolloutCollector` recorded), for verifiers tooling.

    Each step's LLM call becomes its request messages (shared prefixes are shared nodes) and a
    sampled reply with its `ModelCall` (model, usage, finish reason, error). The rewards are the
    env's components, as `RLAIFEnvironment` records them; `trace_to_trajectory` gives back the same
    trajectory.
    """
    if trajectory.seed is None:
        raise ValueError(f"trajectory {trajectory.trajectory_id} records no seed")
    first = trajectory.steps[0] if trajectory.steps else None
    first_call = first.llm_calls[0] if first and first.llm_calls else None
    config = RLAIFEnvConfig.model_validate(trajectory.config)
    fn = RLAIFTextEnv(config).reward_function
    data = RLAIFTaskData(seed=trajectory.seed, env_config=config.model_dump(mode="json", exclude_defaults=True),
                         name=f"seed-{trajectory.seed}", id=f"seed-{trajectory.seed}",
                         prompt=first.observation.text if first and first.observation else None,
                         system_prompt=first_call.system_prompt or None if first_call else None)
    task = RLAIFTask(data)
    model = first_call.model if first_call else trajectory.agent_id
    trace = vf.Trace(
        id=trajectory.trajectory_id,
        task=vf.TraceTask(type=task_type, data=data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig(model=model, runtime=vf.SubprocessConfig())),
    )
    steps = []
    for step in trajectory.steps:
        raw = step.model_dump(mode="json", exclude={"llm_calls"})
        if step.llm_calls:
            call = step.llm_calls[0]
            messages = call.messages or ([{"role": "system", "content": call.system_prompt}] if call.system_prompt
                                         else []) + [{"role": "user", "content": call.user_prompt}]
            parent: int | None = None
            for m in messages:
                parent = _node(trace, parent, parse_message(m))
            reply = _node(trace, parent, vf.AssistantMessage(content=call.response), sampled=True)
            if call.completion_token_ids:
                trace.nodes[reply].token_ids = list(call.completion_token_ids)
                trace.nodes[reply].mask = [True] * len(call.completion_token_ids)
                trace.nodes[reply].logprobs = list(call.completion_logprobs or [])
            usage = (vf.Usage(prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens)
                     if call.prompt_tokens is not None and call.completion_tokens is not None else None)
            error = vf.Error(type=call.error.type, message=call.error.message,
                             status_code=call.error.status_code) if call.error else None
            trace.calls.append(vf.ModelCall(
                node=reply, model=call.model, usage=usage, finish_reason=_finish_reason(call.finish_reason),
                sampling=vf.Sampling(temperature=call.temperature, top_p=call.top_p, max_tokens=call.max_tokens),
                error=error))
            # What the trace cannot hold (call id, seed, latency, attempts, ...); the texts are its messages.
            text = {"system_prompt", "user_prompt", "response"} | ({"messages"} if call.messages else set())
            raw["llm_call"] = call.model_dump(mode="json", exclude=text)
        steps.append(raw)
    header = trajectory.model_dump(mode="json", exclude={"steps"})
    record = {"version": INFO_VERSION, "env_id": trajectory.env_id or ENV_ID, "seed": trajectory.seed,
              "fork_tick": 0, "config": config.model_dump(mode="json"), "package_version": trajectory.package_version,
              "reward_weights": dict(trajectory.reward_weights), "scheme": fn.scheme,
              "coefficients": dict(fn.coefficients), "status": trajectory.final_status, "steps": steps,
              "trajectory": header}
    trace.info[INFO_KEY] = record
    _record_env_rewards(trace, record)
    trace.is_completed = True
    trace.ok = not trajectory.errors
    return trace


def traces_to_trajectories(traces: Iterable[vf.Trace]) -> list[Trajectory]:
    """`trace_to_trajectory` of each trace."""
    return [trace_to_trajectory(t) for t in traces]


def read_traces(run_dir: str | os.PathLike[str]) -> list[vf.Trace]:
    """The traces of a verifiers run directory (its `traces.jsonl`, read by verifiers' own reader)."""
    episodes = read_episodes(Path(run_dir), vf.Trace[RLAIFTaskData, vf.State, vf.AgentConfig])
    return [trace for episode in episodes for trace in episode.traces]
