"""Episode snapshots as data: a versioned byte encoding of `EnvSnapshot` that no reader turns into code.

A snapshot leaves the process in an OpenEnv token, a TRL dataset row, a file a user shares. Reading
one must never run anything it carries, so the encoding holds only plain data, read with `json` and
`numpy.frombuffer` (never `pickle`):

    zlib( MAGIC | u32 header length | header (UTF-8 JSON) | the arrays' bytes, back to back )

The header names the format and its version, the package version that wrote it, the env class
(``RLAIFEnv`` or ``RLAIFTextEnv``), the config, the generator's state, the env's bookkeeping fields
and, for each array, its name, dtype and shape. Every array is one `WorldState` field (B = 1), plus
the env's own arrays (the render history and, for the text face, the current numeric observation).

This module holds `EnvSnapshot` and the codec, and imports no env: each env class that can leave the
process registers itself (`register_snapshot_class`) and encodes and checks its own bookkeeping fields
(`_encode_snapshot_fields`, `_decode_snapshot_fields`, through a `SnapshotReader`), so the codec
never reads an env's private fields and the import graph has no circle.

Decoding checks everything before anything uses it: sizes (`MAX_SNAPSHOT_BYTES`, the decompressed size
too), the header's JSON depth (and no NaN or Infinity, which JSON does not have), the config
(`RLAIFEnvConfig`'s own validation: its floors keep the reward's worst case finite), every array's dtype and
shape against what `reset` makes for that config, the world against that config (`sim.validate.check_state`:
every field within what the rules and the config allow by its tick, and the laws across fields: every share
backed by collateral, pools on the product the config's liquidity gives, the money summing to what the config
gave the agent and the NPCs and within what it can reach by the tick) and the bookkeeping the same way: the
render history (prices in [0, 1], equity within the world's money), the behaviour tracker (its counts within
the ticks played, its copies of the world's numbers equal to them), the feedback and the prompt (text any
UTF-8 reader can hold) and the numeric observation (within the observation space). A snapshot that decodes
restores into an env that steps to the end of its episode with finite rewards, whatever config it carries.
Any failure raises `SnapshotFormatError` saying what was expected and what arrived.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from .. import sim
from .._version import __version__
from ..config import RLAIFEnvConfig
from ..errors import ConfigError, RLAIFError
from ..rewards.archetypes import normalize_archetype
from ..sim import bounds
from ..sim.validate import check_state
from ..trajectory import storable_text
from .behavior import BehaviorTracker
from .core import world_params

__all__ = ["MAX_SNAPSHOT_BYTES", "SNAPSHOT_FORMAT", "SNAPSHOT_FORMAT_VERSION", "EnvSnapshot", "SnapshotFormatError",
           "SnapshotReader", "check_number", "check_text", "decode_snapshot", "encode_snapshot",
           "register_snapshot_class"]

SNAPSHOT_FORMAT = "rlaif-env-snapshot"
SNAPSHOT_FORMAT_VERSION = 1
"""Bumped on any change an older reader could misread (a reader refuses other versions)."""
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
"""The largest snapshot a reader accepts, compressed or decompressed (a default world is ~25 kB)."""

_MAGIC = b"RLAIFSNAP\n"
_HEADER_LEN = struct.Struct("<I")
_MAX_JSON_DEPTH = 32
_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
"""The bit generators numpy ships; a snapshot names one of them and its state (plain integers)."""
_TRACKER_FIELDS = {f.name: f for f in fields(BehaviorTracker)}
_MAX_NUMBER = 1e300
"""The largest magnitude of a number in the header: a sum the episode goes on adding to stays finite."""
_BEHAVIOR_SCORE = (-0.5, 0.5)
"""The range of `behavior_score` (the tracker's `last_score`)."""


class SnapshotFormatError(RLAIFError, ValueError):
    """Bytes that are not a snapshot this reader can restore; the message says what was wrong."""


@dataclass(frozen=True)
class EnvSnapshot:
    """Everything an episode of `RLAIFEnv` (or a subclass) depends on at one tick, as deep copies.

    Made by `env.get_state()`, consumed by `env.set_state()` and `env.fork()`. Restoring never
    modifies the snapshot, so one snapshot can seed any number of branches. `to_bytes()` /
    `from_bytes()` carry it out of the process as plain data (this module: arrays and JSON, never
    pickle), checked on the way back in; an env restored from the bytes steps bit-identically.

    Attributes:
        env_class: the class that made it (a text env's snapshot carries its prompt and view).
        config: the env's config; a snapshot only restores into an env with an equal config.
        world: the world state (B = 1), ground truth and world key included.
        np_random: the env's generator (it draws the keys of later resets).
        np_random_seed: the seed of the last `reset(seed=...)`, as Gymnasium reports it.
        fields: the env's per-episode bookkeeping (feedback, done flag, behaviour tracker, render
            history; for the text face also the current view, prompt and numeric observation).
    """

    env_class: type
    config: RLAIFEnvConfig
    world: sim.WorldState
    np_random: np.random.Generator
    np_random_seed: int | None
    fields: dict[str, Any]

    @property
    def tick(self) -> int:
        """The tick the snapshot was taken at."""
        return int(self.world.tick[0])

    def to_bytes(self) -> bytes:
        """This snapshot as data-only bytes (see `rlaif_gym.envs.snapshot`); `from_bytes` reads them back."""
        return encode_snapshot(self)

    @classmethod
    def from_bytes(cls, data: bytes, *, env_class: type | None = None) -> EnvSnapshot:
        """The snapshot `to_bytes` wrote, fully checked; `SnapshotFormatError` says what is wrong otherwise.

        Args:
            data: the bytes.
            env_class: the class the snapshot must come from (None: any registered class, both faces once
                `rlaif_gym.envs` has given out either).
        """
        return decode_snapshot(data, env_class=env_class)[0]


class SnapshotClass(Protocol):
    """What an env class gives the codec to leave the process (`register_snapshot_class`)."""

    __name__: str
    _SNAPSHOT_ARRAYS: tuple[str, ...]

    @classmethod
    def _encode_snapshot_fields(cls, snapshot: EnvSnapshot) -> tuple[dict[str, Any], list[tuple[str, np.ndarray]]]:
        """The bookkeeping fields of `snapshot` as (plain JSON, named arrays in `_SNAPSHOT_ARRAYS` order)."""
        ...

    @classmethod
    def _decode_snapshot_fields(cls, reader: SnapshotReader) -> dict[str, Any]:
        """The bookkeeping fields back, each checked through `reader` (it raises `SnapshotFormatError`)."""
        ...


_CLASSES: dict[str, SnapshotClass] = {}
"""The env classes whose snapshots leave the process, by the name a snapshot's header gives."""


def register_snapshot_class(cls: type) -> type:
    """Let snapshots of `cls` be written and read as bytes (the env modules register `RLAIFEnv` and
    `RLAIFTextEnv` as they are imported). `cls` encodes and checks its own fields (`SnapshotClass`)."""
    if not all(hasattr(cls, name) for name in ("_SNAPSHOT_ARRAYS", "_encode_snapshot_fields",
                                               "_decode_snapshot_fields")):
        raise TypeError(f"{cls.__name__} does not encode its own snapshot fields (see SnapshotClass)")
    _CLASSES[cls.__name__] = cls
    return cls


# -- encoding ------------------------------------------------------------------------------------------


def tracker_dict(tracker: BehaviorTracker) -> dict[str, Any]:
    """A behaviour tracker's fields as plain JSON (its sets sorted)."""
    out: dict[str, Any] = {}
    for name in _TRACKER_FIELDS:
        value = getattr(tracker, name)
        out[name] = sorted(value) if isinstance(value, set) else value
    return out


def encode_snapshot(snapshot: EnvSnapshot, meta: dict[str, Any] | None = None) -> bytes:
    """`snapshot` as bytes; `meta` is extra plain JSON kept beside it (e.g. a session's episode id and return),
    returned by `decode_snapshot`."""
    cls = snapshot.env_class
    if _CLASSES.get(cls.__name__) is not cls:
        raise ConfigError(f"to_bytes() writes snapshots of {' and '.join(sorted(_CLASSES))}; a {cls.__name__} "
                          "snapshot stays in the process (use it with set_state or fork)")
    arrays: list[tuple[str, np.ndarray]] = [(f"world.{fl.name}", getattr(snapshot.world, fl.name))
                                             for fl in fields(sim.WorldState)]
    header_fields, own = cls._encode_snapshot_fields(snapshot)
    arrays += own
    header = {
        "format": SNAPSHOT_FORMAT, "version": SNAPSHOT_FORMAT_VERSION, "package": __version__,
        "env": cls.__name__, "config": snapshot.config.model_dump(mode="json"),
        "np_random": snapshot.np_random.bit_generator.state, "np_random_seed": snapshot.np_random_seed,
        "fields": header_fields, "meta": dict(meta or {}),
        "arrays": [[name, arr.dtype.str, list(arr.shape)] for name, arr in arrays],
    }
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    body = b"".join(np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes() for _, arr in arrays)
    return zlib.compress(_MAGIC + _HEADER_LEN.pack(len(head)) + head + body, 6)


# -- decoding ------------------------------------------------------------------------------------------


def _fail(what: str) -> SnapshotFormatError:
    return SnapshotFormatError(f"not a restorable snapshot: {what}. Pass the bytes encode_snapshot() "
                               "(or EnvSnapshot.to_bytes()) wrote, unchanged")


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of decoded JSON, stopping at `limit` + 1."""
    stack, deepest = [(value, 1)], 0
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            break
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def _inflate(data: object) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _fail(f"expected bytes, got {type(data).__name__}")
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise _fail(f"{len(data)} bytes is over the {MAX_SNAPSHOT_BYTES}-byte limit")
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(bytes(data), MAX_SNAPSHOT_BYTES)
    except zlib.error as exc:
        raise _fail(f"the bytes are not zlib data ({exc})") from None
    if inflater.unconsumed_tail:
        raise _fail(f"it decompresses to more than {MAX_SNAPSHOT_BYTES} bytes")
    if not inflater.eof:
        raise _fail("the zlib data is truncated")
    return raw


def _no_constant(name: str) -> float:
    """`json.loads`'s hook for NaN, Infinity and -Infinity, which JSON does not have and the writer never writes."""
    raise ValueError(f"{name} is not a JSON number")


def _header(raw: bytes) -> tuple[dict[str, Any], memoryview]:
    if not raw.startswith(_MAGIC) or len(raw) < len(_MAGIC) + _HEADER_LEN.size:
        raise _fail("the data does not start with the snapshot marker")
    start = len(_MAGIC) + _HEADER_LEN.size
    (length,) = _HEADER_LEN.unpack_from(raw, len(_MAGIC))
    if start + length > len(raw):
        raise _fail(f"the header claims {length} bytes, only {len(raw) - start} follow")
    try:
        header = json.loads(raw[start : start + length].decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise _fail(f"the header is not JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(header, dict) or _depth(header, _MAX_JSON_DEPTH) > _MAX_JSON_DEPTH:
        raise _fail("the header is not a JSON object of the snapshot layout")
    if header.get("format") != SNAPSHOT_FORMAT:
        raise _fail(f"the format is {header.get('format')!r}, expected {SNAPSHOT_FORMAT!r}")
    if header.get("version") != SNAPSHOT_FORMAT_VERSION:
        raise _fail(f"format version {header.get('version')!r}; this reader (rlaif-gym {__version__}) reads "
                    f"version {SNAPSHOT_FORMAT_VERSION}; restore it with the version that wrote it "
                    f"({header.get('package')!r})")
    return header, memoryview(raw)[start + length :]


def _generator(state: object) -> np.random.Generator:
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in _GENERATORS:
        raise _fail(f"the generator must be one of numpy's {list(_GENERATORS)}, got {name!r}")
    bit_generator = getattr(np.random, name)()
    try:
        bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise _fail(f"the {name} generator state is invalid ({exc})") from None
    return np.random.Generator(bit_generator)


def _arrays(specs: object, body: memoryview) -> dict[str, np.ndarray]:
    if not isinstance(specs, list):
        raise _fail("the header lists no arrays")
    out: dict[str, np.ndarray] = {}
    offset = 0
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str) and isinstance(spec[1], str)
                and isinstance(spec[2], list) and all(type(n) is int and 0 <= n <= MAX_SNAPSHOT_BYTES
                                                      for n in spec[2])):
            raise _fail(f"an array entry must be [name, dtype, shape], got {str(spec)[:80]}")
        name, dtype_str, shape = spec
        if dtype_str not in ("<f8", "<f4", "<i8", "<u8", "|b1"):
            raise _fail(f"array {name!r} has dtype {dtype_str!r}; snapshots hold only <f8, <f4, <i8, <u8 and |b1")
        dtype = np.dtype(dtype_str)
        size = dtype.itemsize * math.prod(shape)  # Python ints: a shape's product cannot overflow
        if size > len(body) - offset:
            raise _fail(f"array {name!r} needs {size} bytes, {len(body) - offset} are left")
        out[name] = np.frombuffer(body, dtype=dtype, count=size // dtype.itemsize, offset=offset) \
            .reshape(shape).astype(dtype.newbyteorder("="))
        offset += size
    if offset != len(body):
        raise _fail(f"{len(body) - offset} bytes follow the last array")
    return out


def _number(value: object, name: str, low: float = -_MAX_NUMBER, high: float = _MAX_NUMBER) -> float:
    """A finite number in [low, high] (with the validator's relative rounding room of 1e-9)."""
    try:
        number = check_number(value, name)
    except SnapshotFormatError as exc:
        raise _fail(str(exc)) from None
    if not low - 1e-9 * abs(low) <= number <= high + 1e-9 * abs(high):
        raise _fail(f"{name} must lie in [{low:.6g}, {high:.6g}], got {number:.6g}")
    return number


def _floats(value: object, name: str, limit: int, low: float = -_MAX_NUMBER, high: float = _MAX_NUMBER) -> list[float]:
    """A list of at most `limit` finite numbers, each in [low, high]."""
    if not isinstance(value, list) or len(value) > limit:
        got = f"{len(value)} entries" if isinstance(value, list) else type(value).__name__
        raise _fail(f"{name} must be a list of at most {limit} numbers, got {got}")
    return [_number(v, f"{name}[{i}]", low, high) for i, v in enumerate(value)]


def check_number(value: object, name: str) -> float:
    """A finite JSON number of magnitude at most 1e300 (an episode's running sum adds finite rewards to it).

    Raises:
        SnapshotFormatError: anything else (a NaN, an infinity, a bool, a string); the message names `name`.
    """
    if type(value) not in (int, float) or not math.isfinite(value) or abs(value) > _MAX_NUMBER:
        raise SnapshotFormatError(f"{name} must be a finite number of magnitude at most {_MAX_NUMBER:g}, got "
                                  f"{str(value)[:40]} ({type(value).__name__})")
    return float(value)


def check_text(value: object, name: str, max_chars: int = MAX_SNAPSHOT_BYTES, *, min_chars: int = 1) -> str:
    """Text every UTF-8 reader can hold (no lone surrogate, such as the JSON escape \\ud800 decodes to), of
    `min_chars` to `max_chars` characters.

    Raises:
        SnapshotFormatError: not a string, too short or too long, or holding a lone surrogate; the message names
            `name`.
    """
    if not isinstance(value, str) or not min_chars <= len(value) <= max_chars:
        got = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
        raise SnapshotFormatError(f"{name} must be a string of {min_chars} to {max_chars} characters, got {got}")
    repaired = storable_text(value)[1]
    if repaired:
        raise SnapshotFormatError(f"{name} must be text UTF-8 can hold, got one with {repaired} lone surrogate(s) "
                                  "(such as the JSON escape \\ud800 decodes to; the writer never writes one)")
    return value


def _text(value: object, name: str, min_chars: int = 1) -> str:
    try:
        return check_text(value, name, min_chars=min_chars)
    except SnapshotFormatError as exc:
        raise _fail(str(exc)) from None


def _tracker(data: object, archetype: str, world: sim.WorldState, params: sim.WorldParams) -> BehaviorTracker:
    """The behaviour tracker of a world at its tick: its copies of the world's numbers (ticks, followers, reputation,
    groups joined, messages, posts) equal to the world's, its other counts within the ticks played (one action a
    tick) or the markets resolved, its amounts within the world's money."""
    if not isinstance(data, dict) or set(data) != set(_TRACKER_FIELDS):
        raise _fail(f"a behaviour tracker must have exactly the fields {sorted(_TRACKER_FIELDS)}")
    if data["archetype"] != archetype:
        raise _fail(f"the behaviour tracker is for archetype {data['archetype']!r}, the config says {archetype!r}")
    tick = int(world.tick[0])
    copies = {"ticks": tick, "followers": int(world.followers[0]), "reputation": float(world.reputation[0]),
              "groups": int(world.joined[0].sum()), "dms": int(world.dms_sent[0]), "posts": int(world.posts_created[0])}
    for name, want in copies.items():
        if data[name] != want or type(data[name]) is not type(want):
            raise _fail(f"behaviour field {name!r} must equal the world's {want!r} (it copies it), got "
                        f"{str(data[name])[:40]}")
    counts = {"trades": tick, "predictions": tick, "correct": int(world.next_serial[0]) - params.num_markets}
    for name, most in counts.items():
        value = data[name]
        if type(value) is not int or not 0 <= value <= most:
            raise _fail(f"behaviour field {name!r} must be an integer in [0, {most}] at tick {tick} (one action a "
                        f"tick; a market called right has resolved), got {str(value)[:40]}")
    usd = float(bounds.money(params, world.tick)[0])
    reputation = (0.0, bounds.REPUTATION_MAX)
    start_reputation = _number(data["start_reputation"], "behaviour field 'start_reputation'", *reputation)
    last_score = _number(data["last_score"], "behaviour field 'last_score'", *_BEHAVIOR_SCORE)
    samples = _floats(data["samples"], "behaviour field 'samples' (realized PnL, USD)", tick, -usd, usd)
    sizes = _floats(data["sizes"], "behaviour field 'sizes' (USD)", tick, params.min_order,
                    params.max_leverage * usd)
    markets, recipients = data["markets"], data["recipients"]
    names = {f"market-{n}" for n in range(int(world.next_serial[0]))} | set(sim.PERP_TICKERS[: params.num_perps])
    if not (isinstance(markets, list) and len(markets) <= min(tick, len(names))
            and all(isinstance(v, str) and v in names for v in markets)):
        raise _fail("behaviour field 'markets' must list ids of markets opened so far and perp tickers")
    if not (isinstance(recipients, list) and len(recipients) <= params.num_npcs
            and all(type(v) is int and 0 <= v < params.num_npcs for v in recipients)):
        raise _fail(f"behaviour field 'recipients' must list NPC indices in [0, {params.num_npcs})")
    return BehaviorTracker(archetype=archetype, start_reputation=start_reputation, samples=samples,
                           markets=set(markets), sizes=sizes, recipients=set(recipients), last_score=last_score,
                           **{name: data[name] for name in counts}, **copies)


def _feedback(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if not (isinstance(value, dict) and set(value) == {"success", "error"} and isinstance(value["success"], bool)):
        raise _fail('feedback must be null or {"success": bool, "error": str | null}')
    if value["error"] is not None:
        _text(value["error"], "the feedback's error", min_chars=0)
    return dict(value)


def decode_snapshot(data: object, *, env_class: type | None = None) -> tuple[Any, dict[str, Any]]:
    """The `EnvSnapshot` that `encode_snapshot` wrote, and its `meta`.

    Args:
        data: the bytes.
        env_class: the class the snapshot must be of (None: either face).

    Raises:
        SnapshotFormatError: the bytes are not a snapshot this reader restores (the message says why).
    """
    try:
        return _decode(data, env_class)
    except (TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError) as exc:
        # A value of a type no check above expected (found by fuzzing signed tokens): still the data's fault.
        raise _fail(f"a field holds a value of the wrong type or size ({type(exc).__name__}: {str(exc)[:200]})") \
            from None


class SnapshotReader:
    """What an env class's `_decode_snapshot_fields` reads its fields from, each check raising `SnapshotFormatError`.

    Attributes:
        fields: the header's `fields` object (plain JSON, unchecked until read through the methods below).
        arrays: the env's own arrays by name (`_SNAPSHOT_ARRAYS`; dtypes and shapes unchecked).
        config, params, world: the snapshot's config, world parameters and world, already checked.
        archetype: the config's normalised archetype, or None.
        tick: the world's tick.
        usd: the most money the world can hold at this tick (`sim.bounds.money`), USD.
    """

    def __init__(self, fields_: dict[str, Any], arrays: dict[str, np.ndarray], config: RLAIFEnvConfig,
                 params: sim.WorldParams, world: sim.WorldState, archetype: str | None) -> None:
        self.fields, self.arrays, self.config, self.params, self.world = fields_, arrays, config, params, world
        self.archetype = archetype
        self.tick = int(world.tick[0])
        self.usd = float(bounds.money(params, world.tick)[0])

    fail = staticmethod(_fail)
    number = staticmethod(_number)
    floats = staticmethod(_floats)
    text = staticmethod(_text)
    feedback = staticmethod(_feedback)

    def tracker(self, data: object) -> BehaviorTracker:
        """A behaviour tracker of this world at its tick, checked (see `_tracker`)."""
        assert self.archetype is not None
        return _tracker(data, self.archetype, self.world, self.params)


def _decode(data: object, env_class: type | None) -> tuple[Any, dict[str, Any]]:
    header, body = _header(_inflate(data))
    env_name = header.get("env")
    cls = _CLASSES.get(env_name) if isinstance(env_name, str) else None
    if cls is None:
        hint = (f" (import rlaif_gym.envs.{'text_env' if env_name == 'RLAIFTextEnv' else 'rlaif_env'} first, or "
                "pass env_class)" if env_name in ("RLAIFEnv", "RLAIFTextEnv") else "")
        raise _fail(f"the env class must be one of {sorted(_CLASSES)}, got {str(env_name)[:40]!r}{hint}")
    if env_class is not None and cls is not env_class:
        raise _fail(f"it holds a {cls.__name__} snapshot, expected a {env_class.__name__} one")
    try:
        config = RLAIFEnvConfig.from_any(header.get("config"))
        archetype = None if config.archetype is None else normalize_archetype(config.archetype, strict=True)
    except (ConfigError, ValueError, TypeError) as exc:
        raise _fail(f"its config is invalid: {str(exc)[:400]}") from None
    params = world_params(config)
    arrays = _arrays(header.get("arrays"), body)
    names = [f"world.{f.name}" for f in fields(sim.WorldState)]
    expected = [*names, *cls._SNAPSHOT_ARRAYS]
    if list(arrays) != expected:
        raise _fail(f"the arrays must be {len(expected)} named {expected[:2]}...{expected[-2:]}, got "
                    f"{len(arrays)} ({str(list(arrays))[:120]})")
    world = sim.WorldState(**{f.name: arrays[f"world.{f.name}"] for f in fields(sim.WorldState)})
    try:
        check_state(world, params)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    seed = header.get("np_random_seed")
    if seed is not None and (type(seed) is not int or seed < 0):
        raise _fail(f"np_random_seed must be null or an integer >= 0, got {seed!r}")
    f = header.get("fields")
    if not isinstance(f, dict):
        raise _fail("the header has no fields object")
    own = {name: arrays[name] for name in cls._SNAPSHOT_ARRAYS}
    env_fields = cls._decode_snapshot_fields(SnapshotReader(f, own, config, params, world, archetype))
    meta = header.get("meta")
    if not isinstance(meta, dict):
        raise _fail("meta must be a JSON object")
    snapshot = EnvSnapshot(env_class=cls, config=config, world=world, np_random=_generator(header.get("np_random")),
                           np_random_seed=seed, fields=env_fields)
    return snapshot, meta
