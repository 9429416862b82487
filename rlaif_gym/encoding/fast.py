"""A numba-compiled `encode_observations` for the compiled world backend (`backend="numba"`).

`observation.encode_observations` stays the reference. Building the observation from numpy
temporaries costs about as much as the compiled world step itself (docs/benchmarks.md); one loop per
world that writes each feature straight into the output removes the temporaries. Same features, same
formulas, same clipping; equity and exposure come from the world kernel's own accounting helpers, so
they sum in numpy's order. tanh and log may differ from numpy's in the last bit, which the float32
cast hides almost always (tests/encoding/test_fast_observation.py checks agreement to 1e-6).
"""

from __future__ import annotations

import numpy as np

from ..sim import WorldParams, WorldState
from ..sim import rules as sim_rules
from .observation import FeatureLayout, encode_observations

__all__ = ["available", "encode_observations_fast", "kernel", "scratch"]

_warm = False  # the kernel has run in this process (later calls skip `sim_rules.compile_notice`)


def available() -> bool:
    """True when numba is installed, so `encode_observations_fast` runs compiled."""
    return sim_rules.available()


def kernel(start, dur_max, num_ticks, max_lev, fee_rate, min_fee, low, high, fb, ib, kb, bb, tab, out, esc):
    """Write every world's observation row into out (B, D); fb, ib, kb, bb, tab: the packed state
    (`sim.rules.packed`); esc: `scratch` floats."""
    s = sim_rules.state_views(fb, ib, kb, bb, tab)
    tick, cash, realized, pm_yes, pm_no = s.tick, s.cash, s.realized_pnl, s.pm_yes, s.pm_no
    pm_last, pm_resolve, hold_yes, hold_no = s.pm_last_price, s.pm_resolve_tick, s.hold_yes, s.hold_no
    news_acc, post_acc, group_acc, joined, npc_flow = s.news_acc, s.post_acc, s.group_acc, s.joined, s.pm_npc_flow
    perp_price, perp_prev, perp_ema, perp_funding = s.perp_price, s.perp_prev_price, s.perp_ema, s.perp_funding
    perp_news, pos_side, pos_entry, pos_margin = s.perp_news_acc, s.pos_side, s.pos_entry, s.pos_margin
    pos_notional, pos_leverage = s.pos_notional, s.pos_leverage
    b_count, m_count = pm_yes.shape
    p_count = perp_price.shape[1]
    g_count = joined.shape[1]
    nbuf = max(m_count, p_count)
    buf, row = esc[0:nbuf], esc[nbuf:nbuf + out.shape[1]]
    for b in range(b_count):
        t = tick[b]
        k = 0
        for m in range(m_count):
            price = pm_no[b, m] / (pm_yes[b, m] + pm_no[b, m])
            group = 0.0
            for g in range(g_count):
                group += group_acc[b, g, m] * (1.0 if joined[b, g] else 0.0)
            row[k] = price
            row[k + 1] = price - pm_last[b, m]
            row[k + 2] = (pm_resolve[b, m] - t) / dur_max
            row[k + 3] = hold_yes[b, m] * price / start
            row[k + 4] = hold_no[b, m] * (1.0 - price) / start
            row[k + 5] = np.tanh(0.5 * news_acc[b, m])
            row[k + 6] = np.tanh(0.5 * post_acc[b, m])
            row[k + 7] = np.tanh(0.5 * group)
            row[k + 8] = npc_flow[b, m]
            k += 9
        for p in range(p_count):
            side = pos_side[b, p]
            is_open = side != 0
            entry = pos_entry[b, p] if is_open else 1.0
            price = perp_price[b, p]
            current = pos_notional[b, p] * price / entry
            row[k] = 20.0 * np.log(price / perp_prev[b, p])
            row[k + 1] = 10.0 * np.log(price / perp_ema[b, p])
            row[k + 2] = perp_funding[b, p] / 3e-3
            row[k + 3] = np.tanh(0.5 * perp_news[b, p])
            row[k + 4] = side * current / start
            row[k + 5] = (side * (price / entry - 1.0) * pos_notional[b, p] if is_open else 0.0) / start
            row[k + 6] = pos_leverage[b, p] / max_lev
            k += 7
        for g in range(g_count):
            row[k] = 1.0 if joined[b, g] else 0.0
            k += 1
        eq = sim_rules.equity(b, m_count, p_count, fee_rate, min_fee, cash, pm_yes, pm_no, hold_yes, hold_no,
                             pos_side, pos_entry, pos_margin, pos_notional, perp_price, buf)
        ex = sim_rules.exposure(b, m_count, p_count, pm_yes, pm_no, hold_yes, hold_no, pos_side, pos_entry,
                               pos_notional, perp_price, buf)
        row[k] = cash[b] / start
        row[k + 1] = eq / start
        row[k + 2] = 1.0 - t / num_ticks
        row[k + 3] = ex / sim_rules.fmax(eq, 1e-9)
        row[k + 4] = realized[b] / start
        for j in range(out.shape[1]):
            v = sim_rules.fmin(sim_rules.fmax(row[j], low[j]), high[j])
            out[b, j] = np.float32(v)


kernel = sim_rules.jit_flat(kernel)  # `kernel` itself where numba is missing


def scratch(num_markets: int, num_perps: int, dim: int) -> np.ndarray:
    """Float scratch for `kernel` (it allocates nothing itself: see `sim.rules.jit_flat`)."""
    return np.empty(max(num_markets, num_perps) + dim)


def encode_observations_fast(state: WorldState, params: WorldParams, layout: FeatureLayout) -> np.ndarray:
    """`encode_observations`, compiled; falls back to the reference without numba."""
    if not sim_rules.available():
        return encode_observations(state, params, layout)
    s = state
    out = np.empty((s.batch_size, len(layout.names)), dtype=np.float32)
    args = (float(params.starting_cash), float(params.market_duration_max), float(params.num_ticks),
            float(params.max_leverage), float(params.fee_rate), float(params.min_fee),
            layout.low.astype(np.float64), layout.high.astype(np.float64), *sim_rules.packed_copy(s),
            out, scratch(params.num_markets, params.num_perps, out.shape[1]))
    global _warm
    if _warm:
        kernel(*args)
    else:
        with sim_rules.compile_notice(kernel):
            kernel(*args)
        _warm = True
    return out
