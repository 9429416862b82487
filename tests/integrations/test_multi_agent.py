"""Several learning agents in one world: PettingZoo's API and seed tests, shared prices, fair ordering."""

from __future__ import annotations

import warnings
from dataclasses import fields

import numpy as np
import pytest

from rlaif_gym import ConfigError, RLAIFEnv
from rlaif_gym.encoding import decode_actions
from rlaif_gym.envs import RLAIFMultiAgentEnv
from rlaif_gym.sim import multi, step

pettingzoo = pytest.importorskip("pettingzoo")
from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

from rlaif_gym.integrations.pettingzoo import RLAIFParallelEnv, parallel_env  # noqa: E402

WAIT = np.zeros(4, np.int64)
BUY_YES_0 = np.array([1, 0, 4, 0])  # buy YES in market slot 0 with 25% of equity


@pytest.mark.parametrize("face", ["numeric", "text"])
def test_parallel_api_test_passes(face):
    env = parallel_env(num_agents=3, face=face, num_ticks=12)
    assert isinstance(env, pettingzoo.ParallelEnv)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports problems as warnings: none allowed
        parallel_api_test(env, num_cycles=40)


@pytest.mark.parametrize("face", ["numeric", "text"])
def test_parallel_seed_test_passes(face):
    parallel_seed_test(lambda: parallel_env(num_agents=3, face=face, num_ticks=12), num_cycles=40)


def _two_runs(first_actions):
    """Step two identical worlds once: agents act as given in the first, all wait in the second."""
    envs = [parallel_env(num_agents=2), parallel_env(num_agents=2)]
    for e in envs:
        e.reset(seed=7)
    moved = envs[0].step(first_actions)
    still = envs[1].step({"trader_0": WAIT, "trader_1": WAIT})
    return envs, moved, still


def test_one_agents_large_order_changes_the_price_another_agent_sees():
    envs, moved, still = _two_runs({"trader_0": BUY_YES_0, "trader_1": WAIT})
    price = RLAIFEnv().layout.names.index("market0.price")
    seen_moved, seen_still = moved[0]["trader_1"][price], still[0]["trader_1"][price]
    assert moved[4]["trader_0"]["feedback"]["success"]
    assert seen_moved > seen_still + 0.02, f"trader_1 saw {seen_still:.4f} without and {seen_moved:.4f} with the buy"
    # trader_1 held nothing and did nothing: its own account is untouched by trader_0's trade.
    assert moved[4]["trader_1"]["cash"] == still[4]["trader_1"]["cash"] == envs[0].config.starting_cash


def test_second_mover_pays_the_price_the_first_mover_left():
    env = parallel_env(num_agents=2)
    env.reset(seed=3)
    fills, compared = {}, 0
    for _ in range(4):  # both buy YES in the same market each tick; the order is drawn per tick
        _, _, _, _, infos = env.step({"trader_0": np.array([1, 1, 3, 0]), "trader_1": np.array([1, 1, 3, 0])})
        first = min(infos, key=lambda a: infos[a]["order"])
        second = max(infos, key=lambda a: infos[a]["order"])
        assert {infos[first]["order"], infos[second]["order"]} == {0, 1}
        a, b = infos[first], infos[second]
        fills.setdefault(first, 0)
        fills[first] += 1
        # Same order size in USD (10% of the same equity at tick 0; later each agent's own equity).
        if a["filled_usd"] == pytest.approx(b["filled_usd"], rel=1e-9):
            compared += 1
            assert b["filled_shares"] < a["filled_shares"], "the second buyer was not filled at a worse price"
    assert compared >= 1, "no tick had equal order sizes to compare"
    assert len(fills) == 2, f"one agent went first in every tick: {fills}"


def test_agent_order_is_a_fair_reproducible_permutation():
    env = RLAIFEnv(num_ticks=4)
    env.reset(seed=0)
    world = env.state.take([0, 0, 0])
    firsts = np.zeros(4, dtype=int)
    for t in range(400):
        world.tick[:] = t
        order = multi.agent_order(world, 4)
        assert (np.sort(order, axis=1) == np.arange(4)).all()
        assert (order == order[0]).all(), "the same world and tick gave different orders"
        firsts[order[0, 0]] += 1
    assert firsts.min() > 60, f"first-mover counts over 400 ticks: {firsts.tolist()}"


def test_one_agent_world_is_bit_identical_to_the_single_agent_step():
    env = RLAIFEnv()
    env.reset(seed=9)
    ref, shared = env.state.copy(), env.state.copy()
    accounts = multi.Accounts.fresh(shared, 1)
    rng = np.random.default_rng(0)
    for t in range(60):
        act = rng.integers(0, env.action_space.nvec)[None, :]
        a = step(ref, decode_actions(act, ref, env.params, 2.0), env.params)
        accounts.load(shared, 0)
        b = multi.step_agents(shared, accounts, [decode_actions(act, shared, env.params, 2.0)], env.params)[0]
        for f in fields(a):
            assert np.array_equal(getattr(a, f.name), getattr(b, f.name)), f"tick {t}: outcome {f.name} differs"
    accounts.load(shared, 0)
    for f in fields(ref):
        assert np.array_equal(getattr(ref, f.name), getattr(shared, f.name)), f"state field {f.name} differs"


def test_rewards_flags_and_fork_of_the_multi_agent_world():
    env = RLAIFMultiAgentEnv(num_agents=2, num_ticks=6)
    env.reset(seed=1)
    env.step({"trader_0": BUY_YES_0, "trader_1": WAIT})
    a, b = env.fork(2)
    runs = []
    for branch in (a, b, env):
        out = []
        while branch.agents:
            out.append(branch.step({"trader_0": WAIT, "trader_1": np.array([1, 0, 2, 1])}))
        runs.append(out)
    assert len(runs[0]) == 5 and runs[0][-1][3] == {"trader_0": True, "trader_1": True}
    for x, y in zip(runs[0], runs[2], strict=True):
        assert all(np.array_equal(x[0][k], y[0][k]) for k in x[0]) and x[1:] == y[1:]
    with pytest.raises(ConfigError, match="archetype"):
        RLAIFMultiAgentEnv(archetype="no-such-archetype")
    assert isinstance(parallel_env(), RLAIFParallelEnv)


def test_one_agent_with_an_archetype_is_paid_what_the_single_env_pays():
    single = RLAIFEnv(archetype="degen", num_ticks=30)
    shared = RLAIFMultiAgentEnv(num_agents=1, archetype="degen", num_ticks=30)
    obs, _ = single.reset(seed=5)
    obs_m, _ = shared.reset(seed=5)
    assert np.array_equal(obs, obs_m["trader_0"])
    rng = np.random.default_rng(2)
    paid = 0
    for t in range(30):
        act = rng.integers(0, single.action_space.nvec)
        obs, reward, term, trunc, info = single.step(act)
        obs_m, rewards, _, _, infos = shared.step({"trader_0": act})
        assert np.array_equal(obs, obs_m["trader_0"]) and reward == rewards["trader_0"], f"tick {t}"
        assert info["reward_components"] == infos["trader_0"]["reward_components"], f"tick {t}"
        paid += info["reward_components"]["behavior"] != 0
        if term or trunc:
            break
    assert paid >= 3, f"the behavior component was paid on only {paid} ticks"


def test_each_agent_is_paid_its_own_behavior_and_forks_carry_the_trackers():
    from rlaif_gym.rewards.archetypes import behavior_score

    env = RLAIFMultiAgentEnv(num_agents=2, archetype="social-butterfly", num_ticks=10)
    env.reset(seed=3)
    empty = behavior_score("social-butterfly", env._behavior["trader_0"].metrics())
    buy, join = np.array([1, 0, 2, 0]), np.array([5, 1, 0, 0])  # trader_1 only waits
    totals = {a: 0.0 for a in env.possible_agents}
    for _ in range(4):
        infos = env.step({"trader_0": buy, "trader_1": WAIT})[4]
        for a in totals:
            totals[a] += infos[a]["reward_components"]["behavior"]
    branch = env.fork(1)[0]
    infos = env.step({"trader_0": join})[4]
    assert branch.step({"trader_0": join})[4] == infos, "a fork must continue the behaviour episode, not restart it"
    for a in totals:
        totals[a] += infos[a]["reward_components"]["behavior"]
        score = behavior_score("social-butterfly", env._behavior[a].metrics())
        assert totals[a] == pytest.approx(score - empty, abs=1e-12), a
    first, second = env._behavior["trader_0"], env._behavior["trader_1"]
    assert (first.trades, first.groups, second.trades, second.groups) == (4, 1, 0, 0)
    assert totals["trader_0"] != totals["trader_1"]


def test_the_multi_agent_snapshot_is_the_single_envs_dataclass_and_restores_without_being_used_up():
    from rlaif_gym.envs import EnvSnapshot

    env = RLAIFMultiAgentEnv(num_agents=2, num_ticks=8)
    env.reset(seed=4)
    env.step({"trader_0": BUY_YES_0, "trader_1": WAIT})
    snap = env.get_state()
    assert isinstance(snap, EnvSnapshot) and snap.env_class is RLAIFMultiAgentEnv and snap.tick == 1
    expected = env.step({"trader_0": WAIT, "trader_1": BUY_YES_0})
    for _ in range(2):  # the same snapshot seeds two continuations, each the same as the original's
        other = RLAIFMultiAgentEnv(num_agents=2, num_ticks=8)
        other.set_state(snap)
        got = other.step({"trader_0": WAIT, "trader_1": BUY_YES_0})
        assert all(np.array_equal(got[0][k], expected[0][k]) for k in expected[0]) and got[1:] == expected[1:]
    with pytest.raises(ConfigError, match="agent list"):
        RLAIFMultiAgentEnv(num_agents=3, num_ticks=8).set_state(snap)
    with pytest.raises(ConfigError, match="get_state"):
        RLAIFMultiAgentEnv(num_agents=2, num_ticks=8).set_state({"config": None})
    with pytest.raises(ConfigError, match="stays in the process"):
        snap.to_bytes()
