"""`rlaif-gym eval` on whole episodes: the model plays every tick of each held-out episode through the rollout
collector, and the baselines play the same seeds.

Per episode (a "point" of the scorecard; the interval is over episodes, one per seed):

* `pnl`: final equity minus the starting cash, USD (equity is what the holdings would fetch if sold now);
* `return`: the episode's summed reward (the text env's default reward);
* `format_valid`, `executed`: the shares of its ticks whose reply parsed without a format error, and whose action
  the world executed.

A failed call (after the client's retries) ends the model's episode there, and the collector records the episode
as failed: an outage, not the model's play. Such an episode is never scored: an eval with failed episodes writes no
scorecard and raises `FailedCallsError`, unless `allow_failed_calls=True` (the model is then scored on the episodes
it finished); `resume=True, retry_failed=True` plays the failed episodes again (the collector's `retry_failed`).

The baselines, each reading only what a policy of its kind may read:

* `wait`: the clean wait every tick;
* `teacher`: the scripted teacher (`ScriptedLLM`, greedy), every tick: the reply `--agent scripted` gives at
  temperature 0, so the scripted model's row is the teacher's;
* `informed` and `truth`: the decision sets' bets, made where the decision task makes them: when the market the
  feed names most resolves within `RESOLVES_WITHIN` ticks and is not held yet, 5 % of cash on the side of the
  evidence (informed) or of the drawn outcome (truth, the ceiling); a wait otherwise.

The model's episodes are stored as trajectories (`episodes/`, a `JsonlStore`): an interrupted eval resumes where
it stopped (`resume=True`), and the run is there to judge, report or export like any rollout.

Drives an `LLMAgent` with the rollout collector; plays the baselines on the text env.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..envs.decisions import WAIT_REPLY
from ..envs.text_env import RLAIFTextEnv, text_system_prompt
from ..errors import ConfigError
from ..llm.format_teacher import FormatOnlyLLM
from ..rollout import RolloutCollector
from ..storage import JsonlStore, holds_run_folder
from ..trajectory import Trajectory
from .baselines import BASELINES, BET_FRACTION, reply_at
from .runner import EvalResult, FailedCallsError, _finish, _prepare, first_call
from .scorecard import EPISODE_METRICS
from .sets import EpisodeSet

__all__ = ["RESOLVES_WITHIN", "episode_reply", "play_baseline", "run_episode_eval", "trajectory_metrics"]

RESOLVES_WITHIN = 4
"""The informed and truth baselines bet on a market only when it resolves within this many ticks (the decision
sets' filter), so their bets are paid at the drawn outcome inside the episode."""


def episode_reply(name: str, prompt: str, env: RLAIFTextEnv) -> str:
    """Baseline `name`'s reply at the tick `env` shows now (see the module docstring)."""
    if name in ("informed", "truth"):
        bet = FormatOnlyLLM(fraction=BET_FRACTION).bet(prompt)
        market = None if bet is None else env.view.market(bet[0])
        if market is None or market.resolves_in > RESOLVES_WITHIN or market.held_yes > 0 or market.held_no > 0:
            return WAIT_REPLY
    return reply_at(name, prompt, env)


def play_baseline(name: str, eset: EpisodeSet, *, trace: bool = False,
                  ) -> tuple[dict[int, dict[str, float]], list[list[Any]]]:
    """Baseline `name` on every episode of `eset`: (per episode, its metrics; with `trace`, per episode the digest
    material: each tick's prompt and the hidden outcome and p* of every open market)."""
    values: dict[int, dict[str, float]] = {}
    traces: list[list[Any]] = []
    env = RLAIFTextEnv(eset.config)
    for k, seed in enumerate(eset.seeds):
        prompt, info = env.reset(seed=seed)
        total, valid, executed, ticks, done, steps = 0.0, 0, 0, 0, False, []
        while not done:
            if trace:
                hidden = [[m.market_id, int(env.state.pm_outcome[0, m.slot]), float(env.state.pm_truth[0, m.slot])]
                          for m in env.view.markets]
                steps.append(hashlib.sha256(json.dumps([prompt, hidden]).encode()).hexdigest())
            prompt, reward, terminated, truncated, info = env.step(episode_reply(name, prompt, env))
            total += reward
            ticks += 1
            valid += not info["format_errors"]
            executed += info["parsed_action"] is not None and bool(info["feedback"]["success"])
            done = terminated or truncated
        values[k] = {"pnl": info["equity"] - eset.config.starting_cash, "return": total,
                     "format_valid": valid / ticks, "executed": executed / ticks}
        traces.append(steps)
    return values, traces


def trajectory_metrics(t: Trajectory) -> dict[str, float]:
    """The episode metrics of the model's recorded episode (in a failed one, its failed call counts as one more tick,
    invalid, not executed; the eval scores no failed episode)."""
    ticks = len(t.steps) + len(t.failed_calls)
    valid = sum(not s.format_errors for s in t.steps)
    executed = sum(s.action is not None and s.action.action_type != "invalid" and s.action.success for s in t.steps)
    return {"pnl": t.final_pnl, "return": math.fsum(s.reward for s in t.steps),
            "format_valid": valid / ticks if ticks else 0.0, "executed": executed / ticks if ticks else 0.0}


async def _preflight(agent: Any, eset: EpisodeSet) -> None:
    """One call on the first episode's first prompt, alone (`first_call`): a server that cannot be reached, fails it
    or never answers it stops the eval here."""
    env = RLAIFTextEnv(eset.config)
    prompt, _ = env.reset(seed=eset.first_seed)
    try:
        await first_call(agent, agent.act(text_system_prompt(eset.config), prompt,
                                          seed=0, call_id="preflight"))
    finally:
        await agent.aclose()


@holds_run_folder("out", "an eval")  # one writer per run folder, as run_decision_eval
def run_episode_eval(agent: Any, eset: EpisodeSet, out: Path | str, *, concurrency: int = 8,
                     resume: bool = False, overwrite: bool = False, command: Sequence[str] = (),
                     preflight: bool = True, describe: Mapping[str, Any] | None = None,
                     log: Callable[[str], None] | None = None, retry_failed: bool = False,
                     allow_failed_calls: bool = False) -> EvalResult:
    """Score `agent` on the whole episodes of `eset`, beside the baselines on the same seeds; the run folder is
    `run_decision_eval`'s, with the model's trajectories in `out/episodes` instead of replies.jsonl.

    Args: as `run_decision_eval`'s, less `samples` (one episode per seed) and `seed` (each call's sampling seed
    derives from its episode's seed and tick, as in every rollout). `retry_failed` plays the failed episodes again
    (their records move to `episodes/retried-failures.jsonl`); `allow_failed_calls` scores the model on the episodes
    it finished.

    Raises:
        ConfigError: as `run_decision_eval`.
        FailedCallsError: episodes failed and `allow_failed_calls` is off; they are kept, no scorecard written.
    """
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
    if retry_failed and not resume:
        raise ConfigError("--retry-failed plays the failed episodes of an eval being resumed again; pass --resume as "
                          "well (--resume --retry-failed)")
    say = log or (lambda line: None)
    out = Path(out)
    started = time.perf_counter()
    values = {"wait": play_baseline("wait", eset, trace=True)}
    described = eset.describe(values["wait"][1])
    say(f"set {eset.name}: {eset.episodes} episodes of {eset.config.num_ticks} ticks "
        f"({time.perf_counter() - started:.1f} s), digest {described['digest'][:19]}")
    model = dict(describe) if describe is not None else agent.describe()
    meta = {"set": described, "model": model, "sampling": model.get("sampling", {}), "samples": 1,
            "seed": "per call, from its episode's seed and tick"}
    store = JsonlStore(out / "episodes")
    _prepare(out, meta, resume, overwrite, started=(out / "episodes").exists() and bool(store.completed_ids()))
    store = JsonlStore(out / "episodes")  # (`_prepare` may have removed an old one)
    calls_started = time.perf_counter()
    if preflight:
        asyncio.run(_preflight(agent, eset))
    collector = RolloutCollector(agent, sink=store, env_config=eset.config, num_envs=concurrency, run_name="eval")
    summary = collector.collect(eset.episodes, eset.first_seed, resume=resume, retry_failed=retry_failed)
    calls_s = time.perf_counter() - calls_started
    say(f"model: {summary.completed} episodes played now, {summary.skipped_existing} already stored, "
        f"{summary.failed_calls} failed calls")
    by_seed = {t.seed: t for t in store.read()}
    missing = [s for s in eset.seeds if s not in by_seed]
    if missing:
        raise ConfigError(f"{out}/episodes lacks the episodes of seeds {missing[:5]}...; run again with --resume")
    trajectories = [by_seed[s] for s in eset.seeds]
    failed = [t for t in trajectories if t.final_status == "failed"]
    if failed and not allow_failed_calls:
        first = next((t.errors[0] for t in failed if t.errors), "")
        raise FailedCallsError(out, len(failed), len(trajectories), f"seed {failed[0].seed}: {first}",
                               where=f"{out}/episodes", unit="episodes", retried="it plays the failed episodes again")
    # A failed episode ended at an outage, not at the model's play: it is counted in `calls`, never scored.
    per_point = {"model": {k: trajectory_metrics(t) for k, t in enumerate(trajectories) if t.final_status != "failed"},
                 "wait": values["wait"][0]}
    for name in BASELINES:
        if name != "wait":
            per_point[name] = play_baseline(name, eset)[0]
    calls = [c for t in trajectories for c in (*(s.llm_calls[0] for s in t.steps if s.llm_calls), *t.failed_calls)]
    stats = {"calls": len(calls), "failed": sum(len(t.failed_calls) for t in trajectories),
             "retried_attempts": sum(max(0, (c.attempts or 1) - 1) for c in calls),
             "prompt_tokens": sum(c.prompt_tokens or 0 for c in calls),
             "completion_tokens": sum(c.completion_tokens or 0 for c in calls), "unanswered_points": len(failed)}
    latencies = [c.latency_ms / 1000.0 for c in calls if c.latency_ms is not None]
    card, markdown, timing = _finish(out, {name: per_point[name] for name in ("model", *BASELINES)}, list(eset.seeds),
                                     {**meta, "calls": stats}, command=command, metrics=EPISODE_METRICS,
                                     started=started, calls_s=calls_s, latencies=latencies)
    return EvalResult(card, markdown, timing, out)
