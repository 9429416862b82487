"""Shared fixtures. Every test runs offline on the embedded defaults."""

from __future__ import annotations

import gymnasium as gym
import pytest

import rlaif_gym  # noqa: F401  (registers RLAIF-v0)


@pytest.fixture
def env():
    e = gym.make("RLAIF-v0")
    yield e
    e.close()
