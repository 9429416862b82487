"""The native vector env's step alone: microseconds per world-tick at each N, nothing else running.

    python benchmarks/bench_native_step.py                  # N = 1, 64, 1024
    python benchmarks/bench_native_step.py --sizes 64 1024 --windows 7

For a before/after comparison of the world step: `rlaif-gym bench` also runs the async vector env, whose 64
worker processes lift the load of a 2-core machine to 4-6 while they run and blur the rows around them. Here
each N steps 64 fixed random actions in turn (after 20 untimed steps), in `--windows` timed windows of
max(200, 200,000 / N) steps; the median window is reported. Run it from each checkout with its own `PYTHONPATH`,
interleaving the rounds; the CPU model and load average are printed with the line.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
from machine import cpu_model, load_average

import rlaif_gym  # noqa: F401  (registers RLAIF-v0)


def us_per_world_tick(n: int, windows: int) -> float:
    env = gym.make_vec("RLAIF-v0", num_envs=n, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, env.single_action_space.nvec, size=(64, n, 4))
    for i in range(20):
        env.step(actions[i % 64])
    steps = max(200, 200_000 // n)
    times = []
    for _ in range(windows):
        start = time.perf_counter()
        for i in range(steps):
            env.step(actions[i % 64])
        times.append((time.perf_counter() - start) / steps / n * 1e6)
    env.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1024])
    parser.add_argument("--windows", type=int, default=5)
    args = parser.parse_args()
    cells = [f"N={n}: {us_per_world_tick(n, args.windows):.3f}" for n in args.sizes]
    print(f"CPU: {cpu_model()}; load average: {load_average()}; us per world-tick: " + " | ".join(cells))


if __name__ == "__main__":
    main()
