"""RLAIF-v0 plugs into real Stable-Baselines3 training, and the examples run end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_sb3_ppo_trains_on_rlaif_v0_with_a_vec_env():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    vec = make_vec_env("RLAIF-v0", n_envs=2, seed=0)
    model = PPO("MlpPolicy", vec, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    obs = vec.reset()
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (2, 4)
    assert gym.make("RLAIF-v0").action_space.contains(np.asarray(action[0]))


def test_demo_runs_and_prints_a_summary():
    out = subprocess.run([sys.executable, "examples/demo.py", "--seed", "3"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "=== Summary (same seed) ===" in out and "InformedAgent" in out and "market-" in out


def test_baselines_script_prints_the_table():
    out = subprocess.run([sys.executable, "examples/baselines.py", "--seeds", "8"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    for name in ("OracleAgent", "InformedAgent", "PassiveAgent", "RandomAgent"):
        assert f"| {name} |" in out
