"""Fixtures of the eval tests: the scripted eval of the default set, run once, and the rollout tests' fake server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # `import fake_server`: one fake server for all
sys.path.insert(0, str(Path(__file__).parents[1] / "judge"))  # `import judge_server`: the fake judge

from fake_server import fake_server  # noqa: F401  (the fixture, offered to the tests here)


@pytest.fixture(scope="session")
def scripted_eval(tmp_path_factory):
    """`run_decision_eval` of the offline scripted model (greedy) on the default set, decisions-v1/held-out-a."""
    from rlaif_gym.agents import ScriptedLLMAgent
    from rlaif_gym.evals import decision_set, run_decision_eval

    return run_decision_eval(ScriptedLLMAgent(temperature=0.0), decision_set(), tmp_path_factory.mktemp("scripted"),
                             command=["test"])
