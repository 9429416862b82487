"""`rlaif_gym.envs.inputs`: the one check of seeds, horizons, configs and snapshots (issue 25 row 11)."""

from __future__ import annotations

import numpy as np
import pytest

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.envs import RLAIFEnv, RLAIFTextEnv
from rlaif_gym.envs.inputs import MAX_SEED, check_config, check_seed, check_snapshot, check_ticks
from rlaif_gym.envs.snapshot import SnapshotFormatError
from rlaif_gym.errors import ConfigError


@pytest.mark.parametrize("value", [None, 0, 7, MAX_SEED, np.int64(5), np.uint32(3)])
def test_seeds_that_are_whole_numbers_pass_unchanged(value):
    assert check_seed(value) == (None if value is None else int(value))


@pytest.mark.parametrize("value", [1.5, 2.0, True, False, np.bool_(True), "7", "abc", -1, MAX_SEED + 1, 2**64,
                                   [1], {"seed": 1}, float("nan")])
def test_every_other_seed_is_refused_not_converted(value):
    with pytest.raises(ConfigError, match=r"^dataset row column 'seed' must be an integer in \[0, 2\*\*63 - 1\]"):
        check_seed(value, "dataset row column 'seed'")


def test_text_seeds_only_where_a_command_line_writes_them():
    assert check_seed("7", strings=True) == 7
    for text in ("7.0", "-1", " 7", "abc", "", "١٢"):  # Arabic-Indic digits are digits to str.isdigit
        with pytest.raises(ConfigError):
            check_seed(text, strings=True)
    assert check_seed(2**100, recorded=True) == 2**100  # an unseeded episode's entropy, only recorded
    with pytest.raises(ConfigError):
        check_seed(1.5, recorded=True)


@pytest.mark.parametrize("value", [1.7, 0, -3, True, "3", 10**7, [2]])
def test_ticks_are_whole_and_in_range(value):
    with pytest.raises(ConfigError, match=r"ticks must be an integer in \[1, 1,000,000\] or null"):
        check_ticks(value)
    assert check_ticks(None) is None and check_ticks(8) == 8 and check_ticks(np.int64(3)) == 3


def test_configs_from_objects_text_and_overrides():
    base = RLAIFEnvConfig(num_ticks=5)
    assert check_config(None) == RLAIFEnvConfig() and check_config(None, base=base) is base
    assert check_config({"num_markets": 2}, base=base) == RLAIFEnvConfig(num_ticks=5, num_markets=2)
    assert check_config('{"num_markets": 2}') == RLAIFEnvConfig(num_markets=2)
    for value, message in [("not json", "must be a JSON object"), ("[" * 100_000, "must be a JSON object"),
                           ("[1]", "must be an object of config overrides"), (3, "must be an object"),
                           ({"num_tiks": 1}, "Did you mean 'num_ticks'"),
                           ({"market_duration_max": 2**63}, "market_duration_max")]:
        with pytest.raises(ConfigError, match=message) as err:
            check_config(value, "column 'config'")
        assert str(err.value).startswith("column 'config'"), err.value


def test_snapshots_are_bytes_of_the_right_face():
    env = RLAIFTextEnv({"num_ticks": 3})
    env.reset(seed=1)
    data = env.get_state().to_bytes()
    assert check_snapshot(None, RLAIFTextEnv) is None
    assert check_snapshot(data, RLAIFTextEnv).config == env.config
    assert check_snapshot(bytearray(data), RLAIFTextEnv).np_random_seed == 1
    with pytest.raises(ConfigError, match="'snapshot' must be the bytes"):
        check_snapshot(data.decode("latin-1"), RLAIFTextEnv, "'snapshot'")
    with pytest.raises(SnapshotFormatError, match=r"^'snapshot': not a restorable snapshot: it holds a RLAIFTextEnv"):
        check_snapshot(data, RLAIFEnv, "'snapshot'")
    with pytest.raises(SnapshotFormatError, match="not zlib"):
        check_snapshot(b"garbage", RLAIFTextEnv)


def test_whole_number_options_and_seed_lists():
    """Issue 37 row D2: the checks decision_points and build_dataset share with reset."""
    from rlaif_gym.envs.inputs import check_int, check_items, check_seeds

    assert check_int(np.int64(3), "n", low=1) == 3 and check_int(0, "n", low=0) == 0
    for value in (1.5, 2.0, True, "3", None, 0, 10**7):
        with pytest.raises(ConfigError, match=r"^per_seed must be an integer in \[1, 1,000,000\], got "):
            check_int(value, "per_seed", low=1)
    assert check_seeds([1, np.int64(2)]) == [1, 2] and check_seeds(range(3, 9)) == range(3, 9)
    assert check_seeds([None, 4], unseeded=True) == [None, 4]
    with pytest.raises(ConfigError, match=r"^seeds\[0\] must be an integer in \[0, 2\*\*63 - 1\] \(a seeded"):
        check_seeds([None])
    with pytest.raises(ConfigError, match=r"^seeds\[1\] must be .* or null, got -1"):
        check_seeds([0, -1], unseeded=True)
    assert check_items((x for x in [1, 2]), "xs", int, "pass ints") == [1, 2]
    with pytest.raises(ConfigError, match=r"^xs\[1\] must be an int, got 'a' \(str\); pass ints"):
        check_items([1, "a"], "xs", int, "pass ints")
