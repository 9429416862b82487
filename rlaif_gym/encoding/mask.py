"""Which numeric actions the world would accept now: action masks for masked policy gradients.

`valid_actions` gives, per world, a boolean of every `MultiDiscrete([6, T, 5, 2])` action: True
exactly where the world would accept it this tick (feedback `success`), by the rules the world
applies (docs/training.md, "Action masks"):

| kind | accepted when |
|---|---|
| wait | always (any target, size, side) |
| buy_prediction | target < num_markets; `min_order` <= size fraction x equity <= cash |
| sell_prediction | target < num_markets; shares of that side held; proceeds after slippage above the fee |
| open_perp | target < num_perps, no position there; notional >= `min_order`; margin + fee <= cash |
| close_perp | target < num_perps with a position there |
| join_group | target < num_groups, not yet a member |

`multidiscrete_mask` folds it into what a factored policy can use: the concatenation of one mask
per dimension (kind 6, target T, size 5, side 2), the layout sb3-contrib's `MaskablePPO` takes for
a `MultiDiscrete` space. A per-dimension mask can only say "this kind", "this target", "this size",
"this side", each on its own, so it is exact per entry but not per combination:

* an entry is allowed iff at least one accepted action uses it, counting only the dimensions its
  kind reads (wait reads none; close_perp and join_group read the target only). So an action whose
  kind, or a dimension its kind reads, is masked out is always refused;
* an action every entry of which is allowed is accepted, except for combinations the product
  cannot exclude: a target, size or side that one allowed kind accepts is allowed with every
  allowed kind (target 3 is a market but not a perp, so open_perp on target 3 is refused), and a
  sell's market, side and size are allowed each on its own (holding YES of market 0 and NO of
  market 1 allows selling NO of market 0).

`table_mask` is exact: one entry per row of a `Discrete` action table (allowed iff that row is
accepted). `action_masks` gives any of the three layouts (per dimension, per table row, or
`valid_actions` flattened: one exact entry per action) in one compiled call per batch (numba; the
numpy functions are the reference, and a test checks they agree). Everything here reads only the
agent's own account and the public prices, never the hidden truth.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..sim import WorldParams, WorldState, equity, sell_proceeds
from .action import BUY_FRACTIONS, SELL_FRACTIONS, action_nvec

__all__ = ["action_masks", "multidiscrete_mask", "table_mask", "valid_actions"]

_WAIT, _BUY, _SELL, _OPEN, _CLOSE, _JOIN = range(6)


def valid_actions(state: WorldState, params: WorldParams, perp_leverage: float) -> np.ndarray:
    """Whether the world would accept each numeric action now, bool of shape (B, 6, T, 5, 2).

    Args:
        state: the worlds (before the action).
        params: their parameters.
        perp_leverage: the numeric face's perp leverage (`numeric_perp_leverage`).
    """
    b = state.batch_size
    kinds, t_n, sizes, sides = (int(n) for n in action_nvec(params))
    m_n, p_n, g_n = params.num_markets, params.num_perps, params.num_groups
    ok = np.zeros((b, kinds, t_n, sizes, sides), dtype=bool)
    ok[:, _WAIT] = True
    cash = state.cash[:, None]
    eq = equity(state, params)[:, None]
    # buy: amount = fraction x equity, as decode_actions prices it.
    amount = BUY_FRACTIONS[None, :] * eq
    buy = np.isfinite(amount) & (amount > 0) & (amount >= params.min_order) & (amount <= cash)  # (B, 5)
    ok[:, _BUY, :m_n] = buy[:, None, :, None]
    # sell: fraction x the held shares of that side, refused when the proceeds do not cover the fee.
    for side, held, same, other in ((0, state.hold_yes, state.pm_yes, state.pm_no),
                                    (1, state.hold_no, state.pm_no, state.pm_yes)):
        shares = SELL_FRACTIONS[None, None, :] * held[:, :, None]  # (B, M, 5)
        gross = sell_proceeds(same[:, :, None], other[:, :, None], np.where(np.isfinite(shares), shares, 0.0))[0]
        fee = np.maximum(params.fee_rate * gross, params.min_fee)
        ok[:, _SELL, :m_n, :, side] = (held[:, :, None] > 0) & np.isfinite(shares) & (shares > 0) & (gross > fee)
    # open_perp: notional = fraction x equity x leverage; margin = notional / leverage.
    lev = float(perp_leverage)
    if np.isfinite(lev) and 1.0 <= lev <= params.max_leverage and p_n:
        notional = amount * lev
        fee = np.maximum(params.fee_rate * np.where(np.isfinite(notional), notional, 0.0), params.min_fee)
        afford = (np.isfinite(notional) & (notional > 0) & (notional >= params.min_order)
                  & (notional / lev + fee <= cash))  # (B, 5)
        flat = state.pos_side == 0  # (B, P)
        ok[:, _OPEN, :p_n] = (flat[:, :, None] & afford[:, None, :])[..., None]
    if p_n:
        ok[:, _CLOSE, :p_n] = (state.pos_side != 0)[:, :, None, None]
    if g_n:
        ok[:, _JOIN, :g_n] = ~state.joined[:, :, None, None]
    return ok


def multidiscrete_mask(valid: np.ndarray) -> np.ndarray:
    """Per-dimension masks from `valid_actions`, concatenated: bool (B, 6 + T + 5 + 2).

    An entry is True iff some accepted action uses it in a dimension its kind reads (see the
    module docstring); every dimension keeps at least one True entry (a world that can only wait
    gets wait, target 0, size 0, side 0).
    """
    b, kinds = valid.shape[:2]
    kind = valid.reshape(b, kinds, -1).any(axis=2)
    sized = valid[:, _BUY:_OPEN + 1]  # kinds that read the size and the side
    target = sized.any(axis=(3, 4)).any(axis=1) | valid[:, _CLOSE:_JOIN + 1, :, 0, 0].any(axis=1)
    size = sized.any(axis=(1, 2, 4))
    side = sized.any(axis=(1, 2, 3))
    for dim in (target, size, side):
        dim[~dim.any(axis=1), 0] = True
    return np.concatenate([kind, target, size, side], axis=1)


def table_mask(valid: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Exact masks of the rows of a `Discrete` action table: bool (B, K), True iff that row is accepted."""
    t = np.asarray(table, dtype=np.int64)
    return valid[:, t[:, 0], t[:, 1], t[:, 2], t[:, 3]]


# ---------------------------------------------------------------------------------------------
# Compiled: both folds straight from the state, one loop per world, no temporaries.

_kernel = None
_equity = None  # sim.rules's compiled equity of one world (numpy's summation order), bound by `_compiled`


def _compiled():
    """The numba kernel (compiled on first use, cached on disk), or None without numba."""
    global _kernel, _equity
    if _kernel is None:
        from ..sim import rules as sim_rules

        if not sim_rules.available():
            return None
        _equity = sim_rules.equity
        _kernel = sim_rules.jit(_mask_rows)  # cached with the other kernels (sim.rules.kernel_cache_dir)
    return _kernel


def _mask_rows(fee_rate, min_fee, min_order, lev, lev_ok, cash, pm_yes, pm_no, hold_yes, hold_no, pos_side,
               pos_entry, pos_margin, pos_notional, perp_price, joined, buy_frac, sell_frac, table, joint, t_count,
               out, valid, buf):
    """Write each world's mask row into out: every action (joint), per table row, or per dimension (no rows).

    valid: (6, T, 5, 2) bool scratch; buf: float scratch of max(M, P); the rules of `valid_actions`.
    """
    b_count, m_count = pm_yes.shape
    p_count, g_count = pos_side.shape[1], joined.shape[1]
    for b in range(b_count):
        valid[:] = False
        valid[0] = True
        eq = _equity(b, m_count, p_count, fee_rate, min_fee, cash, pm_yes, pm_no, hold_yes, hold_no, pos_side,
                     pos_entry, pos_margin, pos_notional, perp_price, buf)
        for z in range(5):
            amount = buy_frac[z] * eq
            if np.isfinite(amount) and amount > 0 and amount >= min_order and amount <= cash[b]:
                for m in range(m_count):
                    valid[1, m, z, 0] = True
                    valid[1, m, z, 1] = True
            notional = amount * lev
            if lev_ok and np.isfinite(notional) and notional > 0 and notional >= min_order:
                fee = max(fee_rate * notional, min_fee)
                if notional / lev + fee <= cash[b]:
                    for t in range(p_count):
                        if pos_side[b, t] == 0:
                            valid[3, t, z, 0] = True
                            valid[3, t, z, 1] = True
        for m in range(m_count):
            for side in range(2):
                held = hold_yes[b, m] if side == 0 else hold_no[b, m]
                same = pm_yes[b, m] if side == 0 else pm_no[b, m]
                other = pm_no[b, m] if side == 0 else pm_yes[b, m]
                if held > 0:
                    for z in range(5):
                        sh = sell_frac[z] * held
                        if np.isfinite(sh) and sh > 0:
                            a_ = same + sh + other
                            disc = max(a_ * a_ - 4.0 * sh * other, 0.0)
                            gross = (2.0 * sh * other) / (a_ + np.sqrt(disc))
                            if gross > max(fee_rate * gross, min_fee):
                                valid[2, m, z, side] = True
        for t in range(p_count):
            if pos_side[b, t] != 0:
                valid[4, t, :, :] = True
        for g in range(g_count):
            if not joined[b, g]:
                valid[5, g, :, :] = True
        if joint:
            out[b, :] = valid.reshape(-1)
            continue
        if table.shape[0]:
            for r in range(table.shape[0]):
                out[b, r] = valid[table[r, 0], table[r, 1], table[r, 2], table[r, 3]]
            continue
        out[b, :] = False
        for k in range(6):
            for t in range(t_count):
                for z in range(5):
                    for side in range(2):
                        if valid[k, t, z, side]:
                            out[b, k] = True
                            if 1 <= k <= 3:
                                out[b, 6 + t] = True
                                out[b, 6 + t_count + z] = True
                                out[b, 11 + t_count + side] = True
                            elif k >= 4:
                                out[b, 6 + t] = True
        for lo, hi in ((6, 6 + t_count), (6 + t_count, 11 + t_count), (11 + t_count, 13 + t_count)):
            if not out[b, lo:hi].any():
                out[b, lo] = True


def action_masks(state: WorldState, params: WorldParams, perp_leverage: float,
                 table: np.ndarray | None = None, layout: str = "dims") -> np.ndarray:
    """The masks of `valid_actions` in one of three layouts, compiled when numba is there.

    Args:
        state, params, perp_leverage: as for `valid_actions`.
        table: rows of a `Discrete` action table: one exact entry per row, (B, K) (the layout is ignored).
        layout: without a table, `"dims"` for `multidiscrete_mask` (B, 6 + T + 5 + 2), or `"joint"`
            for `valid_actions` flattened in C order, one exact entry per MultiDiscrete action (B, 6 T 5 2).
    """
    if layout not in ("dims", "joint"):
        raise ValueError(f"layout must be 'dims' or 'joint', got {layout!r}")
    kernel = _compiled()
    if kernel is None:
        valid = valid_actions(state, params, perp_leverage)
        if table is not None:
            return table_mask(valid, table)
        return valid.reshape(len(valid), -1) if layout == "joint" else multidiscrete_mask(valid)
    c = _constants(params, float(perp_leverage))
    if table is None:
        rows, joint = _NO_ROWS, layout == "joint"
        width = c.joint_width if joint else c.dims_width
    else:
        rows, joint = np.ascontiguousarray(table, dtype=np.int64), False
        width = len(rows)
    out = np.empty((state.batch_size, width), dtype=bool)
    s = state
    kernel(c.fee_rate, c.min_fee, c.min_order, c.lev, c.lev_ok, s.cash, s.pm_yes, s.pm_no, s.hold_yes, s.hold_no,
           s.pos_side, s.pos_entry, s.pos_margin, s.pos_notional, s.perp_price, s.joined, BUY_FRACTIONS, SELL_FRACTIONS,
           rows, joint, c.targets, out, np.empty(c.shape, dtype=bool), np.empty(c.buf))
    return out


_NO_ROWS = np.zeros((0, 4), np.int64)


class _Constants(NamedTuple):
    fee_rate: float
    min_fee: float
    min_order: float
    lev: float
    lev_ok: bool
    targets: int
    shape: tuple[int, ...]
    dims_width: int
    joint_width: int
    buf: int


@functools.lru_cache(maxsize=32)
def _constants(params: WorldParams, lev: float) -> _Constants:
    """What the kernel needs besides the state, per world parameters (built once: the call is per step)."""
    nvec = action_nvec(params)
    return _Constants(float(params.fee_rate), float(params.min_fee), float(params.min_order), lev,
                      bool(np.isfinite(lev) and 1.0 <= lev <= params.max_leverage), int(nvec[1]),
                      tuple(int(n) for n in nvec), int(nvec.sum()), int(np.prod(nvec)),
                      max(params.num_markets, params.num_perps, 1))
