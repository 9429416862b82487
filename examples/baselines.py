"""Print the baseline table: mean ± std episode PnL of each baseline agent over many seeds.

    python examples/baselines.py --seeds 200

Every seed is one full `RLAIF-v0` episode (168 ticks). All seeds of one agent run as one batch on
the same core as the single env, so each row equals what `gym.make("RLAIF-v0")` gives seed by seed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.agents import InformedAgent, OracleAgent, PassiveAgent, RandomAgent
from rlaif_gym.envs import RLAIFCore, evaluate_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="number of seeds (episodes) per agent")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed .. first-seed+seeds-1")
    args = parser.parse_args()

    config = RLAIFEnvConfig()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    core = RLAIFCore(config, num_worlds=len(seeds))
    print(f"RLAIF-v0, {args.seeds} seeds x {config.num_ticks} ticks, starting cash ${config.starting_cash:,.0f}")
    print("| agent | mean PnL (USD) | std | 95% CI of mean | mean return | bankrupt |")
    print("|---|---:|---:|---:|---:|---:|")
    for agent_cls in (OracleAgent, InformedAgent, PassiveAgent, RandomAgent):
        start = time.perf_counter()
        stats = evaluate_policy(agent_cls(core, seed=0), seeds, config, core=core)
        pnl = stats.final_pnl
        half = 1.96 * pnl.std(ddof=1) / np.sqrt(len(pnl)) if len(pnl) > 1 else 0.0
        print(f"| {agent_cls.__name__} | {pnl.mean():,.1f} | {pnl.std(ddof=1) if len(pnl) > 1 else 0.0:,.1f} | "
              f"± {half:,.1f} | {stats.episode_return.mean():.3f} | {int(stats.bankrupt.sum())} |"
              f"  <!-- {time.perf_counter() - start:.1f}s -->")


if __name__ == "__main__":
    main()
