"""The CLI tells the truth about what it did (issue 15, items 9 and 10), through `main([...])` and real servers.

Item 9: text from outside (server errors) is printed literally: no rich markup, no terminal links, no
raw ANSI escapes. Item 10: a run with failed episodes exits non-zero and says why; a policy that
cannot work is refused before anything starts; export and judge say plainly when they wrote nothing.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from fake_server import FakeOpenAIServer, Fault, episode_seeds
from judge_server import JudgeServer

from rlaif_gym.cli import main

HOSTILE = "upstream said [/red] and [link=http://evil.example/]click here[/link] \x1b[31mRED\x1b[0m \x07[bold]x"


@pytest.fixture(autouse=True)
def _no_model_env(monkeypatch):
    for name in ("RLAIF_MODEL", "OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _dead_url() -> str:
    """A loopback URL nothing listens on (a port the OS just handed out and that was closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _stored(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(out.glob("trajectories-*.jsonl")) for line in p.read_text().splitlines()]


# --- item 9 ---------------------------------------------------------------------------------------


def test_server_error_text_is_printed_literally_and_the_judge_post_pass_still_runs(tmp_path, capsys):
    out = tmp_path / "run"
    bad = episode_seeds(0, 0, range(0, 3))  # every call of the episode with env seed 0
    faults = [Fault("status", match=lambda b: b.get("seed") in bad, status=400, message=HOSTILE)]
    with FakeOpenAIServer(faults).start() as policy, JudgeServer() as judge:
        code = main(["rollout", "--agent", "openai", "--base-url", policy.base_url, "--model", "m",
                     "--episodes", "2", "--num-envs", "2", "--seed", "0", "--out", str(out), "--no-progress",
                     "--max-retries", "0", "--set", "num_ticks=3", "--judge", "llm", "--judge-base-url",
                     judge.base_url, "--judge-model", "j"])
        judged = len(judge.chat_requests())
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text and "MarkupError" not in text, text[-3000:]
    assert code == 1, f"one of two episodes failed, so rollout must exit 1, got {code}: {text[-2000:]}"
    assert "[/red]" in captured.out and "[link=http://evil.example/]click here[/link]" in captured.out
    assert "[bold]x" in captured.out
    assert "\x1b" not in captured.out and "\x07" not in captured.out, repr(captured.out[-800:])
    assert "\\x1b[31mRED" in captured.out  # shown, escaped, not interpreted
    assert judged >= 1, "the --judge llm post-pass did not run"
    assert (out / "judge" / "scores.absolute.jsonl").exists()


# --- item 10 --------------------------------------------------------------------------------------


def test_a_run_whose_episodes_all_failed_exits_non_zero_naming_the_url(tmp_path, capsys):
    url = _dead_url()
    out = tmp_path / "dead"
    code = main(["rollout", "--agent", "openai", "--base-url", url, "--model", "m", "--episodes", "2",
                 "--num-envs", "2", "--out", str(out), "--no-progress", "--max-retries", "0", "--timeout", "5",
                 "--set", "num_ticks=3"])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 1, text[-2000:]
    assert "2 of 2 episodes failed" in text, text[-2000:]
    assert url in text and "first error" in text, text[-2000:]
    assert len(_stored(out)) == 2  # the failures are recorded, for --resume --retry-failed

    # The export of that run writes nothing and says so, instead of "wrote grpo export of 2 trajectories".
    target = tmp_path / "g.jsonl"
    code = main(["export", str(out), "--format", "grpo", "--output", str(target)])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert "wrote grpo export of 2" not in captured.out
    assert "nothing" in captured.err and "2 of 2 trajectories failed" in captured.err, captured.err
    assert not target.exists()


def test_a_run_with_some_failed_episodes_exits_non_zero(tmp_path, capsys):
    bad = episode_seeds(1, 0, range(0, 3))
    with FakeOpenAIServer([Fault("status", match=lambda b: b.get("seed") in bad, status=400)]).start() as server:
        code = main(["rollout", "--agent", "openai", "--base-url", server.base_url, "--model", "m",
                     "--episodes", "3", "--num-envs", "3", "--out", str(tmp_path / "r"), "--no-progress",
                     "--max-retries", "0", "--set", "num_ticks=3"])
    text = "".join(capsys.readouterr())
    assert code == 1 and "1 of 3 episodes failed" in text and server.base_url in text, text[-2000:]


@pytest.mark.parametrize("args, needle", [
    (["--model", "m"], "--base-url"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--model"),
])
def test_openai_agent_without_base_url_or_model_is_refused_before_starting(tmp_path, capsys, args, needle):
    out = tmp_path / "run"
    code = main(["rollout", "--agent", "openai", *args, "--episodes", "1", "--out", str(out), "--no-progress",
                 "--set", "num_ticks=2"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and needle in err, err
    assert not out.exists() or not list(out.glob("trajectories-*.jsonl"))


def test_openai_agent_without_the_openai_extra_is_refused_before_starting(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "h11", None)  # `import h11` raises ImportError
    out = tmp_path / "run"
    code = main(["rollout", "--agent", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                 "--episodes", "1", "--out", str(out), "--no-progress", "--set", "num_ticks=2"])
    err = capsys.readouterr().err
    assert code == 2 and 'pip install -e ".[openai]"' in err, err
    assert not out.exists() or not list(out.glob("trajectories-*.jsonl"))


def test_negative_seed_is_refused_before_starting(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["rollout", "--episodes", "1", "--seed", "-1", "--out", str(out), "--no-progress",
                 "--set", "num_ticks=2"])
    err = capsys.readouterr().err
    assert code == 2 and "--seed" in err and "-1" in err, err
    assert not out.exists() or not list(out.glob("trajectories-*.jsonl"))


def test_dpo_export_of_groups_of_one_says_it_wrote_nothing_and_why(singles, tmp_path, capsys):
    target = tmp_path / "d.jsonl"
    code = main(["export", str(singles), "--format", "dpo", "--output", str(target)])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert "nothing" in captured.err and "--group-size" in captured.err, captured.err
    assert not target.exists()


def test_export_reports_what_it_wrote(singles, tmp_path, capsys):
    target = tmp_path / "s.jsonl"
    assert main(["export", str(singles), "--format", "sft", "--output", str(target)]) == 0
    lines = len(target.read_text().splitlines())
    assert f"wrote {lines} sft records from 2 trajectories" in capsys.readouterr().out


def test_pairwise_judge_of_groups_of_one_says_it_scored_nothing_and_why(singles, capsys):
    with JudgeServer() as server:
        code = main(["judge", str(singles), "--mode", "pairwise", "--base-url", server.base_url, "--model", "j",
                     "--out", str(singles / "judge-pairwise")])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert "nothing" in captured.err and "--group-size" in captured.err and "pairwise" in captured.err, captured.err


def test_report_prints_record_text_literally(singles, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(singles, run, ignore=shutil.ignore_patterns("report", "judge*"))
    (path,) = sorted(run.glob("trajectories-*.jsonl"))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["finalStatus"] = "odd\x1b[2J[/red][link=http://evil.example/]x"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    code = main(["report", str(run), "--no-plots", "--no-baselines"])
    out = capsys.readouterr().out
    assert code == 0
    assert "\x1b" not in out, repr(out[out.find("\x1b") - 300:][:400])
    assert "\\x1b[2J[/red]" in out and "[link=http:" in out, out[-2500:]  # the table may wrap the rest
