"""Train Stable-Baselines3 PPO on RLAIF-v0 and compare it with the baselines on two held-out seed sets.

    python examples/train_sb3_ppo.py                      # default world, compact Discrete table, 1.2M steps
    python examples/train_sb3_ppo.py --actions joint      # default world, the env's own MultiDiscrete space
    python examples/train_sb3_ppo.py --actions joint --masks    # the same with MaskablePPO and exact action masks
    python examples/train_sb3_ppo.py --preset easy --gamma 0.95 --total-timesteps 100000   # about a minute

One file, top to bottom (CleanRL style): typed arguments, the vectorised env, PPO with a callback
that logs every reward component and trading metric (stdout, CSV and TensorBoard under
`--log-dir`), then one episode per held-out seed for PPO, InformedAgent, PassiveAgent and
RandomAgent on the same worlds, printed as a Markdown table with PPO's margin over each, for each
of two disjoint held-out seed sets. Wall time, CPU time and the machine's load average are printed
and written to the summary (docs/training.md has the measured results).

Training worlds use seeds `seed + i` and their generators' later draws; evaluation uses the seeds
from each `--eval-first-seeds` entry (1,000,000 and 2,000,000 by default), which training never
resets to.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import tyro
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecMonitor

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.envs import RLAIFCore, evaluate_policy, world_params
from rlaif_gym.integrations.sb3 import (
    COMPACT_ACTIONS,
    EASY_CONFIG,
    JointActionPolicy,
    RLAIFMetricsCallback,
    RLAIFSB3VecEnv,
    SB3BatchPolicy,
    comparison_table,
    discrete_action_table,
    evaluate_against_baselines,
)


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`, underscores as dashes; `--help` shows these docstrings)."""

    preset: Literal["default", "easy"] = "default"
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
    actions: Literal["compact", "all", "joint", "multidiscrete"] = "compact"
    """Action set: "compact" (Discrete over COMPACT_ACTIONS: 5%-of-equity buys, sell-all, no perps), "all"
    (Discrete over every distinct action), "joint" (the env's own MultiDiscrete([6, T, 5, 2]) with
    JointActionPolicy: what to do, then a size per kind) or "multidiscrete" (the env's own space with SB3's four
    independent heads, which learns nothing here; kept for comparison)."""
    masks: bool = False
    """Train sb3-contrib's MaskablePPO with the env's action masks instead of PPO (exact masks for "joint" and the
    Discrete tables, per-dimension ones for "multidiscrete")."""
    eval_episodes: int = 100
    """Held-out seeds (one episode each) per agent and seed set."""
    deterministic: bool = False
    """Evaluate the argmax of the policy instead of the policy PPO trained (sampled actions, seeded by --seed).
    Both rows are printed; the sampled policy is the one the table's margins refer to by default."""
    eval_first_seeds: list[int] = field(default_factory=lambda: [1_000_000, 2_000_000])
    """First seed of each held-out set (sets of --eval-episodes seeds; keep them disjoint)."""
    log_dir: str = "runs/sb3_ppo"
    """Where the CSV and TensorBoard logs (and model.zip, summary.json) go."""
    torch_threads: int = 1
    """torch CPU threads (1 keeps small MLPs fast and leaves cores to others)."""
    summary_json: str = ""
    """Also write the evaluation summary to this path (default: <log_dir>/summary.json)."""


def parse_args() -> Args:
    """The command line as `Args` (tyro: each field a `--flag`, its docstring the help, with its default)."""
    return tyro.cli(Args, description=__doc__.splitlines()[0])


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.torch_threads)
    if args.preset not in ("default", "easy"):
        raise SystemExit(f"--preset must be 'default' or 'easy', got {args.preset!r}")
    if args.actions not in ("compact", "all", "joint", "multidiscrete"):
        raise SystemExit(f"--actions must be compact, all, joint or multidiscrete, got {args.actions!r}")
    firsts = sorted(args.eval_first_seeds)
    if any(b < a + args.eval_episodes for a, b in itertools.pairwise(firsts)):
        raise SystemExit(f"--eval-first-seeds {firsts} overlap with {args.eval_episodes} episodes each")
    base = EASY_CONFIG if args.preset == "easy" else {}
    config = RLAIFEnvConfig(**{**base, **json.loads(args.config or "{}")})
    params = world_params(config)
    table = {"compact": discrete_action_table(params, **COMPACT_ACTIONS), "all": discrete_action_table(params)}.get(
        args.actions)
    mode = "multidiscrete" if table is None else "discrete"
    joint = args.actions == "joint"

    # -- env: one batched core, SB3 autoreset, VecMonitor for ep_rew_mean ---------------------
    env = VecMonitor(RLAIFSB3VecEnv(args.num_envs, config, seed=args.seed, action_mode=mode, action_table=table,
                                    mask_layout="joint" if joint else "dims"))

    # -- PPO (or MaskablePPO) with the metrics callback ---------------------------------------
    policy_kwargs = {"net_arch": args.net_arch}
    algo, policy, extra = PPO, "MlpPolicy", {}
    if joint:  # the env's own actions, chosen as "what" (kind, target, side) then "how much" (size)
        policy, policy_kwargs["action_table"] = JointActionPolicy, discrete_action_table(params)
    if args.masks:
        from sb3_contrib import MaskablePPO

        algo = MaskablePPO
        if joint:
            from rlaif_gym.integrations.sb3 import JointMaskRolloutBuffer, MaskableJointActionPolicy

            policy, extra = MaskableJointActionPolicy, {"rollout_buffer_class": JointMaskRolloutBuffer}
    log_dir = Path(args.log_dir)
    model = algo(policy, env, n_steps=args.n_steps, batch_size=args.batch_size, n_epochs=args.n_epochs,
                 learning_rate=args.learning_rate, gamma=args.gamma, gae_lambda=args.gae_lambda,
                 ent_coef=args.ent_coef, policy_kwargs=policy_kwargs, seed=args.seed, device="cpu", **extra)
    model.set_logger(configure(str(log_dir), ["stdout", "csv", "tensorboard"]))
    load_before = os.getloadavg()
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=args.total_timesteps, callback=RLAIFMetricsCallback())
    train_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    load_after = os.getloadavg()
    model.save(log_dir / "model.zip")
    print(f"\ntrained {model.num_timesteps:,} steps in {train_s:.1f} s ({model.num_timesteps / train_s:,.0f} steps/s; "
          f"{cpu_s:.0f} s of CPU; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, "
          f"{os.cpu_count()} cores); logs in {log_dir}/ (progress.csv, TensorBoard)")

    # -- evaluation on held-out seeds ---------------------------------------------------------
    # PPO optimised a stochastic policy; its sampled actions are what it learned (the argmax alone piles
    # into the most likely action and earns less here), so the margins refer to the sampled policy
    # unless --deterministic. Sampling is seeded: the tables are reproducible.
    label, other = ("PPO (argmax)", "PPO (sampled)") if args.deterministic else ("PPO (sampled)", "PPO (argmax)")
    summary = {"preset": args.preset, "actions": args.actions, "masks": args.masks, "policy": label,
               "timesteps": int(model.num_timesteps), "train_seconds": train_s, "cpu_seconds": cpu_s,
               "load_average": {"before": list(load_before), "after": list(load_after)}, "cpus": os.cpu_count(),
               "sets": {}}
    for first in args.eval_first_seeds:
        seeds = range(first, first + args.eval_episodes)
        torch.manual_seed(args.seed)
        results = evaluate_against_baselines(model, seeds, config, name=label, action_table=table,
                                             deterministic=args.deterministic)
        results[other] = evaluate_policy(SB3BatchPolicy(model, not args.deterministic, table, config), list(seeds),
                                         config, core=RLAIFCore(config, num_worlds=len(seeds)))
        print(f"\nRLAIF-v0 ({args.preset} world, --actions {args.actions}{' --masks' if args.masks else ''}), "
              f"{args.eval_episodes} held-out seeds from {first:,}, {config.num_ticks} ticks each, starting cash "
              f"${config.starting_cash:,.0f}:\n")
        print(comparison_table(results, reference=label))
        ppo = results[label].final_pnl
        out = {"seeds": [seeds.start, seeds.stop], "mean_pnl": {}, "margin": {}}
        for name, stats in results.items():
            out["mean_pnl"][name] = float(stats.final_pnl.mean())
            diff = ppo - stats.final_pnl
            half = 1.96 * float(diff.std(ddof=1)) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
            out["margin"][name] = {"mean": float(diff.mean()), "ci95_low": float(diff.mean()) - half,
                                   "ci95_high": float(diff.mean()) + half}
        for name in ("InformedAgent", "RandomAgent", "PassiveAgent"):
            m = out["margin"][name]
            print(f"{label} margin over {name}: {m['mean']:+,.1f} USD per episode (paired 95% CI "
                  f"{m['ci95_low']:+,.1f} .. {m['ci95_high']:+,.1f})")
        summary["sets"][str(first)] = out
    path = Path(args.summary_json) if args.summary_json else log_dir / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
