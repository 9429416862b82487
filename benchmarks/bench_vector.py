"""RLAIF-v0 steps/s next to Gymnasium's CartPole, single env and vectorised, measured in one run.

    python benchmarks/bench_vector.py [--seconds 1] [--repeats 3] [--sizes 1 64 1024 16384]

Same as `rlaif-gym bench --no-text`. Ratios are computed against CartPole measured in the same run.
"""

from __future__ import annotations

import argparse

from rlaif_gym.benchmark import bench_vector, format_vector

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed window")
    parser.add_argument("--repeats", type=int, default=3, help="windows per cell (median reported)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1, 64, 1024, 16384])
    parser.add_argument("--backend", default="auto", choices=["auto", "numpy", "numba"], help="world-step backend")
    args = parser.parse_args()
    print(format_vector(bench_vector(tuple(args.sizes), args.seconds, args.repeats, backend=args.backend)))
