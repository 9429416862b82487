"""Time to first step: from a fresh `python` to the first `step` of each face, cold (empty kernel cache) and warm.

    python benchmarks/bench_first_step.py                  # cold once, then warm --repeats times, per face
    python benchmarks/bench_first_step.py --no-cold        # warm only (uses and fills the user's cache)

Each measurement is a new Python process (so the imports count, as they do for a user), timed at four points:
`import rlaif_gym` (with gymnasium), `gym.make`, `reset`, and the first `step`. Cold runs get an empty
`$RLAIF_GYM_CACHE` (a fresh install: the world kernels compile); the warm runs then reuse what the cold run
cached, as every later run on that machine does. The table gives the CPU model and the load average before
and after, because the cold figure is mostly compile time, which scales with free cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import cpu_model, load_average

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys, time
t0 = time.perf_counter()
import gymnasium as gym
import rlaif_gym
t1 = time.perf_counter()
face = sys.argv[1]
if face == "vector":
    env = gym.make_vec("RLAIF-v0", num_envs=64, vectorization_mode="vector_entry_point")
else:
    env = gym.make("RLAIF-v0" if face == "numeric" else "RLAIF-Text-v0")
t2 = time.perf_counter()
env.reset(seed=0)
t3 = time.perf_counter()
env.step('{"type": "wait"}' if face == "text" else env.action_space.sample())
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "make": t2 - t1, "reset": t3 - t2, "step": t4 - t3, "total": t4 - t0}))
"""

FACES = {"numeric": "RLAIF-v0", "text": "RLAIF-Text-v0", "vector": "RLAIF-v0, 64 native worlds"}


def measure(face: str, cache: Path | None) -> dict[str, float]:
    """One fresh process's timings (seconds); `cache` is its `$RLAIF_GYM_CACHE` (None: the user's)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if cache is not None:
        env.pop("NUMBA_CACHE_DIR", None)  # numba's own setting would win over the project's cache
        env["RLAIF_GYM_CACHE"] = str(cache)
    out = subprocess.run([sys.executable, "-c", PROBE, face], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faces", nargs="*", default=list(FACES), choices=list(FACES))
    parser.add_argument("--repeats", type=int, default=3, help="warm runs per face (median reported)")
    parser.add_argument("--no-cold", dest="cold", action="store_false", help="skip the cold runs")
    args = parser.parse_args()
    load_before = load_average(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlaif-first-step-") as tmp:
        for face in args.faces:
            cache = Path(tmp) / face if args.cold else None
            cold = measure(face, cache) if args.cold else None
            warm = [measure(face, cache) for _ in range(args.repeats)]
            med = {k: statistics.median(w[k] for w in warm) for k in warm[0]}
            rows.append((face, cold, med))
            print(f"{face}: cold {cold and round(cold['total'], 1)} s, warm {med['total']:.2f} s", file=sys.stderr)
    print(f"\nTime to first step, s (CPU: {cpu_model()}, {os.cpu_count()} cores; load average {load_before} before, "
          f"{load_average(1)} after; warm: median of {args.repeats} fresh processes)\n")
    print("| face | cold: total | warm: import | make | reset | first step | warm: total |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for face, cold, med in rows:
        cold_cell = f"{cold['total']:.1f}" if cold else "-"
        print(f"| {FACES[face]} | {cold_cell} | {med['import']:.2f} | {med['make']:.2f} | {med['reset']:.2f} | "
              f"{med['step']:.2f} | {med['total']:.2f} |")


if __name__ == "__main__":
    main()
