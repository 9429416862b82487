"""One value, one verdict: the OpenEnv server, the TRL adapter and the verifiers adapter check the inputs an
episode starts from the same way (`rlaif_gym.envs.inputs`; issue 25 row 11).

Each bad seed, horizon or config goes to all three, through their public entry points: a real server on
127.0.0.1 (`RLAIFEnvClient.reset`), a TRL dataset row (`RowEpisode.from_row`) and a verifiers taskset
(`load_environment`). All three refuse it with the same explanation; none truncates it.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openenv")
pytest.importorskip("trl")
pytest.importorskip("verifiers.v1")

from rlaif_gym.errors import ConfigError
from rlaif_gym.integrations.openenv import RemoteEnvError, RLAIFEnvClient, background_server
from rlaif_gym.integrations.trl import RowEpisode
from rlaif_gym.integrations.verifiers import load_environment

CONFIG = {"num_ticks": 3}
SEED_RULE = "must be an integer in [0, 2**63 - 1]"


@pytest.fixture(scope="module")
def client():
    with (background_server(max_sessions=2, env_config=CONFIG, snapshot_key="shared-" + "s" * 32) as url,
          RLAIFEnvClient(base_url=url).sync() as env):
        yield env


def _refusals(client, *, seed=None, config=None) -> dict[str, str]:
    """What each adapter says about one start point (every one must refuse it)."""
    out = {}
    with pytest.raises(RemoteEnvError) as err:
        client.reset(**({"seed": seed} if seed is not None else {}), config=config or CONFIG)
    assert (err.value.code, err.value.error_type) == ("VALIDATION_ERROR", "ConfigError"), err.value
    out["openenv"] = err.value.message
    with pytest.raises(ConfigError) as err:
        RowEpisode.from_row(seed=seed, config=json.dumps(config or CONFIG))
    out["trl"] = str(err.value)
    with pytest.raises(ConfigError) as err:
        load_environment(num_tasks=1, **({"seed": seed} if seed is not None else {}), config=config or CONFIG)
    out["verifiers"] = str(err.value)
    return out


@pytest.mark.parametrize("seed", [1.5, True, -1, 2**64, "abc", [3]])
def test_a_bad_seed_is_refused_alike_everywhere(client, seed):
    said = _refusals(client, seed=seed)
    for adapter, message in said.items():
        assert SEED_RULE in message and f"got {seed!r}"[:12] in message, (adapter, message)
    assert client.reset(seed=1).observation.tick == 0  # the server's session goes on


@pytest.mark.parametrize(("config", "field"), [
    ({"reward_weights": {"pnl": 1e308}}, "reward_weights"),
    ({"market_duration_max": 2**63}, "market_duration_max"),
    ({"funding_interval": 2**64}, "funding_interval"),
    ({"num_tiks": 3}, "Did you mean 'num_ticks'"),
])
def test_a_bad_config_is_refused_alike_everywhere(client, config, field):
    said = _refusals(client, seed=1, config=config)
    for adapter, message in said.items():
        assert field in message, (adapter, message)


def test_only_the_trl_row_takes_a_horizon_and_refuses_a_fractional_one():
    with pytest.raises(ConfigError, match=r"column 'ticks' must be an integer .* got 1.7 \(float\)"):
        RowEpisode.from_row(seed=1, config=json.dumps(CONFIG), ticks=1.7)
    assert RowEpisode.from_row(seed=1, config=json.dumps(CONFIG), ticks=2).ticks == 2
