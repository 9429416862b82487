"""Action masks: microseconds per world for one `action_masks` call, per layout and batch size.

    python benchmarks/bench_masks.py                        # B = 1, 16, 256; 5 rounds; the median per cell
    python benchmarks/bench_masks.py --sizes 1 64 --rounds 3

The states are played, not fresh: a trade-heavy random policy runs 30 ticks first, so positions, holdings and
joined groups are there to check (a fresh world can only buy, open and join). The first call of each layout
compiles (or loads) the kernel and is not timed. To compare two commits, run this file from each checkout with
its own `PYTHONPATH`, rounds interleaved by the caller; the CPU model and load average are printed with the table.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from machine import cpu_model, load_average

from rlaif_gym import RLAIFEnvConfig, sim
from rlaif_gym.encoding import action_masks
from rlaif_gym.envs import RLAIFCore


def played_core(worlds: int) -> RLAIFCore:
    """`worlds` worlds after 30 ticks of a random policy that buys, opens and joins more than it waits."""
    core = RLAIFCore(RLAIFEnvConfig(), num_worlds=worlds)
    core.reset(sim.draw_keys(np.random.default_rng(0), worlds))
    rng = np.random.default_rng(1)
    for _ in range(30):
        acts = rng.integers(0, core.nvec, size=(worlds, 4))
        acts[:, 0] = rng.choice([1, 1, 2, 3, 4, 5], size=worlds)
        core.step(acts)
    return core


def per_world_us(core: RLAIFCore, layout: str, table: np.ndarray | None, calls: int) -> float:
    lev = core.config.numeric_perp_leverage
    action_masks(core.state, core.params, lev, table, layout)  # compile or load
    start = time.perf_counter()
    for _ in range(calls):
        action_masks(core.state, core.params, lev, table, layout)
    return (time.perf_counter() - start) / calls / core.num_worlds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; load average before: {load_average()}")
    table = np.array([(0, 0, 0, 0), (1, 0, 4, 1), (2, 1, 0, 0), (3, 0, 2, 1), (4, 0, 0, 0), (5, 0, 0, 0)])
    print("| B | dims µs/world | joint µs/world | table µs/world |")
    print("|---:|---:|---:|---:|")
    for b in args.sizes:
        core = played_core(b)
        calls = max(20, 4000 // b)
        cells = []
        for layout, rows in (("dims", None), ("joint", None), ("dims", table)):
            cells.append(statistics.median(per_world_us(core, layout, rows, calls) for _ in range(args.rounds)))
        print(f"| {b} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
