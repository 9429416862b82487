"""SB3: the batched VecEnv equals DummyVecEnv, the callback logs every component, and PPO learns.

The learning tests train PPO for 100k steps on the documented easy world (`EASY_CONFIG`, about a
minute on one core each) through `examples/train_sb3_ppo.py`, once with the compact Discrete
table and once on the env's own MultiDiscrete space (`--actions joint`, its argmax), and require
that on each of two disjoint sets of 100 held-out seeds PPO beats RandomAgent and PassiveAgent in
mean episode PnL with a paired 95% CI above zero. The joint-action policy's distribution is checked against
brute force, and MaskablePPO (sb3-contrib) trains with the env's masks without one refused action.
"""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

import rlaif_gym
from rlaif_gym.encoding import ACTION_KINDS, action_nvec
from rlaif_gym.envs import world_params
from rlaif_gym.integrations.sb3 import (
    COMPACT_ACTIONS,
    EASY_CONFIG,
    JointActionPolicy,
    RLAIFMetricsCallback,
    RLAIFSB3VecEnv,
    SB3BatchPolicy,
    canonical_actions,
    discrete_action_table,
    evaluate_against_baselines,
)

ROOT = Path(__file__).resolve().parents[2]


def _assert_steps_equal(ours, theirs, t):
    assert np.array_equal(ours[0], theirs[0]), f"step {t}: observations differ"
    assert np.array_equal(ours[1], theirs[1]), f"step {t}: rewards {ours[1]} != {theirs[1]}"
    assert np.array_equal(ours[2], theirs[2]), f"step {t}: dones {ours[2]} != {theirs[2]}"
    for i, (x, y) in enumerate(zip(ours[3], theirs[3], strict=True)):
        for key in ("reward_components", "pnl_delta", "equity", "cash", "feedback", "tick", "fill",
                    "TimeLimit.truncated"):
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
    # Every distinct action of the world: each kind's canonical actions on the targets it has (117 by default).
    reach = {None: 1, "market": params.num_markets, "perp": params.num_perps, "group": params.num_groups}
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in action_nvec(params)], indexing="ij"), -1).reshape(-1, 4)
    inside = [reach[rlaif_gym.sim.SPEC_OF[ACTION_KINDS[k].name.lower()].numeric_target] > t for k, t in grid[:, :2]]
    assert len({tuple(r) for r in full}) == len(full)
    assert {tuple(r) for r in full} == {tuple(r) for r in canonical_actions(grid[inside])}
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
    shares = sum(float(last[f"rlaif/action_{kind.name.lower()}"]) for kind in ACTION_KINDS)
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


def _every_canonical_action(nvec):
    return np.unique(canonical_actions(np.array(list(itertools.product(*[range(int(n)) for n in nvec])))), axis=0)


def test_joint_action_policy_is_a_distribution_over_the_envs_own_actions():
    env = RLAIFSB3VecEnv(3, {"num_ticks": 12}, seed=0)
    table = discrete_action_table(env.params)
    model = PPO(JointActionPolicy, env, policy_kwargs={"action_table": table}, n_steps=8, batch_size=24, seed=0,
                device="cpu")
    assert model.action_space == env.action_space  # the env's own MultiDiscrete([6, T, 5, 2])
    obs = th.as_tensor(env.reset())
    with th.no_grad():
        dist = model.policy.get_distribution(obs)
        every = _every_canonical_action(env.action_space.nvec)
        logp = th.stack([dist.log_prob(th.as_tensor(np.repeat(a[None], 3, 0))) for a in every], dim=1)
        p = logp.exp()
        # One probability per distinct action: the table's rows share all of it, every other action has none.
        assert th.allclose(p.sum(dim=1), th.ones(3), atol=1e-5)
        in_table = th.as_tensor([any(np.array_equal(a, r) for r in table) for a in every])
        assert float(p[:, ~in_table].sum()) == 0.0
        brute = -(p[:, in_table] * logp[:, in_table]).sum(dim=1)
        assert th.allclose(dist.entropy(), brute, atol=1e-5)
        # Entries a kind ignores do not change what the action is, nor its probability.
        wait_elsewhere = dist.log_prob(th.as_tensor([[0, 3, 4, 1]] * 3))
        assert th.allclose(wait_elsewhere, dist.log_prob(th.as_tensor([[0, 0, 0, 0]] * 3)))
    acts, _ = model.predict(obs.numpy(), deterministic=False)
    assert acts.shape == (3, 4) and all(any(np.array_equal(a, r) for r in table) for a in acts)
    model.learn(48)  # PPO stores and scores the env's own rows
    with pytest.raises(ValueError, match="distinct canonical"):
        PPO(JointActionPolicy, env, policy_kwargs={"action_table": [[0, 1, 0, 0]]}, device="cpu")


def _refused_while_training(model, steps: int) -> tuple[int, int]:
    """(refused, taken) actions over `steps` of real training, counted from the env's feedback."""
    counts = {"refused": 0, "taken": 0}

    class Count(RLAIFMetricsCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                counts["taken"] += 1
                counts["refused"] += not info["feedback"]["success"]
            return super()._on_step()

    model.learn(steps, callback=Count())
    return counts["refused"], counts["taken"]


def test_maskable_ppo_trains_on_exact_masks_without_a_refused_action():
    """sb3-contrib's MaskablePPO, real training on the env's masks (about 20 s on a quiet core)."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from rlaif_gym.integrations.sb3 import JointMaskRolloutBuffer, MaskableJointActionPolicy

    kw = {"n_steps": 64, "batch_size": 256, "n_epochs": 1, "seed": 0, "device": "cpu"}
    # The env's own MultiDiscrete space with the joint-action policy: masks of every action, exact.
    env = RLAIFSB3VecEnv(8, EASY_CONFIG, seed=0, mask_layout="joint")
    model = sb3_contrib.MaskablePPO(MaskableJointActionPolicy, env, rollout_buffer_class=JointMaskRolloutBuffer,
                                    policy_kwargs={"action_table": discrete_action_table(env.params)}, **kw)
    refused, taken = _refused_while_training(model, 2048)
    assert taken >= 2048 and refused == 0, f"{refused} of {taken} masked actions were refused"
    # A Discrete table with MaskablePPO's own policy: one exact mask entry per row.
    table = discrete_action_table(env.params, **COMPACT_ACTIONS)
    env = RLAIFSB3VecEnv(8, EASY_CONFIG, seed=0, action_mode="discrete", action_table=table)
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, **kw)
    refused, taken = _refused_while_training(model, 2048)
    assert refused == 0, f"{refused} of {taken} masked actions were refused"
    # The evaluation helpers pass the masks too: no refused action on held-out seeds either.
    stats = evaluate_against_baselines(model, range(1_000_000, 1_000_016), EASY_CONFIG, action_table=table)
    assert set(stats) == {"PPO", "InformedAgent", "PassiveAgent", "RandomAgent"}


def test_maskable_ppo_per_dimension_masks_through_make_vec_env():
    """SB3's plain route: `make_vec_env("RLAIF-v0")` envs answer `action_masks()`; no masked-out kind is chosen."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = make_vec_env("RLAIF-v0", n_envs=4, seed=0, env_kwargs={"num_ticks": 24})
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    taken_kinds = []

    class Kinds(RLAIFMetricsCallback):
        def _on_rollout_start(self) -> None:
            self.masks = None

        def _on_step(self) -> bool:
            taken_kinds.append((self.masks, np.asarray(self.locals["actions"])[:, 0].copy()))
            self.masks = np.stack(self.training_env.env_method("action_masks"))
            return super()._on_step()

    env.reset()
    masks0 = np.stack(env.env_method("action_masks"))
    assert masks0.shape == (4, int(env.action_space.nvec.sum()))
    model.learn(512, callback=Kinds())
    checked = 0
    for masks, kinds in taken_kinds:
        if masks is not None:  # the masks of the state each action was chosen in
            assert masks[np.arange(len(kinds)), kinds].all(), "MaskablePPO chose a kind its mask forbade"
            checked += 1
    assert checked > 100


def _learning_run(tmp_path, *extra: str) -> dict:
    summary_path = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, "examples/train_sb3_ppo.py", "--preset", "easy", "--gamma", "0.95",
         "--total-timesteps", "100000", "--eval-episodes", "100", "--log-dir", str(tmp_path / "logs"),
         "--summary-json", str(summary_path), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["timesteps"] >= 100_000
    label = summary["policy"]  # the sampled policy PPO trained ("PPO (sampled)") unless --deterministic
    assert f"| {label} |" in proc.stdout and "| PPO (argmax) |" in proc.stdout, proc.stdout[-2000:]
    assert "| InformedAgent |" in proc.stdout, proc.stdout[-2000:]
    assert sorted(summary["sets"]) == ["1000000", "2000000"]  # two disjoint held-out sets of 100 seeds
    for first, out in summary["sets"].items():
        assert out["seeds"] == [int(first), int(first) + 100]
        report = "; ".join(f"{k}: {v['mean']:+,.1f} USD (95% CI {v['ci95_low']:+,.1f}..{v['ci95_high']:+,.1f})"
                           for k, v in out["margin"].items() if k != label)
        print(f"\nseeds from {first}: {label} mean PnL {out['mean_pnl'][label]:,.1f} USD; margins: {report}")
        for baseline in ("RandomAgent", "PassiveAgent"):
            margin = out["margin"][baseline]
            assert margin["ci95_low"] > 0, f"PPO does not beat {baseline} on held-out seeds from {first}: {report}"
    return summary


@pytest.mark.slow
def test_ppo_beats_random_and_passive_on_held_out_seeds(tmp_path):
    _learning_run(tmp_path)


@pytest.mark.slow
def test_ppo_learns_on_the_envs_own_multidiscrete_space(tmp_path):
    # The argmax of the policy (--deterministic) is the reference: after 100k steps it earns about 1,000 USD per
    # episode here, the sampled policy about 300 (docs/training.md).
    summary = _learning_run(tmp_path, "--actions", "joint", "--deterministic")
    assert summary["actions"] == "joint" and summary["policy"] == "PPO (argmax)"


def test_sb3_ppo_trains_on_rlaif_v0_with_a_vec_env():
    vec = make_vec_env("RLAIF-v0", n_envs=2, seed=0)
    model = PPO("MlpPolicy", vec, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    obs = vec.reset()
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (2, 4)
    assert gym.make("RLAIF-v0").action_space.contains(np.asarray(action[0]))
