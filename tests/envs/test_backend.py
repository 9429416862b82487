"""The compiled backend gives the same episodes as the numpy reference (within 1e-9), through the env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlaif_gym import ConfigError


def test_numba_backend_env_matches_numpy_backend():
    pytest.importorskip("numba")
    a = gym.make("RLAIF-v0", backend="numpy")
    b = gym.make("RLAIF-v0", backend="numba")
    oa, _ = a.reset(seed=3)
    ob, _ = b.reset(seed=3)
    assert np.array_equal(oa, ob)
    for t, act in enumerate(np.random.default_rng(0).integers(0, [6, 4, 5, 2], size=(168, 4))):
        xa, xb = a.step(act), b.step(act)
        np.testing.assert_allclose(xa[0], xb[0], rtol=1e-6, atol=1e-6, err_msg=f"obs at step {t}")
        assert xa[1] == pytest.approx(xb[1], abs=1e-9), t
        assert xa[2:4] == xb[2:4], t
        assert xa[4]["feedback"] == xb[4]["feedback"], t


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="backend"):
        gym.make("RLAIF-v0", backend="cuda")
