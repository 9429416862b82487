"""Side-by-side benchmarks: env steps/s against Gymnasium's CartPole, and the text face's per-tick cost.

Everything a table compares is measured in the same process and the same run, so ratios are
meaningful on a shared, noisy machine; absolute numbers are not asserted anywhere. Each cell runs
for a fixed time budget and reports the median of `repeats` windows.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import gymnasium as gym
import numpy as np

from . import sim
from .config import RLAIFEnvConfig
from .encoding.prompt import render_prompt
from .encoding.reply import parse_reply
from .encoding.view import build_view
from .envs import RLAIFCore, seed_keys
from .judge.rules import RuleJudge
from .llm import ScriptedLLM
from .trajectory import EnvironmentState, LLMCall, step_record

__all__ = [
    "VectorRow",
    "bench_text_overhead",
    "bench_vector",
    "cpu_model",
    "format_text",
    "format_vector",
    "load_average",
    "machine_line",
    "memory_per_env",
    "state_bytes_per_world",
]


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one, else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average(digits: int = 2) -> str:
    """The 1-, 5- and 15-minute load averages, or "n/a" where the platform has none."""
    return " ".join(f"{v:.{digits}f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def machine_line() -> str:
    """What the numbers were measured on."""
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"numpy {np.__version__}, gymnasium {gym.__version__}")


def _rate(step: Callable[[], None], per_call: int, seconds: float, repeats: int) -> float:
    """Median steps/s over `repeats` windows of `seconds` (at least one call per window)."""
    rates = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            step()
            n += per_call
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        rates.append(n / elapsed)
    return statistics.median(rates)


def _single_env_rate(env_id: str, seconds: float, repeats: int, **kwargs) -> float:
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    actions = [env.action_space.sample() for _ in range(256)]
    i = 0

    def step() -> None:
        nonlocal i
        _, _, term, trunc, _ = env.step(actions[i % 256])
        i += 1
        if term or trunc:
            env.reset()

    return _rate(step, 1, seconds, repeats)


def _vector_rate(env_id: str, mode: str, n: int, seconds: float, repeats: int, **kwargs) -> float:
    env = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode, **kwargs)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(8)]
        i = 0

        def step() -> None:
            nonlocal i
            env.step(actions[i % 8])
            i += 1

        return _rate(step, n, seconds, repeats)
    finally:
        env.close()


def state_bytes_per_world(n: int = 1024) -> float:
    """Bytes of world state per world (all arrays of a batch of `n`, divided by `n`)."""
    core = RLAIFCore(RLAIFEnvConfig(), num_worlds=n)
    core.reset(seed_keys(range(n)))
    return sum(getattr(core.state, f.name).nbytes for f in fields(core.state)) / n


def memory_per_env(sizes: tuple[int, ...] = (1024, 4096, 16384), backend: str = "numpy") -> dict[int, float]:
    """Peak bytes allocated per env by a native vector env of each size: make, reset, 4 steps.

    Measured with `tracemalloc` (numpy reports its buffers to it), so it counts everything the env
    allocates, temporaries of a step included, and not what the interpreter held before. Linear
    growth shows as the same figure at every size.
    """
    import tracemalloc

    def run(n: int):
        env = gym.make_vec("RLAIF-v0", num_envs=n, vectorization_mode="vector_entry_point", backend=backend)
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(4):
            env.step(env.action_space.sample())
        return env

    run(8).close()  # imports, caches and compiled kernels load here, outside the measurement
    per_env = {}
    for n in sizes:
        tracemalloc.start()
        try:
            env = run(n)
            _, peak = tracemalloc.get_traced_memory()
            env.close()
        finally:
            tracemalloc.stop()
        per_env[n] = peak / n
    return per_env


@dataclass
class VectorRow:
    """One row of the vector table: steps/s per mode (None where skipped) next to CartPole's."""

    num_envs: int
    native: float
    sync: float | None
    async_: float | None
    cartpole_native: float


def bench_vector(sizes=(1, 64, 1024, 16384), seconds: float = 1.0, repeats: int = 3, max_sync: int = 1024,
                 max_async: int = 64, backend: str = "auto") -> dict:
    """Single-env and vector-env steps/s of RLAIF-v0 next to CartPole, in one run.

    Sync mode is skipped above `max_sync` worlds and async above `max_async` (one process per
    world: on a 2-core machine thousands of processes measure the OS, not the env). `backend` is the
    RLAIF world-step backend ("auto", the default: numba when it imports; "numpy" or "numba").
    """
    kw = {"backend": backend}
    single_cartpole = _single_env_rate("CartPole-v1", seconds, repeats)
    single_rlaif = _single_env_rate("RLAIF-v0", seconds, repeats, **kw)
    rows = []
    for n in sizes:
        rows.append(VectorRow(
            num_envs=n,
            native=_vector_rate("RLAIF-v0", "vector_entry_point", n, seconds, repeats, **kw),
            sync=_vector_rate("RLAIF-v0", "sync", n, seconds, 1, **kw) if n <= max_sync else None,
            async_=_vector_rate("RLAIF-v0", "async", n, seconds, 1, **kw) if n <= max_async else None,
            cartpole_native=_vector_rate("CartPole-v1", "vector_entry_point", n, seconds, repeats),
        ))
    from .envs.core import compiled_backend

    ran = "numba" if compiled_backend(backend) else "numpy"
    return {"machine": f"{machine_line()}, backend {backend} ({ran})", "single_cartpole": single_cartpole,
            "single_rlaif": single_rlaif, "rows": rows, "bytes_per_world": state_bytes_per_world(),
            "memory_per_env": memory_per_env(tuple(n for n in sizes if n >= 1024) or (max(sizes),), backend)}


# The speed targets each row is read against (docs/benchmarks.md), printed beside the measurements.
SINGLE_TARGET = 0.5
"""Single env through gym.make: at least this fraction of CartPole-v1's steps/s."""
NATIVE_TARGETS = {1024: "≥ 0.05x CartPole", 16384: "≤ 1.2 us per world-tick"}
"""Native vector env targets by number of worlds."""
TEXT_TARGET_US = 200.0
"""Text-face overhead per tick (render + parse + judge + reward + record), microseconds."""


def format_vector(result: dict) -> str:
    """Markdown tables of `bench_vector`'s result: each row beside its reference (CartPole, measured in the
    same run) and the target it is read against."""
    sc, sr = result["single_cartpole"], result["single_rlaif"]
    lines = [f"machine: {result['machine']}", "",
             "| single env via gym.make | steps/s | vs CartPole | target |", "|---|---:|---:|---|",
             f"| CartPole-v1 (reference) | {sc:,.0f} | 1.000x | |",
             f"| RLAIF-v0 | {sr:,.0f} | {sr / sc:.3f}x | ≥ {SINGLE_TARGET}x CartPole |", "",
             "| N | RLAIF native | RLAIF sync | RLAIF async | CartPoleVectorEnv (reference) | native / CartPole "
             "| native / sync | native us per world-tick | target |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def cell(x):
        return f"{x:,.0f}" if x is not None else "skipped"

    for r in result["rows"]:
        vs_sync = f"{r.native / r.sync:,.1f}x" if r.sync else "-"
        lines.append(f"| {r.num_envs} | {r.native:,.0f} | {cell(r.sync)} | {cell(r.async_)} | "
                     f"{r.cartpole_native:,.0f} | {r.native / r.cartpole_native:.3f}x | {vs_sync} | "
                     f"{1e6 / r.native:.2f} | {NATIVE_TARGETS.get(r.num_envs, '')} |")
    lines += ["", f"state memory: {result['bytes_per_world']:,.0f} bytes per world (linear in N: every array has a "
              "leading world dimension)"]
    if result.get("memory_per_env"):
        cells = ", ".join(f"N={n}: {b:,.0f}" for n, b in result["memory_per_env"].items())
        lines.append(f"peak allocation of a native vector env (make, reset, 4 steps; tracemalloc), bytes per env: "
                     f"{cells}")
    return "\n".join(lines)


def bench_text_overhead(ticks: int = 40, number: int = 50) -> dict[str, float]:
    """Microseconds per tick of each text-face stage, on real states and scripted replies.

    `ticks` states are sampled evenly over one scripted episode.

    Stages: prompt rendering (view + text), reply parsing, the rule judge, the composite reward,
    and building plus serialising the step record as the collector and `JsonlStore` do (the call
    record, the step with its observation, action, feedback, reward components and judge scores, one
    JSON line). The world's own step is reported separately. Each stage is the median of 5 windows of
    `number // 5` passes over the `ticks` sampled ticks; every prompt is new to the judge, as in an
    episode (no stage caches on the prompt text).
    """
    env = gym.make("RLAIF-Text-v0").unwrapped
    prompt, info = env.reset(seed=0)
    llm = ScriptedLLM()
    judge = RuleJudge()
    samples = []
    # Ticks spread over a whole episode: late ticks have full news, post and tip feeds (longer
    # prompts, more names for the judge to check) and cost more than the first ones.
    every = max(1, env.params.num_ticks // ticks)
    for t in range(env.params.num_ticks):
        reply = llm.reply(prompt)
        view = env.view
        before = EnvironmentState(  # as the collector records the account before the tick
            agent_balance=info["equity"], agent_pnl=info["equity"] - env.config.starting_cash,
            open_positions=sum(m.held_yes > 0 for m in view.markets) + sum(m.held_no > 0 for m in view.markets)
            + sum(p.side is not None for p in view.perps), active_markets=env.config.num_markets, cash=info["cash"],
            tick=view.tick)
        sample = (env.state.copy(), view, prompt, reply, before, env.numeric_observation.tolist())
        next_prompt, reward, terminated, truncated, info = env.step(reply)
        if t % every == 0 and len(samples) < ticks:
            samples.append((*sample, t, reward, info))
        prompt = next_prompt
        if terminated or truncated:
            break
    params, reward_fn = env.params, env.reward_function
    comps = {k: np.array([0.1]) for k in ("pnl", "format", "reasoning", "risk")}
    no_bankruptcy = np.zeros(1, dtype=bool)
    system = env.system_prompt

    windows = 5
    per_window = max(1, number // windows)

    def per_tick(fn) -> float:
        """Median over `windows` timed windows of this thread's CPU time (time spent waiting for a core on a
        shared machine is not the stage's cost; a spike lands in one window, not all)."""
        totals = timeit.repeat(lambda: [fn(s) for s in samples], number=per_window, repeat=windows,
                               timer=time.thread_time)
        return 1e6 * statistics.median(totals) / (per_window * len(samples))

    parsed = [parse_reply(s[3]) for s in samples]

    def record(s) -> str:
        _, _, prompt, reply, before, numeric, t, reward, info = s
        call = LLMCall(call_id=f"bench-t{t}", model="m", system_prompt=system, user_prompt=prompt, messages=[],
                       temperature=0.7, max_tokens=512, top_p=None, seed=t, purpose="action", action_type=None,
                       latency_ms=50.0, response=reply, reasoning=None, finish_reason="stop", prompt_tokens=900,
                       completion_tokens=120, total_tokens=1020, prompt_token_ids=None, completion_token_ids=None,
                       completion_logprobs=None, attempts=1)
        return step_record(t, before, call, prompt, numeric, reward, info).to_json()  # as `JsonlStore` writes it

    index = {id(s): i for i, s in enumerate(samples)}
    stages = {
        "prompt rendering": per_tick(lambda s: render_prompt(build_view(s[0], params, 0), "ok")),
        "reply parsing": per_tick(lambda s: parse_reply(s[3])),
        "rule judge": per_tick(lambda s: judge.score(parsed[index[id(s)]], s[1], s[2])),
        "composite reward": per_tick(lambda s: reward_fn.combine(comps, no_bankruptcy)),
        "record build + serialise": per_tick(record),
    }
    batch = sim.ActionBatch.waits(1)
    from .envs.core import _select_backend

    world = _select_backend(env.config.backend)[0]  # the step the text env itself runs (compiled by default)

    own = {id(s): s[0].copy() for s in samples}  # stepped in place: a copy per call would time the copy

    def world_step(s) -> None:
        world(own[id(s)], batch, params)

    stages["(world step, for reference)"] = per_tick(world_step)
    return stages


def format_text(stages: dict[str, float], llm_ms: float = 50.0) -> str:
    """Markdown table of `bench_text_overhead`: each stage beside its references, the world's own step
    (measured in the same run) and a `llm_ms` LLM call, and its share of the `TEXT_TARGET_US` budget."""
    world = stages.get("(world step, for reference)")
    lines = ["| text-face stage | µs per tick | vs the world step | share of a "
             f"{llm_ms:.0f} ms LLM call | share of the {TEXT_TARGET_US:.0f} µs target |", "|---|---:|---:|---:|---:|"]

    def row(name: str, us: float, bold: bool = False) -> str:
        vs_world = f"{us / world:,.1f}x" if world else "-"
        cells = [f"{us:,.1f}", vs_world, f"{100 * us / (1000 * llm_ms):.2f}%", f"{100 * us / TEXT_TARGET_US:.0f}%"]
        if bold:
            cells = [f"**{c}**" for c in cells]
        return f"| {name} | " + " | ".join(cells) + " |"

    total = 0.0
    for name, us in stages.items():
        lines.append(row(name, us))
        if not name.startswith("("):
            total += us
    lines.append(row("**total text overhead**", total, bold=True))
    return "\n".join(lines)
