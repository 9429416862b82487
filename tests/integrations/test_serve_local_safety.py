"""`serve-local` keeps the promises `rollout` makes (issue 15 items 3 and 10, issue 16 item 1): `--overwrite`
deletes only what a run wrote, and only once its options are known good; a run with failed episodes
exits non-zero. The llama.cpp server is replaced by stand-ins here (test_real_llm.py runs the real one)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

import rlaif_gym.integrations.local_llm as local_llm
from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.cli import main
from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import CollectionSummary, RolloutCollector
from rlaif_gym.storage import JsonlStore


@pytest.fixture
def old_run(tmp_path, monkeypatch):
    """A run directory that also holds a user's file, with the local-llm extra reported as installed."""
    monkeypatch.setattr(local_llm, "missing_local_llm", lambda: [])
    out = tmp_path / "run"
    RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(out), env_config={"num_ticks": 2}, num_envs=1).collect(1)
    (out / "src").mkdir()
    (out / "src" / "main.py").write_text("print('mine')\n")
    return out


class NoServer:
    """Stands in for LocalLLMServer: records the model it was given; starting it fails, so a test stops there."""

    pid = None
    n_threads, n_threads_batch = 1, 2
    started_with: ClassVar[list[Path]] = []

    def __init__(self, model=None, **kwargs):
        self.model_file = Path(model)
        self.started_with.append(self.model_file)

    def start(self):
        raise local_llm.LocalServerError("no server in this test")

    def stop(self, **kwargs):
        pass


@pytest.fixture
def no_server(monkeypatch) -> list[Path]:
    """LocalLLMServer replaced by `NoServer`; returns the models it was started with."""
    monkeypatch.setattr(NoServer, "started_with", [])
    monkeypatch.setattr(local_llm, "LocalLLMServer", NoServer)
    return NoServer.started_with


def test_overwrite_with_a_bad_config_deletes_nothing(old_run):
    before = sorted(p.relative_to(old_run) for p in old_run.rglob("*"))
    with pytest.raises(ConfigError, match="num_markets"):
        local_llm.serve_local(old_run, overwrite=True, install=False, env_config={"num_markts": 3})
    assert sorted(p.relative_to(old_run) for p in old_run.rglob("*")) == before


def test_overwrite_deletes_only_the_run_files(old_run, monkeypatch, no_server):
    monkeypatch.setattr(local_llm, "fast_model_path", lambda **kwargs: old_run.parent / "model.Q8_0.gguf")
    with pytest.raises(local_llm.LocalServerError):
        local_llm.serve_local(old_run, overwrite=True, install=False, log=lambda line: None)
    assert (old_run / "src" / "main.py").read_text() == "print('mine')\n"
    assert not (old_run / "run.json").exists() and not list(old_run.glob("trajectories-*.jsonl"))


def test_an_unconvertible_model_falls_back_to_the_shipped_file(tmp_path, monkeypatch, no_server):
    def unwritable(**kwargs):
        raise local_llm.LocalServerError("cannot create the model cache /ro; set RLAIF_GYM_CACHE to a writable folder")

    shipped = tmp_path / "shipped.Q4_1.gguf"
    monkeypatch.setattr(local_llm, "fast_model_path", unwritable)
    monkeypatch.setattr(local_llm, "model_path", lambda: shipped)
    lines: list[str] = []
    with pytest.raises(local_llm.LocalServerError, match="no server in this test"):
        local_llm.serve_local(tmp_path / "run", install=False, log=lines.append)
    assert no_server == [shipped]
    assert any("shipped Q4_1" in line and "RLAIF_GYM_CACHE" in line for line in lines)


def test_serve_local_with_failed_episodes_exits_1(tmp_path, monkeypatch, capsys):
    def failed_run(out, **kwargs):
        return CollectionSummary(planned=2, completed=1, failed=1, errors=["run-s1-m0: tick 0: the server died"])

    monkeypatch.setattr(local_llm, "serve_local", failed_run)
    code = main(["serve-local", "--out", str(tmp_path / "run"), "--no-install", "--no-progress"])
    assert code == 1
    assert "the server died" in capsys.readouterr().out


@pytest.mark.parametrize(("flag", "expected"), [([], "converted Q4_0"), (["--quant", "Q8_0"], "converted Q8_0"),
                                                (["--quant", "Q4_1"], "shipped")])
def test_quant_picks_the_served_weights(tmp_path, monkeypatch, capsys, no_server, flag, expected):
    """`--quant` from the command line down to the file the server is started with."""
    monkeypatch.setattr(local_llm, "missing_local_llm", lambda: [])
    monkeypatch.setattr(local_llm, "build_hint", lambda: None)
    monkeypatch.setattr(local_llm, "fast_model_path", lambda quant, **kwargs: tmp_path / f"converted {quant}")
    monkeypatch.setattr(local_llm, "model_path", lambda: tmp_path / "shipped")
    code = main(["serve-local", "--out", str(tmp_path / "run"), "--no-install", "--no-progress", *flag])
    assert code != 0 and [p.name for p in no_server] == [expected]
    assert main(["serve-local", "--out", str(tmp_path / "run"), "--quant", "Q3_K"]) == 2
    assert "Q3_K" in capsys.readouterr().err


def test_serve_local_prints_the_build_hint(tmp_path, monkeypatch, no_server):
    monkeypatch.setattr(local_llm, "missing_local_llm", lambda: [])
    monkeypatch.setattr(local_llm, "build_hint", lambda: "this llama-cpp-python was compiled without AVX512")
    monkeypatch.setattr(local_llm, "fast_model_path", lambda **kwargs: tmp_path / "m.gguf")
    lines: list[str] = []
    with pytest.raises(local_llm.LocalServerError):
        local_llm.serve_local(tmp_path / "run", install=False, log=lines.append)
    assert lines[0] == "this llama-cpp-python was compiled without AVX512"


def test_a_bad_quant_fails_before_anything_is_installed(tmp_path, monkeypatch):
    installs = []
    monkeypatch.setattr(local_llm, "missing_local_llm", lambda: ["llama-cpp-python[server]==0.3.36"])
    monkeypatch.setattr(local_llm, "install_local_llm", lambda **kwargs: installs.append(kwargs))
    with pytest.raises(ConfigError, match="quant must be one of Q4_0, Q8_0, IQ4_NL, Q4_1, got 'Q3_K'"):
        local_llm.serve_local(tmp_path / "run", quant="Q3_K", log=lambda line: None)
    assert installs == [] and not (tmp_path / "run").exists()


def test_the_cli_offers_exactly_the_model_formats():
    from rlaif_gym.cli import ModelFormat

    assert tuple(m.value for m in ModelFormat) == local_llm.MODEL_FORMATS
    assert ModelFormat.Q4_0.value == local_llm.FAST_QUANT, "the CLI's default is the module's"
