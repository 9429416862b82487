"""Train RLlib PPO (new API stack) on RLAIF-v0, or on the multi-agent world with one shared policy.

    python examples/train_rllib_ppo.py --iterations 10
    python examples/train_rllib_ppo.py --multi-agent --num-agents 3 --iterations 10
    python examples/train_rllib_ppo.py --address auto          # on a running Ray cluster

The env is built in each EnvRunner by the creator registered with `ray.tune.register_env`, from a
plain `env_config` dict that `RLAIFEnvConfig` validates (a misspelled key fails at build time).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import ray
import tyro
from ray.rllib.algorithms.ppo import PPOConfig

from rlaif_gym.integrations import rllib


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`, underscores as dashes; `--help` shows these docstrings)."""

    iterations: int = 5
    """PPO training iterations."""
    env_config: str = '{"num_ticks": 48}'
    """JSON of RLAIFEnvConfig fields (plus "num_agents" for --multi-agent)."""
    multi_agent: bool = False
    """Train one shared policy for every trader of RLAIF-MultiAgent-v0."""
    num_agents: int = 2
    """Traders in the multi-agent world."""
    num_env_runners: int = 1
    """Remote EnvRunner actors (0 samples in the driver)."""
    train_batch_size: int = 2048
    """Env steps per training iteration."""
    minibatch_size: int = 256
    """SGD minibatch size."""
    num_epochs: int = 5
    """SGD epochs per iteration."""
    lr: float = 3e-4
    """Learning rate."""
    gamma: float = 0.99
    """Discount per tick."""
    seed: int = 0
    """RLlib seed."""
    address: str = ""
    """Ray address: "" starts a local instance, "auto" joins a running cluster."""
    num_cpus: int = 2
    """CPUs of a local Ray instance."""


def parse_args() -> Args:
    """The command line as `Args` (tyro: each field a `--flag`, its docstring the help, with its default)."""
    return tyro.cli(Args, description=__doc__.splitlines()[0])


def main() -> None:
    args = parse_args()
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False)
    rllib.register()
    env_config = json.loads(args.env_config)
    config = PPOConfig()
    if args.multi_agent:
        env_config["num_agents"] = args.num_agents
        config = (config.environment(rllib.MULTI_AGENT_ENV_NAME, env_config=env_config)
                  .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, episode, **kw: "shared"))
    else:
        config = config.environment(rllib.ENV_NAME, env_config=env_config)
    config = (config.env_runners(num_env_runners=args.num_env_runners)
              .training(train_batch_size_per_learner=args.train_batch_size, minibatch_size=args.minibatch_size,
                        num_epochs=args.num_epochs, lr=args.lr, gamma=args.gamma)
              .debugging(seed=args.seed))
    algo = config.build_algo()
    start = time.perf_counter()
    try:
        for i in range(args.iterations):
            result = algo.train()
            runners = result["env_runners"]
            print(f"iteration {i + 1}: env steps {result['num_env_steps_sampled_lifetime']:,}, "
                  f"episodes {runners.get('num_episodes_lifetime', 0):,.0f}, "
                  f"mean episode return {runners.get('episode_return_mean', float('nan')):+.3f} "
                  f"({time.perf_counter() - start:.0f} s)")
    finally:
        algo.stop()
        ray.shutdown()


if __name__ == "__main__":
    main()
