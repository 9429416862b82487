"""Snapshots as data (issue 25, "no code from data"): `EnvSnapshot.to_bytes()` / `from_bytes()` round-trip both
faces bit for bit, and reading bytes from outside the process never runs anything they carry.

A pickle in place of a snapshot is refused without being unpickled (a marker file proves nothing ran); a
thousand random mutations of real snapshot bytes each give either `SnapshotFormatError` or a snapshot whose
env steps; a world with an index out of range, a NaN, a wrong shape or a decompression bomb is refused
with a message naming what is wrong.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import zlib
from dataclasses import fields

import numpy as np
import pytest

from rlaif_gym import RLAIFEnv, RLAIFTextEnv
from rlaif_gym.envs.rlaif_env import EnvSnapshot
from rlaif_gym.envs.snapshot import MAX_SNAPSHOT_BYTES, SnapshotFormatError, decode_snapshot, encode_snapshot
from rlaif_gym.llm import ScriptedLLM

TEXT_CONFIG = {"num_ticks": 40}
MODEL = ScriptedLLM()


def _reply(prompt: str) -> str:
    think, action = MODEL.decide(prompt)
    return f"<think>{think}</think>\n{json.dumps(action)}"


def _text_env_at(tick: int, seed: int = 3, config=TEXT_CONFIG) -> RLAIFTextEnv:
    env = RLAIFTextEnv(config)
    prompt, _ = env.reset(seed=seed)
    for _ in range(tick):
        prompt, *_ = env.step(_reply(prompt))
    return env


def _same_world(a, b) -> None:
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.dtype == y.dtype and np.array_equal(x, y), f.name


@pytest.mark.parametrize("tick", [0, 7])
def test_text_snapshot_bytes_restore_a_bit_identical_episode(tick):
    trunk = _text_env_at(tick)
    snap = trunk.get_state()
    back = EnvSnapshot.from_bytes(snap.to_bytes())
    _same_world(snap.world, back.world)
    assert back.config == snap.config and back.np_random_seed == snap.np_random_seed
    assert back.np_random.bit_generator.state == snap.np_random.bit_generator.state
    a, b = RLAIFTextEnv(TEXT_CONFIG), RLAIFTextEnv(TEXT_CONFIG)
    a.set_state(snap)
    b.set_state(back)
    assert a.prompt == b.prompt and a.view == b.view
    assert np.array_equal(a.numeric_observation, b.numeric_observation)
    for _ in range(12):
        reply = _reply(a.prompt)
        ra, rb = a.step(reply), b.step(reply)
        assert ra[0] == rb[0] and ra[1] == rb[1] and ra[2:4] == rb[2:4]
        assert json.dumps(ra[4], sort_keys=True, default=str) == json.dumps(rb[4], sort_keys=True, default=str)
    _same_world(a.state, b.state)
    # the generator travels too: the next reset draws the same world
    assert a.reset()[0] == b.reset()[0]


def test_numeric_snapshot_with_an_archetype_round_trips_its_behaviour_tracker():
    env = RLAIFEnv({"archetype": "trader", "num_ticks": 30}, render_mode="rgb_array")
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, env.action_space.nvec) for _ in range(20)]
    for a in actions[:8]:
        env.step(a)
    snap = env.get_state()
    back = EnvSnapshot.from_bytes(snap.to_bytes(), env_class=RLAIFEnv)
    assert back.fields["_behavior"].trackers[0] == snap.fields["_behavior"].trackers[0]
    twin = RLAIFEnv({"archetype": "trader", "num_ticks": 30}, render_mode="rgb_array")
    twin.set_state(back)
    for a in actions[8:]:
        x, y = env.step(a), twin.step(a)
        assert np.array_equal(x[0], y[0]) and x[1:4] == y[1:4]
        assert x[4]["reward_components"] == y[4]["reward_components"]
    assert np.array_equal(env.render(), twin.render())


def test_the_face_a_snapshot_must_come_from_is_checked():
    data = _text_env_at(1).get_state().to_bytes()
    with pytest.raises(SnapshotFormatError, match="RLAIFTextEnv snapshot, expected a RLAIFEnv"):
        EnvSnapshot.from_bytes(data, env_class=RLAIFEnv)


class _Marker:
    """Unpickling this writes a file: the proof that a reader ran code from data."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.makedirs, (self.path,))


def test_a_pickle_is_refused_without_being_unpickled(tmp_path):
    marker = tmp_path / "pwned"
    for payload in (pickle.dumps(_Marker(str(marker))), zlib.compress(pickle.dumps(_Marker(str(marker))))):
        with pytest.raises(SnapshotFormatError, match="not a restorable snapshot"):
            EnvSnapshot.from_bytes(payload)
    assert not marker.exists(), "a pickle inside snapshot bytes was run"


def _raw(data: bytes) -> tuple[dict, bytes]:
    raw = zlib.decompress(data)
    (n,) = struct.unpack_from("<I", raw, 10)
    return json.loads(raw[14 : 14 + n]), raw[14 + n :]


def _pack(header: dict | str, body: bytes) -> bytes:
    head = (header if isinstance(header, str) else json.dumps(header)).encode()
    return zlib.compress(b"RLAIFSNAP\n" + struct.pack("<I", len(head)) + head + body)


def _world_bytes_with(snap: EnvSnapshot, name: str, value) -> bytes:
    world = snap.world.copy()
    getattr(world, name)[...] = value
    return encode_snapshot(EnvSnapshot(snap.env_class, snap.config, world, snap.np_random, snap.np_random_seed,
                                       snap.fields))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("narr_ticker", 99, "narr_ticker"),
    ("post_author", -2, "post_author"),
    ("cash", np.nan, "'cash' holds a NaN"),
    ("pm_yes", 0.0, r"'pm_yes' at \[0\] must lie in"),
    ("tick", 10**6, "'tick' must lie in"),
])
def test_a_world_the_engine_could_not_hold_is_refused_naming_the_field(field, value, message):
    snap = _text_env_at(2).get_state()
    with pytest.raises(SnapshotFormatError, match=message):
        EnvSnapshot.from_bytes(_world_bytes_with(snap, field, value))


def test_wrong_shapes_dtypes_configs_and_bombs_are_refused():
    data = _text_env_at(2).get_state().to_bytes()
    header, body = _raw(data)
    bad_dtype = json.loads(json.dumps(header))
    bad_dtype["arrays"][0][1] = "|O"  # an object array would need pickle
    bad_shape = json.loads(json.dumps(header))
    bad_shape["arrays"][2][2] = [1, 5]  # pm_yes of 5 markets in a 4-market world
    transposed = json.loads(json.dumps(header))
    transposed["arrays"][2][2] = [4, 1]  # the same bytes as (1, 4)
    bad_config = json.loads(json.dumps(header))
    bad_config["config"]["num_markets"] = -3
    deep = json.dumps(header).replace('"meta": {}', '"meta": ' + "[" * 100_000 + "]" * 100_000)
    assert "[[[" in deep
    cases = {
        "dtype '|O'": _pack(bad_dtype, body),
        "array .* needs [0-9]+ bytes, [0-9]+ are left": _pack(bad_shape, body),
        r"'pm_yes' must be a float64 array of shape \(1, 4\), got float64 \(4, 1\)": _pack(transposed, body),
        "its config is invalid": _pack(bad_config, body),
        "not a JSON object of the snapshot layout|not JSON": _pack(deep, body),
        "bytes follow the last array": _pack(header, body + b"\0" * 8),
        "decompresses to more than": zlib.compress(b"\0" * (MAX_SNAPSHOT_BYTES + 1), 9),
        "does not start with the snapshot marker": zlib.compress(b"not a snapshot"),
        "expected bytes, got str": "a string",
        "truncated": data[: len(data) // 2],
    }
    for message, blob in cases.items():
        with pytest.raises(SnapshotFormatError, match=message):
            decode_snapshot(blob)


def test_random_mutations_give_a_typed_error_or_an_env_that_steps():
    """1,000 mutations of the decompressed bytes (flipped bytes, cut or duplicated spans): no other exception
    type, and every snapshot that is accepted restores into an env that steps."""
    snap = _text_env_at(3, config={"num_ticks": 12, "num_markets": 2, "num_perps": 1, "num_groups": 1})
    raw = zlib.decompress(snap.get_state().to_bytes())
    rng = np.random.default_rng(25)
    accepted = 0
    for _ in range(1000):
        blob = bytearray(raw)
        kind = rng.integers(3)
        i = int(rng.integers(len(blob)))
        if kind == 0:
            for j in rng.integers(len(blob), size=int(rng.integers(1, 4))):
                blob[j] = int(rng.integers(256))
        elif kind == 1:
            del blob[i : i + int(rng.integers(1, 64))]
        else:
            blob[i:i] = blob[i : i + int(rng.integers(1, 64))]
        try:
            restored = EnvSnapshot.from_bytes(zlib.compress(bytes(blob)))
        except SnapshotFormatError:
            continue
        accepted += 1
        env = RLAIFTextEnv(restored.config)
        env.set_state(restored)
        if not (restored.fields["_done"]):
            env.step(_reply(env.prompt))
    assert accepted < 1000  # most mutations break something the reader checks
