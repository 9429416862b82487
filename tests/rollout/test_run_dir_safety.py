"""Issue 15 item 4: a run refuses directories written by something else and resumes only the same plan."""

from __future__ import annotations

import pytest

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore


def _collector(out, temperature=0.7):
    return RolloutCollector(ScriptedLLMAgent(temperature=temperature), sink=JsonlStore(out),
                            env_config={"num_ticks": 3}, num_envs=2)


def test_fresh_run_refuses_foreign_trajectory_files(tmp_path):
    src, out = tmp_path / "a", tmp_path / "b"
    _collector(src).collect(2, seed=0)
    out.mkdir()
    (out / "trajectories-0.jsonl").write_bytes((src / "trajectories-0.jsonl").read_bytes())
    before = (out / "trajectories-0.jsonl").read_bytes()
    for resume in (False, True):
        with pytest.raises(ConfigError, match=r"no run\.json"):
            _collector(out).collect(2, seed=0, resume=resume)
    assert (out / "trajectories-0.jsonl").read_bytes() == before
    assert not (out / "run.json").exists()


def test_resume_refuses_another_policy(tmp_path):
    out = tmp_path / "run"
    _collector(out).collect(2, seed=0)
    manifest = (out / "run.json").read_bytes()
    with pytest.raises(ConfigError, match="agent"):
        _collector(out, temperature=0.0).collect(4, seed=0, resume=True)
    assert (out / "run.json").read_bytes() == manifest


def test_overwrite_deletes_only_what_a_run_wrote(tmp_path):
    from rlaif_gym.cli import main

    out = tmp_path / "project"
    (out / "src").mkdir(parents=True)
    (out / "src" / "main.py").write_text("print('mine')\n")
    (out / "notes.txt").write_text("keep\n")
    _collector(out).collect(2, seed=0)
    args = ["rollout", "--out", str(out), "--episodes", "1", "--max-ticks", "2", "--no-progress", "--overwrite"]
    assert main(args) == 0
    assert (out / "src" / "main.py").read_text() == "print('mine')\n" and (out / "notes.txt").exists()
    assert len(JsonlStore(out).completed_ids()) == 1

    (out / "run.json").write_text('{"name": "someone else"}\n')
    assert main(args) == 2
    assert (out / "src" / "main.py").exists() and (out / "run.json").read_text() == '{"name": "someone else"}\n'


@pytest.mark.parametrize("bad", [
    ["--set", "num_markts=3"],                                   # a typo'd config key
    ["--judge", "llm"],                                          # an LLM judge without a model
    ["--episodes", "3", "--group-size", "2", "--fork-tick", "1"],  # forks need whole groups
    ["--ray-address", "auto"],                                   # an address without workers
])
def test_overwrite_with_a_refused_option_deletes_nothing(bad, tmp_path, capsys, monkeypatch):
    from rlaif_gym.cli import main

    for var in ("RLAIF_MODEL", "OPENAI_MODEL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "run"
    _collector(out).collect(2, seed=0)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code = main(["rollout", "--out", str(out), "--overwrite", "--no-progress", "--set", "num_ticks=3", *bad])
    assert code == 2, capsys.readouterr().err[-1500:]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "the refused command deleted the old run"


def test_overwrite_refuses_a_judge_link_before_deleting_anything(tmp_path, capsys):
    """Issue 25 row 13: with judge/ a symbolic link elsewhere, --overwrite deleted the run's files, then failed
    with a vague `error: OSError`."""
    from rlaif_gym.cli import main

    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    _collector(out).collect(2, seed=0)
    elsewhere.mkdir()
    (elsewhere / "verdicts.jsonl").write_text("someone else's\n")
    (out / "judge").symlink_to(elsewhere, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()}
    code = main(["rollout", "--out", str(out), "--overwrite", "--no-progress", "--set", "num_ticks=3",
                 "--episodes", "1"])
    err = capsys.readouterr().err
    assert code == 2, err[-1500:]
    assert "judge is a symbolic link" in err and "nothing was deleted" in err and "OSError" not in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()} == before
    assert (out / "judge").is_symlink() and (elsewhere / "verdicts.jsonl").read_text() == "someone else's\n"
