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


# --- issue 25: every number bounded, every JSON reader typed, one action check ---------------------

FACES = ["RLAIF-v0", "RLAIF-Text-v0"]


def _play(env, steps: int = 6) -> list[float]:
    env.reset(seed=0)
    rewards = []
    for t in range(steps):
        if env.unwrapped.spec.id == "RLAIF-Text-v0":
            action = ('<think>buy</think>{"type": "buy_prediction", "market": "market-0", "outcome": "YES", '
                      f'"amount": {10 ** (t % 4)}}}')
        else:
            action = env.action_space.sample()
        _, reward, terminated, truncated, _ = env.step(action)
        rewards.append(reward)
        if terminated or truncated:
            break
    return rewards


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(("overrides", "field"), [
    ({"reward_weights": {"pnl": 1e308}}, "reward_weights"),        # row 4: the reward became NaN / -inf
    ({"reward_weights": {"risk": 1e7}}, "reward_weights"),
    ({"reward_weights": {"format": math.nan}}, "reward_weights"),
    ({"market_duration_max": 2**63}, "market_duration_max"),       # row 5: OverflowError from gym.make
    ({"market_duration_min": 10**30, "market_duration_max": 10**30}, "market_duration_min"),
    ({"funding_interval": 2**64}, "funding_interval"),
    ({"num_ticks": 10**12}, "num_ticks"),
    ({"numeric_perp_leverage": 1e300}, "numeric_perp_leverage"),
])
def test_config_refuses_numbers_past_their_bound_on_both_faces(face, overrides, field):
    """Issue 25 rows 4 and 5: a ConfigError naming the field, never NaN rewards or an OverflowError."""
    with pytest.raises(ConfigError, match=field) as err:
        gym.make(face, **overrides)
    assert str(err.value).startswith("invalid RLAIFEnvConfig: ")


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("scheme", ["skill", "original"])
def test_every_config_at_its_bounds_gives_finite_rewards(face, scheme):
    """The bounds are tight enough: every field at its extreme still gives finite rewards on both faces."""
    extremes = [
        {"reward_weights": dict.fromkeys(("pnl", "format", "reasoning", "risk"), 1e6), "pnl_scale": 1e6,
         "risk_penalty": 1e6, "form_scale": 1e6, "risk_threshold": 1e-9, "max_leverage": 100.0,
         "numeric_perp_leverage": 100.0, "num_ticks": 1_000_000},
        {"market_duration_min": 1_000_000, "market_duration_max": 1_000_000, "funding_interval": 1_000_000,
         "starting_cash": 1e12, "market_liquidity": 1e12, "npc_starting_cash": 1e12},
        {"starting_cash": 1e-3, "min_order": 1e-6, "min_fee": 0.0, "market_liquidity": 1e-6, "fee_rate": 0.0999,
         "funding_interval": 1, "market_duration_min": 1, "market_duration_max": 1, "perp_volatility": 0.1999,
         "reward_weights": {"pnl": 1e6, "risk": 1e6}, "pnl_scale": 1e6, "risk_penalty": 1e6},
    ]
    for overrides in extremes:
        env = gym.make(face, reward_scheme=scheme, **overrides)
        rewards = _play(env)
        assert rewards and all(math.isfinite(r) for r in rewards), (overrides, rewards)


def test_the_multi_agent_env_refuses_a_huge_integer_like_the_single_env():
    """Issue 25 row 16: the multi-agent env raised a bare OverflowError for [2**70, 0, 0, 0]."""
    from rlaif_gym.envs import RLAIFMultiAgentEnv

    single = gym.make("RLAIF-v0")
    single.reset(seed=0)
    multi = RLAIFMultiAgentEnv(num_agents=2)
    multi.reset(seed=0)
    for action in ([2**70, 0, 0, 0], [0, -(10**30), 0, 0], [1.5, 0, 0, 0], ["x", 0, 0, 0], [0, 0, 0]):
        with pytest.raises(InvalidActionError) as want:
            single.step(action)
        with pytest.raises(InvalidActionError) as got:
            multi.step({"trader_0": action, "trader_1": [0, 0, 0, 0]})
        assert str(got.value) == f"trader_0: {want.value}"  # one check, one message, the agent's name in front
    _, rewards, *_ = multi.step({"trader_0": [0, 0, 0, 0]})  # the episode goes on
    assert set(rewards) == {"trader_0", "trader_1"}


def _line_variant(good_run: Path, tmp_path: Path, line: str, at: int) -> Path:
    d = tmp_path / "run"
    shutil.copytree(good_run, d)
    (path,) = sorted(d.glob("trajectories-*.jsonl"))
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(at, line)
    path.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
    return d


def _wrong_schema(good_run: Path) -> str:
    (path,) = sorted(good_run.glob("trajectories-*.jsonl"))
    record = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    record["trajectoryId"] += "-copy"
    record["steps"][1]["reward"] = "lots"
    return json.dumps(record)


LINES = {
    "deep-array": (lambda run: "[" * 100_000 + "]" * 100_000, "nested deeper"),     # row 7
    "deep-object": (lambda run: '{"a":' * 50_000 + "1" + "}" * 50_000, "nested deeper"),
    "wrong-schema": (_wrong_schema, "field steps[1].reward: Input should be a valid number"),  # row 14
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(LINES))
@pytest.mark.parametrize("at", [1, 2], ids=["middle", "last"])
def test_a_deep_or_wrong_schema_line_is_one_line_naming_file_and_line(good_run, tmp_path, capsys, case, command,
                                                                      at):
    """Issue 25 rows 7 and 14: a 100k-deep JSON line gave "this is a bug" with a RecursionError traceback, a
    record of the wrong schema pydantic's 8-line dump with URLs."""
    make, reason = LINES[case]
    run = _line_variant(good_run, tmp_path, make(good_run), at)
    code = main(COMMANDS[command](run, tmp_path))
    err = capsys.readouterr().err
    assert code == 2, f"{command} on {case}: exit {code}, stderr {err[-1500:]}"
    assert "Traceback" not in err and "this is a bug" not in err and "errors.pydantic.dev" not in err, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert f"trajectories-0.jsonl:{at + 1}: " in err and reason in err, err
    assert not (tmp_path / "g.jsonl").exists() and not (tmp_path / "s.jsonl").exists()


def test_repair_keeps_a_deep_last_line_for_the_reader_to_report(good_run, tmp_path):
    """A line nested too deeply is no torn write: repair() keeps it, and the reader names it."""
    from rlaif_gym.storage import CorruptLineError, JsonlStore

    run = _line_variant(good_run, tmp_path, "[" * 100_000 + "]" * 100_000, 2)
    store = JsonlStore(run)
    before = store.path.read_bytes()
    assert store.repair().lines_dropped == 0 and store.path.read_bytes() == before
    with pytest.raises(CorruptLineError, match=r"trajectories-0\.jsonl:3: .*nested deeper"):
        list(store.read())
    with pytest.raises(CorruptLineError, match="nested deeper"):
        store.completed_ids()  # what --resume reads
