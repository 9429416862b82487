"""State fork: get_state/set_state/fork on the env and the core give k identical branches at any tick.

Branches stepped with identical actions stay bit-identical (observations, rewards, flags, infos and
every world array); different actions make them diverge; the original episode is unaffected.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from rlaif_gym import ConfigError, ResetNeeded, RLAIFEnv, RLAIFEnvConfig, RLAIFTextEnv
from rlaif_gym.envs import RLAIFCore, seed_keys
from rlaif_gym.sim import rules

TICKS = 24
BACKENDS = ["numpy"] + (["numba"] if rules.available() else [])


def _actions(env: RLAIFEnv, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, env.action_space.nvec) for _ in range(n)]


def _play(env, actions):
    out = []
    for a in actions:
        obs, reward, term, trunc, info = env.step(a)
        out.append((obs, reward, term, trunc, info))
        if term or trunc:
            break
    return out


def _assert_same_world(a, b, where):
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.array_equal(x, y), f"{where}: world field {f.name} differs"


def _assert_same_transitions(ra, rb, where):
    assert len(ra) == len(rb), f"{where}: {len(ra)} vs {len(rb)} steps"
    for t, (x, y) in enumerate(zip(ra, rb, strict=True)):
        assert np.array_equal(x[0], y[0]), f"{where} step {t}: observations differ"
        assert x[1:4] == y[1:4], f"{where} step {t}: reward/flags {x[1:4]} != {y[1:4]}"
        assert x[4] == y[4], f"{where} step {t}: infos differ: {x[4]} != {y[4]}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("archetype", [None, "trader"])
def test_branches_are_bit_identical_under_identical_actions(backend, archetype):
    env = RLAIFEnv(num_ticks=TICKS, backend=backend, archetype=archetype)
    env.reset(seed=11)
    prefix, suffix = _actions(env, 9, 0), _actions(env, TICKS, 1)
    _play(env, prefix)
    branches = env.fork(3)
    assert [b.state.tick[0] for b in branches] == [9, 9, 9]
    runs = [_play(b, suffix) for b in branches]
    for i in (1, 2):
        _assert_same_transitions(runs[0], runs[i], f"branch 0 vs branch {i}")
        _assert_same_world(branches[0].state, branches[i].state, f"branch 0 vs branch {i} at the end")
    # A later reset without a seed draws the same next world in every branch (the generator was copied).
    obs = [b.reset()[0] for b in branches]
    assert all(np.array_equal(obs[0], o) for o in obs[1:]), "branches' generators were not copied"


@pytest.mark.parametrize("backend", BACKENDS)
def test_branches_diverge_under_different_actions(backend):
    env = RLAIFEnv(num_ticks=TICKS, backend=backend)
    env.reset(seed=5)
    _play(env, _actions(env, 6, 0))
    a, b = env.fork(2)
    buy_yes = np.array([1, 0, 4, 0])  # buy YES in market slot 0 with 25% of equity
    held = a.state.hold_yes[0, 0]
    ra, rb = _play(a, [buy_yes]), _play(b, [np.zeros(4, np.int64)])
    assert ra[0][4]["feedback"]["success"], ra[0][4]["feedback"]
    assert not np.array_equal(ra[0][0], rb[0][0]), "a 25%-of-equity buy left the observation unchanged"
    assert a.state.hold_yes[0, 0] > held == b.state.hold_yes[0, 0]
    assert not np.array_equal(a.state.pm_yes, b.state.pm_yes), "the branches share their market pools"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_original_episode_is_unaffected_by_forking(backend):
    cfg = {"num_ticks": TICKS, "backend": backend}
    ref = RLAIFEnv(**cfg)
    ref.reset(seed=3)
    actions = _actions(ref, TICKS, 7)
    expected = _play(ref, actions)

    env = RLAIFEnv(**cfg)
    env.reset(seed=3)
    first = _play(env, actions[:10])
    branches = env.fork(2)
    _play(branches[0], _actions(env, TICKS, 99))  # the branches trade wildly
    _play(branches[1], [np.array([3, 0, 4, 1])] * TICKS)
    rest = _play(env, actions[10:])
    _assert_same_transitions(first + rest, expected, "forked original vs never-forked episode")
    _assert_same_world(env.state, ref.state, "original at the end")


def test_set_state_rewinds_and_replays_exactly():
    env = RLAIFEnv(num_ticks=TICKS)
    env.reset(seed=21)
    _play(env, _actions(env, 8, 0))
    snap = env.get_state()
    assert snap.tick == 8
    suffix = _actions(env, TICKS, 2)
    first = _play(env, suffix)
    env.set_state(snap)
    assert env.state.tick[0] == 8
    second = _play(env, suffix)
    _assert_same_transitions(first, second, "replay after set_state")
    env.set_state(snap)  # the snapshot survives being restored and stepped from
    _assert_same_transitions(first, _play(env, suffix), "second replay")


def test_snapshot_checks_class_and_config():
    env = RLAIFEnv(num_ticks=TICKS)
    with pytest.raises(ResetNeeded):
        env.get_state()
    env.reset(seed=0)
    snap = env.get_state()
    with pytest.raises(ConfigError, match="another config"):
        RLAIFEnv(num_ticks=TICKS + 1).set_state(snap)
    with pytest.raises(ConfigError, match="RLAIFEnv"):
        RLAIFTextEnv(num_ticks=TICKS).set_state(snap)
    with pytest.raises(TypeError, match="EnvSnapshot"):
        env.set_state(env.state)
    with pytest.raises(ValueError, match="k >= 1"):
        env.fork(0)


def test_text_env_branches_share_prompt_and_diverge_on_replies():
    env = RLAIFTextEnv(num_ticks=TICKS)
    env.reset(seed=4)
    wait = '<think>Nothing clear yet.</think>\n{"type": "wait"}'
    for _ in range(5):
        env.step(wait)
    a, b, c = env.fork(3)
    assert a.view == b.view and np.array_equal(a.numeric_observation, env.numeric_observation)
    market = env.view.markets[0].market_id
    buy = f'<think>Buying.</think>\n{{"type": "buy_prediction", "market": "{market}", "outcome": "YES", "amount": 900}}'
    ra, rb, rc = _play(a, [wait] * 3), _play(b, [wait] * 3), _play(c, [buy] + [wait] * 2)
    _assert_same_transitions(ra, rb, "text branches a vs b")
    assert ra[0][0] != rc[0][0], "a buy and a wait gave the same next prompt"
    assert rc[0][4]["feedback"]["success"], rc[0][4]["feedback"]
    # The original continues from its own prompt, untouched by the branches.
    assert env.step(wait)[0] == ra[0][0]


def test_core_fork_steps_branches_as_one_batch():
    cfg = RLAIFEnvConfig(num_ticks=TICKS)
    core = RLAIFCore(cfg, num_worlds=2)
    core.reset(seed_keys([8, 9]))
    for _ in range(4):
        core.step(np.zeros((2, 4), np.int64))
    before = core.get_state()
    batch = core.fork(4, world=1)
    assert batch.num_worlds == 4
    acts = np.zeros((4, 4), np.int64)
    acts[2] = [1, 1, 4, 1]  # branch 2 buys NO in market slot 1; the others wait
    res = batch.step(acts)
    for i in (1, 3):
        assert np.array_equal(res.observation[0], res.observation[i]) and res.reward[0] == res.reward[i]
    assert not np.array_equal(res.observation[0], res.observation[2])
    _assert_same_world(core.state, before, "the forked core")
    # World 1 of the parent stepped alone equals the waiting branches.
    single = RLAIFCore(cfg, num_worlds=1)
    single.set_state(before.take([1]))
    assert np.array_equal(single.step(np.zeros((1, 4), np.int64)).observation[0], res.observation[0])
    with pytest.raises(ValueError, match="1 world"):
        single.set_state(before)


def test_text_env_prompt_property_follows_steps_and_restores():
    env = RLAIFTextEnv(num_ticks=TICKS)
    with pytest.raises(ResetNeeded):
        _ = env.prompt
    prompt, _ = env.reset(seed=4)
    assert env.prompt == prompt
    snap = env.get_state()
    later, *_ = env.step('{"action": "wait"}')
    assert env.prompt == later != prompt
    fresh = RLAIFTextEnv(num_ticks=TICKS)
    fresh.reset(seed=99)
    fresh.set_state(snap)
    assert fresh.prompt == prompt, "a restored env shows the snapshot's prompt"
