"""RLlib: env creators from plain dicts (strict), registered with Ray Tune; PPO trains on a local Ray.

One local Ray instance (2 CPUs, `conftest.local_ray`) serves the tests. The single-agent run samples in a remote
EnvRunner actor, which finds the env only through the Tune registry (not Gymnasium's).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.rllib")

from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.env.env_context import EnvContext  # noqa: E402

from rlaif_gym import ConfigError, RLAIFEnv  # noqa: E402
from rlaif_gym.integrations import rllib  # noqa: E402


@pytest.fixture
def registered(local_ray):
    rllib.register()


def test_env_creator_validates_plain_dicts_strictly():
    env = rllib.env_creator({"num_ticks": 12, "num_markets": 2})
    assert isinstance(env, RLAIFEnv) and env.config.num_ticks == 12 and env.observation_space.shape == (65 - 2 * 9,)
    ctx = EnvContext({"num_ticks": 9}, worker_index=3, num_workers=4)  # what RLlib passes
    assert rllib.env_creator(ctx).config.num_ticks == 9
    with pytest.raises(ConfigError, match="num_markets"):
        rllib.env_creator({"num_markts": 2})
    with pytest.raises(ConfigError, match="mapping"):
        rllib.env_creator(["num_ticks"])
    ma = rllib.multi_agent_env_creator({"num_agents": 3, "num_ticks": 4})
    obs, _ = ma.reset(seed=0)
    assert sorted(obs) == ["trader_0", "trader_1", "trader_2"]
    for _ in range(4):
        obs, _rewards, term, trunc, _infos = ma.step({a: np.zeros(4, np.int64) for a in ma.agents})
    assert trunc["__all__"] and not term["__all__"] and ma.agents == []


def _train(config, iterations=2):
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(iterations)]
    finally:
        algo.stop()
    return results


def test_ppo_trains_on_the_registered_env_from_a_dict(registered):
    config = (PPOConfig()
              .environment(rllib.ENV_NAME, env_config={"num_ticks": 16, "num_markets": 2})
              .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
              .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1)
              .debugging(seed=0))
    results = _train(config)
    runners = results[-1]["env_runners"]
    assert results[-1]["num_env_steps_sampled_lifetime"] >= 256
    assert runners["num_episodes_lifetime"] >= 256 // 16
    assert math.isfinite(runners["episode_return_mean"])
    assert "default_policy" in results[-1]["learners"]


def test_multi_agent_ppo_trains_with_a_shared_policy(registered):
    config = (PPOConfig()
              .environment(rllib.MULTI_AGENT_ENV_NAME, env_config={"num_agents": 2, "num_ticks": 16})
              .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, episode, **kw: "shared")
              .env_runners(num_env_runners=0)
              .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1)
              .debugging(seed=0))
    results = _train(config)
    assert results[-1]["num_env_steps_sampled_lifetime"] >= 256
    assert "shared" in results[-1]["learners"]
    assert results[-1]["env_runners"]["num_episodes_lifetime"] >= 2
