"""Counter-based random streams: every draw is a pure function of (world key, stream, index).

Why not one `np.random.Generator` per world per tick? Because the sim works on a batch of worlds,
and world b must see exactly the same draws whether it runs alone (the single env), in a batch of
16,384 (the native vector env) or in a subprocess (AsyncVectorEnv). Keying draws by counter makes a
world's randomness independent of the batch it runs in, costs one vectorised hash per tick, needs no
per-world Python objects, and makes "the future" an explicit function of the key (which is what the
look-ahead test perturbs).

The key itself comes from the env's `np.random.Generator` (seeded by `reset(seed=...)`), so all
randomness still flows from one explicit generator. The hash is SplitMix64's finaliser applied twice,
which is the standard way to turn counters into well-mixed 64-bit words.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["NORMAL_MAX", "draw_keys", "normals", "uniforms"]

_U64 = np.uint64
_C1 = _U64(0xBF58476D1CE4E5B9)
_C2 = _U64(0x94D049BB133111EB)
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_TO_UNIT = 2.0**-53
NORMAL_MAX = math.sqrt(-2.0 * math.log(_TO_UNIT))
"""The largest magnitude `normals` returns (about 8.57): a uniform is at most 1 - 2**-53, so the Box-Muller radius
sqrt(-2 log(1 - u1)) is at most sqrt(2 * 53 ln 2). The world's worst cases (`sim.bounds`) start from it."""


def _mix(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> _U64(30))) * _C1
    x = (x ^ (x >> _U64(27))) * _C2
    return x ^ (x >> _U64(31))


def draw_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw `n` world keys (uint64) from an explicit generator."""
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def uniforms(keys: np.ndarray, stream: np.ndarray | int, n: int) -> np.ndarray:
    """Uniform draws in [0, 1), shape (len(keys), n).

    Args:
        keys: uint64 world keys, shape (B,).
        stream: a stream id per world (shape (B,)) or one shared id; distinct (stream, column)
            pairs give independent draws.
        n: number of draws per world.
    """
    with np.errstate(over="ignore"):
        stream_u = np.asarray(stream, dtype=_U64).reshape(-1, 1)
        counters = stream_u * _U64(1 << 16) + np.arange(n, dtype=_U64)[None, :]
        x = _mix(keys[:, None] ^ _mix(counters * _GOLDEN + _GOLDEN))
    return (x >> _U64(11)).astype(np.float64) * _TO_UNIT


def normals(u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """Standard normal draws from two uniform arrays (Box–Muller)."""
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
