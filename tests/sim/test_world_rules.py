"""The world's rules (`rlaif_gym.sim.rules`), compiled and as Python, against the frozen numpy engine they were
first written in (`engine_oracle`, in tests/support).

Random action sequences over whole episodes (buys, sells of fractions of the holding, opens, closes,
joins, posts, DMs, and failures of every kind: bad targets, NaN/inf/negative amounts, leverage out of
range, pre-errors) run through the oracle, the compiled step and the Python step from the same reset; after every
step the compiled and Python states and outcomes must be equal bit for bit, and against the oracle every integer
and boolean field must be equal, and every float field equal or within a relative 1e-9 (exp/log/log1p come from
different libraries and may differ in the last bit).
"""

from __future__ import annotations

from dataclasses import fields

import engine_oracle as oracle
import numpy as np
import pytest

from rlaif_gym.errors import InvalidActionError
from rlaif_gym.sim import (
    ActionBatch,
    ActionType,
    StepOutcome,
    WorldParams,
    WorldState,
    _jit,
    draw_keys,
    equity,
    reset,
    rules,
    step,
)
from rlaif_gym.sim.state import FEED_LENGTH, field_specs

pytestmark = [
    pytest.mark.skipif(not rules.available(), reason="numba is not installed (pip install rlaif-gym[fast])"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

RTOL = 1e-9
NAN, INF = float("nan"), float("inf")
_SPECIAL_AMOUNTS = np.array([0.0, -1.0, NAN, INF, -INF, 0.5, 1e-300, 0.99, 1.0, 1e6, 1e300])
_SPECIAL_LEVS = np.array([0.0, 0.5, 0.999, -2.0, 1.0, 10.0, 10.000001, 11.0, NAN, INF])


# How often each action type is drawn; a type not listed (a new one) gets the social actions' 6 %, so the fuzz
# below reaches every ActionType without this file changing.
_WEIGHTS = {ActionType.WAIT: 0.12, ActionType.BUY_PREDICTION: 0.22, ActionType.SELL_PREDICTION: 0.2,
            ActionType.OPEN_PERP: 0.16, ActionType.CLOSE_PERP: 0.12}
ORACLE_KINDS = [t for t in ActionType if t in oracle.KINDS]  # the oracle's comparison draws only what it implements


def _random_actions(rng: np.random.Generator, state: WorldState, params: WorldParams,
                    kinds=ORACLE_KINDS) -> ActionBatch:
    """One action per world of `kinds`, drawn to hit each of them and every failure."""
    b = state.batch_size
    p = np.array([_WEIGHTS.get(t, 0.06) for t in kinds])
    kind = rng.choice(np.array([int(t) for t in kinds]), size=b, p=p / p.sum()).astype(np.int64)
    target = rng.integers(0, 8, size=b)
    bad = rng.random(b) < 0.06
    target[bad] = rng.choice([-1, -7, 3, 4, 5, 8, 16, 2**31], size=bad.sum())
    side = rng.integers(0, 2, size=b)
    amount = np.where(rng.random(b) < 0.5, rng.uniform(1.0, 4000.0, b), rng.uniform(1.0, 500.0, b))
    special = rng.random(b) < 0.08
    amount[special] = rng.choice(_SPECIAL_AMOUNTS, size=special.sum())
    leverage = rng.uniform(1.0, params.max_leverage, b)
    special = rng.random(b) < 0.1
    leverage[special] = rng.choice(_SPECIAL_LEVS, size=special.sum())
    # Sells: mostly a fraction of what is held (all of it, a hair above it, half, more than held).
    for w in np.nonzero(kind == 2)[0]:
        m = target[w] % params.num_markets if 0 <= target[w] < 2**31 else 0
        if rng.random() < 0.8 and 0 <= target[w] < params.num_markets:
            held = (state.hold_yes if side[w] == 0 else state.hold_no)[w, m]
            amount[w] = held * rng.choice([1.0, 1.0 + 5e-10, 0.5, 0.1, 1e-6, 1.5])
    # Perp targets mostly in range; closes mostly on an open position.
    perp = (kind == 3) | (kind == 4)
    target[perp & ~bad] %= params.num_perps
    pre_error = np.where(rng.random(b) < 0.03, rng.choice([1, 6, 14, 16, 19], size=b), 0).astype(np.int64)
    return ActionBatch(kind=kind, target=target.astype(np.int64), side=side.astype(np.int64), amount=amount,
                       leverage=leverage, pre_error=pre_error, pre_a=rng.uniform(0, 10, b), pre_b=np.zeros(b))


def _close(name: str, a: np.ndarray, b: np.ndarray, worst: dict, scale=0.0) -> None:
    """Integers and booleans equal; floats equal or within RTOL of max(|a|, |b|, scale)."""
    assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
    if a.dtype.kind == "f":
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        with np.errstate(invalid="ignore"):
            diff = np.abs(a - b)
            rel = np.where(same, 0.0, diff / np.maximum(np.maximum(np.abs(a), np.abs(b)), scale))
        rel = np.where(np.isnan(rel), np.inf, rel)
        worst[name] = max(worst.get(name, 0.0), float(rel.max(initial=0.0)))
        assert np.all(rel <= RTOL), f"{name}: max relative difference {rel.max():.3g}"
    else:
        assert np.array_equal(a, b), f"{name} differs at {np.argwhere(a != b)[:5].tolist()}"


def _compare(ref_state, fast_state, ref_out, fast_out, worst):
    for f in fields(WorldState):
        _close(f.name, getattr(ref_state, f.name), getattr(fast_state, f.name), worst)
    for f in fields(StepOutcome):
        # pnl_delta is a difference of two equities: measure its error against the equity.
        scale = np.abs(ref_out.equity_before) if f.name == "pnl_delta" else 0.0
        _close("out." + f.name, getattr(ref_out, f.name), getattr(fast_out, f.name), worst, scale)


def _same(fast_state, py_state, fast_out, py_out) -> None:
    """The compiled and the Python step: the same bits in every field."""
    for f in fields(WorldState):
        assert np.array_equal(getattr(fast_state, f.name), getattr(py_state, f.name), equal_nan=True), f.name
    for f in fields(StepOutcome):
        assert np.array_equal(getattr(fast_out, f.name), getattr(py_out, f.name), equal_nan=True), "out." + f.name


def _run(params: WorldParams, seed: int, b: int, steps: int) -> dict:
    rng = np.random.default_rng(seed)
    keys = draw_keys(rng, b)
    ref = oracle.reset(params, keys)
    fst = reset(params, keys)
    py = reset(params, keys, compiled=False)
    for f in fields(WorldState):  # reset is exact: no exp or log differs in its draws
        assert np.array_equal(getattr(ref, f.name), getattr(fst, f.name)), f.name
    worst: dict = {}
    seen = {"errors": set(), "succeeded": set(), "liquidated": 0, "resolved": 0, "bankrupt": 0, "fired": 0}
    for _ in range(steps):
        a = _random_actions(rng, ref, params)
        ro = oracle.step(ref, a, params)
        fo = rules.step(fst, a, params)
        _same(fst, py, fo, step(py, a, params, compiled=False))
        _compare(ref, fst, ro, fo, worst)
        # The account's valuation: the step's per-world text (`_scalars.equity`) and the batch's (`sim.equity`).
        assert np.array_equal(rules.equities(fst, params), equity(fst, params)), "equity: per world != batched"
        seen["errors"] |= set(ro.error.tolist())
        seen["succeeded"] |= set(a.kind[ro.success].tolist())
        seen["liquidated"] += int(ro.liquidated.sum())
        seen["resolved"] += int(ro.resolved.sum())
        seen["bankrupt"] += int(ro.bankrupt.sum())
        seen["fired"] += int((ref.news_kind == 2).sum())
    return worst, seen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_step_matches_numpy_over_episodes(seed):
    worst, seen = _run(WorldParams(), seed, b=8, steps=168)
    assert max(worst.values()) <= RTOL
    # The episodes exercised every action type the oracle knows (each succeeded somewhere) and most failures.
    assert seen["succeeded"] >= {int(t) for t in ORACLE_KINDS}, seen
    assert len(seen["errors"]) >= 14, seen
    assert seen["resolved"] > 0 and seen["fired"] > 0, seen


def test_every_action_kind_runs_the_same_compiled_and_as_python():
    """Every declared kind, the oracle's and any added since, over whole episodes: compiled = Python, bit for bit,
    and each kind succeeded somewhere (opens come often enough that a kind acting on a position finds one)."""
    params = WorldParams()
    rng = np.random.default_rng(5)
    keys = draw_keys(rng, 8)
    fst, py = reset(params, keys), reset(params, keys, compiled=False)
    succeeded: set[int] = set()
    for _ in range(168):
        a = _random_actions(rng, fst, params, kinds=list(ActionType))
        fo = rules.step(fst, a, params)
        _same(fst, py, fo, step(py, a, params, compiled=False))
        succeeded |= set(a.kind[fo.success].tolist())
    assert succeeded >= {int(t) for t in ActionType}, succeeded


@pytest.mark.parametrize(
    "params",
    [
        WorldParams(num_markets=1, num_perps=1, num_npcs=9, num_groups=1),  # K sums pairwise when M == 1
        WorldParams(num_markets=12, num_perps=5, num_npcs=20, num_groups=2, funding_interval=3,
                    market_duration_min=3, market_duration_max=6, max_leverage=50.0, perp_volatility=0.05,
                    narrative_rate=0.5),  # pairwise sums over M >= 8, frequent resolutions and liquidations
        WorldParams(num_markets=16, num_npcs=64, fee_rate=0.0, min_fee=0.0, tip_rate=1.0, news_rate=1.0),
    ],
    ids=["m1", "m12-volatile", "m16-k64"],
)
def test_fast_step_matches_numpy_other_params(params):
    worst, seen = _run(params, 7, b=6, steps=100)
    assert max(worst.values()) <= RTOL
    if params.perp_volatility > 0.01:
        assert seen["liquidated"] > 0, seen


def test_fast_step_rejects_bad_kinds_without_touching_state():
    params = WorldParams()
    state = reset(params, np.array([1, 2], dtype=np.uint64))
    before = state.copy()
    a = ActionBatch.waits(2)
    a.kind[1] = 99
    with pytest.raises(InvalidActionError):
        rules.step(state, a, params)
    with pytest.raises(InvalidActionError):
        rules.step(state, a, params, compiled=False)
    for f in fields(WorldState):
        assert np.array_equal(getattr(state, f.name), getattr(before, f.name)), f.name


def test_fast_step_matches_numpy_when_one_world_loses_two_positions_in_a_tick():
    params = WorldParams()
    keys = np.array([11, 12], dtype=np.uint64)
    ref = oracle.reset(params, keys)
    n = 2
    for t in range(2):  # a 10x long on perps 0 and 1 in both worlds
        a = ActionBatch.waits(n)
        a.kind[:], a.target[:], a.amount[:], a.leverage[:] = 3, t, 1000.0, 10.0
        assert oracle.step(ref, a, params).success.all()
    ref.perp_price[:, :2] *= 0.5  # a crash: both positions are liquidated at the next tick
    fst, py = ref.copy(), ref.copy()
    worst: dict = {}
    ro = oracle.step(ref, ActionBatch.waits(n), params)
    fo = rules.step(fst, ActionBatch.waits(n), params)
    assert ro.liquidated.tolist() == [2, 2]
    _compare(ref, fst, ro, fo, worst)
    _same(fst, py, fo, step(py, ActionBatch.waits(n), params, compiled=False))


def test_the_kernel_cache_is_keyed_by_every_source_a_kernel_freezes(tmp_path, monkeypatch):
    """numba's own cache checks only the timestamp of the file defining a function; the fused step inlines this
    module's helpers, so after an edit here it ran stale code (found in issue 28: the exposure change). The cache
    directory is a digest of every kernel source, so any edit compiles afresh."""
    sources = [tmp_path / "a.py", tmp_path / "b.py"]
    for path in sources:
        path.write_text("x = 1\n")
    monkeypatch.setenv("RLAIF_GYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_jit, "kernel_sources", lambda: sources)
    rules.kernel_cache_dir.cache_clear()
    try:
        first = rules.kernel_cache_dir()
        assert first is not None and first.is_dir() and first.parent == tmp_path / "cache" / "kernels"
        sources[1].write_text("x = 2\n")  # an edit of a file the kernel inlines from
        rules.kernel_cache_dir.cache_clear()
        assert rules.kernel_cache_dir() != first
        monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))  # numba's own setting wins
        rules.kernel_cache_dir.cache_clear()
        assert rules.kernel_cache_dir() is None
    finally:
        rules.kernel_cache_dir.cache_clear()


def test_the_kernel_sources_cover_every_compiled_module():
    names = {p.relative_to(p.parents[1]).as_posix() for p in _jit.kernel_sources()}
    assert {"sim/rules.py", "sim/constants.py", "sim/params.py", "sim/packing.py", "encoding/fast.py",
            "encoding/mask.py",
            "envs/fused.py"} <= names


def test_every_state_field_is_declared_once_and_the_compiled_state_follows_it():
    """A WorldState field's dtype and dims live in its declaration; reset, the packed layout and the kernels'
    named tuple are derived from it, so a field added there reaches the compiled step with no other edit."""
    params = WorldParams(num_markets=3, num_perps=2, num_npcs=5, num_groups=2)
    sizes = {"M": 3, "P": 2, "K": 5, "G": 2, "R": FEED_LENGTH}
    state = reset(params, draw_keys(np.random.default_rng(0), 4))
    specs = field_specs()
    assert [s.name for s in specs] == [f.name for f in fields(WorldState)] == list(rules.WorldArrays._fields)
    for spec in specs:
        arr = getattr(state, spec.name)
        assert arr.dtype == spec.dtype and arr.shape == (4, *(sizes[d] for d in spec.dims)), spec
    fb, ib, kb, bb, table = rules.packed(state)
    assert table.shape[0] == len(specs) + 1
    for buffer, kind in ((fb, "f"), (ib, "i"), (kb, "u"), (bb, "b")):
        assert buffer.size == sum(getattr(state, s.name).size for s in specs if s.dtype.kind == kind)
    # The packed views are the state's arrays: a write through the state shows in the buffer.
    state.cash[2] = 123.0
    assert 123.0 in fb
    blank = WorldState.allocate(4, {"M": 3, "P": 2, "K": 5, "G": 2})
    assert all(np.all(getattr(blank, s.name) == s.fill) for s in specs)


def test_a_throwaway_pack_matches_the_kept_one_and_leaves_the_state_alone():
    """`packed_copy` (the encoder's, for a state nobody will step, e.g. a vector env's autoreset) gives the buffers
    and table `packed` would, without rebinding the state's arrays to views or caching anything on it."""
    params = WorldParams(num_markets=3, num_perps=2, num_npcs=5, num_groups=2)
    state = reset(params, draw_keys(np.random.default_rng(1), 3)).copy()  # reset's state is packed; a copy is not
    assert "_packed" not in state.__dict__
    before = {f.name: getattr(state, f.name) for f in fields(WorldState)}
    copied = rules.packed_copy(state)
    assert "_packed" not in state.__dict__
    assert all(getattr(state, name) is arr for name, arr in before.items())
    kept = rules.packed(state.copy())
    for a, b in zip(copied, kept, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert rules.packed_copy(state.copy()) is not kept and rules.packed(state) is rules.packed_copy(state)


def test_every_random_stream_is_its_own():
    """The world's random streams (`*_STREAM` constants: markets, reset, the agents' order, a rule's own draws) are
    distinct multiples of 2**40 below 2**47, so that stream + tick or serial never reaches another stream and
    stream * 2**16 (the draw counter's base) stays within 64 bits."""
    from rlaif_gym.sim import constants, multi

    streams: dict[str, int] = {}  # by name: rules imports constants' streams under their own names
    for module in (constants, multi, rules):
        for name, value in vars(module).items():
            if name.endswith("_STREAM") and isinstance(value, int):
                assert streams.setdefault(name, value) == value, f"{name} has two values"
    assert len(streams) >= 3, streams
    assert len(set(streams.values())) == len(streams), f"two streams share a value: {streams}"
    for name, value in streams.items():
        assert value % 2**40 == 0 and 2**40 <= value < 2**47, f"{name} = {value} is not a multiple of 2**40 below 2**47"
