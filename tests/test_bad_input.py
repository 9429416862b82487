"""Bad input raises a typed error naming the field, at the boundary (issue 15, item 12)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rlaif_gym
from rlaif_gym import ConfigError, InvalidActionError, RLAIFEnvConfig
from rlaif_gym.cli import main
from rlaif_gym.errors import RecordError, RLAIFError

# --- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["starting_cash", "pnl_scale", "market_liquidity", "npc_starting_cash",
                                   "form_scale", "risk_penalty", "risk_threshold"])
@pytest.mark.parametrize("value", [math.inf, 1e308])
def test_config_rejects_infinite_or_huge_values_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        RLAIFEnvConfig(**{field: value})
    with pytest.raises(ConfigError, match=field):
        gym.make("RLAIF-v0", **{field: value})


def test_config_accepts_large_but_sane_money():
    env = gym.make("RLAIF-v0", starting_cash=1e9, pnl_scale=100.0)
    env.reset(seed=0)
    for _ in range(5):
        _, reward, *_ = env.step(env.action_space.sample())
        assert math.isfinite(reward)


# --- actions --------------------------------------------------------------------------------------


@pytest.mark.parametrize("action", [[10**20, 0, 0, 0], [0, -(10**30), 0, 0], [2**64, 0, 0, 0]])
def test_step_with_a_huge_integer_raises_invalid_action(action):
    env = gym.make("RLAIF-v0")
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match=r"action must be 4 integers"):
        env.step(action)


# --- records: report, export, judge ---------------------------------------------------------------


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bad-input") / "run"
    code = main(["rollout", "--episodes", "2", "--num-envs", "2", "--seed", "0", "--out", str(out),
                 "--no-progress", "--set", "num_ticks=5"])
    assert code == 0
    return out


def _variant(good_run: Path, tmp_path: Path, mutate) -> Path:
    d = tmp_path / "run"
    shutil.copytree(good_run, d)
    (path,) = sorted(d.glob("trajectories-*.jsonl"))
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    mutate(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")  # NaN as Python writes it
    return d


def _nan_reward(records):
    records[0]["steps"][2]["reward"] = math.nan


def _inf_pnl(records):
    records[1]["finalPnL"] = math.inf


def _negative_seed(records):
    records[0]["seed"] = -1


def _huge_seed(records):
    records[0]["seed"] = 2**64


def _duplicate_id(records):
    records[1]["trajectoryId"] = records[0]["trajectoryId"]


CASES = {
    "nan-reward": (_nan_reward, "steps[2].reward"),
    "inf-pnl": (_inf_pnl, "finalPnL"),
    "negative-seed": (_negative_seed, "seed"),
    "huge-seed": (_huge_seed, "seed"),
    "duplicate-id": (_duplicate_id, "trajectoryId"),
}
COMMANDS = {
    "report": lambda d, tmp: ["report", str(d), "--no-plots"],
    "report-no-baselines": lambda d, tmp: ["report", str(d), "--no-plots", "--no-baselines"],
    "export-grpo": lambda d, tmp: ["export", str(d), "--format", "grpo", "--output", str(tmp / "g.jsonl")],
    "export-sft": lambda d, tmp: ["export", str(d), "--format", "sft", "--output", str(tmp / "s.jsonl")],
    # Replay needs no server: the bad record is refused before any verdict is asked for.
    "judge": lambda d, tmp: ["judge", str(d), "--tape-mode", "replay", "--model", "m"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(CASES))
def test_cli_refuses_bad_records_with_one_line_naming_the_field(good_run, tmp_path, capsys, case, command):
    mutate, field = CASES[case]
    run = _variant(good_run, tmp_path, mutate)
    code = main(COMMANDS[command](run, tmp_path))
    err = capsys.readouterr().err
    assert code == 2, f"{command} on {case}: exit {code}, stderr {err[-1500:]}"
    assert "Traceback" not in err
    assert err.startswith("error: "), err
    assert field in err and "trajectories-0.jsonl" in err, err
    assert not (tmp_path / "g.jsonl").exists() and not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize("case", list(CASES))
def test_load_run_raises_record_error(good_run, tmp_path, case):
    from rlaif_gym.report import load_run

    mutate, field = CASES[case]
    with pytest.raises(RecordError, match=field.replace("[", r"\[").replace("]", r"\]")) as info:
        load_run(_variant(good_run, tmp_path, mutate))
    assert isinstance(info.value, RLAIFError) and isinstance(info.value, ValueError)
    assert info.value.field == field


def test_good_run_still_loads(good_run):
    from rlaif_gym.report import load_run

    assert len(load_run(good_run)) == 2
    assert np.isfinite([t.total_reward for t in load_run(good_run)]).all()
    assert rlaif_gym.__version__
