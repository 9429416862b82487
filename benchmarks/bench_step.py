"""Steps per second of RLAIF-v0 next to Gymnasium's CartPole, measured side by side in one run.

    python benchmarks/bench_step.py [--seconds 2]

Rows: the single env through `gym.make` (wrappers included) with random actions, and the batched
core (the same code the single env runs) at several batch sizes, counted in world-steps per second.
Ratios are against CartPole-v1 through `gym.make` in the same process. Timings are medians of
`--repeats` timed windows of `--seconds` each.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import gymnasium as gym
import numpy as np

import rlaif_gym
from rlaif_gym.envs import RLAIFCore, seed_keys


def _rate(step_fn, steps_per_call: int, seconds: float) -> float:
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step_fn()
        n += steps_per_call
    return n / elapsed


def single_env_rate(env_id: str, seconds: float) -> float:
    env = gym.make(env_id)
    env.reset(seed=0)
    actions = [env.action_space.sample() for _ in range(1024)]
    i = 0

    def step():
        nonlocal i
        _, _, term, trunc, _ = env.step(actions[i % 1024])
        i += 1
        if term or trunc:
            env.reset()

    return _rate(step, 1, seconds)


def core_rate(num_worlds: int, seconds: float) -> float:
    core = RLAIFCore(rlaif_gym.RLAIFEnvConfig(), num_worlds=num_worlds)
    core.reset(seed_keys(range(num_worlds)))
    rng = np.random.default_rng(0)
    actions = rng.integers(0, core.nvec, size=(16, num_worlds, 4))
    i = 0

    def step():
        nonlocal i
        if core.state.tick[0] >= core.params.num_ticks:
            core.reset(seed_keys(range(num_worlds)))
        core.step(actions[i % 16])
        i += 1

    return _rate(step, num_worlds, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one timed window")
    parser.add_argument("--repeats", type=int, default=3, help="timed windows per row (median reported)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1, 64, 1024, 16384])
    args = parser.parse_args()

    def median(fn, *a):
        return statistics.median(fn(*a, args.seconds) for _ in range(args.repeats))

    cartpole = median(single_env_rate, "CartPole-v1")
    rows = [("CartPole-v1 via gym.make", cartpole), ("RLAIF-v0 via gym.make", median(single_env_rate, "RLAIF-v0"))]
    rows += [(f"RLAIF core, batch of {n}", median(core_rate, n)) for n in args.sizes]
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"numpy {np.__version__}, gymnasium {gym.__version__}")
    print("| what | steps/s | vs CartPole via gym.make |")
    print("|---|---:|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / cartpole:.3f}x |")


if __name__ == "__main__":
    main()
