"""The inputs an episode is started from, checked once for every adapter: seeds, horizons, configs, snapshots.

The OpenEnv server (a client's reset), the TRL adapter (a dataset row) and the verifiers adapter (a
taskset's config) all start text-env episodes from values that come from outside. They share these
checks, so that one value is accepted or refused the same way everywhere. Nothing is coerced: a seed of
``1.5``, ``True`` or ``"7"`` is refused, never truncated or parsed. Every refusal is a typed error whose
message names where the value came from (``where``: ``"seed"``, ``"dataset row column 'seed'"``), what
was expected, what arrived and how to fix it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..config import RLAIFEnvConfig
from ..errors import ConfigError
from ..sim.params import MAX_TICKS
from .snapshot import EnvSnapshot, SnapshotFormatError

__all__ = ["MAX_SEED", "MAX_TICKS", "check_config", "check_int", "check_items", "check_seed", "check_seeds",
           "check_snapshot", "check_ticks"]

MAX_SEED = 2**63 - 1
"""The largest seed accepted (what the trajectory readers accept: numpy's int64; `reset` needs >= 0)."""


def _describe(value: object) -> str:
    text = repr(value)
    return f"{text[:80]}... ({type(value).__name__})" if len(text) > 80 else f"{text} ({type(value).__name__})"


def _integer(value: object, *, strings: bool) -> int | None:
    """`value` as an int when it is one (a Python or numpy integer, not a bool), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if strings and isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        return int(value)
    return None


def check_seed(value: object, where: str = "seed", *, strings: bool = False, recorded: bool = False,
               nullable: bool = True) -> int | None:
    """A reset seed: None (unseeded) or an integer in [0, 2**63 - 1].

    Args:
        value: the seed as it arrived.
        where: what to call it in the error (e.g. ``"dataset row column 'seed'"``).
        strings: also accept the decimal text of one (``"7"``), as a command line passes it.
        recorded: the seed only records where a snapshot came from (it seeds nothing): any integer
            gymnasium reports is accepted (an unseeded reset's seed is 128-bit entropy; -1 when unknown).
        nullable: accept None (an unseeded episode); without it the episode must be seeded, so that
            the same seed gives the same episode.

    Raises:
        ConfigError: anything else: a float (``1.5``, even ``2.0``), a bool, a string, a negative or
            too large integer (or None, when not `nullable`).
    """
    if value is None and nullable:
        return None
    seed = _integer(value, strings=strings)
    if seed is None or not (recorded or 0 <= seed <= MAX_SEED):
        refused = "floats, booleans and other text" if strings else "floats, booleans and strings"
        null = " or null" if nullable else " (a seeded episode: the same seed gives the same one)"
        raise ConfigError(f"{where} must be an integer in [0, 2**63 - 1]{null}, got {_describe(value)}; pass a "
                          f"whole number such as 0 or 42 ({refused} are refused, not converted)")
    return seed


def check_seeds(value: object, where: str = "seeds", *, unseeded: bool = False) -> Sequence[int | None]:
    """Reset seeds: a list, tuple, range or other iterable of them, each checked as `check_seed` checks it.

    A `range` is returned as it is (its ends are checked: every seed between lies between them), so a
    million-seed range costs nothing; any other iterable is read once into a list.

    Args:
        value: the seeds as they arrived.
        where: what to call them in the error; an item is named ``where[i]``.
        unseeded: None (an unseeded episode) is a seed too; without it, None is refused (episodes found or
            built from these seeds must come out the same every time).

    Raises:
        ConfigError: not an iterable (an int), text or a mapping, or an item that is not a seed.
    """
    if isinstance(value, range):
        for i in (0, len(value) - 1) if len(value) else ():
            check_seed(value[i], f"{where}[{i}]", nullable=unseeded)
        return value
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"{where} must be a list or range of integer seeds such as [0, 1, 2], got "
                          f"{_describe(value)}")
    return [check_seed(item, f"{where}[{i}]", nullable=unseeded) for i, item in enumerate(value)]


def check_int(value: object, where: str, *, low: int, high: int = MAX_TICKS) -> int:
    """A whole-number option in [`low`, `high`]: a Python or numpy integer, never a bool, a float or text.

    Raises:
        ConfigError: anything else (``1.5``, ``True``, ``"3"``, a number out of range), naming `where`.
    """
    number = _integer(value, strings=False)
    if number is None or not low <= number <= high:
        raise ConfigError(f"{where} must be an integer in [{low:,}, {high:,}], got {_describe(value)}; pass a whole "
                          f"number such as {max(low, 1)} (floats, booleans and strings are refused, not converted)")
    return number


def check_items(value: object, where: str, kind: type, hint: str) -> list[Any]:
    """A list (tuple, or other iterable that is not text or a mapping) of `kind` instances, read once.

    Args:
        value: the items as they arrived.
        where: what to call them in the error; an item is named ``where[i]``.
        kind: the class every item must be an instance of.
        hint: how to make one (ends the message).

    Raises:
        ConfigError: not such an iterable, or an item of another type.
    """
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"{where} must be a list of {kind.__name__}, got {_describe(value)}; {hint}")
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            article = "an" if kind.__name__[:1].lower() in "aeiou" else "a"
            raise ConfigError(f"{where}[{i}] must be {article} {kind.__name__}, got {_describe(item)}; {hint}")
    return items


def check_ticks(value: object, where: str = "ticks") -> int | None:
    """A horizon: None (play to the episode's end) or an integer in [1, 1,000,000].

    Raises:
        ConfigError: anything else (``1.7``, ``True``, ``"3"``, 0).
    """
    if value is None:
        return None
    ticks = _integer(value, strings=False)
    if ticks is None or not 1 <= ticks <= MAX_TICKS:
        raise ConfigError(f"{where} must be an integer in [1, {MAX_TICKS:,}] or null (play to the episode's end), got "
                          f"{_describe(value)}; pass a whole number of ticks such as 8")
    return ticks


def check_config(value: object, where: str = "config", *, base: RLAIFEnvConfig | None = None) -> RLAIFEnvConfig:
    """An env config from None (`base`, or the defaults), an `RLAIFEnvConfig`, a mapping of fields (over
    `base`) or the JSON text of one (a dataset row's column).

    Raises:
        ConfigError: not JSON, not an object, an unknown key or a value out of its bound; the message
            starts with `where` and keeps the config's own explanation.
    """
    if value is None:
        return base if base is not None else RLAIFEnvConfig()
    if isinstance(value, RLAIFEnvConfig):
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{where} must be a JSON object of config fields such as '{{\"num_ticks\": 8}}', got "
                              f"text that is not JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be an object of config overrides, e.g. {{\"num_ticks\": 8}}, got "
                          f"{_describe(value)}")
    try:
        return RLAIFEnvConfig.from_any(base, **{str(k): v for k, v in value.items()})
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_snapshot(value: object, env_class: type, where: str = "snapshot") -> EnvSnapshot | None:
    """A fork point: None, or the bytes `EnvSnapshot.to_bytes()` wrote of an `env_class` env, fully checked.

    Returns:
        The `EnvSnapshot`, or None.

    Raises:
        ConfigError: not bytes (e.g. a string or a list).
        SnapshotFormatError: bytes that are not a snapshot of `env_class` (the reason in the message).
    """
    if value is None:
        return None
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ConfigError(f"{where} must be the bytes EnvSnapshot.to_bytes() wrote (or null), got "
                          f"{_describe(value)}; build the row with build_dataset(snapshots=[env.get_state()])")
    try:
        return EnvSnapshot.from_bytes(bytes(value), env_class=env_class)
    except SnapshotFormatError as exc:
        raise SnapshotFormatError(f"{where}: {exc}") from None
