"""The Gymnasium and SB3 contracts of RLAIF-v0: checkers, registration, spaces, info keys, errors."""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import rlaif_gym
from rlaif_gym import ConfigError, InvalidActionError, ResetNeeded, RLAIFEnv, RLAIFEnvConfig
from rlaif_gym.encoding import ACTION_KINDS


def test_gymnasium_check_env_passes_with_warnings_as_errors():
    env = gym.make("RLAIF-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym_check_env(env.unwrapped, skip_render_check=False)


def test_gymnasium_check_env_passes_for_each_render_mode():
    for mode in ("ansi", "rgb_array"):
        env = gym.make("RLAIF-v0", render_mode=mode)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            gym_check_env(env.unwrapped, skip_render_check=False)


def test_sb3_check_env_passes():
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    env = gym.make("RLAIF-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_checker.check_env(env, warn=True)


def test_registered_under_both_ids():
    assert isinstance(gym.make("RLAIF-v0").unwrapped, RLAIFEnv)
    assert isinstance(gym.make("rlaif_gym:RLAIF-v0").unwrapped, RLAIFEnv)
    # No registry cap: the env truncates itself at its config's num_ticks (issue 15, item 6).
    assert gym.spec("RLAIF-v0").max_episode_steps is None


def test_babylon_aliases_are_the_same_classes():
    assert rlaif_gym.BabylonRLAIFEnv is RLAIFEnv
    assert rlaif_gym.BabylonEnvConfig is RLAIFEnvConfig


def test_spaces_are_numeric_and_bounded(env):
    space = env.observation_space
    assert isinstance(space, gym.spaces.Box) and space.dtype == np.float32
    assert np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
    assert space.shape == (len(env.unwrapped.layout.names),)
    assert isinstance(env.action_space, gym.spaces.MultiDiscrete)
    assert env.action_space.nvec.tolist() == [len(ACTION_KINDS), 4, 5, 2]  # T = max(4 markets, 3 perps, 3 groups)


def test_info_carries_the_public_contract_keys(env):
    env.reset(seed=3)
    _, reward, _, _, info = env.step(np.array([1, 0, 3, 0]))
    assert set(info) >= {"reward_components", "pnl_delta", "equity", "cash", "feedback"}
    assert set(info["reward_components"]) == {"pnl", "risk"}
    assert all(isinstance(v, float) for v in info["reward_components"].values())
    assert info["feedback"] == {"success": True, "error": None}
    assert isinstance(info["pnl_delta"], float) and isinstance(info["equity"], float)
    assert isinstance(info["cash"], float)
    assert -1.0 <= reward <= 1.0


def test_pnl_delta_is_the_equity_change_over_the_whole_transition(env):
    _, info = env.reset(seed=5)
    equity = info["equity"]
    for t in range(30):
        _, _, _, _, info = env.step(env.action_space.sample())
        assert info["pnl_delta"] == pytest.approx(info["equity"] - equity, abs=1e-9), f"tick {t}"
        equity = info["equity"]


def test_failed_action_reports_why_in_feedback(env):
    env.reset(seed=1)
    _, _, _, _, info = env.step(np.array([2, 0, 4, 0]))  # sell shares never bought
    assert info["feedback"]["success"] is False
    assert "no shares" in info["feedback"]["error"]
    _, _, _, _, info = env.step(np.array([4, 1, 0, 0]))  # close a perp that is not open
    assert info["feedback"]["success"] is False and "no open position" in info["feedback"]["error"]


@pytest.mark.parametrize("bad", [[99, 0, 0, 0], [0, 0, 0], [0.5, 0, 0, 0], "buy", [-1, 0, 0, 0]])
def test_out_of_space_action_raises_a_clear_error(env, bad):
    env.reset(seed=0)
    nvec = re.escape(str(env.action_space.nvec.tolist()))
    with pytest.raises(InvalidActionError, match=rf"0 <= a\[i\] < {nvec}|4 integers"):
        env.step(bad)


def test_step_before_reset_raises_reset_needed():
    with pytest.raises(ResetNeeded, match="reset"):
        RLAIFEnv().step([0, 0, 0, 0])


def test_episode_truncates_at_num_ticks_without_time_limit():
    env = RLAIFEnv(num_ticks=12)
    env.reset(seed=0)
    flags = [env.step([0, 0, 0, 0])[3] for _ in range(12)]
    assert flags == [False] * 11 + [True]
    with pytest.raises(ResetNeeded, match="ended"):
        env.step([0, 0, 0, 0])


def test_unknown_config_key_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"unknown config key 'num_markts'.*Did you mean 'num_markets'"):
        gym.make("RLAIF-v0", num_markts=3)


@pytest.mark.parametrize(
    ("overrides", "pattern"),
    [
        ({"num_markets": 0}, "num_markets"),
        ({"fee_rate": -0.1}, "fee_rate"),
        ({"market_duration_min": 80, "market_duration_max": 40}, "market_duration_min"),
        ({"reward_weights": {"pnll": 1.0}}, "Did you mean 'pnl'"),
        ({"reward_weights": {"pnl": -1.0}}, "finite and >= 0"),
    ],
)
def test_bad_config_values_raise_config_error_naming_the_field(overrides, pattern):
    with pytest.raises(ConfigError, match=pattern):
        RLAIFEnvConfig(**overrides)


def test_config_world_fields_mirror_the_sim_parameters():
    from rlaif_gym.sim import WorldParams

    cfg = RLAIFEnvConfig()
    for name in WorldParams.field_names():
        assert getattr(cfg, name) == getattr(WorldParams(), name), name


def test_config_accepts_a_mapping_such_as_rllib_env_config():
    env = RLAIFEnv({"num_markets": 2, "num_perps": 1})
    obs, _ = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape
    assert env.action_space.nvec.tolist() == [len(ACTION_KINDS), 3, 5, 2]


def test_zero_pnl_weight_reports_the_component_without_adding_it():
    env = RLAIFEnv(reward_weights={"pnl": 0.0, "risk": 0.0})
    env.reset(seed=2)
    pnl_seen = []
    for _ in range(20):
        _, reward, _, _, info = env.step([1, 0, 4, 0])  # keep buying: the pnl component moves
        assert reward == 0.0
        pnl_seen.append(info["reward_components"]["pnl"])
    assert any(v != 0.0 for v in pnl_seen), "the pnl component must still be computed and reported"


def test_render_modes_produce_text_and_a_changing_chart():
    env = gym.make("RLAIF-v0", render_mode="ansi")
    env.reset(seed=0)
    env.step([1, 0, 3, 0])
    text = env.render()
    assert "market-" in text and "equity $" in text and "¢" in text
    env = gym.make("RLAIF-v0", render_mode="rgb_array")
    env.reset(seed=0)
    first = env.render()
    for _ in range(10):
        env.step([0, 0, 0, 0])
    later = env.render()
    assert first.dtype == np.uint8 and first.shape[2] == 3 and first.shape == later.shape
    assert not np.array_equal(first, later)


def test_config_knows_exactly_the_reward_components():
    from rlaif_gym.config import REWARD_COMPONENTS
    from rlaif_gym.rewards import COMPONENT_NAMES, DEFAULT_WEIGHTS

    assert set(REWARD_COMPONENTS) == set(COMPONENT_NAMES) == {*DEFAULT_WEIGHTS, "truth_mark"}
    assert RLAIFEnv({"reward_mark": "truth"}).reward_weights["truth_mark"] == DEFAULT_WEIGHTS["pnl"]
    assert DEFAULT_WEIGHTS == {"pnl": 0.5, "format": 0.25, "reasoning": 0.15, "behavior": 0.10, "risk": 0.5}


def test_an_episode_has_about_a_dozen_market_resolutions():
    """docs/world.md says 12-14 resolutions per default episode; check the mean over seeds."""
    from rlaif_gym.envs import RLAIFCore, seed_keys

    core = RLAIFCore(RLAIFEnvConfig(), num_worlds=64)
    core.reset(seed_keys(range(64)))
    resolved = np.zeros(64)
    for _ in range(168):
        resolved += core.step(np.zeros((64, 4), np.int64)).outcome.resolved
    assert 12.0 <= resolved.mean() <= 14.0, resolved.mean()
