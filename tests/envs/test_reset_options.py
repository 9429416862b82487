"""`reset(options=...)` is never silently ignored (issue 16, item 10): None and {} are accepted, anything
else raises `ConfigError` naming the keys, on every Gymnasium face. (The PettingZoo face must accept any
options by PettingZoo's API contract, and documents that it ignores them.)"""

from __future__ import annotations

import gymnasium as gym
import pytest

import rlaif_gym  # noqa: F401  (registers the env ids)
from rlaif_gym import ConfigError


def _faces():
    yield "numeric", gym.make("RLAIF-v0").unwrapped
    yield "text", gym.make("RLAIF-Text-v0").unwrapped
    yield "vector", gym.make_vec("RLAIF-v0", num_envs=2, vectorization_mode="vector_entry_point")


@pytest.mark.parametrize("face", ["numeric", "text", "vector"])
def test_reset_refuses_options_it_would_ignore(face):
    env = dict(_faces())[face]
    env.reset(seed=0, options=None)
    env.reset(seed=0, options={})
    with pytest.raises(ConfigError, match=r"num_markets.*takes no options|takes no options.*num_markets"):
        env.reset(seed=0, options={"num_markets": 6})


def test_sync_vector_env_passes_no_options_and_still_works():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("RLAIF-v0")] * 2)
    obs, _ = envs.reset(seed=1)
    assert obs.shape[0] == 2
