"""SB3: the batched VecEnv equals DummyVecEnv, the callback logs every component, and PPO learns.

The learning test trains PPO for 100k steps on the documented easy world (`EASY_CONFIG`, about a
minute on one core) through `examples/train_sb3_ppo.py` and requires that on 64 held-out seeds
PPO beats RandomAgent and PassiveAgent in mean episode PnL with a paired 95% CI above zero.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

import rlaif_gym
from rlaif_gym.envs import world_params
from rlaif_gym.integrations.sb3 import (
    COMPACT_ACTIONS,
    EASY_CONFIG,
    RLAIFMetricsCallback,
    RLAIFSB3VecEnv,
    SB3BatchPolicy,
    discrete_action_table,
)

ROOT = Path(__file__).resolve().parents[2]


def _assert_steps_equal(ours, theirs, t):
    assert np.array_equal(ours[0], theirs[0]), f"step {t}: observations differ"
    assert np.array_equal(ours[1], theirs[1]), f"step {t}: rewards {ours[1]} != {theirs[1]}"
    assert np.array_equal(ours[2], theirs[2]), f"step {t}: dones {ours[2]} != {theirs[2]}"
    for i, (x, y) in enumerate(zip(ours[3], theirs[3], strict=True)):
        for key in ("reward_components", "pnl_delta", "equity", "cash", "feedback", "tick", "TimeLimit.truncated"):
            assert x[key] == y[key], f"step {t} world {i}: info[{key!r}] {x[key]} != {y[key]}"
        assert ("terminal_observation" in x) == ("terminal_observation" in y), f"step {t} world {i}"
        if "terminal_observation" in y:
            assert np.array_equal(x["terminal_observation"], y["terminal_observation"]), f"step {t} world {i}"


@pytest.mark.parametrize("cfg", [{"num_ticks": 7}, {"num_ticks": 7, "archetype": "trader"}],
                         ids=["default", "archetype"])
def test_batched_vec_env_equals_dummy_vec_env_across_episode_ends(cfg):
    ours = RLAIFSB3VecEnv(3, cfg, seed=12)
    theirs = DummyVecEnv([lambda: gym.make("RLAIF-v0", **cfg) for _ in range(3)])
    theirs.seed(12)
    assert np.array_equal(ours.reset(), theirs.reset())
    rng = np.random.default_rng(0)
    ends = paid = 0
    for t in range(24):  # three episodes and a bit, with autoresets from each world's own generator
        act = rng.integers(0, ours.action_space.nvec, size=(3, 4))
        a, b = ours.step(act), theirs.step(act)
        _assert_steps_equal(a, b, t)
        ends += int(a[2].sum())
        paid += sum(info["reward_components"].get("behavior", 0.0) != 0 for info in a[3])
    assert ends == 9
    assert (paid > 5) == ("archetype" in cfg), f"the behavior component was paid {paid} times"


def test_discrete_mode_executes_its_table_rows():
    params = world_params(rlaif_gym.RLAIFEnvConfig())
    full = discrete_action_table(params)
    assert len(full) == 117 and len({tuple(r) for r in full}) == 117
    table = discrete_action_table(params, **COMPACT_ACTIONS)
    disc = RLAIFSB3VecEnv(2, seed=3, action_mode="discrete", action_table=table)
    multi = RLAIFSB3VecEnv(2, seed=3)
    disc.reset(), multi.reset()
    for t, idx in enumerate([[1, 2], [0, 5], [3, 3], [len(table) - 1, 4]]):
        _assert_steps_equal(disc.step(np.array(idx)), multi.step(table[idx]), t)
    with pytest.raises(rlaif_gym.InvalidActionError):
        disc.step(np.array([len(table), 0]))


def test_callback_logs_every_component_and_trading_metric_to_csv_and_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    # Any VecEnv of RLAIF-v0 works; an archetype adds the behavior component.
    env = make_vec_env("RLAIF-v0", n_envs=4, seed=0, env_kwargs={"num_ticks": 8, "archetype": "trader"})
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.set_logger(configure(str(tmp_path), ["csv", "tensorboard"]))
    callback = RLAIFMetricsCallback()
    model.learn(total_timesteps=128, callback=callback)
    assert callback.finished == 128 // 8
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert rows, "nothing was dumped to progress.csv"
    last = rows[-1]
    for key in ("episode_pnl", "episode_return", "episode_length", "reward_pnl", "reward_risk", "reward_behavior",
                "trades", "failed_action_rate", "action_wait", "action_buy_prediction", "action_join_group",
                "max_drawdown", "sharpe", "win_rate", "bankrupt", "final_cash_fraction"):
        assert last.get(f"rlaif/{key}", "") != "", f"rlaif/{key} missing from progress.csv: {sorted(last)}"
    assert float(last["rlaif/episode_length"]) == 8.0
    shares = sum(float(last[f"rlaif/action_{k}"]) for k in ("wait", "buy_prediction", "sell_prediction",
                                                             "open_perp", "close_perp", "join_group"))
    assert shares == pytest.approx(1.0)
    assert list(tmp_path.glob("events.out.tfevents.*")), "no TensorBoard event file was written"


def test_sb3_batch_policy_maps_discrete_actions_back():
    table = discrete_action_table(world_params(rlaif_gym.RLAIFEnvConfig(**EASY_CONFIG)), **COMPACT_ACTIONS)
    env = RLAIFSB3VecEnv(2, EASY_CONFIG, seed=0, action_mode="discrete", action_table=table)
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=16, seed=0, device="cpu")
    obs = env.reset()
    acts = SB3BatchPolicy(model).act(obs)
    assert acts.shape == (2, 4)
    assert all(any(np.array_equal(a, row) for row in table) for a in acts)
    with pytest.raises(ValueError, match="rows"):
        SB3BatchPolicy(model, action_table=table[:3])


@pytest.mark.slow
def test_ppo_beats_random_and_passive_on_held_out_seeds(tmp_path):
    summary_path = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, "examples/train_sb3_ppo.py", "--preset", "easy", "--gamma", "0.95",
         "--total-timesteps", "100000", "--eval-episodes", "64", "--log-dir", str(tmp_path / "logs"),
         "--summary-json", str(summary_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["timesteps"] >= 100_000
    label = summary["policy"]  # the sampled policy PPO trained ("PPO (sampled)") unless --deterministic
    report = "; ".join(f"{k}: {v['mean']:+,.1f} USD (95% CI {v['ci95_low']:+,.1f}..{v['ci95_high']:+,.1f})"
                       for k, v in summary["margin"].items() if k != label)
    print(f"\n{label} mean PnL {summary['mean_pnl'][label]:,.1f} USD; margins: {report}")
    for baseline in ("RandomAgent", "PassiveAgent"):
        margin = summary["margin"][baseline]
        assert margin["ci95_low"] > 0, f"PPO does not beat {baseline} on held-out seeds: {report}"
    assert f"| {label} |" in proc.stdout and "| PPO (argmax) |" in proc.stdout, proc.stdout[-2000:]
    assert "| InformedAgent |" in proc.stdout, proc.stdout[-2000:]
