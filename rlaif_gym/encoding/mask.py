"""Which numeric actions the world would accept now: action masks for masked policy gradients.

`valid_actions` gives, per world, a boolean of every `MultiDiscrete([K, T, 5, 2])` action: True
exactly where the world would accept it this tick (feedback `success`). It does not restate the
rules: each action is decoded as the step decodes it (`encoding.action.numeric_amount`) and handed to
the world's own handlers with nothing committed (`sim.rules.apply_action`), so a mask cannot drift
from the rules and a new action kind has its mask without a line here (docs/training.md, "Action
masks"). With the default kinds that means:

| kind | accepted when |
|---|---|
| wait | always (any target, size, side) |
| buy_prediction | target < num_markets; `min_order` <= size fraction x equity <= cash |
| sell_prediction | target < num_markets; shares of that side held; proceeds after slippage above the fee |
| open_perp | target < num_perps, no position there; notional >= `min_order`; margin + fee <= cash |
| close_perp | target < num_perps with a position there |
| join_group | target < num_groups, not yet a member |

`multidiscrete_mask` folds it into what a factored policy can use: the concatenation of one mask
per dimension (kind K, target T, size 5, side 2), the layout sb3-contrib's `MaskablePPO` takes for
a `MultiDiscrete` space. A per-dimension mask can only say "this kind", "this target", "this size",
"this side", each on its own, so it is exact per entry but not per combination:

* an entry is allowed iff at least one accepted action uses it, counting only the dimensions its
  kind reads (`encoding.action.KIND_READS`: wait reads none; close_perp and join_group read the
  target only). So an action whose kind, or a dimension its kind reads, is masked out is always refused;
* an action every entry of which is allowed is accepted, except for combinations the product
  cannot exclude: a target, size or side that one allowed kind accepts is allowed with every
  allowed kind (target 3 is a market but not a perp, so open_perp on target 3 is refused), and a
  sell's market, side and size are allowed each on its own (holding YES of market 0 and NO of
  market 1 allows selling NO of market 0).

`table_mask` is exact: one entry per row of a `Discrete` action table (allowed iff that row is
accepted). `action_masks` gives any of the three layouts (per dimension, per table row, or
`valid_actions` flattened: one exact entry per action) in one compiled call per batch (numba; the
numpy folds are the reference, and a test checks they agree). Everything here reads only the
agent's own account and the public prices, never the hidden truth.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..sim import WorldParams, WorldState
from ..sim import rules as sim_rules
from ..sim.rules import apply_action, equity_of, jit_flat, param_arrays, state_views
from .action import (
    _KIND_CODES,
    BUY_FRACTIONS,
    KIND_READS,
    KIND_SIZE_RULES,
    SELL_FRACTIONS,
    SIZE_NONE,
    action_nvec,
    numeric_amount,
)

__all__ = ["action_masks", "multidiscrete_mask", "table_mask", "valid_actions"]

_TARGET, _SIZE, _SIDE = 0, 1, 2  # KIND_READS' columns


def valid_actions(state: WorldState, params: WorldParams, perp_leverage: float) -> np.ndarray:
    """Whether the world would accept each numeric action now, bool of shape (B, K, T, 5, 2).

    Args:
        state: the worlds (before the action).
        params: their parameters.
        perp_leverage: the numeric face's perp leverage (`numeric_perp_leverage`).
    """
    return action_masks(state, params, perp_leverage, layout="joint").reshape(
        state.batch_size, *(int(n) for n in action_nvec(params)))


def multidiscrete_mask(valid: np.ndarray) -> np.ndarray:
    """Per-dimension masks from `valid_actions`, concatenated: bool (B, K + T + 5 + 2).

    An entry is True iff some accepted action uses it in a dimension its kind reads (see the
    module docstring); every dimension keeps at least one True entry (a world that can only wait
    gets wait, target 0, size 0, side 0).
    """
    b, kinds = valid.shape[:2]
    kind = valid.reshape(b, kinds, -1).any(axis=2)
    dims = []
    for col, other_axes in ((_TARGET, (2, 3)), (_SIZE, (1, 3)), (_SIDE, (1, 2))):
        readers = valid[:, KIND_READS[:, col]]  # (B, readers, T, 5, 2)
        dim = readers.any(axis=tuple(a + 1 for a in other_axes)).any(axis=1)
        dim[~dim.any(axis=1), 0] = True
        dims.append(dim)
    return np.concatenate([kind, *dims], axis=1)


def table_mask(valid: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Exact masks of the rows of a `Discrete` action table: bool (B, K), True iff that row is accepted."""
    t = np.asarray(table, dtype=np.int64)
    return valid[:, t[:, 0], t[:, 1], t[:, 2], t[:, 3]]


# ---------------------------------------------------------------------------------------------
# One loop per world: every action asked of the rules, then folded, no temporaries.


def _mask_rows(pf, pi, fb, ib, kb, bb, tab, kind_codes, size_rules, reads, buy_frac, sell_frac, lev, table, joint,
               out, valid, buf):
    """Write each world's mask row into out: every action (joint), per table row, or per dimension (no rows).

    valid: (K, T, 5, 2) bool scratch; buf: float scratch of max(M, P). An action is valid iff the world's own
    handler accepts it (`apply_action` with commit False) with the amount the step would decode. A kind without a
    size sees the same amount for every bucket, so it is asked once per (target, side).
    """
    s = state_views(fb, ib, kb, bb, tab)
    n_kinds, t_count, n_sizes, n_sides = valid.shape
    for b in range(s.tick.shape[0]):
        eq = equity_of(b, s, pf, pi, buf)
        for k in range(n_kinds):
            code, rule = kind_codes[k], size_rules[k]
            for t in range(t_count):
                for sd in range(n_sides):
                    for z in range(n_sizes):
                        if rule == SIZE_NONE and z > 0:
                            valid[k, t, z, sd] = valid[k, t, 0, sd]
                            continue
                        am = numeric_amount(rule, z, t, sd, b, s, pi, eq, buy_frac, sell_frac, lev)
                        err = apply_action(b, s, pf, pi, code, t, sd, am, lev, 0.0, 0.0, False)[0]
                        valid[k, t, z, sd] = err == 0
        if joint:  # C order, element by element (a whole-row copy would need numba's runtime)
            j = 0
            for k in range(n_kinds):
                for t in range(t_count):
                    for z in range(n_sizes):
                        for sd in range(n_sides):
                            out[b, j] = valid[k, t, z, sd]
                            j += 1
            continue
        if table.shape[0]:
            for r in range(table.shape[0]):
                out[b, r] = valid[table[r, 0], table[r, 1], table[r, 2], table[r, 3]]
            continue
        out[b, :] = False
        at_size, at_side = n_kinds + t_count, n_kinds + t_count + n_sizes
        for k in range(n_kinds):
            for t in range(t_count):
                for z in range(n_sizes):
                    for sd in range(n_sides):
                        if valid[k, t, z, sd]:
                            out[b, k] = True
                            if reads[k, 0]:
                                out[b, n_kinds + t] = True
                            if reads[k, 1]:
                                out[b, at_size + z] = True
                            if reads[k, 2]:
                                out[b, at_side + sd] = True
        for lo, hi in ((n_kinds, at_size), (at_size, at_side), (at_side, at_side + n_sides)):
            if not out[b, lo:hi].any():
                out[b, lo] = True


_warm = False  # the kernel has run in this process (later calls skip `sim_rules.compile_notice`)
_kernel = jit_flat(_mask_rows)  # no runtime: see `sim.rules.jit_flat`; `_mask_rows` itself without numba


def action_masks(state: WorldState, params: WorldParams, perp_leverage: float,
                 table: np.ndarray | None = None, layout: str = "dims") -> np.ndarray:
    """The masks of `valid_actions` in one of three layouts, in one call per batch (compiled when numba is there).

    Args:
        state, params, perp_leverage: as for `valid_actions`.
        table: rows of a `Discrete` action table: one exact entry per row, (B, K) (the layout is ignored).
        layout: without a table, `"dims"` for `multidiscrete_mask` (B, K + T + 5 + 2), or `"joint"`
            for `valid_actions` flattened in C order, one exact entry per MultiDiscrete action (B, K T 5 2).
    """
    if layout not in ("dims", "joint"):
        raise ValueError(f"layout must be 'dims' or 'joint', got {layout!r}")
    c = _constants(params)
    if table is None:
        rows, joint = _NO_ROWS, layout == "joint"
        width = c.joint_width if joint else c.dims_width
    else:
        rows, joint = np.ascontiguousarray(table, dtype=np.int64), False
        width = len(rows)
    out = np.empty((state.batch_size, width), dtype=bool)
    pf, pi, _, _ = param_arrays(params)
    args = (pf, pi, *sim_rules.packed_copy(state), _KIND_CODES, KIND_SIZE_RULES, KIND_READS, BUY_FRACTIONS,
            SELL_FRACTIONS, float(perp_leverage), rows, joint, out, np.empty(c.shape, dtype=bool), np.empty(c.buf))
    global _warm
    if _warm:  # the notice's check costs more than a small batch's masks
        _kernel(*args)
    else:
        with sim_rules.compile_notice(_kernel):
            _kernel(*args)
        _warm = True
    return out


_NO_ROWS = np.zeros((0, 4), np.int64)


class _Constants(NamedTuple):
    shape: tuple[int, ...]
    dims_width: int
    joint_width: int
    buf: int


@functools.lru_cache(maxsize=32)
def _constants(params: WorldParams) -> _Constants:
    """The scratch and output sizes for `params` (built once: the call is per step)."""
    nvec = action_nvec(params)
    return _Constants(tuple(int(n) for n in nvec), int(nvec.sum()), int(np.prod(nvec)),
                      max(params.num_markets, params.num_perps, 1))
