"""Soak: resident memory of a long collection, per 1,000 trajectories written (not a timed test).

    python benchmarks/bench_soak.py [--trajectories 20000] [--k 64] [--ticks 3] [--agent http|scripted]
                                    [--every 1000] [--tracemalloc] [--smoke]

A collection writes `--trajectories` short episodes (`num_ticks=--ticks`) to a `JsonlStore` in a
temporary directory with `K` episodes and K LLM calls in flight. With `--agent http` (the default)
the policy is `OpenAIChatAgent` against an OpenAI-compatible server on 127.0.0.1 that answers at
once like the offline scripted model; the server runs in a *child process*, so the RSS measured is
the collector's alone. `--agent scripted` uses the in-process `ScriptedLLMAgent`.

Every `--every` trajectories (from the collector's `on_trajectory` hook) the script samples this
process's resident set size (`/proc/self/statm`), open file descriptors and, with `--tracemalloc`,
the Python heap. It prints the samples and the growth per 1,000 trajectories over the second half
of the run (a least-squares slope, after the warm-up: first-connection buffers, caches filling).
Bounded memory means that slope stays near zero however long the run is; a leak of one object per
trajectory shows as a slope of its size. The numbers depend on the allocator and the machine.

`--smoke` (for CI) writes 300 trajectories and checks only that the table is produced.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import rlaif_gym
from rlaif_gym.agents.llm import OpenAIChatAgent, ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    """This process's resident set size, MB (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE / 1e6


def open_fds() -> int:
    """Open file descriptors of this process (sockets included)."""
    return len(os.listdir("/proc/self/fd"))


def serve(port_file: str) -> None:
    """Child process: the benchmark's OpenAI-compatible server with no latency, until killed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_collector import LatencyServer

    with LatencyServer(latency_s=0.0, jitter_s=0.0) as server:
        Path(port_file).write_text(server.base_url)
        while True:
            time.sleep(3600)


def slope_kb_per_1000(samples: list[tuple[int, float]]) -> float:
    """Least-squares slope of RSS (MB) against trajectories over the second half, as KB per 1,000."""
    half = samples[len(samples) // 2:]
    if len(half) < 2:
        return float("nan")
    n = len(half)
    mx = sum(x for x, _ in half) / n
    my = sum(y for _, y in half) / n
    sxx = sum((x - mx) ** 2 for x, _ in half)
    sxy = sum((x - mx) * (y - my) for x, y in half)
    return (sxy / sxx) * 1e3 * 1e3 if sxx else float("nan")  # MB per trajectory -> KB per 1,000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=20_000, help="trajectories to write")
    parser.add_argument("--k", type=int, default=64, help="episodes (and LLM calls) in flight")
    parser.add_argument("--ticks", type=int, default=3, help="ticks per episode (num_ticks)")
    parser.add_argument("--agent", choices=["http", "scripted"], default="http")
    parser.add_argument("--every", type=int, default=1000, help="sample every this many trajectories")
    parser.add_argument("--tracemalloc", action="store_true", help="also sample the Python heap (slower)")
    parser.add_argument("--smoke", action="store_true", help="300 trajectories, every 50 (numbers mean nothing)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    if args.smoke:
        args.trajectories, args.every, args.k = 300, 50, 16
    for name in ("trajectories", "k", "ticks", "every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")

    server = None
    with tempfile.TemporaryDirectory(prefix="rlaif-soak-") as tmp:
        if args.agent == "http":
            port_file = Path(tmp) / "url"
            server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file)])
            deadline = time.monotonic() + 30
            while not port_file.exists() or not port_file.read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the loopback server did not start")
                time.sleep(0.05)
            agent = OpenAIChatAgent(model="soak", base_url=port_file.read_text(), api_key="sk-soak",
                                    logprobs=False, timeout=30.0)
        else:
            agent = ScriptedLLMAgent()
        try:
            if args.tracemalloc:
                tracemalloc.start()
            samples: list[tuple[int, float, int, float]] = []
            written = 0
            start = time.perf_counter()

            def sample(_traj: object) -> None:
                nonlocal written
                written += 1
                if written % args.every == 0:
                    gc.collect()
                    heap = tracemalloc.get_traced_memory()[0] / 1e6 if args.tracemalloc else float("nan")
                    samples.append((written, rss_mb(), open_fds(), heap))

            store = JsonlStore(Path(tmp) / "run")
            collector = RolloutCollector(agent, sink=store, env_config={"num_ticks": args.ticks}, num_envs=args.k,
                                         max_concurrent_calls=args.k, run_name="soak", on_trajectory=sample)
            summary = collector.collect(args.trajectories, seed=0)
            wall = time.perf_counter() - start
        finally:
            if server is not None:
                server.kill()
                server.wait()

    print(f"rlaif_gym {rlaif_gym.__version__} | python {platform.python_version()} | {platform.machine()} | "
          f"agent {args.agent} | K={args.k} | {args.ticks} ticks/episode | {wall:.0f} s")
    print(f"completed {summary.completed}, failed {summary.failed}, {summary.steps} ticks\n")
    print("| trajectories | RSS MB | open fds | Python heap MB |")
    print("|---:|---:|---:|---:|")
    for n, rss, fds, heap in samples:
        print(f"| {n} | {rss:.1f} | {fds} | {heap:.1f} |")
    rss_slope = slope_kb_per_1000([(n, r) for n, r, _, _ in samples])
    line = f"\nRSS growth over the second half: {rss_slope:+.0f} KB per 1,000 trajectories"
    if args.tracemalloc:
        heap_slope = slope_kb_per_1000([(n, h) for n, _, _, h in samples])
        line += f"; Python heap {heap_slope:+.0f} KB per 1,000"
    print(line)
    return 0 if summary.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
