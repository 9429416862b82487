"""The time limit follows the config's num_ticks (issue 15, item 6): no registry cap at 168 ticks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlaif_gym

WAIT = np.array([0, 0, 0, 0])


def _episode_length(env: gym.Env, action) -> tuple[int, bool, bool]:
    env.reset(seed=0)
    t = 0
    while True:
        t += 1
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return t, terminated, truncated


@pytest.mark.parametrize("num_ticks", [170, 200])
def test_gym_make_runs_to_num_ticks_beyond_168(num_ticks):
    env = gym.make("RLAIF-v0", num_ticks=num_ticks)
    length, terminated, truncated = _episode_length(env, WAIT)
    assert (length, terminated, truncated) == (num_ticks, False, True)
    assert env.unwrapped._core.state.tick[0] == num_ticks


def test_gym_make_with_a_config_object_runs_to_num_ticks():
    env = gym.make("RLAIF-v0", config=rlaif_gym.RLAIFEnvConfig(num_ticks=175))
    assert _episode_length(env, WAIT)[0] == 175


def test_text_env_runs_to_num_ticks_beyond_168():
    env = gym.make("RLAIF-Text-v0", num_ticks=172)
    length, _, truncated = _episode_length(env, "wait")
    assert (length, truncated) == (172, True)


def test_explicit_max_episode_steps_still_cuts_short():
    env = gym.make("RLAIF-v0", num_ticks=300, max_episode_steps=20)
    assert _episode_length(env, WAIT)[:2] == (20, False)


@pytest.mark.parametrize("mode", ["sync", "async", "vector_entry_point"])
def test_make_vec_truncates_at_num_ticks_beyond_168(mode):
    n, ticks = 2, 171
    envs = gym.make_vec("RLAIF-v0", num_envs=n, vectorization_mode=mode, num_ticks=ticks)
    try:
        envs.reset(seed=1)
        for t in range(1, ticks + 1):
            _, _, terminated, truncated, _ = envs.step(np.zeros((n, 4), dtype=np.int64))
            if t < ticks:
                assert not truncated.any() and not terminated.any(), f"{mode} cut the episode at tick {t}"
        assert truncated.all(), f"{mode} did not truncate at num_ticks={ticks}"
    finally:
        envs.close()


def test_collector_plays_episodes_longer_than_168_ticks():
    from rlaif_gym.agents.llm import ScriptedLLMAgent
    from rlaif_gym.rollout import RolloutCollector

    collector = RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 170}, num_envs=1)
    collector.collect(episodes=1, seed=0)
    (traj,) = collector.trajectories
    assert traj.final_status == "completed"
    assert len(traj.steps) == 170
