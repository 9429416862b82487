"""The compiled observation encoder (`backend="numba"`) against the numpy reference.

Whole episodes of random numeric actions (buys, sells, perps with leverage, joins, waits) over several
world sizes, including 16 markets (numpy's pairwise summation kicks in from 8 terms): at every tick
both encoders see the same state and must agree to 1e-6 (tanh and log may differ in the last bit),
stay inside the declared bounds and have the same dtype and shape.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.encoding import fast as encoding_fast
from rlaif_gym.encoding.observation import encode_observations
from rlaif_gym.envs.core import RLAIFCore
from rlaif_gym.envs.evaluate import seed_keys

pytestmark = pytest.mark.skipif(not encoding_fast.available(), reason='numba is not installed: pip install '
                                '"rlaif-gym[fast]"')


@pytest.mark.parametrize("sizes", [{}, {"num_markets": 16, "num_perps": 5, "num_groups": 1},
                                   {"num_markets": 1, "num_perps": 1, "num_npcs": 3}])
def test_compiled_encoder_matches_reference_over_random_episodes(sizes):
    config = RLAIFEnvConfig(num_ticks=60, **sizes)
    core = RLAIFCore(config, num_worlds=48)
    core.reset(seed_keys(range(100, 148)))
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(config.num_ticks):
        ref = encode_observations(core.state, core.params, core.layout)
        got = encoding_fast.encode_observations_fast(core.state, core.params, core.layout)
        assert got.dtype == np.float32 and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
        assert np.all(got >= core.layout.low) and np.all(got <= core.layout.high)
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - ref))))
        actions = np.stack([rng.integers(0, n, core.num_worlds) for n in core.nvec], axis=1)
        actions[rng.random(core.num_worlds) < 0.3, 0] = 0  # some waits, so positions live a while
        core.step(actions)
    # Not a tautology: the states moved (prices, holdings, positions) while the encoders agreed.
    assert np.ptp(ref[:, 0]) > 0 and worst < 1e-6


def test_numba_backend_core_uses_the_compiled_encoder_and_agrees_with_numpy():
    cores = {b: RLAIFCore(RLAIFEnvConfig(backend=b), num_worlds=8) for b in ("numpy", "numba")}
    first = {b: c.reset(seed_keys(range(8))) for b, c in cores.items()}
    assert cores["numba"]._encode is encoding_fast.encode_observations_fast
    np.testing.assert_allclose(first["numba"], first["numpy"], rtol=1e-6, atol=1e-6)
    rng = np.random.default_rng(3)
    for _ in range(40):
        actions = np.stack([rng.integers(0, n, 8) for n in cores["numpy"].nvec], axis=1)
        obs = {b: c.step(actions).observation for b, c in cores.items()}
        np.testing.assert_allclose(obs["numba"], obs["numpy"], rtol=1e-6, atol=1e-6)
