"""The demo shape of the `rlaif-gym` command: rollout, report, every export, and a typo'd config key."""

from __future__ import annotations

import json

import pytest
from rollout_checks import check_run, read_store_strict

from rlaif_gym.cli import main
from rlaif_gym.storage import read_parquet

TICKS = 15


def test_rollout_report_export_demo(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["rollout", "--agent", "scripted", "--episodes", "3", "--num-envs", "3", "--seed", "0",
                 "--out", str(out), "--no-progress", "--set", f"num_ticks={TICKS}"])
    captured = capsys.readouterr()
    assert code == 0, f"rollout returned {code}: {captured.err[-2000:]}"
    assert "rollout summary" in captured.out, f"no summary table on stdout: {captured.out[-1000:]}"

    files = sorted(out.glob("*.jsonl"))
    assert files, f"no *.jsonl under {out}: {sorted(p.name for p in out.iterdir())}"
    trajs = read_store_strict(out)
    assert len(trajs) == 3, f"{len(trajs)} trajectories on disk, expected 3"
    by_id = check_run(trajs, ["demo-s0-m0", "demo-s1-m0", "demo-s2-m0"], TICKS)
    for tid, t in by_id.items():
        assert len(t.steps) == t.episode_length == TICKS, \
            f"trajectory {tid}: {len(t.steps)} steps, episode_length {t.episode_length}, expected {TICKS}"
        assert t.config.get("num_ticks") == TICKS, f"trajectory {tid}: config num_ticks {t.config.get('num_ticks')}"
    assert (out / "run.json").exists(), "no run.json manifest"

    assert main(["report", str(out)]) == 0
    report = capsys.readouterr().out
    assert "3 trajectories" in report and "completed 3" in report, f"report output: {report[-1500:]}"

    expected_lines = {"sft": 3 * TICKS, "db": 3}
    for fmt in ("sft", "dpo", "grpo", "db", "parquet"):
        target = tmp_path / "exports" / (f"demo.{fmt}.parquet" if fmt == "parquet" else f"demo.{fmt}.jsonl")
        code = main(["export", str(out), "--format", fmt, "--output", str(target)])
        captured = capsys.readouterr()
        if fmt in ("dpo", "grpo"):  # groups of 1: no pair or group; it says so and writes nothing (issue 15, item 10)
            assert code == 2 and "--group-size 2" in captured.err and not target.exists(), captured.err[-1500:]
            continue
        assert code == 0, f"export --format {fmt} returned {code}: {captured.err[-1500:]}"
        assert target.exists(), f"export --format {fmt} wrote no file"
        if fmt == "parquet":
            back = read_parquet(target)
            assert sorted(t.trajectory_id for t in back) == sorted(by_id), f"parquet holds {len(back)} trajectories"
            continue
        lines = target.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            try:
                json.loads(line)
            except ValueError as exc:
                raise AssertionError(f"export {fmt}: line {number} is not JSON: {exc}") from exc
        if fmt in expected_lines:
            assert len(lines) == expected_lines[fmt], \
                f"export {fmt}: {len(lines)} records, expected {expected_lines[fmt]}"
    sft = [json.loads(line) for line in (tmp_path / "exports" / "demo.sft.jsonl").read_text().splitlines()]
    for number, record in enumerate(sft, 1):
        roles = [m["role"] for m in record["messages"]]
        assert roles == ["system", "user", "assistant"], f"sft record {number}: roles {roles}"
        assert all(m["content"].strip() for m in record["messages"]), f"sft record {number}: an empty message"


def test_typo_in_a_config_key_is_a_clear_error(tmp_path, capsys):
    code = main(["rollout", "--set", "num_markts=3", "--out", str(tmp_path / "typo"), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2, f"a typo'd --set key returned {code}"
    assert "Did you mean 'num_markets'" in captured.err, f"stderr: {captured.err[-1000:]}"
    assert "Traceback" not in captured.err, "a traceback instead of a one-line error"
    assert not list((tmp_path / "typo").glob("*.jsonl")) if (tmp_path / "typo").exists() else True


USAGE_ERRORS = {
    "set-without-value": ["rollout", "--set", "num_markets", "--no-progress"],
    "episodes-not-a-number": ["rollout", "--episodes", "x", "--no-progress"],
    "unknown-option": ["rollout", "--bogus", "--no-progress"],
    "unknown-command": ["nosuchcommand"],
    "export-without-format": ["export", "{tmp}/somewhere", "--output", "{tmp}/x.jsonl"],
}


@pytest.mark.parametrize("name", sorted(USAGE_ERRORS))
def test_usage_errors_exit_2_without_a_traceback(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a rollout that wrongly started would write runs/latest here
    argv = [a.replace("{tmp}", str(tmp_path)) for a in USAGE_ERRORS[name]]
    try:
        code = main(argv)
    except BaseException as exc:
        raise AssertionError(f"{name}: main({argv}) raised {type(exc).__name__}: {exc}") from exc
    captured = capsys.readouterr()
    assert code == 2, f"{name}: returned {code}"
    assert "Traceback" not in captured.err, f"{name}: a traceback instead of an error line"
    assert captured.err.strip(), f"{name}: no error message on stderr"


@pytest.mark.parametrize("command", ["report", "export"])
def test_a_missing_run_directory_is_an_error_and_is_not_created(command, tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    argv = [command, str(missing)]
    if command == "export":
        argv += ["--format", "sft", "--output", str(tmp_path / "sft.jsonl")]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, f"{command} of a missing directory returned {code} (stdout: {captured.out[-300:]})"
    assert not missing.exists(), f"{command} created the missing run directory {missing}"


def test_rollout_fork_tick_collects_groups_that_share_the_state_at_the_fork(tmp_path, capsys):
    out = tmp_path / "forks"
    code = main(["rollout", "--episodes", "4", "--group-size", "2", "--fork-tick", "5", "--seed", "3", "--out",
                 str(out), "--no-progress", "--set", "num_ticks=9"])
    assert code == 0, capsys.readouterr().err[-2000:]
    trajs = read_store_strict(out)
    groups: dict[str, list] = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t)
    assert sorted(groups) == ["forks-s3-t5", "forks-s4-t5"]
    for members in groups.values():
        assert len(members) == 2
        # Branches start at the fork tick from one state: the same prompt and equity there.
        firsts = [m.steps[0] for m in members]
        assert all(s.step_number == 5 for s in firsts) and all(len(m.steps) == 4 for m in members)
        assert firsts[0].observation.text == firsts[1].observation.text
        assert firsts[0].environment_state.agent_balance == firsts[1].environment_state.agent_balance
    assert main(["rollout", "--episodes", "3", "--group-size", "2", "--fork-tick", "5", "--out",
                 str(tmp_path / "bad"), "--no-progress"]) == 2
    assert "multiple of --group-size" in capsys.readouterr().err
