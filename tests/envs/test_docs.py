"""The env's class docstring is its manual: its example must run."""

from __future__ import annotations

import doctest

import rlaif_gym.envs.rlaif_env as rlaif_env


def test_rlaif_env_docstring_example_runs():
    result = doctest.testmod(rlaif_env, verbose=False)
    assert result.attempted >= 4 and result.failed == 0
