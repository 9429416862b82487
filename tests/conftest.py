"""Shared fixtures. Every test runs offline on the embedded defaults.

`tests/support/` holds what several test folders share: the fake OpenAI-compatible server (`fake_server`, whose
fixture is offered to every test here), the fake judge server (`judge_server`), the checks of a run's files
(`rollout_checks`) and the frozen numpy engine the world's rules are held to (`engine_oracle`); it is put on
`sys.path` once, here, so a test module imports them by name.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import pytest

import rlaif_gym  # noqa: F401  (registers RLAIF-v0)

sys.path.insert(0, str(Path(__file__).parent / "support"))

from fake_server import fake_server  # noqa: F401  (the fixture, offered to every test)


@pytest.fixture
def env():
    e = gym.make("RLAIF-v0")
    yield e
    e.close()


@pytest.fixture(scope="session")
def singles(tmp_path_factory):
    """A small scripted run written by the CLI: 2 episodes of 3 ticks in groups of 1 (the default --group-size)."""
    from rlaif_gym.cli import main

    out = tmp_path_factory.mktemp("cli-run") / "singles"
    assert main(["rollout", "--episodes", "2", "--num-envs", "2", "--out", str(out), "--no-progress",
                 "--set", "num_ticks=3"]) == 0
    return out


def pytest_sessionfinish(session, exitstatus):
    """Close the two /dev/null files llama_cpp._utils opens at import and never closes.

    Otherwise the interpreter reports them as unclosed (two ResourceWarnings) after pytest's
    summary, at the very end of the CI log. By now every llama_cpp object of the tests is closed.
    """
    import sys

    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        handle = getattr(utils, name, None)
        if handle is not None and not handle.closed:
            handle.close()


@pytest.fixture
def ticks_played(monkeypatch):
    """A one-item list counting the ticks every text env plays from now on (`RLAIFTextEnv.step` calls, from any
    thread: a decision search, a server's sessions)."""
    from rlaif_gym.envs.text_env import RLAIFTextEnv

    played = [0]
    step = RLAIFTextEnv.step

    def counted(self, action):
        played[0] += 1
        return step(self, action)

    monkeypatch.setattr(RLAIFTextEnv, "step", counted)
    return played
