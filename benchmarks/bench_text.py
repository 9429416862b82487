"""Per-tick cost of the text face (prompt, parser, rule judge, reward, record), in microseconds.

    python benchmarks/bench_text.py [--ticks 40] [--number 50]

Same as `rlaif-gym bench --no-vector`. Measured on real states and scripted replies from one episode.
"""

from __future__ import annotations

import argparse

from rlaif_gym.benchmark import bench_text_overhead, format_text

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=40, help="distinct ticks sampled")
    parser.add_argument("--number", type=int, default=50, help="repetitions per tick")
    args = parser.parse_args()
    print(format_text(bench_text_overhead(args.ticks, args.number)))
