"""Fixtures of the eval tests: the scripted eval of the default set, run once."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def scripted_eval(tmp_path_factory):
    """`run_decision_eval` of the offline scripted model (greedy) on the default set, decisions-v1/held-out-a."""
    from rlaif_gym.agents import ScriptedLLMAgent
    from rlaif_gym.evals import decision_set, run_decision_eval

    return run_decision_eval(ScriptedLLMAgent(temperature=0.0), decision_set(), tmp_path_factory.mktemp("scripted"),
                             command=["test"])
