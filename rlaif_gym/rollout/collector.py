"""`RolloutCollector`: drive many text envs against an LLM policy and record every tick in full.

Design.
* **One asyncio task per episode, each with its own env.** An env advances as soon as its own reply
  arrives; there is no lock-step batch, so one slow call never stalls the others. Because every
  episode resets its own env explicitly, there is no Gymnasium autoreset step to skip: every
  recorded step is a real transition with exactly one policy call.
* **Bounded concurrency**, separately for episodes in flight (`num_envs`) and LLM calls in flight
  (`max_concurrent_calls`).
* **GRPO groups**: `group_size` episodes share an env seed (identical start state) and differ only
  in their per-call sampling seeds.
* **Failures are data.** A call that fails for good (after the client's retries) ends its episode
  with `final_status="failed"`, the failed call in `failed_calls` and the error in `errors`; any
  other exception inside an episode is recorded the same way. Nothing escapes `collect`, and the
  other episodes carry on. A malformed *reply* is not a failure: the env scores it (format -1).
* **Streaming and resume.** Each finished trajectory goes to the sink at once; with `resume=True`,
  episodes whose trajectory id the sink already holds are skipped, so a killed run continues without
  losing or duplicating anything; `retry_failed=True` also sets aside and replays the failed ones.

* **GRPO groups from one mid-episode state** (`collect_forks`): a trunk episode is played to
  `fork_tick`, the env is forked (`RLAIFEnv.fork`) into `group_size` branches, and each branch plays
  on with its own call seeds. Branch 0 uses the trunk's seeds, so it continues exactly the episode a
  plain `collect` would record for member 0.
* **Backends.** By default everything runs in this process. `backend=RayBackend(...)`
  (`rlaif_gym.rollout.ray_backend`) runs the same episodes on Ray actors and streams their
  trajectories back to the same sink, in the order they finish.

Determinism: episode ids, env seeds and per-call seeds derive from the run seed; with a
deterministic policy (the scripted agent) a rerun writes identical steps (latencies aside), on
either backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

import gymnasium as gym

from .._version import __version__ as _pkg_version
from ..agents.llm import LLMAgent
from ..config import RLAIFEnvConfig
from ..envs.decisions import DecisionPoint
from ..envs.text_env import warm_up
from ..errors import ConfigError
from ..llm import LLMError
from ..llm.recording import TokenBudget
from ..sim import TRADE_TYPES
from ..trajectory import (
    EnvironmentState,
    Trajectory,
    TrajectoryStep,
    step_record,
)
from .progress import ProgressDisplay, progress_mode
from .quality import QualityTally, validate_trajectory

_log = logging.getLogger(__name__)

__all__ = ["CollectionSummary", "EpisodeSpec", "ForkGroup", "RolloutCollector", "TrajectorySink", "build_trajectory",
           "call_seed"]

class TrajectorySink(Protocol):
    """Where finished trajectories go (e.g. `rlaif_gym.storage.JsonlStore`)."""

    def append(self, trajectory: Trajectory) -> None: ...


def call_seed(seed: int, member: int, tick: int) -> int:
    """A per-call sampling seed in [0, 2**31) derived from the episode and tick (SplitMix64 mix)."""
    x = (seed * 0x9E3779B97F4A7C15 + member * 0xBF58476D1CE4E5B9 + tick * 0x94D049BB133111EB) & (2**64 - 1)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return (x ^ (x >> 31)) & (2**31 - 1)


@dataclass(frozen=True)
class EpisodeSpec:
    """One planned episode."""

    trajectory_id: str
    env_seed: int
    member: int
    group_id: str


@dataclass(frozen=True)
class ForkGroup:
    """One planned GRPO group of `collect_forks`: a trunk to `fork_tick`, then one branch per member.

    With `start` (a decision point's `EnvSnapshot`, `collect_decisions`) there is no trunk to play: the
    branches start from that state, and `horizon` caps their ticks (None: to the end of the episode)."""

    env_seed: int
    fork_tick: int
    members: tuple[EpisodeSpec, ...]
    start: Any = None
    horizon: int | None = None


@dataclass
class _Start:
    """Where a branch starts: its env (already at the fork tick) and the prompt, info and tick there."""

    env: Any
    system: str
    prompt: str
    info: dict[str, Any]
    tick: int
    steps: list[TrajectoryStep]


@dataclass
class CollectionSummary:
    """What a collection did."""

    planned: int = 0
    skipped_existing: int = 0
    retried_failed: int = 0
    """Failed trajectories of the resumed run that were set aside and played again (`retry_failed`)."""
    completed: int = 0
    failed: int = 0
    bankrupt: int = 0
    steps: int = 0
    llm_calls: int = 0
    failed_calls: int = 0
    wall_s: float = 0.0
    """Seconds from the first episode's start to the last one's end (the start-up is `startup_s`)."""
    startup_s: float = 0.0
    """Seconds spent before the clock of `wall_s` started: one warm-up tick that loads the compiled kernels
    from their cache (about a second), or compiles them on a machine's first run (minutes on 2 cores)."""
    mean_return: float = 0.0
    mean_final_pnl: float = 0.0
    quality: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    """The first `MAX_ERRORS` error lines (the trajectories hold them all)."""
    errors_omitted: int = 0
    """Error lines beyond `MAX_ERRORS`, counted but not kept (a long outage stays bounded in memory)."""

    MAX_ERRORS: ClassVar[int] = 100

    def add_errors(self, lines: Iterable[str]) -> None:
        """Keep the first `MAX_ERRORS` error lines; count the rest."""
        for line in lines:
            if len(self.errors) < self.MAX_ERRORS:
                self.errors.append(line)
            else:
                self.errors_omitted += 1

    @property
    def ticks_per_s(self) -> float:
        """Environment ticks (with their LLM calls) per wall-clock second, start-up (`startup_s`) excluded."""
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict:
        """JSON-able form (for `rlaif-gym report` and logs)."""
        return {**asdict(self), "ticks_per_s": self.ticks_per_s}


class RolloutCollector:
    """Collect trajectories from `RLAIF-Text-v0` (or another text env id) with an LLM policy.

    Args:
        agent: the policy (`ScriptedLLMAgent`, `OpenAIChatAgent`, or any `LLMAgent`).
        sink: receives each finished trajectory; None keeps them in `self.trajectories`.
        env_id: a registered text env id.
        env_config: an `RLAIFEnvConfig` or mapping for every env.
        num_envs: episodes in flight at once.
        max_concurrent_calls: LLM calls in flight at once (default: num_envs).
        group_size: episodes per env seed (GRPO groups); 1 for plain rollouts.
        run_name: prefix of trajectory and group ids.
        progress: show progress on stderr (`rollout.progress`): True or "auto" (a live bar on a
            terminal, a plain line every few seconds elsewhere), "live", "lines", or False.
        max_ticks: stop each episode after this many ticks (default: the env's num_ticks).
        on_trajectory: called with each finished trajectory once the sink holds it (e.g. a
            `rlaif_gym.integrations.tracking` logger); an exception in it is reported in the summary's
            errors and logged, and the run goes on.
        backend: None (or "local") runs episodes in this process; a `RayBackend` runs them on Ray
            actors (num_envs and max_concurrent_calls then apply per actor).
    """

    def __init__(self, agent: LLMAgent, *, sink: TrajectorySink | None = None, env_id: str = "RLAIF-Text-v0",
                 env_config: RLAIFEnvConfig | Mapping[str, Any] | None = None, num_envs: int = 8,
                 max_concurrent_calls: int | None = None, group_size: int = 1, run_name: str = "run",
                 progress: bool | str = False, max_ticks: int | None = None,
                 on_trajectory: Callable[[Trajectory], None] | None = None, backend: Any = None) -> None:
        if num_envs < 1 or group_size < 1:
            raise ConfigError(f"num_envs and group_size must be >= 1, got {num_envs} and {group_size}")
        self.agent = agent
        self.sink = sink
        self.env_id = env_id
        self.config = RLAIFEnvConfig.from_any(env_config)
        self.num_envs = num_envs
        self.max_concurrent_calls = max_concurrent_calls or num_envs
        self.group_size = group_size
        self.run_name = run_name
        self.progress = progress
        progress_mode(progress)  # a bad value fails here, not after the plan
        self.max_ticks = max_ticks
        self.on_trajectory = on_trajectory
        if backend == "local":
            backend = None
        if backend is not None and not hasattr(backend, "stream"):
            raise ConfigError(f"backend must be None, 'local' or a RayBackend, got {backend!r}")
        self.backend = backend
        self.trajectories: list[Trajectory] = []

    # -- planning ---------------------------------------------------------------------------

    def plan(self, episodes: int, seed: int) -> list[EpisodeSpec]:
        """The episodes of a run: ceil(episodes / group_size) env seeds from `seed` up."""
        specs = []
        for g in range(math.ceil(episodes / self.group_size)):
            env_seed = seed + g
            for member in range(self.group_size):
                if len(specs) == episodes:
                    break
                specs.append(EpisodeSpec(f"{self.run_name}-s{env_seed}-m{member}", env_seed, member,
                                         f"{self.run_name}-s{env_seed}"))
        return specs

    def plan_forks(self, groups: int, seed: int, fork_tick: int) -> list[ForkGroup]:
        """The groups of a forked run: env seeds `seed` .. `seed + groups - 1`, `group_size` branches each."""
        limit = self.max_ticks or self.config.num_ticks
        if not 0 <= fork_tick < limit:
            raise ConfigError(f"fork_tick must be in [0, {limit}) (the episode length), got {fork_tick}")
        if groups < 0:
            raise ConfigError(f"groups must be >= 0, got {groups}")
        out = []
        for g in range(groups):
            env_seed = seed + g
            group_id = f"{self.run_name}-s{env_seed}-t{fork_tick}"
            members = tuple(EpisodeSpec(f"{group_id}-m{m}", env_seed, m, group_id) for m in range(self.group_size))
            out.append(ForkGroup(env_seed, fork_tick, members))
        return out

    def plan_decisions(self, points: Sequence[DecisionPoint], horizon: int | None = None) -> list[ForkGroup]:
        """One group per decision point (`rlaif_gym.envs.decisions`), `group_size` branches from its state."""
        if horizon is not None and horizon < 1:
            raise ConfigError(f"horizon must be None or >= 1, got {horizon}")
        out = []
        for p in points:
            if p.config != self.config:
                raise ConfigError(f"decision point (seed {p.seed}, tick {p.tick}) comes from another config than the "
                                  "collector's; find the points with the collector's env_config")
            group_id = f"{self.run_name}-s{p.seed}-t{p.tick}"
            members = tuple(EpisodeSpec(f"{group_id}-m{m}", p.seed, m, group_id) for m in range(self.group_size))
            out.append(ForkGroup(p.seed, p.tick, members, p.snapshot, horizon))
        return out

    def collect_decisions(self, points: Sequence[DecisionPoint], *, horizon: int | None = None,
                          resume: bool = False, retry_failed: bool = False) -> CollectionSummary:
        """GRPO groups that start at decision points (blocking): see `collect_decisions_async`."""
        return asyncio.run(self.collect_decisions_async(points, horizon=horizon, resume=resume,
                                                        retry_failed=retry_failed))

    async def collect_decisions_async(self, points: Sequence[DecisionPoint], *, horizon: int | None = None,
                                      resume: bool = False, retry_failed: bool = False) -> CollectionSummary:
        """One group of `group_size` branches per decision point, each played by the agent from the point's state.

        A decision point (`rlaif_gym.envs.decisions.decision_points`) is a state where a market resolves soon and
        the prompt names it, so a group's replies can differ in value. Branches play `horizon` ticks (None: to the
        end of the episode); their `step_number` is the tick. Group ids are `<run>-s<seed>-t<tick>`.
        """
        plan = self.plan_decisions(points, horizon)
        specs = [m for g in plan for m in g.members]
        manifest = self.manifest(len(specs), points[0].seed if points else 0)
        manifest["decision_points"] = [[p.seed, p.tick] for p in points]
        manifest["horizon"] = horizon
        return await self._run(specs, plan, manifest, resume, False, retry_failed)

    def manifest(self, episodes: int, seed: int, fork_tick: int | None = None,
                 include_trunk: bool = False) -> dict[str, Any]:
        """What identifies a run, so that `--resume` can refuse to mix two different runs."""
        out = {"run_name": self.run_name, "episodes": episodes, "seed": seed, "group_size": self.group_size,
               "env_id": self.env_id, "config": self.config.model_dump(mode="json"),
               "agent": self.agent.describe(), "max_ticks": self.max_ticks}
        if fork_tick is not None:
            out["fork_tick"], out["include_trunk"] = fork_tick, include_trunk
        return out

    # -- running ----------------------------------------------------------------------------

    def collect(self, episodes: int, seed: int = 0, *, resume: bool = False,
                retry_failed: bool = False) -> CollectionSummary:
        """Run the collection to completion (blocking); see `collect_async`."""
        return asyncio.run(self.collect_async(episodes, seed, resume=resume, retry_failed=retry_failed))

    def collect_forks(self, groups: int, seed: int = 0, *, fork_tick: int, resume: bool = False,
                      include_trunk: bool = False, retry_failed: bool = False) -> CollectionSummary:
        """Collect GRPO groups that share one mid-episode state (blocking); see `collect_forks_async`."""
        return asyncio.run(self.collect_forks_async(groups, seed, fork_tick=fork_tick, resume=resume,
                                                    include_trunk=include_trunk, retry_failed=retry_failed))

    async def collect_forks_async(self, groups: int, seed: int = 0, *, fork_tick: int, resume: bool = False,
                                  include_trunk: bool = False, retry_failed: bool = False) -> CollectionSummary:
        """Collect `groups` groups of `group_size` branches forked at tick `fork_tick`.

        For each group the agent plays a trunk episode from `reset(seed=env_seed)` to `fork_tick`
        (with member 0's call seeds), the env is forked, and branch m plays on to the end with
        member m's call seeds. Every branch of a group therefore starts from the identical state.

        Args:
            groups: number of groups (env seeds `seed`, `seed + 1`, ...).
            seed: the first env seed.
            fork_tick: the tick at which the branches split (0 = right after reset).
            resume: skip branches the sink already holds (the trunk is replayed; it is deterministic).
            retry_failed: with `resume`, also play again the branches stored as failed (see `collect_async`).
            include_trunk: prepend the trunk's steps to every branch, so each trajectory is a whole
                episode; by default a branch's steps start at `fork_tick` (their `step_number` is the
                tick). Group ids are `<run>-s<seed>-t<fork_tick>`.
        """
        plan = self.plan_forks(groups, seed, fork_tick)
        specs = [m for g in plan for m in g.members]
        manifest = self.manifest(groups * self.group_size, seed, fork_tick, include_trunk)
        return await self._run(specs, plan, manifest, resume, include_trunk, retry_failed)

    async def collect_async(self, episodes: int, seed: int = 0, *, resume: bool = False,
                            retry_failed: bool = False) -> CollectionSummary:
        """Collect `episodes` trajectories; returns the summary. Never raises for a failed episode.

        Args:
            episodes: trajectories to collect (env seeds from `seed`; see `plan`).
            seed: the run seed.
            resume: continue the run the sink already holds (same settings, checked against its
                manifest): every trajectory it holds is skipped, so nothing is lost or duplicated.
            retry_failed: with `resume`, first set aside the stored trajectories whose status is
                "failed" (a server outage, say) and play those episodes again, with the same seeds.
                The JSONL store keeps the old records in `retried-failures.jsonl`; a database row is
                replaced. Needs a sink with `failed_ids` and `set_aside`.
        """
        specs = self.plan(episodes, seed)
        return await self._run(specs, None, self.manifest(episodes, seed), resume, False, retry_failed)

    async def _run(self, specs: list[EpisodeSpec], fork_plan: list[ForkGroup] | None, manifest: dict[str, Any],
                   resume: bool, include_trunk: bool, retry_failed: bool = False) -> CollectionSummary:
        # One writer per run folder: a sink that can be held (JsonlStore, a FanoutSink over one) is held from
        # before its manifest is read until the last trajectory is stored; a second collection into it is
        # refused at once (RunFolderBusyError), never run beside this one (docs/cli.md, "One writer per run folder").
        hold = getattr(self.sink, "hold", None)
        with hold("a rollout") if hold is not None else contextlib.nullcontext():
            return await self._run_held(specs, fork_plan, manifest, resume, include_trunk, retry_failed)

    async def _run_held(self, specs: list[EpisodeSpec], fork_plan: list[ForkGroup] | None, manifest: dict[str, Any],
                        resume: bool, include_trunk: bool, retry_failed: bool) -> CollectionSummary:
        summary = CollectionSummary(planned=len(specs))
        done_ids: set[str] = set()
        if retry_failed and not resume:
            raise ConfigError("retry_failed replays the failed trajectories of a run being resumed; pass "
                              "resume=True as well (--resume --retry-failed)")
        if retry_failed and not (hasattr(self.sink, "failed_ids") and hasattr(self.sink, "set_aside")):
            held = "no sink (trajectories kept in memory)" if self.sink is None else type(self.sink).__name__
            raise ConfigError(f"retry_failed needs a sink that can set records aside (JsonlStore, "
                              f"SqlTrajectorySink, FanoutSink); {held} cannot")
        if self.sink is not None and hasattr(self.sink, "read_manifest"):
            previous = self.sink.read_manifest()
            if previous is not None and resume:
                changed = [k for k in ("run_name", "seed", "group_size", "env_id", "config", "max_ticks", "fork_tick",
                                     "include_trunk", "decision_points", "horizon")
                           if previous.get(k) != manifest.get(k)]
                if _policy(previous.get("agent")) != _policy(manifest.get("agent")):
                    changed.append(f"agent (stored {_policy(previous.get('agent'))}, now "
                                   f"{_policy(manifest.get('agent'))})")
                if changed:
                    raise ConfigError(f"--resume would mix two runs: {', '.join(changed)} differ from the run "
                                      "recorded in run.json; use a new --out directory or the same settings")
            elif previous is not None and not resume:
                raise ConfigError("the output directory already holds a run; pass resume=True (--resume) to "
                                  "continue it, or choose an empty directory")
            if previous is None and hasattr(self.sink, "files") and self.sink.files():
                raise ConfigError(f"the output directory holds trajectory files ({self.sink.files()[0].name}, ...) but "
                                  "no run.json, so they were not written by a run of this plan and would be mixed "
                                  "with it; choose an empty --out directory or move those files away")
            self.sink.write_manifest(manifest)
        if resume and self.sink is not None and hasattr(self.sink, "completed_ids"):
            if hasattr(self.sink, "repair"):
                self.sink.repair()
            if retry_failed:
                failed = set(self.sink.failed_ids()) & {s.trajectory_id for s in specs}
                self.sink.set_aside(failed)
                summary.retried_failed = len(failed)
            done_ids = set(self.sink.completed_ids())
        todo = [s for s in specs if s.trajectory_id not in done_ids]
        summary.skipped_existing = len(specs) - len(todo)
        if summary.skipped_existing:
            _log.info("resume: %d of %d planned episodes are already stored and are skipped", summary.skipped_existing,
                      len(specs))
        units: list[EpisodeSpec | ForkGroup] = list(todo)
        if fork_plan is not None:
            wanted = {s.trajectory_id for s in todo}
            units = [ForkGroup(g.env_seed, g.fork_tick, tuple(m for m in g.members if m.trajectory_id in wanted),
                               g.start, g.horizon) for g in fork_plan]
            units = [g for g in units if g.members]

        # Running totals, never per-trajectory lists: a collection of 100,000 trajectories runs in bounded memory.
        return_sum = pnl_sum = 0.0
        counted = 0
        qualities = QualityTally()
        limit = self.max_ticks or self.config.num_ticks
        if fork_plan is None:
            planned_ticks = len(todo) * limit
        else:  # each group's trunk once (none from a decision point), then its branches from the fork tick
            planned_ticks = sum((0 if g.start is not None else g.fork_tick)
                                + len(g.members) * (_branch_limit(g, limit) - g.fork_tick) for g in units)
        if todo and self.backend is None:  # a Ray actor loads the kernels in its own process
            # The kernels load (or compile, once per machine) here, before the clock of wall_s, ticks/s and
            # the progress display's ETA starts, so those figures measure the collection, not the start-up.
            summary.startup_s = warm_up(self.config)
        display = ProgressDisplay(progress_mode(self.progress), len(todo), planned_ticks)
        start = time.perf_counter()

        def record(traj: Trajectory) -> None:
            nonlocal return_sum, pnl_sum, counted
            try:
                self._emit(traj)
            except Exception as exc:  # one trajectory the sink refused (disk full, ...) never ends the run
                summary.failed += 1  # not stored: a resumed run plays it again
                error = f"{traj.trajectory_id}: could not store the trajectory: {type(exc).__name__}: {exc}"
                summary.add_errors([error])
                _log.warning("%s", error)
                display.episode_done(True, _unplayed(traj, limit, fork_plan is not None))
                return
            self._notify(traj, summary)
            summary.steps += len(traj.steps)
            summary.llm_calls += sum(len(s.llm_calls) for s in traj.steps) + len(traj.failed_calls)
            summary.failed_calls += len(traj.failed_calls)
            if traj.final_status == "failed":
                summary.failed += 1
                summary.add_errors(f"{traj.trajectory_id}: {e}" for e in traj.errors)
                _log.info("episode %s failed: %s", traj.trajectory_id, "; ".join(traj.errors)[:300])
            else:
                summary.completed += 1
                summary.bankrupt += traj.final_status == "bankrupt"
            return_sum += traj.total_reward
            pnl_sum += traj.final_pnl
            counted += 1
            qualities.add(traj.quality)
            display.episode_done(traj.final_status == "failed", _unplayed(traj, limit, fork_plan is not None))

        try:
            with display:
                if self.backend is not None:
                    async for traj in self.backend.stream(self, units, include_trunk):
                        display.ticks += len(traj.steps)
                        display.calls += len(traj.steps) + len(traj.failed_calls)
                        display.failed_calls += len(traj.failed_calls)
                        record(traj)
                else:
                    async for traj in self.run_units(units, include_trunk, display):
                        record(traj)
        except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels this task): finished episodes are stored
            display.note(f"interrupted: stopping the episodes in flight; the {summary.completed + summary.failed} "
                         "finished ones are stored (the same command with --resume plays the rest)")
            raise
        finally:
            await self.agent.aclose()
        summary.wall_s = time.perf_counter() - start
        summary.mean_return = return_sum / counted if counted else 0.0
        summary.mean_final_pnl = pnl_sum / counted if counted else 0.0
        summary.quality = qualities.summary()
        return summary

    async def run_units(self, units: list[EpisodeSpec | ForkGroup], include_trunk: bool = False,
                        display: ProgressDisplay | None = None) -> AsyncIterator[Trajectory]:
        """Run episodes and fork groups concurrently in this process; yield each trajectory as it finishes.

        At most `num_envs` envs step at once and at most `max_concurrent_calls` LLM calls are in
        flight. This is what every backend runs (a Ray actor runs it on its share of the units).
        """
        display = display or ProgressDisplay(None, 0, 0)
        self._episode_slots = asyncio.Semaphore(self.num_envs)
        self._call_slots = asyncio.Semaphore(self.max_concurrent_calls)
        queue: asyncio.Queue[Trajectory | None] = asyncio.Queue()  # drained between ticks (see `_play`)
        pending = iter(units)

        async def run_one(spec: EpisodeSpec, envs: list[Any]) -> None:
            async with self._episode_slots:
                traj = await self._episode(spec, display, envs)
            await queue.put(traj)

        async def run_group(group: ForkGroup) -> None:
            async for traj in self._fork_group(group, include_trunk, display):
                await queue.put(traj)

        async def worker() -> None:  # units are admitted as slots free up, never one task per unit up front
            envs: list[Any] = []  # this worker's env, reset for each of its episodes (cheaper than a new one)
            try:
                for unit in pending:
                    await (run_group(unit) if isinstance(unit, ForkGroup) else run_one(unit, envs))
            finally:
                for env in envs:
                    env.close()

        async def run_all() -> None:
            try:
                await asyncio.gather(*(worker() for _ in range(min(self.num_envs, len(units)))))
            finally:
                await queue.put(None)

        with _collection_gc():
            runner = asyncio.ensure_future(run_all())
            try:
                while (traj := await queue.get()) is not None:
                    yield traj
            finally:
                if not runner.done():
                    runner.cancel()
                await asyncio.gather(runner, return_exceptions=True)

    def _emit(self, traj: Trajectory) -> None:
        if self.sink is None:
            self.trajectories.append(traj)
        else:
            self.sink.append(traj)

    def _notify(self, traj: Trajectory, summary: CollectionSummary) -> None:
        """Call `on_trajectory` (metrics loggers, ...) after the trajectory is stored; its failure is reported,
        never counted as a failed episode (the trajectory is safe on disk) and never ends the run."""
        if self.on_trajectory is None:
            return
        try:
            self.on_trajectory(traj)
        except Exception as exc:
            error = f"{traj.trajectory_id}: the on_trajectory hook failed: {type(exc).__name__}: {exc}"
            summary.add_errors([error])
            _log.warning("%s", error)

    async def _episode(self, spec: EpisodeSpec, display: ProgressDisplay, envs: list[Any] | None = None) -> Trajectory:
        """Play one episode. `envs` holds the calling worker's env between its episodes: `reset(seed=...)` starts
        each one afresh, and an env whose episode failed is closed and replaced rather than reused."""
        # The passive checker re-validates every character of the first prompt of every episode; the env
        # itself passes Gymnasium's full check_env in the test suite.
        env = envs.pop() if envs else gym.make(self.env_id, config=self.config, disable_env_checker=True)
        wall0 = time.perf_counter()
        status = "failed"
        try:
            steps, failed_calls, errors, status, _ = await self._play(env, spec, display, None,
                                                                      self.max_ticks or self.config.num_ticks)
        finally:
            if envs is not None and status != "failed":
                envs.append(env)
            else:
                env.close()
        return self._trajectory(spec, env.unwrapped, steps, failed_calls, errors, status,
                                time.perf_counter() - wall0)

    async def _fork_group(self, group: ForkGroup, include_trunk: bool,
                          display: ProgressDisplay) -> AsyncIterator[Trajectory]:
        """Play the trunk to the fork tick (or restore the group's decision point), fork the env, and play every
        branch on (concurrently)."""
        trunk_spec = EpisodeSpec(f"{group.members[0].group_id}-trunk", group.env_seed, 0, group.members[0].group_id)
        env = gym.make(self.env_id, config=self.config, disable_env_checker=True)
        wall0 = time.perf_counter()
        try:
            if group.start is not None:
                base = env.unwrapped
                base.set_state(group.start)
                info = {"equity": base.view.equity, "cash": base.view.cash, "tick": group.fork_tick}
                steps, failed_calls, errors, status = [], [], [], "completed"
                end = _Start(env, base.system_prompt, base.prompt, info, group.fork_tick, [])
            else:
                async with self._episode_slots:
                    steps, failed_calls, errors, status, end = await self._play(env, trunk_spec, display, None,
                                                                                group.fork_tick)
            if status == "completed" and end is not None and end.tick == group.fork_tick:
                branches = env.unwrapped.fork(len(group.members))
            else:
                errors = [*errors, f"the trunk ended ({status}) at tick {len(steps)}, before fork_tick "
                                   f"{group.fork_tick}; no branch was played"]
                for spec in group.members:
                    yield self._trajectory(spec, env.unwrapped, list(steps), list(failed_calls), list(errors),
                                           "failed", time.perf_counter() - wall0)
                return
        finally:
            env.close()
        trunk = steps if include_trunk else []
        limit = _branch_limit(group, self.max_ticks or self.config.num_ticks)
        queue: asyncio.Queue[Trajectory] = asyncio.Queue()

        async def branch(spec: EpisodeSpec, benv: Any) -> None:
            t0 = time.perf_counter()
            try:
                async with self._episode_slots:
                    start = _Start(benv, end.system, end.prompt, end.info, end.tick, [s.model_copy(deep=True)
                                                                                        for s in trunk])
                    bsteps, bfailed, berrors, bstatus, _ = await self._play(benv, spec, display, start, limit)
            finally:
                benv.close()
            await queue.put(self._trajectory(spec, benv, bsteps, bfailed, berrors, bstatus,
                                             time.perf_counter() - t0))

        tasks = [asyncio.ensure_future(branch(spec, benv)) for spec, benv in zip(group.members, branches,
                                                                                 strict=True)]
        try:
            for _ in tasks:
                yield await queue.get()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _play(self, env: Any, spec: EpisodeSpec, display: ProgressDisplay, start: _Start | None, limit: int):
        """Step `env` with the agent from reset (or from `start`) until tick `limit` or the episode ends.

        Returns (steps, failed_calls, errors, status, end): `end` is where play stopped (a `_Start`
        a fork can continue from), None if it failed before any prompt.
        """
        base = env.unwrapped
        steps: list[TrajectoryStep] = [] if start is None else start.steps
        failed_calls = []
        errors: list[str] = []
        status = "completed"
        ready, tick = False, 0  # play reached a prompt; the tick it stands at
        budget = TokenBudget(c for s in steps for c in s.llm_calls)  # a branch's trunk spends it first
        try:
            if start is None:
                prompt, info = env.reset(seed=spec.env_seed)
                system, t0 = info["system_prompt"], 0
            else:
                system, prompt, info, t0 = start.system, start.prompt, start.info, start.tick
            ready, tick = True, t0
            for t in range(t0, limit):
                before = account_before(base, info, self.config)
                numeric = base.numeric_observation.tolist()
                try:
                    async with self._call_slots:
                        reply, record = await self.agent.act(system, prompt,
                                                             seed=call_seed(spec.env_seed, spec.member, t),
                                                             call_id=f"{spec.trajectory_id}-t{t}")
                except LLMError as exc:
                    display.call_failed()
                    failed_calls.append(exc.record)  # type: ignore[attr-defined]
                    errors.append(f"tick {t}: policy call failed after {exc.attempts} attempt(s): "
                                  f"{exc.type}: {exc}")
                    status = "failed"
                    break
                next_prompt, reward, terminated, truncated, info = env.step(reply)
                steps.append(step_record(t, before, budget.take(record), prompt, numeric, reward, info))
                display.tick(reward)
                prompt, tick = next_prompt, t + 1
                await asyncio.sleep(0)  # a policy that never awaits (the scripted agent) still lets the writer run
                if terminated:
                    status = "bankrupt"
                    break
                if truncated:
                    break
        except Exception as exc:  # a bad episode is data: record it, keep the run going
            status = "failed"
            errors.append(f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=3).strip().splitlines()[-1]}")
        end = _Start(env, system, prompt, info, tick, steps) if ready else None
        return steps, failed_calls, errors, status, end

    def _trajectory(self, spec, base, steps, failed_calls, errors, status, wall_s) -> Trajectory:
        return build_trajectory(
            trajectory_id=spec.trajectory_id, agent_id=self.agent.name, window_id=self.run_name,
            env_seed=spec.env_seed, group_id=spec.group_id, group_index=spec.member, steps=steps,
            failed_calls=failed_calls, errors=errors, status=status, wall_s=wall_s, config=self.config,
            env_id=self.env_id, reward_weights=base.reward_weights, agent=self.agent.describe(),
        )


GC_THRESHOLD = 20_000
"""Allocations between two young-generation collections of Python's cyclic GC while episodes run (Python's
default is 700): see `_collection_gc`."""


@contextlib.contextmanager
def _collection_gc():
    """Python's cyclic GC, tuned while a collection runs; restored afterwards.

    A collection allocates a few thousand objects per tick (records, views, prompts), nearly all freed by
    reference counting, so the default threshold runs a young collection every fraction of a tick and
    promotes the records of every episode in flight, which the older collections then walk again and
    again, together with every object the imports made (numba's and pydantic's are many). Here the objects
    alive at the start are frozen (`gc.freeze`: no collection looks at them) and the young threshold is
    `GC_THRESHOLD`: cycles are still collected, and the CPU per tick falls by about 8-15%
    (docs/benchmarks.md, "The lean tick"). With the GC disabled by the caller, nothing changes; a caller that
    froze objects itself (a pre-forking server, say) keeps them frozen: `gc.unfreeze` cannot tell its objects
    from ours, so then only the threshold is raised.
    """
    if not gc.isenabled():
        yield
        return
    old = gc.get_threshold()
    ours = gc.get_freeze_count() == 0
    if ours:
        gc.freeze()
    gc.set_threshold(max(old[0], GC_THRESHOLD), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if ours:
            gc.unfreeze()


def _branch_limit(group: ForkGroup, limit: int) -> int:
    """The tick a group's branches stop at: the run's limit, or the fork tick plus the group's horizon."""
    return limit if group.horizon is None else min(limit, group.fork_tick + group.horizon)


def account_before(base: Any, info: Mapping[str, Any], config: RLAIFEnvConfig) -> EnvironmentState:
    """The agent's account before a tick's action: equity, PnL, open positions (from the text env's view of
    the same state when it has one: no array reductions), markets and cash; `info` is the last reset's or
    step's."""
    equity = info["equity"]
    view = getattr(base, "_view", None)
    if view is not None:
        positions = (sum(m.held_yes > 0 for m in view.markets) + sum(m.held_no > 0 for m in view.markets)
                     + sum(p.side is not None for p in view.perps))
        tick = view.tick
    else:
        state = base.state
        positions = int((state.hold_yes[0] > 0).sum() + (state.hold_no[0] > 0).sum() + (state.pos_side[0] != 0).sum())
        tick = int(state.tick[0])
    return EnvironmentState(agent_balance=equity, agent_pnl=equity - config.starting_cash, open_positions=positions,
                            active_markets=config.num_markets, cash=info["cash"], tick=tick)


def build_trajectory(*, trajectory_id: str, agent_id: str, window_id: str, env_seed: int, group_id: str | None,
                     group_index: int | None, steps: list[TrajectoryStep], failed_calls: list, errors: list[str],
                     status: str, wall_s: float, config: RLAIFEnvConfig, env_id: str,
                     reward_weights: Mapping[str, float], agent: dict[str, Any]) -> Trajectory:
    """The trajectory record of one played episode: totals, trade counts, final equity and quality.

    Shared by `RolloutCollector` and the original-API layer (`rlaif_gym.rollout_generator`), so
    both write the same record from the same steps. Final equity is the last step's pre-action
    equity plus its `pnl_delta` (the whole transition), or the starting cash before any step.
    """
    actions = [s.action for s in steps if s.action is not None]
    trades = [a for a in actions if a.action_type in TRADE_TYPES]
    last = steps[-1] if steps else None
    final_equity = (last.environment_state.agent_balance + last.feedback.pnl_delta) if last and last.feedback \
        else config.starting_cash
    traj = Trajectory(
        trajectory_id=trajectory_id, agent_id=agent_id, id=trajectory_id, window_id=window_id,
        scenario_id=f"seed-{env_seed}", episode_id=trajectory_id, group_id=group_id, group_index=group_index,
        start_time=None, end_time=None, duration_ms=int(1000 * wall_s), steps=steps,
        total_reward=math.fsum(s.reward for s in steps), final_pnl=final_equity - config.starting_cash,
        final_balance=final_equity, trades_executed=sum(a.success for a in trades),
        successful_trades=sum(a.success for a in trades), failed_trades=sum(not a.success for a in trades),
        posts_created=sum(a.success and a.action_type == "create_post" for a in actions),
        episode_length=len(steps), final_status=status, archetype=config.archetype, env_id=env_id, seed=env_seed,
        config=config.model_dump(mode="json"), package_version=_pkg_version, reward_weights=dict(reward_weights),
        agent=agent, errors=errors, failed_calls=failed_calls,
    )
    traj.quality = validate_trajectory(traj).to_dict()
    return traj


def _policy(agent: Any) -> Any:
    """What decides the actions of a run's agent (kind, model, sampling, decoding); transport settings aside."""
    if not isinstance(agent, dict):
        return agent
    return {k: agent.get(k) for k in ("name", "kind", "model", "sampling", "constrain", "grammar_limits")}


def _unplayed(traj: Trajectory, limit: int, forked: bool) -> int:
    """Ticks of the plan an episode that ended early will never play (0 for a fork branch: its share
    of the trunk is not known here, so the plan shrinks only for plain episodes)."""
    return 0 if forked else max(0, limit - len(traj.steps))
