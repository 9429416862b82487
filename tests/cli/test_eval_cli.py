"""`rlaif-gym eval` and `rlaif-gym eval compare` on the command line: a scorecard and a table from one command, two
scorecards paired, and every ordinary mistake one line on stderr with exit code 2, naming the fix."""

from __future__ import annotations

import json

import pytest

from rlaif_gym.cli import main


def test_eval_then_compare_from_the_command_line(tmp_path, capsys):
    for name in ("before", "after"):
        assert main(["eval", "--points", "12", "--out", str(tmp_path / name)]) == 0
    out = capsys.readouterr().out
    assert "| gain_over_wait |" in out and "| model minus, paired |" in out and "wrote " in out
    card = json.loads((tmp_path / "after" / "scorecard.json").read_text())
    assert card["schema"] == "rlaif-gym.scorecard/1" and card["command"][:2] == ["rlaif-gym", "eval"]
    assert {"rows", "paired", "set", "model", "sampling", "calls", "package_version"} <= set(card)
    assert main(["eval", "compare", str(tmp_path / "before"), str(tmp_path / "after"), "--output",
                 str(tmp_path / "c.json")]) == 0
    assert "B minus A on 12 shared points" in capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text())["b_minus_a"][0]["mean"] == 0.0


def test_eval_plays_whole_episodes_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "episodes"
    assert main(["eval", "--task-set", "episodes-v1/decision-world-a", "--points", "2", "--set", "num_ticks=8",
                 "--out", str(out)]) == 0
    assert "| pnl |" in capsys.readouterr().out
    card = json.loads((out / "scorecard.json").read_text())
    assert card["set"]["kind"] == "episodes" and card["set"]["points"] == 2 and card["calls"]["calls"] == 16
    assert "--set" in card["command"] and (out / "episodes").is_dir()


BAD = {
    "unknown-set": (["eval", "--task-set", "decisions-v7/nope"], "unknown set"),
    "train-seeds": (["eval", "--seeds", "10", "--points", "3"], "--allow-train-seeds"),
    "openai-without-url": (["eval", "--agent", "openai", "--model", "m"], "--base-url"),
    "unreachable-server": (["eval", "--agent", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                            "--points", "2", "--timeout", "2", "--max-retries", "0"], "did not answer"),
    "temperature-nan": (["eval", "--temperature", "nan"], "--temperature"),
    "compare-no-eval": (["eval", "compare", "{tmp}/a", "{tmp}/b"], "no finished eval"),
    "episodes-samples": (["eval", "--task-set", "episodes-v1/decision-world-a", "--samples", "2"], "--samples"),
    "episodes-judge": (["eval", "--task-set", "episodes-v1/default-a", "--judge", "rule"], "decisions-v1"),
    "episodes-seed": (["eval", "--task-set", "episodes-v1/default-a", "--seed", "3"], "--seed"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_eval_input_is_one_line_and_exit_2(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    argv, needle = BAD[name]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv] + (["--out", str(tmp_path / "run")]
                                                                     if argv[1] != "compare" else []))
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err


def test_every_eval_option_and_argument_has_help():
    import typer.main

    from rlaif_gym.cli import _build_app

    group = typer.main.get_command(_build_app()).commands["eval"]
    documented = [(c.name, p.name, getattr(p, "help", None)) for c in (group, group.commands["compare"])
                  for p in c.params]
    assert len(documented) > 20 and all(text for _, _, text in documented), documented


def _require_local_model() -> None:
    """Skip unless the local-llm extra and the SmolLM2 model package are installed."""
    pytest.importorskip("llama_cpp", reason="the local-llm extra is not installed")
    from rlaif_gym.errors import DependencyNotInstalled
    from rlaif_gym.integrations.local_llm import model_path

    try:
        model_path()
    except DependencyNotInstalled as exc:
        pytest.skip(f"the model package is not installed: {exc}")


def test_eval_drives_the_shipped_model_on_a_local_llama_cpp_server(tmp_path, capsys):
    """`--agent local`: SmolLM2-135M on llama.cpp, started and stopped by the command; its own free replies are
    played and scored (whatever they are worth), beside the baselines on the same points."""
    _require_local_model()
    out = tmp_path / "local"
    assert main(["eval", "--agent", "local", "--points", "3", "--max-tokens", "48", "--out", str(out)]) == 0
    card = json.loads((out / "scorecard.json").read_text())
    assert card["calls"]["calls"] == 3 and card["model"]["kind"] == "openai-compatible"
    replies = [json.loads(line) for line in (out / "replies.jsonl").read_text().splitlines()]
    assert len(replies) == 3 and all(r["call"]["completion_tokens"] for r in replies if r["error"] is None)
    assert "| gain_over_wait |" in capsys.readouterr().out


def test_eval_validates_the_rule_judge_and_an_llm_judge_whose_tape_replays_without_its_server(tmp_path, capsys):
    """`--judge rule` and `--judge llm` on the eval's own points; a finished eval is judged again with --resume, and
    the LLM judge's replay (no server: the tape answers) writes the very same validation."""
    from judge_server import JudgeServer

    out = tmp_path / "run"
    assert main(["eval", "--points", "3", "--judge", "rule", "--out", str(out)]) == 0
    assert "**Judge validation: rule** on 3 groups x 6 rungs" in capsys.readouterr().out
    rule = json.loads((out / "judge" / "validation.rule.json").read_text())
    assert rule["ladder"] == ["model", "truth", "teacher", "informed", "wait", "random"]
    assert rule["set"]["digest"] == json.loads((out / "scorecard.json").read_text())["set"]["digest"]
    card = (out / "scorecard.json").read_bytes()
    server = JudgeServer().start()
    try:
        assert main(["eval", "--points", "3", "--resume", "--judge", "llm", "--judge-base-url", server.base_url,
                     "--judge-model", "judge-model", "--out", str(out)]) == 0
        asked = len(server.chat_requests())
    finally:
        server.stop()
    recorded = (out / "judge" / "validation.llm-absolute.json").read_bytes()
    assert asked == 18 and (out / "scorecard.json").read_bytes() == card  # the judge's options change no score
    assert main(["eval", "--points", "3", "--resume", "--judge", "llm", "--judge-tape-mode", "replay",
                 "--judge-model", "judge-model", "--out", str(out)]) == 0
    assert (out / "judge" / "validation.llm-absolute.json").read_bytes() == recorded
    assert json.loads((out / "judge" / "health.absolute.json").read_text())["calls_from_network"] == 0


def test_the_shipped_model_judges_a_ladder_on_a_local_llama_cpp_server(tmp_path, capsys):
    """`--judge local`: SmolLM2-135M as the LLM judge (started and stopped by the command); whatever its scores are
    worth, the verdict grammar makes each one parse (unconstrained, most are prose), and the validation is
    written."""
    _require_local_model()
    out = tmp_path / "local"
    assert main(["eval", "--points", "1", "--judge", "local", "--judge-max-tokens", "96", "--out", str(out)]) == 0
    report = json.loads((out / "judge" / "validation.llm-absolute.json").read_text())
    health = json.loads((out / "judge" / "health.absolute.json").read_text())
    assert report["trajectories"] == 6 and report["judge"]["model"] == health["model"]
    # the verdict grammar (on by default for --judge local) makes every verdict parse, whatever it says
    assert report["scored"] == 6 and health["parse_failure_rate"] == 0.0
