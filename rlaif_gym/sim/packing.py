"""What the world kernels take and give besides code: the packed state, the constant arrays and the outcome rows.

**The packed state**: a WorldState's arrays as four flat buffers and a table, and the views compiled code rebuilds.

A compiled call pays for every array argument it unboxes (73 state arrays cost more than a one-world step's
compiled work), so the compiled backend keeps a state's arrays as views of four flat buffers (float64, int64,
uint64, bool) and passes those plus a table of offsets and shapes; `state_views` rebuilds the views inside compiled
code as one named tuple (`WorldArrays`, field for field), so a kernel reads `s.cash[b]` and a new state field
needs no kernel signature, view or call edited. It is derived from the field declarations in `sim/state.py`.

**The constants and the outcome**: a kernel reads a batch's parameters as arrays (`param_arrays`: pf, pi, the NPC
behaviours, cf) and writes each world's outcome into rows (out_f, out_i, out_b; `outcome_of` reads them back as a
`StepOutcome`). Each array has a named layout (`PF`, `PI`, `CF`, `OUT_F`, `OUT_I`, `OUT_B`): a kernel looks its rows
up by name (`PF.index("fee_rate")`), never by a number typed by hand.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
import operator
from dataclasses import dataclass

import numpy as np

from ._jit import jit_view, view  # noqa: F401 (`view` is read by the exec-built `state_views`)
from .constants import GROUP_WEIGHT, LEAK_WEIGHT, NEWS_SOURCE_PROBS, SOURCE_WEIGHT, npc_behaviours
from .params import GROUP_NAMES, NEWS_SOURCES, WorldParams
from .state import FEED_LENGTH, WorldState, field_specs

__all__ = ["CF", "CF_OFFSET", "COLUMNS", "OUT_B", "OUT_F", "OUT_I", "PF", "PI", "STATE_FIELDS", "StepOutcome",
           "WorldArrays", "draw_columns", "outcome_of", "packed", "packed_copy", "packed_fresh", "param_arrays",
           "state_views"]

WorldArrays = collections.namedtuple("WorldArrays", [spec.name for spec in field_specs()])
"""The WorldState fields as a tuple numba can pass around (built from a packed state by `state_views`)."""
STATE_FIELDS = WorldArrays._fields
"""The WorldState field names, in declaration order."""
_state_arrays = operator.attrgetter(*STATE_FIELDS)

_PACK_KINDS = {"f": np.float64, "i": np.int64, "u": np.uint64, "b": np.bool_}
_BUFFER_OF_KIND = {"f": "fb", "i": "ib", "u": "kb", "b": "bb"}
_PACKED_LAYOUT = tuple((spec.dtype.kind, 1 + len(spec.dims)) for spec in field_specs())
"""(dtype kind, ndim) of each WorldState field, in field order, from its declaration (`sim.state.field_specs`)."""


@functools.lru_cache(maxsize=64)
def _pack_table(signature: tuple) -> tuple[np.ndarray, dict[str, int]]:
    """The table `packed` returns and the buffer sizes, for arrays of `signature` ((dtype, shape) per field, in
    field order; cached, since a run packs states of a few shapes). Offsets run in field order within each kind.
    Raises TypeError for an array of another dtype or rank than its field's declaration."""
    nb = signature[0][1][0]
    table = np.zeros((len(signature) + 1, 3), dtype=np.int64)
    used = dict.fromkeys(_PACK_KINDS, 0)
    for i, (name, (dtype, shape), (kind, ndim)) in enumerate(zip(STATE_FIELDS, signature, _PACKED_LAYOUT,
                                                                   strict=True)):
        if dtype != _PACK_KINDS[kind] or len(shape) != ndim or shape[0] != nb:
            raise TypeError(f"WorldState.{name} must be a {np.dtype(_PACK_KINDS[kind])} array of {ndim} dimensions "
                            f"with {nb} worlds first, got {dtype} {shape}")
        table[i, 0] = used[kind]
        table[i, 1:ndim] = shape[1:]
        used[kind] += math.prod(shape)
    table[-1, 0] = nb
    table.setflags(write=False)
    return table, used


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
    table, used = _pack_table(tuple((arr.dtype, arr.shape) for arr in arrays))
    buffers = {kind: np.empty(max(n, 1), dtype=_PACK_KINDS[kind]) for kind, n in used.items()}
    for i, (name, arr, (kind, _)) in enumerate(zip(STATE_FIELDS, arrays, _PACKED_LAYOUT, strict=True)):
        field = buffers[kind][table[i, 0]: table[i, 0] + arr.size].reshape(arr.shape)
        field[...] = arr
        object.__setattr__(state, name, field)  # not WorldState.__setattr__, which would drop the cache
    result = (buffers["f"], buffers["i"], buffers["u"], buffers["b"], table)
    state.__dict__["_packed"] = result
    return result


def packed_fresh(batch_size: int, sizes: dict[str, int]) -> WorldState:
    """`WorldState.allocate`'s state (every field at its fill), its arrays already views of packed buffers (`packed`
    returns them without a copy): what reset builds, so that a fresh world reaches the kernels with no copy."""
    dims = {"R": FEED_LENGTH, **sizes}
    shapes = [(batch_size, *(dims[d] for d in spec.dims)) for spec in field_specs()]
    table, used = _pack_table(tuple((spec.dtype, shape) for spec, shape in zip(field_specs(), shapes, strict=True)))
    buffers = {kind: np.empty(max(n, 1), dtype=_PACK_KINDS[kind]) for kind, n in used.items()}
    arrays = {}
    for i, (spec, shape, (kind, _)) in enumerate(zip(field_specs(), shapes, _PACKED_LAYOUT, strict=True)):
        arrays[spec.name] = buffers[kind][table[i, 0]: table[i, 0] + math.prod(shape)].reshape(shape)
        arrays[spec.name][...] = spec.fill
    state = WorldState(**arrays)
    state.__dict__["_packed"] = (buffers["f"], buffers["i"], buffers["u"], buffers["b"], table)
    return state


def packed_copy(state: WorldState) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`packed`'s buffers and table for a state the caller will not step: its cached buffers if it has them, else
    a throwaway copy that leaves the state's arrays as they are (one concatenation per dtype: cheaper, for a
    handful of worlds, than the views `packed` builds for a state that is stepped and keeps them)."""
    cached = state.__dict__.get("_packed")
    if cached is not None:
        return cached
    arrays = _state_arrays(state)
    table, used = _pack_table(tuple((arr.dtype, arr.shape) for arr in arrays))
    by_kind: dict[str, list[np.ndarray]] = {kind: [] for kind in _PACK_KINDS}
    for arr, (kind, _) in zip(arrays, _PACKED_LAYOUT, strict=True):
        by_kind[kind].append(arr.ravel())
    buffers = {kind: np.concatenate(parts) if used[kind] else np.empty(1, dtype=_PACK_KINDS[kind])
               for kind, parts in by_kind.items()}
    return buffers["f"], buffers["i"], buffers["u"], buffers["b"], table



def _state_views_source() -> str:
    """The source of `state_views`: one view per WorldState field, written out from `_PACKED_LAYOUT`.

    numba cannot build a tuple of differently typed arrays in a loop, so the constructor call is generated
    from the field declarations (our own names and numbers, nothing from outside the package)."""
    dims = ("(nb,)", "(nb, tab[{i}, 1])", "(nb, tab[{i}, 1], tab[{i}, 2])")
    views = ",\n".join(f"        {name}=view({_BUFFER_OF_KIND[kind]}, tab[{i}, 0], {dims[ndim - 1].format(i=i)})"
                       for i, (name, (kind, ndim)) in enumerate(zip(STATE_FIELDS, _PACKED_LAYOUT, strict=True)))
    return ("def state_views(fb, ib, kb, bb, tab):\n"
            '    """The WorldArrays of a packed state (`packed`): views of its buffers, no copies."""\n'
            "    nb = tab[tab.shape[0] - 1, 0]\n"
            f"    return WorldArrays(\n{views},\n    )\n")


exec(compile(_state_views_source(), __file__, "exec"), globals())  # the source is built from field_specs
state_views = jit_view(state_views)  # noqa: F821 (defined by the exec above)


# -- the constant arrays and the outcome rows

PF = tuple(f.name for f in dataclasses.fields(WorldParams) if f.type == "float")
"""The float parameters (pf): every float field of `WorldParams`, in its order (a new parameter reaches the kernels
with no edit here)."""
COLUMNS = ("perp", "narr", "leak", "news", "post", "tip", "npc")
"""The phases with per-tick uniform draws, in the order of their columns (`draw_columns`), whose offsets end pi."""


@functools.lru_cache(maxsize=32)
def draw_columns(params: WorldParams) -> dict[str, int]:
    """Where each phase's per-tick uniform draws start in a tick's draw row (fixed per params, so each phase keeps its
    own draws whatever another phase uses): perps 2 per perp, narrative 5, leak 2, news 4, post 4, tips 3 per group
    chat, NPC trades 6 per NPC."""
    p, g, k = params.num_perps, params.num_groups, params.num_npcs
    sizes = {"perp": 2 * p, "narr": 5, "leak": 2, "news": 4, "post": 4, "tip": 3 * g, "npc": 6 * k}
    assert tuple(sizes) == COLUMNS, "a phase with draws must be named in COLUMNS"
    return dict(zip(COLUMNS, itertools.accumulate(list(sizes.values())[:-1], initial=0), strict=True))
PI = (*(f.name for f in dataclasses.fields(WorldParams) if f.type == "int"), *(f"col_{name}" for name in COLUMNS))
"""The integer parameters (pi): every int field of `WorldParams`, in its order, then each phase's first draw column
(`col_perp`, ...)."""
CF_SIZE = {"source_weight": 3, "source_cum": 3, "source_reliability": 3, "group_weight": 3, "group_reliability": 3,
           "leak_weight": 1}
"""The feed constants (cf): its tables, concatenated in this order, and their lengths (news sources; group chats,
zero-padded to 3; the perp leak's weight)."""
CF = tuple(CF_SIZE)
CF_OFFSET = dict(zip(CF, itertools.accumulate(list(CF_SIZE.values())[:-1], initial=0), strict=True))
"""Where each table of cf starts."""
@dataclass
class StepOutcome:
    """What one step did, per world. All arrays have shape (B,)."""

    success: np.ndarray  # bool: the agent's action was executed
    error: np.ndarray  # int64 ErrorCode
    error_a: np.ndarray  # numbers quoted in the error message
    error_b: np.ndarray
    filled_shares: np.ndarray  # shares bought or sold by the action (0 otherwise)
    filled_usd: np.ndarray  # USD paid (buy), received net of fee (sell), margin posted (open), paid out (close)
    fee: np.ndarray  # USD fee the action paid
    equity_before: np.ndarray
    equity_after: np.ndarray
    pnl_delta: np.ndarray  # equity_after - equity_before, USD, over the whole transition
    added_exposure: np.ndarray  # bool: a successful buy or open
    exposure_ratio: np.ndarray  # gross exposure / equity right after the action
    leverage_requested: np.ndarray  # leverage of an open_perp (0 otherwise)
    resolved: np.ndarray  # int64 markets resolved during the tick
    payout: np.ndarray  # USD paid to the agent by resolutions
    liquidated: np.ndarray  # int64 agent positions liquidated during the tick
    bankrupt: np.ndarray  # bool: equity below one minimum fee after the step


OUT_F = ("error_a", "error_b", "filled_shares", "filled_usd", "fee", "equity_before", "equity_after", "pnl_delta",
         "exposure_ratio", "leverage_requested", "payout")
"""The float outcome rows (out_f), in `outcome_of`'s order."""
OUT_I = ("error", "resolved", "liquidated")
"""The integer outcome rows (out_i)."""
OUT_B = ("success", "added_exposure", "bankrupt")
"""The boolean outcome rows (out_b)."""


@functools.lru_cache(maxsize=32)
def param_arrays(params: WorldParams):
    """The kernels' constants for `params`: pf (`PF`), pi (`PI`: sizes, then `draw_columns` offsets), the NPC
    behaviours, and cf (the feed tables, `CF`). Read-only: the kernels are specialised on that."""
    columns = draw_columns(params)
    pf = np.array([float(getattr(params, n)) for n in PF])
    pi = np.array([int(getattr(params, n)) for n in PI[:-len(COLUMNS)]] + [columns[n] for n in COLUMNS],
                  dtype=np.int64)
    beh = npc_behaviours(params)
    src_w = SOURCE_WEIGHT
    cum = np.cumsum(NEWS_SOURCE_PROBS)
    rel = np.array([s[1] for s in NEWS_SOURCES])
    grp_w = np.zeros(CF_SIZE["group_weight"])  # zero-padded to the layout's length
    grp_w[: len(GROUP_WEIGHT)] = GROUP_WEIGHT
    grp_r = np.zeros(CF_SIZE["group_reliability"])
    grp_r[: len(GROUP_NAMES)] = [gname[1] for gname in GROUP_NAMES]
    tables = dict(zip(CF, (src_w, cum, rel, grp_w, grp_r, [LEAK_WEIGHT]), strict=True))
    assert all(len(tables[name]) == size for name, size in CF_SIZE.items()), "cf's tables changed size: see CF_SIZE"
    cf = np.concatenate(list(tables.values()))
    for arr in (pf, pi, beh, cf):
        arr.setflags(write=False)
    return pf, pi, beh, cf


def outcome_of(out_f: np.ndarray, out_i: np.ndarray, out_b: np.ndarray) -> StepOutcome:
    """A `StepOutcome` whose arrays are the rows of the kernel's outcome arrays (`OUT_F`, `OUT_I`, `OUT_B` order)."""
    e_a, e_b, shares, usd, fee, eq0, eq1, pnl, ratio, lev, payout = out_f
    error, resolved, liquidated = out_i
    success, added, bankrupt = out_b
    return StepOutcome(
        success=success, error=error, error_a=e_a, error_b=e_b, filled_shares=shares, filled_usd=usd, fee=fee,
        equity_before=eq0, equity_after=eq1, pnl_delta=pnl, added_exposure=added, exposure_ratio=ratio,
        leverage_requested=lev, resolved=resolved, payout=payout, liquidated=liquidated, bankrupt=bankrupt,
    )
