"""The default numeric step is one compiled call (`envs.fused`) and changes nothing but the speed.

Every comparison is against the unfused compiled path (decode, world kernel, reward and encoder run
one after another), which tests/sim/test_world_rules.py and test_backend.py tie to the numpy reference:
observations, rewards, flags and infos must be bit-identical over whole episodes, bankruptcies and
autoresets included. The packed state the compiled calls take (`sim.rules.packed`) must stay one
with the state's fields: rebinding a field, copying or pickling a state never leaves stale buffers.
"""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from contextlib import redirect_stderr
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlaif_gym import RLAIFEnv, RLAIFEnvConfig
from rlaif_gym.encoding import ACTION_KINDS
from rlaif_gym.errors import InvalidActionError
from rlaif_gym.sim import _jit, rules

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not rules.available(), reason="numba is not installed")

# High fees on a small account: the churning steps of `_episode_log` go bankrupt (twice in its 260 steps; with
# shares valued at what selling them returns, a 20 USD account went bankrupt only once).
BANKRUPTING = {"starting_cash": 12.0, "min_fee": 1.0, "min_order": 1.5, "numeric_perp_leverage": 10.0,
               "max_leverage": 10.0, "num_ticks": 60}
CONFIGS = [
    {},
    BANKRUPTING,
    {"num_markets": 1, "num_npcs": 3, "num_perps": 1, "num_groups": 1, "num_ticks": 40},  # pairwise NPC sums
    {"num_markets": 7, "num_npcs": 20, "numeric_perp_leverage": 4.0, "max_leverage": 4.0, "num_ticks": 40},
]


def _episode_log(env, seed: int, steps: int) -> list:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    log = [obs.tobytes(), repr(info)]
    for t in range(steps):
        # Mostly random actions; every third tick a perp is opened or closed (fees add up).
        act = rng.integers(0, env.action_space.nvec) if t % 3 else np.array([3 + (t // 3) % 2, 0, 4, 0])
        obs, reward, terminated, truncated, info = env.step(act)
        log.append((obs.tobytes(), reward, terminated, truncated, repr(info)))
        if terminated or truncated:
            obs, info = env.reset(seed=seed + t + 1)
            log.append(obs.tobytes())
    return log


def _unfused(env):
    env.unwrapped._core.fused = None
    return env


@pytest.mark.parametrize("cfg", CONFIGS)
def test_single_env_fused_step_is_bit_identical_to_the_unfused_path(cfg):
    fused = RLAIFEnv(**cfg)
    assert fused._core.fused is not None, "the default config must take the fused path"
    plain = _unfused(RLAIFEnv(**cfg))
    a, b = _episode_log(fused, 7, 260), _episode_log(plain, 7, 260)
    assert a == b


def test_the_compared_episodes_include_bankruptcy_and_every_action_kind():
    """The bit-identity above is only worth something if the episodes exercise those paths."""
    executed: set[int] = set()
    logs = {}
    for name, cfg in (("default", CONFIGS[0]), ("bankrupting", BANKRUPTING)):
        env = RLAIFEnv(**cfg)
        original_step = env.step

        def step(action, original_step=original_step):
            result = original_step(action)
            if result[4]["feedback"]["success"]:
                executed.add(int(action[0]))
            return result

        env.step = step
        logs[name] = [entry for entry in _episode_log(env, 7, 260) if isinstance(entry, tuple)]
    assert sum(terminated for _, _, terminated, _, _ in logs["bankrupting"]) >= 2
    assert sum("'success': False" in info for *_, info in logs["bankrupting"]) >= 20
    assert executed == set(range(len(ACTION_KINDS)))


@pytest.mark.parametrize("cfg", CONFIGS[:2])
def test_native_vector_env_fused_step_is_bit_identical_to_the_unfused_path(cfg):
    def run(fused: bool) -> list:
        vec = gym.make_vec("RLAIF-v0", num_envs=16, vectorization_mode="vector_entry_point", **cfg)
        if not fused:
            vec.unwrapped.core.fused = None
        rng = np.random.default_rng(3)
        obs, _ = vec.reset(seed=11)
        log = [obs.tobytes()]
        for _ in range(90):
            obs, reward, term, trunc, info = vec.step(rng.integers(0, vec.single_action_space.nvec, size=(16, 4)))
            log.append((obs.tobytes(), reward.tobytes(), term.tobytes(), trunc.tobytes(),
                        *(info[k].tobytes() for k in ("pnl_delta", "equity", "cash", "tick", "feedback_success")),
                        *(v.tobytes() for v in info["reward_components"].values())))
        return log

    assert run(True) == run(False)


def test_configs_the_fused_step_does_not_cover_take_the_unfused_path():
    assert RLAIFEnv(reward_scheme="original")._core.fused is None
    assert RLAIFEnv(archetype="trader")._core.fused is None
    assert RLAIFEnv(backend="numpy")._core.fused is None
    assert RLAIFEnvConfig().backend == "auto"


def test_an_action_outside_the_space_is_refused_before_any_world_changes():
    env = RLAIFEnv()
    env.reset(seed=0)
    before = env.unwrapped.get_state()
    for bad in (np.array([len(ACTION_KINDS), 0, 0, 0]), np.array([1, 0, 0, -1]), np.array([0, 99, 0, 0])):
        with pytest.raises(InvalidActionError, match="action must be 4 integers"):
            env.step(bad)
    vec = gym.make_vec("RLAIF-v0", num_envs=2, vectorization_mode="vector_entry_point")
    vec.reset(seed=0)
    with pytest.raises(InvalidActionError):
        vec.unwrapped.core.step(np.array([[0, 0, 0, 0], [0, 0, 9, 0]]))
    assert int(vec.unwrapped.core.state.tick[0]) == 0  # the valid world did not step either
    after = env.unwrapped.get_state()
    assert after.tick == before.tick and np.array_equal(after.world.cash, before.world.cash)


def test_packed_buffers_back_the_state_fields_and_follow_rebinding():
    env = RLAIFEnv(num_ticks=20)
    env.reset(seed=1)
    state = env.unwrapped.state
    fb, ib, _, _, _ = rules.packed(state)
    assert np.shares_memory(state.cash, fb) and np.shares_memory(state.tick, ib)
    assert rules.packed(state)[0] is fb  # cached
    # Rebinding a field drops the cache: the next step must read the new array, not the old buffer.
    twin = RLAIFEnv(num_ticks=20)
    twin.reset(seed=1)
    state.cash = np.array([123.0])
    twin.unwrapped.state.cash[:] = 123.0
    assert "_packed" not in state.__dict__
    a, b = env.step(np.array([1, 0, 2, 0])), twin.step(np.array([1, 0, 2, 0]))
    assert a[0].tobytes() == b[0].tobytes() and repr(a[4]) == repr(b[4])
    assert a[4]["cash"] < 123.0  # the buy was paid from the new cash


def test_copies_and_pickles_of_a_packed_state_own_their_arrays():
    env = RLAIFEnv(num_ticks=20)
    env.reset(seed=2)
    env.step(np.array([0, 0, 0, 0]))
    state = env.unwrapped.state
    rules.packed(state)
    for twin in (state.copy(), pickle.loads(pickle.dumps(state))):
        assert "_packed" not in twin.__dict__
        assert not np.shares_memory(twin.cash, state.cash)
        assert all(np.array_equal(getattr(twin, n), getattr(state, n)) for n in rules.STATE_FIELDS)
    # A branch restored from a snapshot steps like the original (its own buffers, same values).
    branch = env.unwrapped.fork(1)[0]
    act = np.array([3, 1, 3, 1])
    x, y = env.step(act), branch.step(act)
    assert x[0].tobytes() == y[0].tobytes() and x[1] == y[1]


class _Dispatcher:
    """A compiled function that has not run yet in this process (numba's `signatures` is empty)."""

    signatures = ()


@pytest.mark.parametrize(("work_s", "says"), [(0.5, True), (0.0, False)])
def test_compile_notice_speaks_only_when_the_first_call_is_slow(monkeypatch, work_s, says):
    import threading

    monkeypatch.setattr(_jit, "COMPILE_NOTICE_AFTER_S", 0.05)
    monkeypatch.setattr(_jit, "_noticed", False)
    err = io.StringIO()
    with redirect_stderr(err), rules.compile_notice(_Dispatcher()):
        threading.Event().wait(work_s)
    assert ("compiling the world kernels" in err.getvalue()) is says
    assert ("compiled the world kernels in" in err.getvalue()) is says  # and how long it took
    assert err.getvalue().count("\n") == (2 if says else 0)


_KERNEL_MODULE = """
import sys, numba
from rlaif_gym.sim import rules

@numba.njit(cache=True)
def _kernel(x):
    return x + 1

with rules.compile_notice(_kernel):
    _kernel(1)
print("ran")
"""


def test_compile_notice_says_so_only_when_numbas_cache_has_nothing(tmp_path):
    """A real numba kernel in a fresh cache: the first process says it compiles and how long it took; a second
    process loads it from the cache and says nothing (before, a 2 s timer spoke on slow cache hits too)."""
    pytest.importorskip("numba")
    (tmp_path / "kernel_mod.py").write_text(_KERNEL_MODULE)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    runs = [subprocess.run([sys.executable, "kernel_mod.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    assert all(r.returncode == 0 and r.stdout == "ran\n" for r in runs), [r.stderr for r in runs]
    assert "compiling the world kernels" in runs[0].stderr and "compiled the world kernels in" in runs[0].stderr
    assert "compil" not in runs[1].stderr, runs[1].stderr
