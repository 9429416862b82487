"""Action masks: `valid_actions` is exactly what the world accepts, and the per-dimension mask keeps its promises.

Every check plays real worlds through `RLAIFCore`, forks each sampled state into one branch per
MultiDiscrete action, steps them all and compares the world's own feedback (`success`) with the
mask. The policy that drives the worlds buys, sells, opens and joins a lot on small accounts, so the
states include empty and nearly empty cash, dust holdings whose sale would not cover the fee, open
perps and joined groups; the test checks that each of those refusals was actually met.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlaif_gym import RLAIFEnv, RLAIFEnvConfig, sim
from rlaif_gym.encoding import action_masks, multidiscrete_mask, table_mask, valid_actions
from rlaif_gym.encoding.action import KIND_READS
from rlaif_gym.envs import RLAIFCore, world_params

E = sim.ErrorCode
# Refusals a state-dependent mask has to predict (the rest depend on the action alone).
STATEFUL = {E.BELOW_MIN_ORDER, E.INSUFFICIENT_CASH, E.NO_SHARES, E.PROCEEDS_BELOW_FEE, E.POSITION_EXISTS,
            E.INSUFFICIENT_MARGIN, E.NO_POSITION, E.ALREADY_MEMBER}
CONFIGS = {
    "default": {"num_ticks": 40},
    "small_account": {"num_ticks": 40, "starting_cash": 60.0, "num_markets": 2, "num_perps": 2, "num_groups": 1},
}


def _states(cfg: dict, backend: str, worlds: int = 6, ticks: int = 36, every: int = 5):
    """(core, tick) at every `every`-th tick of worlds driven by a trade-heavy random policy."""
    config = RLAIFEnvConfig(**cfg, backend=backend)
    core = RLAIFCore(config, num_worlds=worlds)
    core.reset(sim.draw_keys(np.random.default_rng(7), worlds))
    rng = np.random.default_rng(11)
    for t in range(ticks):
        if t % every == 0:
            yield core
        # Buy, open and join first; then mostly sell 75% at a time, which leaves dust holdings. Kinds declared
        # after these six share a tenth of the draws (there are none today).
        acts = rng.integers(0, core.nvec, size=(worlds, 4))
        p = np.array([0.05, 0.5, 0.05, 0.2, 0.05, 0.15] if t < 10 else [0.02, 0.05, 0.85, 0.03, 0.03, 0.02])
        extra = core.nvec[0] - 6
        if extra:
            p = np.concatenate([0.9 * p, np.full(extra, 0.1 / extra)])
        acts[:, 0] = rng.choice(core.nvec[0], size=worlds, p=p)
        acts[:, 2] = np.where(acts[:, 0] == 2, rng.choice([3, 3, 3, 4, 0], size=worlds), acts[:, 2])
        core.step(acts)


def _accepted(core: RLAIFCore):
    """What the world does with every MultiDiscrete action in each world: (success, error), (B, 6, T, 5, 2)."""
    acts = np.array(list(itertools.product(*[range(int(n)) for n in core.nvec])))
    shape = (core.num_worlds, *core.nvec)
    ok, err = np.zeros(shape, bool), np.zeros(shape, np.int64)
    for w in range(core.num_worlds):
        branches = core.fork(len(acts), w)
        out = branches.step(acts).outcome
        ok[w].flat[:] = out.success
        err[w].flat[:] = out.error
    return ok, err


@pytest.mark.parametrize("backend", ["numpy", "auto"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_valid_actions_is_exactly_what_the_world_accepts(name, backend):
    seen: set[int] = set()
    for core in _states(CONFIGS[name], backend):
        ok, err = _accepted(core)
        valid = valid_actions(core.state, core.params, core.config.numeric_perp_leverage)
        assert np.array_equal(valid, ok), f"{name}: mask and world disagree on {int((valid != ok).sum())} actions"
        seen |= set(np.unique(err[~ok]).tolist())
        # The compiled masks (one call per batch) are the reference folds, bit for bit.
        table = np.array([(0, 0, 0, 0), (1, 0, 4, 1), (2, 1, 0, 0), (3, 0, 2, 1), (4, 0, 0, 0), (5, 0, 0, 0)])
        lev = core.config.numeric_perp_leverage
        assert np.array_equal(action_masks(core.state, core.params, lev), multidiscrete_mask(valid))
        assert np.array_equal(action_masks(core.state, core.params, lev, table), table_mask(valid, table))
        assert np.array_equal(action_masks(core.state, core.params, lev, layout="joint"),
                              valid.reshape(core.num_worlds, -1))
    expected = STATEFUL - ({E.BELOW_MIN_ORDER, E.PROCEEDS_BELOW_FEE} if name == "default" else set())
    assert expected <= seen, f"these refusals never came up, so the test did not check them: {expected - seen}"


READS = {k: tuple(d + 1 for d in range(3) if KIND_READS[k, d]) for k in range(len(KIND_READS))}
"""The dimensions each kind reads, as declared (wait none; close_perp and join_group the target only)."""
assert [READS[k] for k in range(6)] == [(), (1, 2, 3), (1, 2, 3), (1, 2, 3), (1,), (1,)]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_multidiscrete_mask_keeps_its_documented_promises(name):
    allowed_refused = allowed = 0
    for core in _states(CONFIGS[name], "auto"):
        ok, _ = _accepted(core)
        mask = multidiscrete_mask(ok)
        nvec = core.nvec
        dims = np.split(mask, np.cumsum(nvec)[:-1], axis=1)
        for w in range(core.num_worlds):
            for a in itertools.product(*[range(int(n)) for n in nvec]):
                kind = a[0]
                entries_in = dims[0][w, kind] and all(dims[d][w, a[d]] for d in READS[kind])
                if not entries_in:
                    # 1. A masked-out kind, or a masked-out entry its kind reads: always refused.
                    assert not ok[(w, *a)], f"{name}: mask forbids {a}, which the world accepts"
                    continue
                allowed += 1
                if ok[(w, *a)]:
                    continue
                allowed_refused += 1
                # 2. Allowed yet refused: only the combinations a per-dimension mask cannot exclude. Either
                # another allowed kind allows this target / size / side (the mask of this kind alone would
                # not), or a sell whose market, side and size are each sold somewhere but not together.
                own = ok[w, kind]
                own_entries = (own.any(axis=(1, 2)), own.any(axis=(0, 2)), own.any(axis=(0, 1)))
                cross_kind = not all(own_entries[d - 1][a[d]] for d in READS[kind])
                # (A kind declared after these six may accept its entries only together too; its test says so.)
                assert cross_kind or kind == 2 or kind >= 6, f"{name}: {a} is allowed and refused undocumented"
            # 3. Every allowed entry is used by some accepted action (nothing is allowed for nothing).
            for d in range(1, 4):
                users = [k for k in READS if d in READS[k]]
                used = np.zeros(nvec[d], bool)
                for k in users:
                    used |= np.moveaxis(ok[w, k], d - 1, 0).reshape(nvec[d], -1).any(axis=1)
                if used.any():
                    assert np.array_equal(dims[d][w], used), f"{name}: dimension {d} allows {dims[d][w]}, used {used}"
                else:  # only waits are possible: the mask keeps entry 0 so that every dimension has one
                    assert dims[d][w].tolist() == [True] + [False] * (nvec[d] - 1)
            assert dims[0][w].tolist() == ok[w].reshape(nvec[0], -1).any(axis=1).tolist()
    assert allowed_refused < allowed


def test_single_env_and_sb3_vec_env_report_the_same_masks():
    pytest.importorskip("stable_baselines3")
    from rlaif_gym.integrations.sb3 import RLAIFSB3VecEnv, discrete_action_table

    cfg = {"num_ticks": 12}
    envs = [RLAIFEnv(cfg) for _ in range(2)]
    for i, env in enumerate(envs):
        env.reset(seed=5 + i)
    vec = RLAIFSB3VecEnv(2, cfg, seed=5)
    vec.reset()
    table = discrete_action_table(world_params(RLAIFEnvConfig(**cfg)))
    disc = RLAIFSB3VecEnv(2, cfg, seed=5, action_mode="discrete", action_table=table)
    disc.reset()
    assert np.array_equal(vec.action_masks(), np.stack([e.action_masks() for e in envs]))
    assert "action_mask" not in vec.reset_infos[1]  # no info carries a mask (the single env's carry none)
    rng = np.random.default_rng(0)
    for _ in range(14):  # past an episode end: the mask is the new episode's, like the observation
        rows = rng.integers(0, len(table), size=2)
        acts = table[rows]
        _, _, _, infos = vec.step(acts)
        disc.step(rows)
        for i, env in enumerate(envs):
            _, _, term, trunc, _ = env.step(acts[i])
            if term or trunc:
                env.reset()
            assert np.array_equal(vec.action_masks()[i], env.action_masks()) and "action_mask" not in infos[i]
            valid = valid_actions(env.unwrapped.state, env.params, env.config.numeric_perp_leverage)
            assert np.array_equal(disc.action_masks()[i], table_mask(valid, table)[0])
        assert np.array_equal(np.stack(vec.env_method("action_masks")), vec.action_masks())


def test_action_masks_needs_a_running_numeric_env():
    from rlaif_gym import ResetNeeded, RLAIFTextEnv

    with pytest.raises(ResetNeeded):
        RLAIFEnv().action_masks()
    text = RLAIFTextEnv()
    text.reset(seed=0)
    with pytest.raises(NotImplementedError, match="text face"):
        text.action_masks()
