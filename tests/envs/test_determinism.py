"""Same seed and same actions give the same episode; the env pickles; no look-ahead in observations."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

from rlaif_gym.agents import InformedAgent, RandomAgent
from rlaif_gym.envs import RLAIFCore, evaluate_policy
from rlaif_gym.sim import GROUND_TRUTH_FIELDS


def _rollout(env, seed, actions):
    obs, info = env.reset(seed=seed)
    trace = [(obs, 0.0, False, False, info)]
    for a in actions:
        out = env.step(a)
        trace.append(out)
        if out[2] or out[3]:
            break
    return trace


def test_same_seed_and_actions_give_an_identical_episode():
    actions = np.random.default_rng(0).integers(0, [6, 4, 5, 2], size=(168, 4))
    a = _rollout(gym.make("RLAIF-v0"), 11, actions)
    b = _rollout(gym.make("RLAIF-v0"), 11, actions)
    assert len(a) == len(b) == 169
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        assert np.array_equal(x[0], y[0]), f"observation differs at step {t}"
        assert x[1:4] == y[1:4], f"reward/flags differ at step {t}"
        assert x[4] == y[4], f"info differs at step {t}"


def test_different_seeds_give_different_worlds():
    a, _ = gym.make("RLAIF-v0").reset(seed=1)
    b, _ = gym.make("RLAIF-v0").reset(seed=2)
    assert not np.array_equal(a, b)


def test_env_pickles_mid_episode_and_continues_identically():
    env = gym.make("RLAIF-v0")
    env.reset(seed=4)
    for a in np.random.default_rng(1).integers(0, [6, 4, 5, 2], size=(20, 4)):
        env.step(a)
    clone = pickle.loads(pickle.dumps(env))
    for a in np.random.default_rng(2).integers(0, [6, 4, 5, 2], size=(30, 4)):
        x, y = env.step(a), clone.step(a)
        assert np.array_equal(x[0], y[0]) and x[1:4] == y[1:4] and x[4] == y[4]


def test_observation_does_not_depend_on_hidden_truth_or_future_events():
    env = gym.make("RLAIF-v0").unwrapped
    env.reset(seed=9)
    rng = np.random.default_rng(0)
    for a in rng.integers(0, [6, 4, 5, 2], size=(40, 4)):
        env.step(a)
    core = env._core
    before = core.observe()
    original = core.state.copy()

    # Rewrite the ground truth: other outcomes and true probabilities, another narrative, and a new
    # world key, which changes every future random draw (news, NPC trades, prices, new markets).
    st = core.state
    st.pm_truth[:] = 1.0 - st.pm_truth
    st.pm_outcome[:] = 1 - st.pm_outcome
    st.narr_active[:] = ~st.narr_active
    st.narr_sign[:] = -st.narr_sign
    st.narr_tick[:] += 5
    st.narr_ticker[:] = (st.narr_ticker + 1) % env.params.num_perps
    st.key[:] = st.key ^ np.uint64(0xDEADBEEF)
    assert set(GROUND_TRUTH_FIELDS) <= {"key", "pm_truth", "pm_outcome", "narr_active", "narr_ticker",
                                         "narr_sign", "narr_tick", "narr_mag"}
    assert np.array_equal(core.observe(), before), "the observation reads ground truth or the future"

    # The perturbation is real: the futures of the two worlds differ from the next tick on.
    perturbed_next = core.step(np.zeros((1, 4), np.int64)).observation
    core.state = original
    original_next = core.step(np.zeros((1, 4), np.int64)).observation
    assert not np.array_equal(perturbed_next, original_next)


@pytest.mark.parametrize("agent_cls", [RandomAgent, InformedAgent])
def test_batched_core_equals_the_single_env_seed_by_seed(agent_cls):
    seeds = [0, 1, 2, 3]
    core = RLAIFCore(gym.make("RLAIF-v0").unwrapped.config, num_worlds=len(seeds))
    batch = evaluate_policy(agent_cls(core, seed=5), seeds, core=core)
    # Replay each world alone through gym.make with the batch's actions.
    agent = agent_cls(core, seed=5)
    obs = core.reset(np.asarray(__import__("rlaif_gym.envs", fromlist=["seed_keys"]).seed_keys(seeds)))
    envs = [gym.make("RLAIF-v0") for _ in seeds]
    singles = [e.reset(seed=s)[0] for e, s in zip(envs, seeds, strict=True)]
    assert np.array_equal(np.stack(singles), obs)
    totals = np.zeros(len(seeds))
    for t in range(168):
        actions = agent.act(obs, core.state)
        res = core.step(actions)
        for i, e in enumerate(envs):
            o, r, _, _, _ = e.step(actions[i])
            assert np.array_equal(o, res.observation[i]), f"world {i} differs at tick {t}"
            assert r == res.reward[i]
            totals[i] += r
        obs = res.observation
    assert np.allclose(totals, batch.episode_return, rtol=0, atol=0)


def test_sync_vector_env_matches_single_envs():
    seeds = [21, 22, 23]
    vec = gym.make_vec("RLAIF-v0", num_envs=3, vectorization_mode="sync")
    obs, _ = vec.reset(seed=21)
    singles = [gym.make("RLAIF-v0") for _ in seeds]
    ref = np.stack([e.reset(seed=s)[0] for e, s in zip(singles, seeds, strict=True)])
    assert np.array_equal(obs, ref)
    for a in np.random.default_rng(3).integers(0, [6, 4, 5, 2], size=(25, 3, 4)):
        o, r, *_ = vec.step(a)
        ref = [e.step(a[i]) for i, e in enumerate(singles)]
        assert np.array_equal(o, np.stack([x[0] for x in ref]))
        assert np.array_equal(r, np.array([x[1] for x in ref]))
