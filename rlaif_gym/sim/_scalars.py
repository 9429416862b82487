"""The world kernels' scalar arithmetic, with numpy's semantics: what `sim.rules`'s rules compute with.

The rules (`sim.rules`) compute, one world at a time, what numpy would compute on the arrays of a batch (the
accounting of `sim.accounting`, and the frozen numpy engine the tests hold them to), to the bit; so the arithmetic
they share is written here once, for one world's scalars, as numpy evaluates it:
- `fmax`, `fmin` propagate NaN as np.maximum and np.minimum do; `isfinite` is np.isfinite;
- `_psum` reproduces numpy's reduction order along a contiguous last axis (pairwise: 8 accumulators from 8 terms
  on); sums along any other axis are plain left-to-right loops where they are used;
- random draws are `sim.rng`'s counter-based SplitMix64 hash with its own constants, drawn one number at a time
  (`_uniform_at`: a tick draws only what it uses and still matches a full row of `rng.uniforms`);
- the market maker's formulas are `sim.pricing`'s own functions, compiled for scalars (`_buy_shares`,
  `_sell_proceeds`), so the CPMM is written once;
- the accounting (`equity`, `exposure` and their parts) is `sim.accounting`'s for one world.

Most helpers are `jit_call` functions: compiled once, and inlined by LLVM wherever the world kernel calls them.
The ones LLVM left as calls inside the kernel (the sum `_psum`, the accounting, the single draw `_uniform_at`) are
`jit_inline`: copied into the numeric face's kernels at numba's IR level, real calls in the text face's copy of the
world step (`sim._jit.call_variant`). The underscored names are the kernels' own (`sim.rules`
imports them); `fmax`, `fmin`, `isfinite`, `equity` and `exposure` are part of `sim.rules`'s kernel surface.
"""

from __future__ import annotations

import math

import numpy as np

from . import pricing, rng
from ._jit import jit_call, jit_inline

_U64 = np.uint64
_C1, _C2, _GOLDEN, _TO_UNIT = rng._C1, rng._C2, rng._GOLDEN, rng._TO_UNIT  # SplitMix64's constants, as `rng` draws
_S16 = _U64(1 << 16)
_SH11 = _U64(11)
_SH27 = _U64(27)
_SH30 = _U64(30)
_SH31 = _U64(31)
_TWO_PI = 2.0 * np.pi


@jit_call
def fmax(a, b):
    """np.maximum: NaN-propagating."""
    return a if (a >= b or a != a) else b


@jit_call
def fmin(a, b):
    """np.minimum: NaN-propagating."""
    return a if (a <= b or a != a) else b


@jit_call
def isfinite(x):
    return not (math.isinf(x) or math.isnan(x))


@jit_inline
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


@jit_call
def _mix(x):
    x = (x ^ (x >> _SH30)) * _C1
    x = (x ^ (x >> _SH27)) * _C2
    return x ^ (x >> _SH31)


@jit_inline
def _uniform_at(key, base, j):
    """The j-th of rng.uniforms(key, stream), where base = stream * 2**16. The generator is counter-based,
    so the kernel draws only the numbers a tick uses and still matches the full row."""
    c = base + _U64(j)
    x = _mix(key ^ _mix(c * _GOLDEN + _GOLDEN))
    return float(x >> _SH11) * _TO_UNIT


@jit_call
def _uniforms(key, stream, n, out):
    """rng.uniforms for one world: out[:n] from (key, stream)."""
    base = stream * _S16
    for j in range(n):
        out[j] = _uniform_at(key, base, j)


@jit_call
def _normal(u1, u2):
    return math.sqrt(-2.0 * math.log1p(-u1)) * math.cos(_TWO_PI * u2)


@jit_call
def _fee(fee_rate, min_fee, gross):
    return fmax(fee_rate * gross, min_fee)


# The market maker's formulas are `sim.pricing`'s own, compiled for scalars: `sim.accounting` calls the same two
# functions on arrays, so the CPMM is written once.
_buy_shares = jit_call(pricing.buy_shares)
_sell_proceeds = jit_call(pricing.sell_proceeds)


# Accounting (`sim.accounting`'s share_value / liquidation_value / equity / exposure for one world)


@jit_inline
def _share_value(b, m, pm_yes, pm_no, hold_yes, hold_no, buf):
    for j in range(m):
        p = pm_no[b, j] / (pm_yes[b, j] + pm_no[b, j])
        buf[j] = hold_yes[b, j] * p + hold_no[b, j] * (1.0 - p)
    return _psum(buf, m)


@jit_call
def _net_sale(same, other, sh, fee_rate, min_fee):
    """What one holding would fetch if sold now: sell_proceeds, less the fee, never below 0 (0 for no shares)."""
    if sh == 0.0:
        return 0.0
    gross = _sell_proceeds(same, other, sh)[0]
    return fmax(gross - _fee(fee_rate, min_fee, gross), 0.0)


@jit_inline
def _liquidation_value(b, m, fee_rate, min_fee, pm_yes, pm_no, hold_yes, hold_no, buf):
    for j in range(m):
        y, n = pm_yes[b, j], pm_no[b, j]
        buf[j] = _net_sale(y, n, hold_yes[b, j], fee_rate, min_fee) + _net_sale(n, y, hold_no[b, j], fee_rate, min_fee)
    return _psum(buf, m)


@jit_inline
def equity(b, m, np_, fee_rate, min_fee, cash, pm_yes, pm_no, hold_yes, hold_no, pos_side, pos_entry, pos_margin,
            pos_notional, perp_price, buf):
    sv = _liquidation_value(b, m, fee_rate, min_fee, pm_yes, pm_no, hold_yes, hold_no, buf)
    for t in range(np_):
        s = pos_side[b, t]
        entry = pos_entry[b, t] if s != 0 else 1.0
        upnl = s * (perp_price[b, t] / entry - 1.0) * pos_notional[b, t]
        buf[t] = fmax(pos_margin[b, t] + upnl, 0.0) if s != 0 else 0.0
    perp = _psum(buf, np_)
    return cash[b] + sv + perp


@jit_inline
def exposure(b, m, np_, pm_yes, pm_no, hold_yes, hold_no, pos_side, pos_entry, pos_notional, perp_price, buf):
    sv = _share_value(b, m, pm_yes, pm_no, hold_yes, hold_no, buf)
    for t in range(np_):
        s = pos_side[b, t]
        entry = pos_entry[b, t] if s != 0 else 1.0
        buf[t] = abs(s) * pos_notional[b, t] * perp_price[b, t] / entry
    return sv + _psum(buf, np_)
