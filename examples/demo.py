"""`make demo`: play one RLAIF-v0 episode with the informed baseline and show what happened.

No server, no API key: the agent is the observation-only heuristic. Prints the dashboard at a few
ticks, every trade with its feedback and reward components, and a summary against a random agent.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import rlaif_gym
from rlaif_gym.agents import InformedAgent, RandomAgent

KINDS = ("wait", "buy_prediction", "sell_prediction", "open_perp", "close_perp", "join_group")


def play(agent_cls, seed: int, verbose: bool) -> tuple[float, float, int]:
    env = gym.make("RLAIF-v0", render_mode="ansi")
    agent = agent_cls(env, seed=seed)
    obs, info = env.reset(seed=seed)
    total, trades, done = 0.0, 0, False
    while not done:
        action = agent.act(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        done = terminated or truncated
        if action[0] != 0:
            trades += 1
            if verbose and trades <= 12:
                fb = info["feedback"]
                status = "ok" if fb["success"] else f"failed: {fb['error']}"
                comps = ", ".join(f"{k}={v:+.3f}" for k, v in info["reward_components"].items())
                print(
                    f"tick {info['tick']:3d} {KINDS[action[0]]:<16} target={action[1]} size={action[2]} "
                    f"side={action[3]}  {status:<8} pnl_delta={info['pnl_delta']:+9.2f}  reward={reward:+.3f} ({comps})"
                )
        if verbose and info["tick"] in (1, 84):
            print(env.render())
            print()
    if verbose:
        print(env.render())
    return info["equity"], total, trades


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print("=== One RLAIF-v0 episode with InformedAgent (reads only its observation) ===\n")
    equity, ret, trades = play(InformedAgent, args.seed, verbose=True)
    r_equity, r_ret, r_trades = play(RandomAgent, args.seed, verbose=False)
    start = rlaif_gym.RLAIFEnvConfig().starting_cash
    print("\n=== Summary (same seed) ===")
    print(f"{'agent':<15}{'final equity':>14}{'PnL':>12}{'return':>10}{'actions':>9}")
    for name, eq, rt, n in (("InformedAgent", equity, ret, trades), ("RandomAgent", r_equity, r_ret, r_trades)):
        print(f"{name:<15}{eq:>14,.2f}{eq - start:>+12,.2f}{rt:>10.3f}{n:>9d}")
    print("\nBaseline table over 200 seeds: make baselines")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
