"""Train Stable-Baselines3 PPO on RLAIF-v0 and compare it with the baselines on held-out seeds.

    python examples/train_sb3_ppo.py                    # default world, 1.2M steps (~4 min on one core)
    python examples/train_sb3_ppo.py --preset easy --gamma 0.95 --total-timesteps 100000   # about a minute

One file, top to bottom (CleanRL style): typed arguments, the vectorised env, PPO with a callback
that logs every reward component and trading metric (stdout, CSV and TensorBoard under
`--log-dir`), then one episode per held-out seed for PPO, InformedAgent, PassiveAgent and
RandomAgent on the same worlds, printed as a Markdown table with PPO's margin over each.

Training worlds use seeds `seed + i` and their generators' later draws; evaluation uses seeds from
`--eval-first-seed` (1,000,000 by default), which training never resets to.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecMonitor

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.envs import RLAIFCore, evaluate_policy, world_params
from rlaif_gym.integrations.sb3 import (
    COMPACT_ACTIONS,
    EASY_CONFIG,
    RLAIFMetricsCallback,
    RLAIFSB3VecEnv,
    SB3BatchPolicy,
    comparison_table,
    discrete_action_table,
    evaluate_against_baselines,
)


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`; underscores become dashes)."""

    preset: str = "default"
    """World: "default" (plain `RLAIFEnvConfig()`, no overrides: each step's reward is the PnL change over starting
    cash, unclipped, so the return telescopes to final PnL / starting cash, plus a small risk penalty) or "easy"
    (`EASY_CONFIG` of rlaif_gym.integrations.sb3)."""
    config: str = ""
    """JSON of further RLAIFEnvConfig overrides, e.g. '{"num_ticks": 96}'."""
    seed: int = 0
    """Seed of PPO and of the training worlds (world i starts from seed + i)."""
    total_timesteps: int = 1_200_000
    """Environment steps to train for (all worlds together)."""
    num_envs: int = 16
    """Worlds stepped as one batch."""
    n_steps: int = 256
    """Steps per world per PPO rollout (rollout = num_envs x n_steps)."""
    batch_size: int = 512
    """PPO minibatch size."""
    n_epochs: int = 5
    """PPO epochs per rollout."""
    learning_rate: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount per tick (0.99 for 168-tick episodes; 0.95 suits the 48-tick easy world)."""
    gae_lambda: float = 0.9
    """GAE lambda."""
    ent_coef: float = 0.01
    """Entropy bonus."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the policy and value MLPs."""
    actions: str = "compact"
    """Action set: "compact" (Discrete over COMPACT_ACTIONS: 5%-of-equity buys, sell-all, no perps), "all"
    (Discrete over every distinct action) or "multidiscrete" (the env's own MultiDiscrete([6, T, 5, 2]))."""
    eval_episodes: int = 100
    """Held-out seeds (one episode each) per agent."""
    deterministic: bool = False
    """Evaluate the argmax of the policy instead of the policy PPO trained (sampled actions, seeded by --seed).
    Both rows are printed; the sampled policy is the one the table's margins refer to by default."""
    eval_first_seed: int = 1_000_000
    """First held-out seed."""
    log_dir: str = "runs/sb3_ppo"
    """Where the CSV and TensorBoard logs (and model.zip, summary.json) go."""
    torch_threads: int = 1
    """torch CPU threads (1 keeps small MLPs fast and leaves cores to others)."""
    summary_json: str = ""
    """Also write the evaluation summary to this path (default: <log_dir>/summary.json)."""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind = type(default)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(default, list):
            parser.add_argument(flag, type=int, nargs="+", default=default)
        elif isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        else:
            parser.add_argument(flag, type=kind, default=default)
    return Args(**vars(parser.parse_args()))


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.torch_threads)
    if args.preset not in ("default", "easy"):
        raise SystemExit(f"--preset must be 'default' or 'easy', got {args.preset!r}")
    base = EASY_CONFIG if args.preset == "easy" else {}
    config = RLAIFEnvConfig(**{**base, **json.loads(args.config or "{}")})
    params = world_params(config)
    table = {"compact": discrete_action_table(params, **COMPACT_ACTIONS), "all": discrete_action_table(params),
             "multidiscrete": None}[args.actions]
    mode = "multidiscrete" if table is None else "discrete"

    # -- env: one batched core, SB3 autoreset, VecMonitor for ep_rew_mean ---------------------
    env = VecMonitor(RLAIFSB3VecEnv(args.num_envs, config, seed=args.seed, action_mode=mode, action_table=table))

    # -- PPO with the metrics callback ------------------------------------------------------
    log_dir = Path(args.log_dir)
    model = PPO("MlpPolicy", env, n_steps=args.n_steps, batch_size=args.batch_size, n_epochs=args.n_epochs,
                learning_rate=args.learning_rate, gamma=args.gamma, gae_lambda=args.gae_lambda,
                ent_coef=args.ent_coef, policy_kwargs={"net_arch": args.net_arch}, seed=args.seed, device="cpu")
    model.set_logger(configure(str(log_dir), ["stdout", "csv", "tensorboard"]))
    start = time.perf_counter()
    model.learn(total_timesteps=args.total_timesteps, callback=RLAIFMetricsCallback())
    train_s = time.perf_counter() - start
    model.save(log_dir / "model.zip")
    print(f"\ntrained {model.num_timesteps:,} steps in {train_s:.1f} s "
          f"({model.num_timesteps / train_s:,.0f} steps/s); logs in {log_dir}/ (progress.csv, TensorBoard)")

    # -- evaluation on held-out seeds ---------------------------------------------------------
    # PPO optimised a stochastic policy; its sampled actions are what it learned (the argmax alone piles
    # into the most likely action and earns less here), so the margins refer to the sampled policy
    # unless --deterministic. Sampling is seeded: the table is reproducible.
    seeds = range(args.eval_first_seed, args.eval_first_seed + args.eval_episodes)
    torch.manual_seed(args.seed)
    label, other = ("PPO (argmax)", "PPO (sampled)") if args.deterministic else ("PPO (sampled)", "PPO (argmax)")
    results = evaluate_against_baselines(model, seeds, config, name=label, action_table=table,
                                         deterministic=args.deterministic)
    cfg_core = RLAIFCore(config, num_worlds=len(seeds))
    results[other] = evaluate_policy(SB3BatchPolicy(model, not args.deterministic, table), list(seeds), config,
                                     core=cfg_core)
    print(f"\nRLAIF-v0 ({args.preset} world), {args.eval_episodes} held-out seeds from {args.eval_first_seed}, "
          f"{config.num_ticks} ticks each, starting cash ${config.starting_cash:,.0f}:\n")
    print(comparison_table(results, reference=label))

    ppo = results[label].final_pnl
    summary = {"preset": args.preset, "policy": label, "timesteps": int(model.num_timesteps), "train_seconds": train_s,
               "eval_seeds": [seeds.start, seeds.stop], "mean_pnl": {}, "margin": {}}
    for name, stats in results.items():
        summary["mean_pnl"][name] = float(stats.final_pnl.mean())
        diff = ppo - stats.final_pnl
        half = 1.96 * float(diff.std(ddof=1)) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
        summary["margin"][name] = {"mean": float(diff.mean()), "ci95_low": float(diff.mean()) - half,
                                   "ci95_high": float(diff.mean()) + half}
    for name in ("InformedAgent", "RandomAgent", "PassiveAgent"):
        m = summary["margin"][name]
        print(f"{label} margin over {name}: {m['mean']:+,.1f} USD per episode (paired 95% CI "
              f"{m['ci95_low']:+,.1f} .. {m['ci95_high']:+,.1f})")
    out = Path(args.summary_json) if args.summary_json else log_dir / "summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
