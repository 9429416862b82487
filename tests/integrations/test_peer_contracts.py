"""Peers' contracts, checked with the peers' own classes: what `SyncVectorEnv` and SB3's `DummyVecEnv` do with
`RLAIF-v0` sub-envs, the batched envs do too (partial resets, action types, infos, `env_method`, options,
errors); a copied env does not recompile; `check_env` passes at the shortest episode a config allows."""

from __future__ import annotations

import copy
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rlaif_gym
from rlaif_gym import ConfigError, InvalidActionError, RLAIFEnv
from rlaif_gym.envs import RLAIFVectorEnv
from rlaif_gym.envs.multi_agent import RLAIFMultiAgentEnv
from rlaif_gym.sim import rules

_NUMBA = pytest.mark.skipif(not rules.available(), reason='numba is not installed: pip install "rlaif-gym[fast]"')
N = 4


def _pair(**cfg):
    sync = gym.make_vec("RLAIF-v0", num_envs=N, vectorization_mode="sync", **cfg)
    native = gym.make_vec("RLAIF-v0", num_envs=N, vectorization_mode="vector_entry_point", **cfg)
    return sync, native


def _same_step(a, b, t):
    for k, name in enumerate(("obs", "reward", "terminated", "truncated")):
        assert np.array_equal(a[k], b[k]), f"{name} differs at step {t}"


@pytest.mark.parametrize("cfg", [{"num_ticks": 9}, {"num_ticks": 9, "archetype": "trader"}],
                         ids=["default", "archetype"])
def test_native_partial_reset_matches_sync_vector_env(cfg):
    sync, native = _pair(**cfg)
    try:
        assert np.array_equal(sync.reset(seed=3)[0], native.reset(seed=3)[0])
        rng = np.random.default_rng(1)
        for t in range(30):  # crosses episode ends, so some masked worlds are mid-autoreset
            if t % 4 == 3:
                mask = rng.random(N) < 0.5
                mask[t % N] = True
                seeds = [int(s) if rng.random() < 0.5 else None for s in rng.integers(0, 1000, N)]
                opts_s, opts_n = {"reset_mask": mask.copy()}, {"reset_mask": mask.copy()}
                (obs_s, info_s), (obs_n, info_n) = sync.reset(seed=seeds, options=opts_s), native.reset(
                    seed=seeds, options=opts_n)
                assert np.array_equal(obs_s, obs_n), f"partial reset at step {t}"
                assert opts_n == opts_s == {}, "reset_mask is taken out of options, as SyncVectorEnv takes it"
                for key in ("equity", "cash", "tick"):
                    assert np.array_equal(info_s[f"_{key}"], info_n[f"_{key}"]) and np.array_equal(
                        info_s[key][mask], info_n[key][mask]), key
            a = rng.integers(0, sync.single_action_space.nvec, size=(N, 4))
            _same_step(sync.step(a), native.step(a), t)
    finally:
        sync.close()
        native.close()


def test_native_reset_mask_refused_as_sync_refuses_it():
    sync, native = _pair(num_ticks=9)
    for env in (sync, native):
        env.reset(seed=0)
        for bad, err in ((np.ones(N, dtype=np.int64), TypeError), (np.zeros(N, dtype=bool), ValueError),
                         (np.ones(N + 1, dtype=bool), ValueError), ([True] * N, TypeError)):
            with pytest.raises(err):
                env.reset(options={"reset_mask": bad})
        with pytest.raises(ConfigError):  # any other option is refused by the sub-envs and by the batch
            env.reset(options={"reset_mask": np.ones(N, dtype=bool), "num_markets": 3})
    fresh = RLAIFVectorEnv(num_envs=N)
    with pytest.raises(gym.error.ResetNeeded, match="reset\\(\\) without a mask"):
        fresh.reset(options={"reset_mask": np.eye(N, dtype=bool)[0]})


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=_NUMBA)])
def test_native_accepts_and_refuses_the_actions_sync_does(backend):
    sync, native = _pair(num_ticks=12, backend=backend)
    try:
        sync.reset(seed=5)
        native.reset(seed=5)
        rng = np.random.default_rng(2)
        for t in range(6):
            a = rng.integers(0, sync.single_action_space.nvec, size=(N, 4))
            form = (a.astype(np.float32), a.tolist(), a.astype(np.int32), a.astype(np.float64))[t % 4]
            _same_step(sync.step(form), native.step(form), t)
        fraction = np.zeros((N, 4))
        fraction[1, 0] = 1.5
        for bad in (fraction, np.full((N, 4), np.nan), np.full((N, 4), "1"), np.full((N, 4), 9)):
            for env in (sync, native):
                with pytest.raises(InvalidActionError):
                    env.step(bad)
    finally:
        sync.close()
        native.close()


def test_reset_needed_is_gymnasiums_in_every_face():
    assert issubclass(rlaif_gym.ResetNeeded, gym.error.ResetNeeded)
    assert issubclass(rlaif_gym.ResetNeeded, RuntimeError)  # what it was before, still caught as such
    with pytest.raises(gym.error.ResetNeeded):
        RLAIFEnv().step(np.zeros(4, dtype=np.int64))
    with pytest.raises(gym.error.ResetNeeded):
        RLAIFVectorEnv(num_envs=2).step(np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(gym.error.ResetNeeded):
        RLAIFMultiAgentEnv(num_agents=2).step({})


def test_shortest_episode_passes_check_env_and_one_tick_is_refused_with_why():
    with pytest.raises(ConfigError, match="num_ticks"):
        gym.make("RLAIF-v0", num_ticks=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gym.make("RLAIF-v0", num_ticks=2).unwrapped)


@_NUMBA
# The pickle round trip loads only the bytes this test itself just dumped (SubprocVecEnv ships envs so).
@pytest.mark.parametrize("clone", [copy.deepcopy, lambda env: pickle.loads(pickle.dumps(env))],
                         ids=["deepcopy", "pickle"])
def test_a_copied_env_steps_without_compiling_again(clone):
    from rlaif_gym.envs import fused

    env = gym.make("RLAIF-v0").unwrapped
    env.reset(seed=4)
    action = np.array([1, 0, 2, 0], dtype=np.int64)
    env.step(np.zeros(4, dtype=np.int64))
    signatures = len(fused._fused.signatures)
    twin = clone(env)
    assert all(not a.flags.writeable for a in twin._core.fused._consts[:4])
    a, b = env.step(action), twin.step(action)
    assert len(fused._fused.signatures) == signatures, "the copy compiled a second specialisation of the kernel"
    assert np.array_equal(a[0], b[0]) and a[1:4] == b[1:4] and a[4]["fill"] == b[4]["fill"]


def test_multi_agent_info_has_the_single_envs_fill():
    single = RLAIFEnv(num_ticks=10)
    single.reset(seed=0)
    *_, info = single.step(np.array([1, 0, 2, 0]))
    multi = RLAIFMultiAgentEnv(num_agents=2, num_ticks=10)
    multi.reset(seed=0)
    _, _, _, _, infos = multi.step({"trader_0": np.array([1, 0, 2, 0]), "trader_1": np.zeros(4, dtype=np.int64)})
    for agent_info in infos.values():
        assert set(agent_info["fill"]) == set(info["fill"])
    assert infos["trader_0"]["fill"]["shares"] > 0 and infos["trader_0"]["fill"]["usd"] > 0
    assert infos["trader_0"]["fill"]["shares"] == infos["trader_0"]["filled_shares"]


# -- SB3: RLAIFSB3VecEnv against DummyVecEnv over RLAIF-v0 sub-envs --------------------------------------------------


@pytest.fixture
def sb3_pair():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from rlaif_gym.integrations.sb3 import RLAIFSB3VecEnv

    cfg = {"num_ticks": 8}
    ours = RLAIFSB3VecEnv(3, cfg, seed=21)
    theirs = DummyVecEnv([lambda: gym.make("RLAIF-v0", **cfg) for _ in range(3)])
    theirs.seed(21)
    return ours, theirs


def test_sb3_infos_carry_fill_and_float_actions_act_as_dummy_vec_envs(sb3_pair):
    ours, theirs = sb3_pair
    ours.reset(), theirs.reset()
    rng = np.random.default_rng(3)
    filled = 0
    for t in range(10):
        a = rng.integers(0, ours.action_space.nvec, size=(3, 4))
        a[:, 0] = np.where(rng.random(3) < 0.5, 1, a[:, 0])  # buys, so fills are not all zero
        x, y = ours.step(a.astype(np.float32)), theirs.step(a.astype(np.float32))
        _same_step((x[0], x[1], x[2], x[2]), (y[0], y[1], y[2], y[2]), t)
        for mine, ref in zip(x[3], y[3], strict=True):
            assert mine["fill"] == ref["fill"], f"step {t}"
            filled += mine["fill"]["usd"] > 0
    assert filled > 3
    fraction = np.zeros((3, 4))
    fraction[0, 2] = 2.5
    with pytest.raises(InvalidActionError):
        theirs.step(fraction)
    with pytest.raises(InvalidActionError):
        ours.step(fraction)  # refused, as the sub-env refuses it, not cut to 2


def test_sb3_env_method_acts_on_one_world_as_on_a_sub_env(sb3_pair):
    ours, theirs = sb3_pair
    ours.reset(), theirs.reset()
    a = np.array([[1, 0, 2, 0], [1, 1, 3, 1], [0, 0, 0, 0]])
    ours.step(a), theirs.step(a)
    assert ours.env_method("reset", seed=77, indices=1) and theirs.env_method("reset", seed=77, indices=1)
    snap = ours.env_method("get_state", indices=[2])[0]
    ref = theirs.env_method("get_state", indices=[2])[0]
    assert snap.tick == ref.tick == 1
    restored = RLAIFEnv(num_ticks=8)
    restored.set_state(snap)
    b = np.array([[2, 0, 4, 0], [1, 0, 1, 1], [1, 1, 2, 0]])
    x, y = ours.step(b), theirs.step(b)  # world 1 restarted from seed 77 in both, world 2 carried on
    _same_step((x[0], x[1], x[2], x[2]), (y[0], y[1], y[2], y[2]), 0)
    assert np.array_equal(restored.step(b[2])[0], x[0][2])
    assert [m.tolist() for m in ours.env_method("action_masks")] == [m.tolist() for m in
                                                                      theirs.env_method("action_masks")]
    with pytest.raises(AttributeError):
        theirs.env_method("no_such_method")
    with pytest.raises(AttributeError):
        ours.env_method("no_such_method")


def test_sb3_options_and_errors_are_the_sub_envs(sb3_pair):
    ours, theirs = sb3_pair
    for env in (ours, theirs):
        env.set_options({"num_markets": 3})
        with pytest.raises(ConfigError):
            env.reset()
    from rlaif_gym.integrations.sb3 import RLAIFSB3VecEnv

    fresh = RLAIFSB3VecEnv(2, {"num_ticks": 8})
    with pytest.raises(gym.error.ResetNeeded):
        fresh.step(np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(gym.error.ResetNeeded):
        fresh.action_masks()
    with pytest.raises(gym.error.ResetNeeded, match="reset"):  # no world exists to lend before the first reset
        fresh.env_method("get_state", indices=0)


def _same_info(mine, ref, where: str) -> None:
    """`mine` is `ref` bit for bit: the same keys, and each value of the same type and value (arrays: the same
    dtype, shape and bytes; dicts: recursively)."""
    assert type(mine) is type(ref), f"{where}: {type(mine).__name__} vs {type(ref).__name__}"
    if isinstance(ref, dict):
        assert sorted(mine) == sorted(ref), f"{where}: keys {sorted(mine)} vs {sorted(ref)}"
        for key in ref:
            _same_info(mine[key], ref[key], f"{where}.{key}")
    elif isinstance(ref, np.ndarray):
        assert mine.dtype == ref.dtype and mine.shape == ref.shape and mine.tobytes() == ref.tobytes(), where
    else:
        assert mine == ref or (mine != mine and ref != ref), f"{where}: {mine!r} != {ref!r}"


@pytest.mark.parametrize("cfg", [{"num_ticks": 8}, {"num_ticks": 8, "archetype": "trader"}],
                         ids=["default", "archetype"])
def test_sb3_infos_and_reset_infos_are_dummy_vec_envs_bit_for_bit(cfg):
    """Issue 57 row V1: RLAIFSB3VecEnv's reset_infos carried an `action_mask` that the sub-env's own reset info
    (`RLAIFEnv.reset`) does not, and its step infos one that `RLAIFEnv.step`'s do not either (the single env
    computes masks only when asked). Now every info of the VecEnv, at reset(), at each step and after each
    auto-reset, is DummyVecEnv's over gym.make("RLAIF-v0") key for key and value for value; the masks are the
    same through `action_masks()` / `env_method("action_masks")`. Each face's reset info carries no key its own
    step info lacks (the text face adds only its `system_prompt`)."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from rlaif_gym import RLAIFTextEnv
    from rlaif_gym.integrations.sb3 import RLAIFSB3VecEnv

    ours = RLAIFSB3VecEnv(3, cfg, seed=21)
    theirs = DummyVecEnv([lambda: gym.make("RLAIF-v0", **cfg) for _ in range(3)])
    theirs.seed(21)
    _same_info(ours.reset(), theirs.reset(), "reset obs")
    for i in range(3):
        _same_info(ours.reset_infos[i], theirs.reset_infos[i], f"reset, world {i}")
    rng = np.random.default_rng(5)
    resets = 0
    for t in range(20):  # two episode ends per world (num_ticks 8), each followed by an auto-reset
        a = rng.integers(0, ours.action_space.nvec, size=(3, 4))
        a[:, 0] = np.where(rng.random(3) < 0.5, 1, a[:, 0])  # buys, so fills and masks change within an episode
        kept_ours, kept_theirs = list(ours.reset_infos), list(theirs.reset_infos)
        x, y = ours.step(a), theirs.step(a)
        _same_step((x[0], x[1], x[2], x[2]), (y[0], y[1], y[2], y[2]), t)
        assert np.array_equal(ours.action_masks(), np.stack(theirs.env_method("action_masks"))), f"step {t}"
        for i in range(3):
            _same_info(x[3][i], y[3][i], f"step {t}, world {i}")
            # a world's reset info is replaced exactly when it auto-resets (a first state's values repeat, so
            # only the replacement tells a renewed info from a stale one)
            renewed = theirs.reset_infos[i] is not kept_theirs[i]
            assert renewed == bool(y[2][i]) == (ours.reset_infos[i] is not kept_ours[i]), f"step {t}, world {i}"
            _same_info(ours.reset_infos[i], theirs.reset_infos[i], f"step {t}, world {i}, reset info")
            resets += renewed
    assert resets == 6
    single, text = gym.make("RLAIF-v0", **cfg), RLAIFTextEnv(**cfg)
    faces = ((single, np.array([1, 0, 2, 0]), set()), (text, "<think>x</think>wait", {"system_prompt"}))
    for env, action, own in faces:
        _, reset_info = env.reset(seed=0)
        step_info = env.step(action)[4]
        assert set(reset_info) - own <= set(step_info) and "action_mask" not in {*reset_info, *step_info}, \
            f"{type(env.unwrapped).__name__}: reset {sorted(reset_info)}, step {sorted(step_info)}"
