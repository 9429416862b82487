"""A numba-compiled `step` with the semantics of `engine.step` (docs/layout.md ("Design rules", rule 1)).

`fast.step(state, actions, params)` mutates `state` and returns a `StepOutcome` exactly as
`engine.step` does; `engine.step` stays the reference. numba is a core dependency; where it cannot be
installed or imported, `available()` is False and `step` falls back to `engine.step`. Kernels compile
on first use, once per machine (30-90 s on 2 cores; `compile_notice` says so), and are
cached in `kernel_cache_dir()`: the user cache (`rlaif_gym.sim.paths.user_cache_dir`, moved with
``$RLAIF_GYM_CACHE``) under a digest of every source a kernel freezes at compile time (this package's
`sim` modules, `encoding/fast.py` and `mask.py`, `envs/fused.py`) and of the numba and Python versions. numba's own
cache checks only the timestamp of the file that defines a function, so a kernel that inlines helpers
from another module (the fused step inlines this module's) would otherwise keep running stale code
after that module changes. ``$NUMBA_CACHE_DIR``, when set, is numba's and wins.

How it stays the same as the numpy path:
- one kernel loops over worlds and does, per world, what the vectorised functions do, in the same
  order (`_apply_actions`, `_advance_perps`, `_funding_and_liquidation`, `_npc_trades`,
  `_information`, `_resolve_markets` with `_open_markets`), with the same floating-point operation
  order (left to right as numpy evaluates the expressions);
- random draws use the same counter-based SplitMix64 hash and the same column layout as `engine._Cols`;
- sums reproduce numpy's reduction order: pairwise summation (8 accumulators from 8 terms on) along
  a contiguous last axis, plain left-to-right accumulation along any other axis;
- several liquidations in one world accumulate in position order, as `np.add.at` does in the engine.

What can differ: exp, log and log1p come from the C library here and from numpy's SIMD code there,
and the two differ in the last bit for a few percent of arguments. Everything else is IEEE-exact, so
float fields agree to about 1e-15 relative and discrete fields agree exactly (tests/sim/test_fast.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import math
import operator
import os
import platform
import sys
import threading
import time
import types
from dataclasses import fields
from pathlib import Path

import numpy as np

from ..errors import InvalidActionError
from . import engine
from .actions import ActionBatch, ActionType
from .params import GROUP_NAMES, NEWS_SOURCES, NpcBehaviour, WorldParams
from .paths import user_cache_dir
from .state import FEED_LENGTH, WorldState

try:  # a core dependency, but the numpy engine stays usable where numba cannot be installed
    import numba
except ImportError:  # pragma: no cover - exercised only where numba is absent
    numba = None

__all__ = ["available", "compile_notice", "kernel_cache_dir", "packed", "step"]

COMPILE_NOTICE_AFTER_S = 2.0
"""Where numba's cache cannot be inspected: a first call still running after this many seconds is compiling."""
_noticed = False
_warm = False  # `step` has run its kernel in this process (so it skips `compile_notice`)
_KERNEL_NAMES = {"rlaif_gym.sim.fast._unpacked_kernel_calls": "world step",
                 "rlaif_gym.sim.fast._unpacked_kernel": "world step (inlined, for the fused step)",
                 "rlaif_gym.envs.fused._fused": "fused step (world, reward, observation)",
                 "rlaif_gym.encoding.fast._kernel": "observation encoder"}


def available() -> bool:
    """True when numba is installed, so `step` runs compiled."""
    return numba is not None


def _has_cache(dispatcher) -> bool | None:
    """Whether numba's on-disk cache holds an index for `dispatcher` (its first call then loads machine code
    rather than compiling: the cache directory is keyed by the kernels' sources, and numba checks their
    contents); None where that cannot be read (not a numba dispatcher, or numba's internals moved)."""
    try:
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except (AttributeError, TypeError):
        return None


@contextlib.contextmanager
def compile_notice(dispatcher):
    """Around a compiled function's first call in this process: say on stderr when it compiles, and how long.

    numba compiles on the first call and caches the machine code on disk, so only a machine's first run
    (or the first after an upgrade) waits, for minutes on 2 cores; that wait should not look like a hang,
    and a cache hit (well under a second) should not claim to compile. So the line before the call prints
    only when the cache has nothing for this kernel, and a line after it gives the measured compile time
    (numba's own count of cache misses says a compile ran). Where the cache cannot be inspected, a timer
    prints the first line if the call is still running after `COMPILE_NOTICE_AFTER_S`.
    """
    global _noticed
    if getattr(dispatcher, "signatures", True):
        yield
        return
    name = _KERNEL_NAMES.get(f"{getattr(dispatcher, '__module__', '')}.{getattr(dispatcher, '__name__', '')}",
                             "world kernels")
    cached = _has_cache(dispatcher)

    spoke = []

    def say() -> None:
        global _noticed
        spoke.append(True)
        if not _noticed:
            _noticed = True
            folder = kernel_cache_dir()
            print(f"rlaif-gym: compiling the world kernels for this machine (once: about 30 s for the text face, "
                  f"1-2 minutes for the numeric one, on 2 cores; cached "
                  f"afterwards{f' in {folder}' if folder else ''}; backend='numpy' skips it)", file=sys.stderr,
                  flush=True)

    timer = None
    if cached is False:
        say()
    elif cached is None and not _noticed:
        timer = threading.Timer(COMPILE_NOTICE_AFTER_S, say)
        timer.daemon = True
        timer.start()
    started = time.perf_counter()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        misses = getattr(dispatcher, "_cache_misses", None)
        if (misses is not None and sum(misses.values()) > 0) or (misses is None and spoke):
            print(f"rlaif-gym: compiled the {name} in {time.perf_counter() - started:.0f} s", file=sys.stderr,
                  flush=True)


_PACKAGE = Path(__file__).resolve().parents[1]


def _kernel_sources() -> list[Path]:
    """Every file whose code or constants a compiled kernel freezes: the sim package, the compiled encoder and
    action mask, and the fused step (they inline this module's helpers and read the engine's constants)."""
    return sorted([*(_PACKAGE / "sim").glob("*.py"), *(_PACKAGE / "encoding" / name for name in ("fast.py", "mask.py")),
                   _PACKAGE / "envs" / "fused.py"])


@functools.lru_cache(maxsize=1)
def kernel_cache_dir() -> Path | None:
    """Where the compiled kernels are cached (see the module docstring), created on first use; None when
    ``$NUMBA_CACHE_DIR`` is set (numba's choice wins) or the directory cannot be written (numba's default,
    next to the sources)."""
    if numba is None or os.environ.get("NUMBA_CACHE_DIR"):
        return None
    digest = hashlib.sha256()
    for path in _kernel_sources():
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(f"{numba.__version__}|{sys.version_info[:2]}|{platform.machine()}".encode())
    folder = user_cache_dir() / "kernels" / digest.hexdigest()[:16]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def _njit(fn, **options):
    """numba.njit(cache=True, ...) with the cache in `kernel_cache_dir()` (numba reads its cache directory when a
    function is decorated, so it is set around the decoration only)."""
    folder = kernel_cache_dir()
    previous = numba.config.CACHE_DIR
    if folder is not None:
        numba.config.CACHE_DIR = str(folder)
    try:
        return numba.njit(cache=True, nogil=True, error_model="numpy", **options)(fn)
    finally:
        numba.config.CACHE_DIR = previous


def _jit(fn):
    return _njit(fn) if numba is not None else fn


def _jit_flat(fn):
    """A kernel without numba's runtime: it allocates nothing (its caller hands it scratch), so no array
    passed to an inlined helper inside its world loop pays an atomic reference-count pair (those pairs
    were about 30 % of a world-tick)."""
    return _njit(fn, _nrt=False) if numba is not None else fn


_INLINED: list[str] = []
"""Names of the `_jit_inline` helpers (see `_rebound`)."""


def _jit_inline(fn):
    """A helper inlined into its caller at the numba IR level (no call, no reference counting)."""
    _INLINED.append(fn.__name__)
    return _njit(fn, inline="always") if numba is not None else fn


def _rebound(dispatcher, name: str, helpers: dict):
    """A second compiled copy of a kernel, named `name`, whose helpers are the dispatchers in `helpers`.

    Why: numba inlines a `_jit_inline` helper by copying it into every call site of its caller's IR, and
    types the copy again: that is most of the world kernel's compile time (the world step inlines about 100
    sites), and it makes the numeric face's hot loops fast. The text face steps one world per LLM call, where
    a real call costs nothing measurable, so it runs a copy of the kernel whose helpers are real calls: the
    same code, the same arithmetic in the same order (so the same bits: tests/envs/test_fused.py compares the
    two paths step by step), compiled in
    about half the time (docs/benchmarks.md ("Time to first step")).
    """
    if numba is None:
        return dispatcher
    fn = dispatcher.py_func
    copy = types.FunctionType(fn.__code__, {**fn.__globals__, **helpers}, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__, copy.__doc__ = name, fn.__doc__  # numba keys its on-disk cache by the qualified name
    return _njit(copy, _nrt=False)


_U64 = np.uint64
_C1 = _U64(0xBF58476D1CE4E5B9)
_C2 = _U64(0x94D049BB133111EB)
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_S16 = _U64(1 << 16)
_SH11 = _U64(11)
_SH27 = _U64(27)
_SH30 = _U64(30)
_SH31 = _U64(31)
_TO_UNIT = 2.0**-53
_MARKET_STREAM = engine._MARKET_STREAM
_SIGNAL_DECAY = engine._SIGNAL_DECAY
_PERP_NEWS_DECAY = engine._PERP_NEWS_DECAY
_LEAK_RELIABILITY = engine._LEAK_RELIABILITY
_LEAK_RATE = engine._LEAK_RATE
_INFORMED_NOISE = engine._INFORMED_NOISE
_REP_STEP = engine._REP_STEP
_TWO_PI = 2.0 * np.pi
_R = FEED_LENGTH
_INFORMED = NpcBehaviour.INFORMED
_DECEIVER = NpcBehaviour.DECEIVER
_MOMENTUM = NpcBehaviour.MOMENTUM
_MAX_KIND = int(max(ActionType))

# ---------------------------------------------------------------------------------------------
# Scalar helpers with numpy's semantics


@_jit_inline
def _fmax(a, b):
    """np.maximum: NaN-propagating."""
    return a if (a >= b or a != a) else b


@_jit_inline
def _fmin(a, b):
    """np.minimum: NaN-propagating."""
    return a if (a <= b or a != a) else b


@_jit_inline
def _isfinite(x):
    return not (math.isinf(x) or math.isnan(x))


@_jit_inline
def _psum(a, n):
    """numpy's pairwise sum of a[:n] (what `arr.sum(axis=-1)` does on a contiguous last axis, n <= 128)."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
    i = 8
    stop = n - n % 8
    while i < stop:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return 0.0 + res


@_jit_inline
def _mix(x):
    x = (x ^ (x >> _SH30)) * _C1
    x = (x ^ (x >> _SH27)) * _C2
    return x ^ (x >> _SH31)


@_jit_inline
def _uniform_at(key, base, j):
    """The j-th of rng.uniforms(key, stream), where base = stream * 2**16. The generator is counter-based,
    so the kernel draws only the numbers a tick uses and still matches the engine's full draw."""
    c = base + _U64(j)
    x = _mix(key ^ _mix(c * _GOLDEN + _GOLDEN))
    return float(x >> _SH11) * _TO_UNIT


@_jit_inline
def _uniforms(key, stream, n, out):
    """rng.uniforms for one world: out[:n] from (key, stream)."""
    base = stream * _S16
    for j in range(n):
        out[j] = _uniform_at(key, base, j)


@_jit_inline
def _normal(u1, u2):
    return math.sqrt(-2.0 * math.log1p(-u1)) * math.cos(_TWO_PI * u2)


@_jit_inline
def _fee(fee_rate, min_fee, gross):
    return _fmax(fee_rate * gross, min_fee)


# ---------------------------------------------------------------------------------------------
# Accounting (engine.share_value / liquidation_value / equity / exposure for one world)


@_jit_inline
def _share_value(b, m, pm_yes, pm_no, hold_yes, hold_no, buf):
    for j in range(m):
        p = pm_no[b, j] / (pm_yes[b, j] + pm_no[b, j])
        buf[j] = hold_yes[b, j] * p + hold_no[b, j] * (1.0 - p)
    return _psum(buf, m)


@_jit_inline
def _net_sale(same, other, sh, fee_rate, min_fee):
    """engine._net_sale for one holding: sell_proceeds, less the fee, never below 0 (0 for no shares)."""
    if sh == 0.0:
        return 0.0
    a_ = same + sh + other
    disc = _fmax(a_ * a_ - 4.0 * sh * other, 0.0)
    gross = (2.0 * sh * other) / (a_ + math.sqrt(disc))
    return _fmax(gross - _fee(fee_rate, min_fee, gross), 0.0)


@_jit_inline
def _liquidation_value(b, m, fee_rate, min_fee, pm_yes, pm_no, hold_yes, hold_no, buf):
    for j in range(m):
        y, n = pm_yes[b, j], pm_no[b, j]
        buf[j] = _net_sale(y, n, hold_yes[b, j], fee_rate, min_fee) + _net_sale(n, y, hold_no[b, j], fee_rate, min_fee)
    return _psum(buf, m)


@_jit_inline
def _equity(b, m, np_, fee_rate, min_fee, cash, pm_yes, pm_no, hold_yes, hold_no, pos_side, pos_entry, pos_margin,
            pos_notional, perp_price, buf):
    sv = _liquidation_value(b, m, fee_rate, min_fee, pm_yes, pm_no, hold_yes, hold_no, buf)
    for t in range(np_):
        s = pos_side[b, t]
        entry = pos_entry[b, t] if s != 0 else 1.0
        upnl = s * (perp_price[b, t] / entry - 1.0) * pos_notional[b, t]
        buf[t] = _fmax(pos_margin[b, t] + upnl, 0.0) if s != 0 else 0.0
    perp = _psum(buf, np_)
    return cash[b] + sv + perp


@_jit_inline
def _exposure(b, m, np_, pm_yes, pm_no, hold_yes, hold_no, pos_side, pos_entry, pos_notional, perp_price, buf):
    sv = _share_value(b, m, pm_yes, pm_no, hold_yes, hold_no, buf)
    for t in range(np_):
        s = pos_side[b, t]
        entry = pos_entry[b, t] if s != 0 else 1.0
        buf[t] = abs(s) * pos_notional[b, t] * perp_price[b, t] / entry
    return sv + _psum(buf, np_)


# ---------------------------------------------------------------------------------------------
# The kernel. Its parameters after the first 13 are the WorldState fields, in dataclass order
# (checked at import), then the outcome buffers.

# Float parameters (pf) and integer parameters (pi), in this order.
_PF = ("fee_rate", "min_fee", "min_order", "max_leverage", "perp_volatility", "news_rate", "post_rate", "tip_rate",
       "npc_trade_rate", "narrative_rate", "market_liquidity")
_PI = ("num_markets", "num_perps", "num_npcs", "num_groups", "market_duration_min", "market_duration_max",
       "funding_interval")
# Outcome rows: floats, ints, bools.
_OF = ("error_a", "error_b", "filled_shares", "filled_usd", "fee", "equity_before", "equity_after", "pnl_delta",
       "exposure_ratio", "leverage_requested", "payout")
_OI = ("error", "resolved", "liquidated")
_OB = ("success", "added_exposure", "bankrupt")


@_jit_inline
def _settle(b, t, liquidation, fee_rate, min_fee, cash, fees_paid, fees_collected, house_cash, realized_pnl,
            pos_side, pos_notional, pos_entry, pos_leverage, pos_margin, perp_price, house0, realized0):
    """engine._settle_positions for one position; returns (payout, fee).

    Several positions of one world settle one after another (the engine accumulates with `np.add.at`,
    in the same order). `house0` / `realized0` are unused and kept for the call signature.
    """
    margin = pos_margin[b, t]
    if liquidation:
        payout = 0.0
        fee = 0.0
        cash[b] = cash[b] + payout
        fees_paid[b] = fees_paid[b] + fee
        fees_collected[b] = fees_collected[b] + fee
        house_cash[b] += margin - payout - fee
        realized_pnl[b] += payout - margin
    else:
        s = pos_side[b, t]
        pnl = s * (perp_price[b, t] / pos_entry[b, t] - 1.0) * pos_notional[b, t]
        fee = _fee(fee_rate, min_fee, pos_notional[b, t] * perp_price[b, t] / pos_entry[b, t])
        payout = _fmax(margin + pnl - fee, 0.0)
        fee = _fmin(fee, margin + _fmax(pnl, -margin))
        fee = _fmax(fee, 0.0)
        cash[b] += payout
        fees_paid[b] += fee
        fees_collected[b] += fee
        house_cash[b] += margin - payout - fee
        realized_pnl[b] += payout - margin
    pos_side[b, t] = 0
    pos_notional[b, t] = 0.0
    pos_entry[b, t] = 0.0
    pos_leverage[b, t] = 0.0
    pos_margin[b, t] = 0.0
    return payout, fee


@_jit_inline
def _ring6(count, a1, a2, a3, a4, a5, a6, b, v1, v2, v3, v4, v5, v6):
    slot = count[b] % _R
    a1[b, slot] = v1
    a2[b, slot] = v2
    a3[b, slot] = v3
    a4[b, slot] = v4
    a5[b, slot] = v5
    a6[b, slot] = v6
    count[b] += 1


@_jit_inline
def _ring5(count, a1, a2, a3, a4, a5, b, v1, v2, v3, v4, v5):
    slot = count[b] % _R
    a1[b, slot] = v1
    a2[b, slot] = v2
    a3[b, slot] = v3
    a4[b, slot] = v4
    a5[b, slot] = v5
    count[b] += 1


@_jit_flat  # a real call: it runs only on ticks where a market is due
def _resolve_and_reopen(b, now, m, k, k_pairwise, liq, dmin, dmax, key, due, ap, buf, npc_pay, npc_pay_m, kbuf, u4,
                        out_i, out_f, n_due, pm_yes, pm_no, pm_collateral, pm_house_yes, pm_house_no, pm_truth,
                        pm_outcome, pm_open_tick, pm_resolve_tick, pm_serial, pm_last_price, pm_npc_flow, next_serial,
                        cash, hold_yes, hold_no, cost_yes, cost_no, realized_pnl, npc_cash, npc_yes, npc_no, npc_rep,
                        npc_claims, news_acc, post_acc, group_acc, house_cash):
    """engine._resolve_markets and _open_markets for world b on a tick where n_due > 0 markets are due."""
    for j in range(m):
        d = pm_resolve_tick[b, j] <= now
        due[j] = d
        ap[j] = (hold_yes[b, j] if pm_outcome[b, j] == 1 else hold_no[b, j]) if d else 0.0
    payout = _psum(ap, m)
    cash[b] += payout
    for j in range(m):
        buf[j] = ap[j] - cost_yes[b, j] - cost_no[b, j] if due[j] else 0.0
    realized_pnl[b] += _psum(buf, m)
    for j in range(m):
        if due[j]:
            hold_yes[b, j] = 0.0
            hold_no[b, j] = 0.0
            cost_yes[b, j] = 0.0
            cost_no[b, j] = 0.0
    for i in range(k):
        for j in range(m):
            yw = pm_outcome[b, j] == 1
            npc_pay[i, j] = (npc_yes[b, i, j] if yw else npc_no[b, i, j]) if due[j] else 0.0
        npc_cash[b, i] += _psum(npc_pay[i], m)
        for j in range(m):
            c = npc_claims[b, i, j]
            sg = 1.0 if c > 0 else (-1.0 if c < 0 else (0.0 if c == 0 else c))
            buf[j] = sg * (1.0 if pm_outcome[b, j] == 1 else -1.0) if due[j] else 0.0
        rep = npc_rep[b, i] + _REP_STEP * _psum(buf, m)
        npc_rep[b, i] = _fmin(_fmax(rep, 0.0), 100.0)
        for j in range(m):
            if due[j]:
                npc_yes[b, i, j] = 0.0
                npc_no[b, i, j] = 0.0
    for j in range(m):
        if k_pairwise:
            for i in range(k):
                kbuf[i] = npc_pay[i, j]
            npc_pay_m[j] = _psum(kbuf, k)
        else:
            acc = 0.0
            for i in range(k):
                acc += npc_pay[i, j]
            npc_pay_m[j] = acc
        buf[j] = pm_collateral[b, j] - ap[j] - npc_pay_m[j] if due[j] else 0.0
    house_cash[b] += _psum(buf, m)
    # _open_markets(due)
    opened = 0
    for j in range(m):
        if not due[j]:
            continue
        pm_collateral[b, j] = 0.0
        serial = next_serial[b] + opened
        opened += 1
        _uniforms(key[b], _U64(_MARKET_STREAM + serial), 4, u4)
        truth = 0.1 + 0.8 * u4[0]
        p0 = 0.3 + 0.4 * u4[2]
        life = dmin + np.int64(math.floor(u4[3] * (dmax - dmin + 1)))
        pool_yes = 2.0 * liq * (1.0 - p0)
        pool_no = 2.0 * liq * p0
        collateral = _fmax(pool_yes, pool_no)
        pm_yes[b, j] = pool_yes
        pm_no[b, j] = pool_no
        pm_collateral[b, j] = collateral
        pm_house_yes[b, j] = collateral - pool_yes
        pm_house_no[b, j] = collateral - pool_no
        house_cash[b] -= collateral
        pm_truth[b, j] = truth
        pm_outcome[b, j] = 1 if u4[1] < truth else 0
        pm_open_tick[b, j] = now
        pm_resolve_tick[b, j] = now + life
        pm_serial[b, j] = serial
        pm_last_price[b, j] = p0
        pm_npc_flow[b, j] = 0.0
        news_acc[b, j] = 0.0
        post_acc[b, j] = 0.0
        for gg in range(group_acc.shape[1]):
            group_acc[b, gg, j] = 0.0
        for i in range(npc_claims.shape[1]):
            npc_claims[b, i, j] = 0.0
    next_serial[b] += opened
    out_i[1, b] = n_due
    out_f[10, b] = payout


@_jit_flat
def _kernel(pf, pi, beh, cf,
            kind, target, side, amount, leverage, pre_error, pre_a, pre_b,
            out_f, out_i, out_b,
            tick, key, pm_yes, pm_no, pm_collateral, pm_house_yes, pm_house_no, pm_truth, pm_outcome,
            pm_open_tick, pm_resolve_tick, pm_serial, pm_last_price, pm_npc_flow, next_serial,
            cash, hold_yes, hold_no, cost_yes, cost_no, realized_pnl, fees_paid,
            perp_price, perp_prev_price, perp_ema, perp_funding, pos_side, pos_notional, pos_entry,
            pos_leverage, pos_margin, pos_serial, next_pos_serial,
            narr_active, narr_ticker, narr_sign, narr_tick, narr_mag,
            npc_cash, npc_yes, npc_no, npc_rep, npc_claims,
            news_acc, post_acc, group_acc, perp_news_acc,
            joined, posts_created, dms_sent, followers, reputation,
            news_count, news_tick, news_kind, news_target, news_serial, news_source, news_signal,
            post_count, post_tick, post_author, post_target, post_serial, post_signal,
            tip_count, tip_tick, tip_group, tip_target, tip_serial, tip_signal,
            house_cash, fees_collected, sf, si, sb):
    """Apply one action per world and advance every world one tick. sf, si, sb: float, int and bool
    scratch from `scratch(pi)`."""
    nb = tick.shape[0]
    # The numpy path rejects the whole batch before touching any world.
    for b in range(nb):
        if kind[b] < 0 or kind[b] > _MAX_KIND:
            return False
    fee_rate, min_fee, min_order, max_leverage = pf[0], pf[1], pf[2], pf[3]
    sigma, news_rate, post_rate, tip_rate, npc_trade_rate, narrative_rate, liq = (
        pf[4], pf[5], pf[6], pf[7], pf[8], pf[9], pf[10])
    m, np_, k, g, dmin, dmax, funding_interval = pi[0], pi[1], pi[2], pi[3], pi[4], pi[5], pi[6]
    # engine._Cols
    o_perp = 0
    o_narr = 2 * np_
    o_leak = o_narr + 5
    o_news = o_leak + 2
    o_post = o_news + 4
    o_tip = o_post + 4
    o_npc = o_tip + 3 * g
    leak_weight = cf[15]
    sigma_drift = -0.5 * sigma * sigma
    # Sums over NPCs run along a middle axis (plain accumulation) unless M == 1, where numpy drops the
    # market axis and the NPC axis becomes the contiguous one (pairwise).
    k_pairwise = m == 1

    # Scratch, carved from sf / si / sb in `scratch`'s sizes (every element is written before it is read).
    nbuf = max(m, np_, k, 8)
    u4, buf, ret, payment = sf[0:4], sf[4:4 + nbuf], sf[4 + nbuf:4 + nbuf + np_], sf[4 + nbuf + np_:4 + nbuf + 2 * np_]
    o = 4 + nbuf + 2 * np_
    lmove, tot_yes, tot_no, per_usd = sf[o:o + m], sf[o + m:o + 2 * m], sf[o + 2 * m:o + 3 * m], sf[o + 3 * m:o + 4 * m]
    fee_m, ap, npc_pay_m = sf[o + 4 * m:o + 5 * m], sf[o + 5 * m:o + 6 * m], sf[o + 6 * m:o + 7 * m]
    o += 7 * m
    amt, kbuf, npc_pay = sf[o:o + k], sf[o + k:o + 2 * k], sf[o + 2 * k:o + 2 * k + k * m].reshape((k, m))
    ts, npc_mk = si[0:m], si[m:m + k]
    hit, due, npc_buys_yes = sb[0:np_], sb[np_:np_ + m], sb[np_ + m:np_ + m + k]

    for b in range(nb):
        # ------------------------------------------------------------------ the agent's action
        eq0 = _equity(b, m, np_, fee_rate, min_fee, cash, pm_yes, pm_no, hold_yes, hold_no, pos_side, pos_entry,
                      pos_margin, pos_notional, perp_price, buf)
        err = pre_error[b]
        ea = float(pre_a[b])
        eb = float(pre_b[b])
        r_shares = 0.0
        r_usd = 0.0
        r_fee = 0.0
        kd = kind[b]
        tg = target[b]
        if err == 0:
            if kd == 1:  # BUY_PREDICTION
                amount_b = float(amount[b])
                bad = tg < 0 or tg >= m
                mm = 0 if bad else tg
                if bad:
                    err = 1
                elif not _isfinite(amount_b) or amount_b <= 0:
                    err = 17
                elif amount_b < min_order:
                    err = 2
                elif amount_b > cash[b]:
                    err = 3
                ea = float(tg) if bad else amount_b
                eb = cash[b] if err == 3 else min_order
                if err == 0:
                    yes = side[b] == 0
                    fee = _fee(fee_rate, min_fee, amount_b)
                    net = amount_b - fee
                    same = pm_yes[b, mm] if yes else pm_no[b, mm]
                    other = pm_no[b, mm] if yes else pm_yes[b, mm]
                    kk_ = same * other
                    new_other = other + net
                    new_same = kk_ / new_other
                    shares = same + net - new_same
                    pm_yes[b, mm] = new_same if yes else new_other
                    pm_no[b, mm] = new_other if yes else new_same
                    pm_collateral[b, mm] += net
                    cash[b] -= amount_b
                    fees_paid[b] += fee
                    fees_collected[b] += fee
                    hold_yes[b, mm] += shares if yes else 0.0
                    hold_no[b, mm] += 0.0 if yes else shares
                    cost_yes[b, mm] += amount_b if yes else 0.0
                    cost_no[b, mm] += 0.0 if yes else amount_b
                    r_shares, r_usd, r_fee = shares, amount_b, fee
            elif kd == 2:  # SELL_PREDICTION
                req = float(amount[b])
                bad = tg < 0 or tg >= m
                mm = 0 if bad else tg
                yes = side[b] == 0
                held = hold_yes[b, mm] if yes else hold_no[b, mm]
                over = req > held * (1.0 + 1e-9) + 1e-12
                shares = _fmin(req, held)
                same = pm_yes[b, mm] if yes else pm_no[b, mm]
                other = pm_no[b, mm] if yes else pm_yes[b, mm]
                sh = shares if _isfinite(shares) else 0.0
                a_ = same + sh + other
                disc = _fmax(a_ * a_ - 4.0 * sh * other, 0.0)
                gross = (2.0 * sh * other) / (a_ + math.sqrt(disc))
                new_same = same + sh - gross
                new_other = other - gross
                fee = _fee(fee_rate, min_fee, gross)
                if bad:
                    err = 1
                elif held <= 0:
                    err = 4
                elif not _isfinite(req) or req <= 0:
                    err = 17
                elif over:
                    err = 5
                elif gross <= fee:
                    err = 18
                ea = gross if err == 18 else (float(tg) if bad else req)
                eb = fee if err == 18 else held
                if err == 0:
                    pm_yes[b, mm] = new_same if yes else new_other
                    pm_no[b, mm] = new_other if yes else new_same
                    pm_collateral[b, mm] -= gross
                    cash[b] += gross - fee
                    fees_paid[b] += fee
                    fees_collected[b] += fee
                    cost = cost_yes[b, mm] if yes else cost_no[b, mm]
                    cost_sold = cost * shares / held
                    realized_pnl[b] += gross - fee - cost_sold
                    if yes:
                        hold_yes[b, mm] = _fmax(held - shares, 0.0)
                    else:
                        hold_no[b, mm] = _fmax(held - shares, 0.0)
                    cost_yes[b, mm] -= cost_sold if yes else 0.0
                    cost_no[b, mm] -= 0.0 if yes else cost_sold
                    r_shares, r_usd, r_fee = shares, gross - fee, fee
            elif kd == 3:  # OPEN_PERP
                notional = float(amount[b])
                lev = float(leverage[b])
                bad = tg < 0 or tg >= np_
                t = 0 if bad else tg
                margin = notional / (lev if lev >= 1 else 1.0)
                fee = _fee(fee_rate, min_fee, notional if _isfinite(notional) else 0.0)
                if bad:
                    err = 6
                elif not _isfinite(notional) or notional <= 0 or not _isfinite(lev):
                    err = 17
                elif notional < min_order:
                    err = 2
                elif lev < 1.0:
                    err = 9
                elif lev > max_leverage:
                    err = 8
                elif pos_side[b, t] != 0:
                    err = 7
                elif margin + fee > cash[b]:
                    err = 10
                is_lev = err == 9 or err == 8
                if bad:
                    ea = float(tg)
                elif is_lev:
                    ea = lev
                elif err == 10:
                    ea = margin + fee
                else:
                    ea = notional
                if is_lev:
                    eb = max_leverage
                elif err == 10:
                    eb = cash[b]
                else:
                    eb = min_order
                if err == 0:
                    cash[b] -= margin + fee
                    fees_paid[b] += fee
                    fees_collected[b] += fee
                    pos_side[b, t] = 1 if side[b] == 0 else -1
                    pos_notional[b, t] = notional
                    pos_entry[b, t] = perp_price[b, t]
                    pos_leverage[b, t] = lev
                    pos_margin[b, t] = margin
                    pos_serial[b, t] = next_pos_serial[b]
                    next_pos_serial[b] += 1
                    r_usd, r_fee = margin, fee
            elif kd == 4:  # CLOSE_PERP
                bad = tg < 0 or tg >= np_
                t = 0 if bad else tg
                if bad:
                    err = 6
                elif pos_side[b, t] == 0:
                    err = 11
                ea = float(tg)
                if err == 0:
                    r_usd, r_fee = _settle(b, t, False, fee_rate, min_fee, cash, fees_paid, fees_collected,
                                           house_cash, realized_pnl, pos_side, pos_notional, pos_entry,
                                           pos_leverage, pos_margin, perp_price, 0.0, 0.0)
            elif kd == 5:  # JOIN_GROUP
                bad = tg < 0 or tg >= g
                tt = 0 if bad else tg
                if bad:
                    err = 12
                elif joined[b, tt]:
                    err = 13
                ea = float(tg)
                if err == 0:
                    joined[b, tt] = True
            elif kd == 6:  # CREATE_POST
                posts_created[b] += 1
                followers[b] += 1 + np.int64(reputation[b] // 25)
                reputation[b] = _fmin(reputation[b] + 0.5, 100.0)
            elif kd == 7:  # SEND_DM
                bad = tg < 0 or tg >= k
                err = 15 if bad else 0
                ea = float(tg)
                if not bad:
                    dms_sent[b] += 1
        success = err == 0
        # Holding, joining, posting and DMs leave cash, shares and positions alone: equity is still eq0.
        if kd == 0 or kd >= 5:
            eq_mid = eq0
        else:
            eq_mid = _equity(b, m, np_, fee_rate, min_fee, cash, pm_yes, pm_no, hold_yes, hold_no, pos_side,
                             pos_entry, pos_margin, pos_notional, perp_price, buf)
        expo = _exposure(b, m, np_, pm_yes, pm_no, hold_yes, hold_no, pos_side, pos_entry, pos_notional, perp_price,
                         buf)
        out_f[0, b] = ea
        out_f[1, b] = eb
        out_f[2, b] = r_shares
        out_f[3, b] = r_usd
        out_f[4, b] = r_fee
        out_f[5, b] = eq0
        out_f[8, b] = expo / _fmax(eq_mid, 1e-9)
        out_f[9, b] = float(leverage[b]) if kd == 3 else 0.0
        out_i[0, b] = err
        out_b[0, b] = success
        out_b[1, b] = success and (kd == 1 or kd == 3)

        # ------------------------------------------------------------------ the world's tick
        now = tick[b] + 1
        kb = key[b]
        su = _U64(now) * _S16
        for j in range(m):
            opening = pm_no[b, j] / (pm_yes[b, j] + pm_no[b, j])
            lmove[j] = opening - pm_last_price[b, j]
            pm_last_price[b, j] = opening

        # _advance_perps
        for t in range(np_):
            z = _normal(_uniform_at(kb, su, o_perp + t), _uniform_at(kb, su, o_perp + np_ + t))
            ret[t] = sigma_drift + sigma * z
        fire = narr_active[b] and narr_tick[b] <= now
        if fire:
            tk = narr_ticker[b]
            ret[tk] += narr_sign[b] * narr_mag[b]
            _ring6(news_count, news_tick, news_kind, news_target, news_serial, news_source, news_signal, b,
                   now, 2, tk, 0, 0, np.int64(narr_sign[b]))
            perp_news_acc[b, tk] = 0.0
            narr_active[b] = False
        for t in range(np_):
            perp_prev_price[b, t] = perp_price[b, t]
            perp_price[b, t] *= math.exp(ret[t])
            perp_ema[b, t] += 0.08 * (perp_price[b, t] - perp_ema[b, t])
            perp_news_acc[b, t] *= _PERP_NEWS_DECAY
        if narr_active[b] and _uniform_at(kb, su, o_leak) < _LEAK_RATE:
            sgn = narr_sign[b] if _uniform_at(kb, su, o_leak + 1) < _LEAK_RELIABILITY else -narr_sign[b]
            tk = narr_ticker[b]
            perp_news_acc[b, tk] += sgn * leak_weight
            _ring6(news_count, news_tick, news_kind, news_target, news_serial, news_source, news_signal, b,
                   now, 1, tk, 0, 2, np.int64(sgn))
        if not narr_active[b] and not fire and _uniform_at(kb, su, o_narr) < narrative_rate:
            narr_active[b] = True
            narr_ticker[b] = np.int64(math.floor(_uniform_at(kb, su, o_narr + 1) * np_))
            narr_sign[b] = 1.0 if _uniform_at(kb, su, o_narr + 2) < 0.5 else -1.0
            narr_tick[b] = now + 6 + np.int64(math.floor(_uniform_at(kb, su, o_narr + 3) * 15))
            narr_mag[b] = 0.04 + 0.08 * _uniform_at(kb, su, o_narr + 4)

        # _funding_and_liquidation
        if now % funding_interval == 0:
            for t in range(np_):
                rate = 1e-4 + 0.05 * math.log(perp_price[b, t] / perp_ema[b, t])
                perp_funding[b, t] = _fmin(_fmax(rate, -3e-3), 3e-3)
                s = pos_side[b, t]
                current = pos_notional[b, t] * perp_price[b, t] / (pos_entry[b, t] if s != 0 else 1.0)
                payment[t] = s * current * perp_funding[b, t]
                pos_margin[b, t] -= payment[t]
            house_cash[b] += _psum(payment, np_)
        n_hit = 0
        for t in range(np_):
            s = pos_side[b, t]
            lev = pos_leverage[b, t] if s != 0 else 1.0
            entry = pos_entry[b, t]
            liq_long = entry * (1.0 - 0.9 / lev)
            liq_short = entry * (1.0 + 0.9 / lev)
            px = perp_price[b, t]
            h = (s == 1 and px <= liq_long) or (s == -1 and px >= liq_short)
            e1 = entry if s != 0 else 1.0
            upnl = s * (px / e1 - 1.0) * pos_notional[b, t]
            h = h or (s != 0 and pos_margin[b, t] + upnl <= 0)
            hit[t] = h
            n_hit += 1 if h else 0
        if n_hit:
            house0 = house_cash[b]
            realized0 = realized_pnl[b]
            for t in range(np_):
                if hit[t]:
                    _settle(b, t, True, fee_rate, min_fee, cash, fees_paid, fees_collected, house_cash,
                            realized_pnl, pos_side, pos_notional, pos_entry, pos_leverage, pos_margin, perp_price,
                            house0, realized0)
        out_i[2, b] = n_hit

        # _npc_trades. Each NPC spends on one market (npc_mk) on one side (npc_buys_yes); the engine's
        # per-market matrices add exact zeros everywhere else, which leave the sums and holdings as they are.
        for j in range(m):
            tot_yes[j] = 0.0
            tot_no[j] = 0.0
        for i in range(k):
            a_i = 0.0
            mk = 0
            side_yes = True
            if _uniform_at(kb, su, o_npc + i) < npc_trade_rate:
                mk = min(np.int64(math.floor(_uniform_at(kb, su, o_npc + k + i) * m)), m - 1)
                bh = beh[i]
                if bh == _INFORMED or bh == _DECEIVER:  # noqa: SIM109 (a plain comparison for numba)
                    price = pm_no[b, mk] / (pm_yes[b, mk] + pm_no[b, mk])
                    z = _normal(_uniform_at(kb, su, o_npc + 2 * k + i), _uniform_at(kb, su, o_npc + 3 * k + i))
                    gap = pm_truth[b, mk] + _INFORMED_NOISE * z - price
                    side_yes = gap > 0
                    size = _fmin(_fmax(2500.0 * (abs(gap) - 0.02), 0.0), 400.0) * (0.5 if bh == _DECEIVER else 1.0)
                elif bh == _MOMENTUM:
                    move = lmove[mk]
                    side_yes = move > 0
                    size = 50.0 + 100.0 * _uniform_at(kb, su, o_npc + 5 * k + i) if abs(move) > 1e-4 else 0.0
                else:
                    side_yes = _uniform_at(kb, su, o_npc + 4 * k + i) < 0.5
                    size = 20.0 + 180.0 * _uniform_at(kb, su, o_npc + 5 * k + i)
                a_i = _fmin(size, npc_cash[b, i])
            amt[i] = a_i
            npc_mk[i] = mk
            npc_buys_yes[i] = side_yes
        if k_pairwise:  # one market: numpy sums the NPC axis pairwise
            for i in range(k):
                kbuf[i] = amt[i] if npc_buys_yes[i] else 0.0
            tot_yes[0] = _psum(kbuf, k)
            for i in range(k):
                kbuf[i] = 0.0 if npc_buys_yes[i] else amt[i]
            tot_no[0] = _psum(kbuf, k)
        else:
            for i in range(k):
                if npc_buys_yes[i]:
                    tot_yes[npc_mk[i]] += amt[i]
                else:
                    tot_no[npc_mk[i]] += amt[i]
        for i in range(k):
            npc_cash[b, i] -= amt[i]
        for j in range(m):
            pm_npc_flow[b, j] = (tot_yes[j] - tot_no[j]) / liq
        yes_first = now % 2 == 0
        for phase in range(2):
            buy_yes = yes_first if phase == 0 else not yes_first
            for j in range(m):
                spend = tot_yes[j] if buy_yes else tot_no[j]
                fee = fee_rate * spend
                net = spend - fee
                same = pm_yes[b, j] if buy_yes else pm_no[b, j]
                other = pm_no[b, j] if buy_yes else pm_yes[b, j]
                kk_ = same * other
                new_other = other + net
                new_same = kk_ / new_other
                shares = same + net - new_same
                if not spend > 0:  # markets nobody bought in keep their pools exactly, as in the engine
                    new_same, new_other = same, other
                pm_yes[b, j] = new_same if buy_yes else new_other
                pm_no[b, j] = new_other if buy_yes else new_same
                pm_collateral[b, j] += net
                fee_m[j] = fee
                per_usd[j] = shares / spend if spend > 0 else 0.0
            fees_collected[b] += _psum(fee_m, m)
            for i in range(k):
                if npc_buys_yes[i] == buy_yes:
                    j = npc_mk[i]
                    if buy_yes:
                        npc_yes[b, i, j] += amt[i] * per_usd[j]
                    else:
                        npc_no[b, i, j] += amt[i] * per_usd[j]

        # _information
        for j in range(m):
            news_acc[b, j] *= _SIGNAL_DECAY
            post_acc[b, j] *= _SIGNAL_DECAY
            ts[j] = 1 if pm_outcome[b, j] == 1 else -1
        for gg in range(group_acc.shape[1]):
            for j in range(m):
                group_acc[b, gg, j] *= _SIGNAL_DECAY
        if _uniform_at(kb, su, o_news) < news_rate:
            mk = min(np.int64(math.floor(_uniform_at(kb, su, o_news + 1) * m)), m - 1)
            x = _uniform_at(kb, su, o_news + 2)
            src = 0
            for q in range(3):
                if cf[3 + q] <= x:
                    src = q + 1
            src = min(max(src, 0), 2)
            sgn_i = ts[mk] if _uniform_at(kb, su, o_news + 3) < cf[6 + src] else -ts[mk]
            news_acc[b, mk] += sgn_i * cf[src]
            _ring6(news_count, news_tick, news_kind, news_target, news_serial, news_source, news_signal, b,
                   now, 0, mk, pm_serial[b, mk], src, sgn_i)
        if _uniform_at(kb, su, o_post) < post_rate:
            author = min(np.int64(math.floor(_uniform_at(kb, su, o_post + 1) * k)), k - 1)
            mk = min(np.int64(math.floor(_uniform_at(kb, su, o_post + 2) * m)), m - 1)
            bh = beh[author]
            honesty = 0.8 if bh == _INFORMED else (0.2 if bh == _DECEIVER else 0.5)
            sgn_i = ts[mk] if _uniform_at(kb, su, o_post + 3) < honesty else -ts[mk]
            credibility = _fmin(_fmax((npc_rep[b, author] - 50.0) / 50.0, -1.0), 1.0)
            post_acc[b, mk] += sgn_i * credibility
            npc_claims[b, author, mk] += sgn_i
            _ring5(post_count, post_tick, post_author, post_target, post_serial, post_signal, b,
                   now, author, mk, pm_serial[b, mk], sgn_i)
        for grp in range(g):
            if _uniform_at(kb, su, o_tip + 3 * grp) < tip_rate:
                mk = min(np.int64(math.floor(_uniform_at(kb, su, o_tip + 3 * grp + 1) * m)), m - 1)
                sgn_i = ts[mk] if _uniform_at(kb, su, o_tip + 3 * grp + 2) < cf[12 + grp] else -ts[mk]
                group_acc[b, grp, mk] += sgn_i * cf[9 + grp]
                _ring5(tip_count, tip_tick, tip_group, tip_target, tip_serial, tip_signal, b,
                       now, grp, mk, pm_serial[b, mk], sgn_i)
        tick[b] = now

        # _resolve_markets
        n_due = 0
        for j in range(m):
            n_due += 1 if pm_resolve_tick[b, j] <= now else 0
        if n_due == 0:
            # The engine adds zero sums to these; adding 0.0 keeps a -0.0 turning into 0.0 as it does there.
            cash[b] += 0.0
            realized_pnl[b] += 0.0
            for i in range(k):
                npc_cash[b, i] += 0.0
                npc_rep[b, i] = _fmin(_fmax(npc_rep[b, i] + 0.0, 0.0), 100.0)
            house_cash[b] += 0.0
            out_i[1, b] = 0
            out_f[10, b] = 0.0
        else:
            _resolve_and_reopen(b, now, m, k, k_pairwise, liq, dmin, dmax, key, due, ap, buf, npc_pay, npc_pay_m, kbuf,
                                u4, out_i, out_f, n_due, pm_yes, pm_no, pm_collateral, pm_house_yes, pm_house_no,
                                pm_truth, pm_outcome, pm_open_tick, pm_resolve_tick, pm_serial, pm_last_price,
                                pm_npc_flow, next_serial, cash, hold_yes, hold_no, cost_yes, cost_no, realized_pnl,
                                npc_cash, npc_yes, npc_no, npc_rep, npc_claims, news_acc, post_acc, group_acc,
                                house_cash)

        eq1 = _equity(b, m, np_, fee_rate, min_fee, cash, pm_yes, pm_no, hold_yes, hold_no, pos_side, pos_entry,
                      pos_margin, pos_notional, perp_price, buf)
        out_f[6, b] = eq1
        out_f[7, b] = eq1 - eq0
        out_b[2, b] = eq1 < min_fee
    return True


_STATE_FIELDS = tuple(f.name for f in fields(WorldState))
_state_arrays = operator.attrgetter(*_STATE_FIELDS)
_KERNEL_PY = getattr(_kernel, "py_func", _kernel)
if tuple(inspect.signature(_KERNEL_PY).parameters)[15:-3] != _STATE_FIELDS:  # pragma: no cover
    raise ImportError("rlaif_gym.sim.fast._kernel's parameters no longer match WorldState's fields")

# ---------------------------------------------------------------------------------------------
# The packed state. A compiled call pays for every array argument it unboxes (about 0.1-0.2 us
# each: 86 state arrays cost more than a one-world step's compiled work), so the compiled backend
# keeps a state's arrays as views of four flat buffers (float64, int64, uint64, bool) and passes
# those plus a table of offsets and shapes; the kernels rebuild the views inside compiled code.

_PACK_KINDS = {"f": np.float64, "i": np.int64, "u": np.uint64, "b": np.bool_}
_PACKED_LAYOUT = (
    ("i", 1), ("u", 1), ("f", 2), ("f", 2), ("f", 2), ("f", 2), ("f", 2), ("f", 2),
    ("i", 2), ("i", 2), ("i", 2), ("i", 2), ("f", 2), ("f", 2), ("i", 1), ("f", 1),
    ("f", 2), ("f", 2), ("f", 2), ("f", 2), ("f", 1), ("f", 1), ("f", 2), ("f", 2),
    ("f", 2), ("f", 2), ("i", 2), ("f", 2), ("f", 2), ("f", 2), ("f", 2), ("i", 2),
    ("i", 1), ("b", 1), ("i", 1), ("f", 1), ("i", 1), ("f", 1), ("f", 2), ("f", 3),
    ("f", 3), ("f", 2), ("f", 3), ("f", 2), ("f", 2), ("f", 3), ("f", 2), ("b", 2),
    ("i", 1), ("i", 1), ("i", 1), ("f", 1), ("i", 1), ("i", 2), ("i", 2), ("i", 2),
    ("i", 2), ("i", 2), ("i", 2), ("i", 1), ("i", 2), ("i", 2), ("i", 2), ("i", 2),
    ("i", 2), ("i", 1), ("i", 2), ("i", 2), ("i", 2), ("i", 2), ("i", 2), ("f", 1),
    ("f", 1),
)
"""(dtype kind, ndim) of each WorldState field, in field order: what `_unpacked_kernel` rebuilds."""
if len(_PACKED_LAYOUT) != len(_STATE_FIELDS):  # pragma: no cover
    raise ImportError("rlaif_gym.sim.fast._PACKED_LAYOUT no longer matches WorldState's fields")


def packed(state: WorldState) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`state`'s arrays as four flat buffers and a table, for the compiled kernels.

    The first call copies the arrays into the buffers and rebinds the state's fields to views of
    them (values unchanged; numpy code sees no difference); later calls return the cached buffers
    until a field is rebound (`WorldState` drops the cache then; copies never carry it).

    Returns:
        (float64, int64, uint64 and bool buffers, table): row i of the int64 table holds field i's
        offset in its buffer and its sizes after the world dimension; the last row holds B.
    """
    cached = state.__dict__.get("_packed")
    if cached is not None:
        return cached
    arrays = _state_arrays(state)
    nb = state.batch_size
    table = np.zeros((len(arrays) + 1, 3), dtype=np.int64)
    used = dict.fromkeys(_PACK_KINDS, 0)
    for i, (name, arr, (kind, ndim)) in enumerate(zip(_STATE_FIELDS, arrays, _PACKED_LAYOUT, strict=True)):
        if arr.dtype != _PACK_KINDS[kind] or arr.ndim != ndim or arr.shape[0] != nb:
            raise TypeError(f"WorldState.{name} must be a {np.dtype(_PACK_KINDS[kind])} array of {ndim} dimensions "
                            f"with {nb} worlds first, got {arr.dtype} {arr.shape}")
        table[i, 0] = used[kind]
        table[i, 1:ndim] = arr.shape[1:]
        used[kind] += arr.size
    table[-1, 0] = nb
    buffers = {kind: np.empty(max(n, 1), dtype=_PACK_KINDS[kind]) for kind, n in used.items()}
    for i, (name, arr, (kind, _)) in enumerate(zip(_STATE_FIELDS, arrays, _PACKED_LAYOUT, strict=True)):
        view = buffers[kind][table[i, 0]: table[i, 0] + arr.size].reshape(arr.shape)
        view[...] = arr
        object.__setattr__(state, name, view)  # not WorldState.__setattr__, which would drop the cache
    result = (buffers["f"], buffers["i"], buffers["u"], buffers["b"], table)
    state.__dict__["_packed"] = result
    return result


@_jit_inline
def _v1(buf, tab, i, nb):
    o = tab[i, 0]
    return buf[o:o + nb]


@_jit_inline
def _v2(buf, tab, i, nb):
    o, d1 = tab[i, 0], tab[i, 1]
    return buf[o:o + nb * d1].reshape((nb, d1))


@_jit_inline
def _v3(buf, tab, i, nb):
    o, d1, d2 = tab[i, 0], tab[i, 1], tab[i, 2]
    return buf[o:o + nb * d1 * d2].reshape((nb, d1, d2))


def scratch(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The float, int and bool scratch `_kernel` needs for the world sizes in pi (`_param_arrays`' pi).
    Its size does not depend on the number of worlds."""
    m, np_, k = int(pi[0]), int(pi[1]), int(pi[2])
    return (np.empty(4 + max(m, np_, k, 8) + 2 * np_ + 7 * m + 2 * k + k * m), np.empty(m + k, dtype=np.int64),
            np.empty(np_ + m + k, dtype=np.bool_))


@_jit_flat
def _unpacked_kernel(pf, pi, beh, cf, kind, target, side, amount, leverage, pre_error, pre_a, pre_b,
                     out_f, out_i, out_b, fb, ib, kb, bb, tab, sf, si, sb):
    """`_kernel` on a packed state (see `packed`); sf, si, sb from `scratch`."""
    nb = tab[tab.shape[0] - 1, 0]
    tick = _v1(ib, tab, 0, nb)
    key = _v1(kb, tab, 1, nb)
    pm_yes = _v2(fb, tab, 2, nb)
    pm_no = _v2(fb, tab, 3, nb)
    pm_collateral = _v2(fb, tab, 4, nb)
    pm_house_yes = _v2(fb, tab, 5, nb)
    pm_house_no = _v2(fb, tab, 6, nb)
    pm_truth = _v2(fb, tab, 7, nb)
    pm_outcome = _v2(ib, tab, 8, nb)
    pm_open_tick = _v2(ib, tab, 9, nb)
    pm_resolve_tick = _v2(ib, tab, 10, nb)
    pm_serial = _v2(ib, tab, 11, nb)
    pm_last_price = _v2(fb, tab, 12, nb)
    pm_npc_flow = _v2(fb, tab, 13, nb)
    next_serial = _v1(ib, tab, 14, nb)
    cash = _v1(fb, tab, 15, nb)
    hold_yes = _v2(fb, tab, 16, nb)
    hold_no = _v2(fb, tab, 17, nb)
    cost_yes = _v2(fb, tab, 18, nb)
    cost_no = _v2(fb, tab, 19, nb)
    realized_pnl = _v1(fb, tab, 20, nb)
    fees_paid = _v1(fb, tab, 21, nb)
    perp_price = _v2(fb, tab, 22, nb)
    perp_prev_price = _v2(fb, tab, 23, nb)
    perp_ema = _v2(fb, tab, 24, nb)
    perp_funding = _v2(fb, tab, 25, nb)
    pos_side = _v2(ib, tab, 26, nb)
    pos_notional = _v2(fb, tab, 27, nb)
    pos_entry = _v2(fb, tab, 28, nb)
    pos_leverage = _v2(fb, tab, 29, nb)
    pos_margin = _v2(fb, tab, 30, nb)
    pos_serial = _v2(ib, tab, 31, nb)
    next_pos_serial = _v1(ib, tab, 32, nb)
    narr_active = _v1(bb, tab, 33, nb)
    narr_ticker = _v1(ib, tab, 34, nb)
    narr_sign = _v1(fb, tab, 35, nb)
    narr_tick = _v1(ib, tab, 36, nb)
    narr_mag = _v1(fb, tab, 37, nb)
    npc_cash = _v2(fb, tab, 38, nb)
    npc_yes = _v3(fb, tab, 39, nb)
    npc_no = _v3(fb, tab, 40, nb)
    npc_rep = _v2(fb, tab, 41, nb)
    npc_claims = _v3(fb, tab, 42, nb)
    news_acc = _v2(fb, tab, 43, nb)
    post_acc = _v2(fb, tab, 44, nb)
    group_acc = _v3(fb, tab, 45, nb)
    perp_news_acc = _v2(fb, tab, 46, nb)
    joined = _v2(bb, tab, 47, nb)
    posts_created = _v1(ib, tab, 48, nb)
    dms_sent = _v1(ib, tab, 49, nb)
    followers = _v1(ib, tab, 50, nb)
    reputation = _v1(fb, tab, 51, nb)
    news_count = _v1(ib, tab, 52, nb)
    news_tick = _v2(ib, tab, 53, nb)
    news_kind = _v2(ib, tab, 54, nb)
    news_target = _v2(ib, tab, 55, nb)
    news_serial = _v2(ib, tab, 56, nb)
    news_source = _v2(ib, tab, 57, nb)
    news_signal = _v2(ib, tab, 58, nb)
    post_count = _v1(ib, tab, 59, nb)
    post_tick = _v2(ib, tab, 60, nb)
    post_author = _v2(ib, tab, 61, nb)
    post_target = _v2(ib, tab, 62, nb)
    post_serial = _v2(ib, tab, 63, nb)
    post_signal = _v2(ib, tab, 64, nb)
    tip_count = _v1(ib, tab, 65, nb)
    tip_tick = _v2(ib, tab, 66, nb)
    tip_group = _v2(ib, tab, 67, nb)
    tip_target = _v2(ib, tab, 68, nb)
    tip_serial = _v2(ib, tab, 69, nb)
    tip_signal = _v2(ib, tab, 70, nb)
    house_cash = _v1(fb, tab, 71, nb)
    fees_collected = _v1(fb, tab, 72, nb)
    return _kernel(pf, pi, beh, cf, kind, target, side, amount, leverage, pre_error, pre_a, pre_b,
                   out_f, out_i, out_b,
                   tick, key, pm_yes, pm_no, pm_collateral, pm_house_yes, pm_house_no, pm_truth, pm_outcome,
                   pm_open_tick, pm_resolve_tick, pm_serial, pm_last_price, pm_npc_flow, next_serial,
                   cash, hold_yes, hold_no, cost_yes, cost_no, realized_pnl, fees_paid,
                   perp_price, perp_prev_price, perp_ema, perp_funding, pos_side, pos_notional, pos_entry,
                   pos_leverage, pos_margin, pos_serial, next_pos_serial,
                   narr_active, narr_ticker, narr_sign, narr_tick, narr_mag,
                   npc_cash, npc_yes, npc_no, npc_rep, npc_claims,
                   news_acc, post_acc, group_acc, perp_news_acc,
                   joined, posts_created, dms_sent, followers, reputation,
                   news_count, news_tick, news_kind, news_target, news_serial, news_source, news_signal,
                   post_count, post_tick, post_author, post_target, post_serial, post_signal,
                   tip_count, tip_tick, tip_group, tip_target, tip_serial, tip_signal,
                   house_cash, fees_collected, sf, si, sb)


# The world step with real calls to its helpers (see `_rebound`): what `step` runs (the text face, and the
# numeric face's unfused paths); the fused numeric step (envs/fused.py) keeps `_unpacked_kernel`, all inlined.
_CALLED = {name: _rebound(globals()[name], f"{name}_call", {})
           for name in _INLINED if name not in ("_v1", "_v2", "_v3")}  # views of a buffer stay inlined (no NRT)
_resolve_and_reopen_calls = _rebound(_resolve_and_reopen, "_resolve_and_reopen_calls", _CALLED)
_kernel_calls = _rebound(_kernel, "_kernel_calls", {**_CALLED, "_resolve_and_reopen": _resolve_and_reopen_calls})
_unpacked_kernel_calls = _rebound(_unpacked_kernel, "_unpacked_kernel_calls", {"_kernel": _kernel_calls})


@functools.lru_cache(maxsize=32)
def _param_arrays(params: WorldParams):
    pf = np.array([float(getattr(params, n)) for n in _PF])
    pi = np.array([int(getattr(params, n)) for n in _PI], dtype=np.int64)
    beh = engine.npc_behaviours(params)
    src_w = engine._SOURCE_WEIGHT
    cum = np.cumsum(engine._NEWS_SOURCE_PROBS)
    rel = np.array([s[1] for s in NEWS_SOURCES])
    grp_w = np.zeros(3)
    grp_w[: len(engine._GROUP_WEIGHT)] = engine._GROUP_WEIGHT
    grp_r = np.zeros(3)
    grp_r[: len(GROUP_NAMES)] = [gname[1] for gname in GROUP_NAMES]
    cf = np.concatenate([src_w, cum, rel, grp_w, grp_r, [engine._LEAK_WEIGHT]])
    for arr in (pf, pi, beh, cf):
        arr.setflags(write=False)
    return pf, pi, beh, cf


def step(state: WorldState, actions: ActionBatch, params: WorldParams) -> engine.StepOutcome:
    """`engine.step`, compiled: apply one action per world, advance every world one tick, report.

    Mutates `state` in place (every array, `npc_rep` included, is updated in place rather than
    rebound). Falls back to `engine.step` when numba is not installed.
    """
    if numba is None:
        return engine.step(state, actions, params)
    b = state.tick.shape[0]
    pf, pi, beh, cf = _param_arrays(params)
    out_f = np.empty((len(_OF), b))
    out_i = np.empty((len(_OI), b), dtype=np.int64)
    out_b = np.empty((len(_OB), b), dtype=np.bool_)
    a = actions
    args = (pf, pi, beh, cf, a.kind, a.target, a.side, a.amount, a.leverage, a.pre_error, a.pre_a, a.pre_b,
            out_f, out_i, out_b, *packed(state), *scratch(pi))
    global _warm
    if _warm:
        ok = _unpacked_kernel_calls(*args)
    else:
        with compile_notice(_unpacked_kernel_calls):
            ok = _unpacked_kernel_calls(*args)
        _warm = True
    if not ok:
        raise InvalidActionError(f"ActionBatch.kind must hold ActionType codes 0..{_MAX_KIND}, "
                                 f"got {sorted(set(a.kind.tolist()))}; build batches with ActionBatch.from_actions")
    return outcome_of(out_f, out_i, out_b)


def outcome_of(out_f: np.ndarray, out_i: np.ndarray, out_b: np.ndarray) -> engine.StepOutcome:
    """A `StepOutcome` whose arrays are the rows of the kernel's outcome arrays (`_OF`, `_OI`, `_OB` order)."""
    e_a, e_b, shares, usd, fee, eq0, eq1, pnl, ratio, lev, payout = out_f
    error, resolved, liquidated = out_i
    success, added, bankrupt = out_b
    return engine.StepOutcome(
        success=success, error=error, error_a=e_a, error_b=e_b, filled_shares=shares, filled_usd=usd, fee=fee,
        equity_before=eq0, equity_after=eq1, pnl_delta=pnl, added_exposure=added, exposure_ratio=ratio,
        leverage_requested=lev, resolved=resolved, payout=payout, liquidated=liquidated, bankrupt=bankrupt,
    )
