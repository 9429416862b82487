"""Native vector env: sync, async and native modes agree exactly, autoreset included."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlaif_gym import ConfigError, InvalidActionError
from rlaif_gym.encoding import ACTION_KINDS
from rlaif_gym.envs import RLAIFVectorEnv
from rlaif_gym.sim import rules

MODES = ("sync", "async", "vector_entry_point")
_NUMBA = pytest.mark.skipif(not rules.available(), reason='numba is not installed: pip install "rlaif-gym[fast]"')


@pytest.mark.parametrize("kwargs", [{"num_ticks": 25}, {"max_episode_steps": 17},
                                    pytest.param({"num_ticks": 25, "backend": "numba"}, marks=_NUMBA),
                                    {"num_ticks": 25, "archetype": "trader"},
                                    {"max_episode_steps": 17, "archetype": "social-butterfly"},
                                    pytest.param({"num_ticks": 25, "archetype": "degen", "backend": "numba"},
                                                 marks=_NUMBA)],
                         ids=["num_ticks", "time_limit", "numba", "archetype-trader", "archetype-social-time-limit",
                              "archetype-degen-numba"])
def test_sync_async_and_native_agree_exactly_through_autoresets(kwargs):
    n = 5
    envs = {m: gym.make_vec("RLAIF-v0", num_envs=n, vectorization_mode=m, **kwargs) for m in MODES}
    try:
        first = {m: e.reset(seed=11)[0] for m, e in envs.items()}
        for m in MODES:
            assert np.array_equal(first["sync"], first[m]), m
        rng = np.random.default_rng(0)
        resets = 0
        behavior_paid = 0
        for t in range(80):
            a = rng.integers(0, [6, 4, 5, 2], size=(n, 4))
            out = {m: e.step(a) for m, e in envs.items()}
            ref = out["sync"]
            for m in MODES[1:]:
                for k, name in enumerate(("obs", "reward", "terminated", "truncated")):
                    assert np.array_equal(ref[k], out[m][k]), f"{name} differs in {m} at step {t}"
                # Components of the worlds that stepped (a world being reset has none: the mask is False).
                comps, ref_comps = out[m][4].get("reward_components", {}), ref[4].get("reward_components", {})
                names = {k for k in (*comps, *ref_comps) if not k.startswith("_")}
                for name in names:
                    mask = ref_comps.get(f"_{name}", np.zeros(n, bool))
                    assert np.array_equal(comps.get(f"_{name}", np.zeros(n, bool)), mask), f"_{name} in {m} at {t}"
                    if mask.any():
                        assert np.array_equal(comps[name][mask], ref_comps[name][mask]), f"{name} in {m} at {t}"
            resets += int((ref[2] | ref[3]).sum())
            if "archetype" in kwargs and "reward_components" in ref[4]:
                behavior_paid += int(np.count_nonzero(ref[4]["reward_components"]["behavior"]))
        assert resets >= n, "the run must cross several autoresets"
        if "archetype" in kwargs:
            assert behavior_paid > 20, f"the behavior component was paid on only {behavior_paid} world-steps"
    finally:
        for e in envs.values():
            e.close()


def test_native_env_declares_next_step_autoreset_and_batched_spaces():
    env = gym.make_vec("RLAIF-v0", num_envs=3, vectorization_mode="vector_entry_point")
    assert isinstance(env.unwrapped, RLAIFVectorEnv)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    obs, info = env.reset(seed=0)
    assert obs.shape == (3, 65) and env.observation_space.contains(obs)
    assert env.single_action_space.nvec.tolist() == [len(ACTION_KINDS), 4, 5, 2]
    info = env.step(env.action_space.sample())[4]
    assert set(info["reward_components"]) >= {"pnl", "risk", "_pnl", "_risk"}
    assert info["pnl_delta"].shape == (3,) and info["_pnl_delta"].all()


def test_the_step_after_an_episode_ends_is_a_reset_step():
    env = RLAIFVectorEnv(num_envs=2, num_ticks=3)
    env.reset(seed=0)
    wait = np.zeros((2, 4), dtype=np.int64)
    for _ in range(2):
        _, _, _, trunc, _ = env.step(wait)
        assert not trunc.any()
    _, _, _, trunc, _ = env.step(wait)
    assert trunc.all()
    _, reward, term, trunc, info = env.step(wait)
    assert (reward == 0).all() and not term.any() and not trunc.any()
    assert not info["_pnl_delta"].any()
    assert (env.core.state.tick == 0).all()


def test_native_env_rejects_bad_action_batches():
    env = RLAIFVectorEnv(num_envs=2)
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match=r"shape \(2, 4\)"):
        env.step(np.zeros((3, 4), dtype=np.int64))
    with pytest.raises(InvalidActionError):
        env.step(np.full((2, 4), 9))


def test_native_archetype_env_pays_each_world_its_episode_behavior_score():
    """Potential-based shaping per world: an episode's behavior components add up to the archetype's
    score of that world's episode, and each world's tracker starts afresh at its autoreset."""
    from rlaif_gym.rewards.archetypes import behavior_score

    n, ticks = 3, 12
    env = RLAIFVectorEnv(num_envs=n, num_ticks=ticks, archetype="trader")
    env.reset(seed=4)
    start = behavior_score("trader", env._behavior.trackers[0].metrics())  # the score of an empty episode
    rng = np.random.default_rng(1)
    totals = np.zeros(n)
    for _ in range(ticks):
        info = env.step(rng.integers(0, [6, 4, 5, 2], size=(n, 4)))[4]
        totals += info["reward_components"]["behavior"]
    scores = [behavior_score("trader", tracker.metrics()) for tracker in env._behavior.trackers]
    np.testing.assert_allclose(totals, np.array(scores) - start, rtol=0, atol=1e-12)
    assert np.any(totals != 0)
    info = env.step(np.zeros((n, 4), dtype=np.int64))[4]  # the reset step: no component, trackers fresh
    assert not info["reward_components"]["_behavior"].any()
    assert all(t.ticks == 0 and t.trades == 0 for t in env._behavior.trackers)
    with pytest.raises(ConfigError, match="archetype"):
        RLAIFVectorEnv(num_envs=2, archetype="no-such-archetype")
