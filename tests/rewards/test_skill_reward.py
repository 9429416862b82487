"""The default (`skill`) reward: the trading part telescopes, form is bounded, risk is proportional.

And the `original` scheme still gives Babylon's composite, number for number.
"""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import rlaif_gym  # noqa: F401
from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.envs import RLAIFCore
from rlaif_gym.envs.evaluate import seed_keys
from rlaif_gym.rewards import (
    format_penalty,
    pnl_component,
    proportional_risk_component,
    risk_component,
    trading_component,
)
from rlaif_gym.rewards.composite import RewardFunction


def _random_reply(rng, view) -> str:
    """A random text action of every kind (trades, perps at up to 10x, social, junk)."""
    m = view.markets[int(rng.integers(len(view.markets)))].market_id
    ticker = view.perps[int(rng.integers(len(view.perps)))].ticker
    side = ["YES", "NO"][int(rng.integers(2))]
    actions = [
        {"type": "wait"},
        {"type": "buy_prediction", "market": m, "outcome": side,
         "amount": round(float(rng.uniform(1, 0.4 * view.cash + 2)), 2)},
        {"type": "sell_prediction", "market": m, "outcome": side, "shares": round(float(rng.uniform(1, 500)), 2)},
        {"type": "open_perp", "ticker": ticker, "side": ["LONG", "SHORT"][int(rng.integers(2))],
         "size": round(float(rng.uniform(10, 3 * view.cash + 20)), 2), "leverage": int(rng.integers(1, 13))},
        {"type": "close_perp", "ticker": ticker},
        {"type": "create_post", "content": f"{m} looks {side}"},
    ]
    kind = int(rng.integers(len(actions) + 1))
    if kind == len(actions):
        return "no action here"
    return f"<think>{m} and {ticker}; I pick at random.</think>{json.dumps(actions[kind])}"


@pytest.mark.parametrize("seed", range(6))
def test_text_trading_part_telescopes_to_final_equity(seed):
    """Σ coefficient x pnl over a random text episode = trading_return(final equity), within 1e-9."""
    env = gym.make("RLAIF-Text-v0", num_ticks=96).unwrapped
    fn = env.reward_function
    rng = np.random.default_rng(seed)
    env.reset(seed=100 + seed)
    trading, total, parts = 0.0, 0.0, 0.0
    done = False
    while not done:
        _, reward, terminated, truncated, info = env.step(_random_reply(rng, env.view))
        comps = info["reward_components"]
        trading += fn.coefficients["pnl"] * comps["pnl"]
        parts += sum(fn.coefficients[k] * v for k, v in comps.items())
        total += reward
        done = terminated or truncated
    expected = fn.trading_return(np.array([info["equity"]]), np.array([terminated]))[0]
    assert trading == pytest.approx(expected, abs=1e-9)
    assert trading == pytest.approx((info["equity"] - 10_000.0) / 10_000.0 - terminated, abs=1e-9)
    assert total == pytest.approx(parts, abs=1e-9)


def test_numeric_trading_part_telescopes_on_random_batches():
    """The same over 64 random numeric episodes stepped as one batch (the vector envs' core)."""
    cfg = RLAIFEnvConfig()
    core = RLAIFCore(cfg, num_worlds=64)
    fn = core.reward_fn
    core.reset(seed_keys(range(64)))
    rng = np.random.default_rng(0)
    trading = np.zeros(64)
    for _ in range(cfg.num_ticks):
        res = core.step(rng.integers(0, core.nvec, size=(64, 4)))
        trading += fn.coefficients["pnl"] * res.components["pnl"]
    final = res.outcome.equity_after
    np.testing.assert_allclose(trading, fn.trading_return(final, res.terminated), rtol=0, atol=1e-9)
    np.testing.assert_allclose(trading, (final - cfg.starting_cash) / cfg.starting_cash, rtol=0, atol=1e-9)


def test_bankruptcy_costs_one_more_and_is_the_worst_return():
    """All-in on the side that loses (read from the hidden truth): bankrupt, trading part = -1 - 1 + equity."""
    env = gym.make("RLAIF-Text-v0").unwrapped
    env.reset(seed=5)
    state = env.state
    slot = int(np.argmin(state.pm_resolve_tick[0]))
    losing = "NO" if state.pm_outcome[0, slot] == 1 else "YES"
    market = env.view.markets[slot].market_id
    reply = (f'<think>{market} trades at {100 * env.view.markets[slot].yes_price:.1f}¢, so I go all in on {losing}.'
             f'</think>{{"type": "buy_prediction", "market": "{market}", "outcome": "{losing}", "amount": 10000}}')
    total, trading, terminated, truncated = 0.0, 0.0, False, False
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = env.step(reply)
        reply = '<think>Nothing left to do, so I wait.</think>{"type": "wait"}'
        total += reward
        trading += env.reward_function.coefficients["pnl"] * info["reward_components"]["pnl"]
    assert terminated and info["equity"] < 0.01
    assert info["reward_components"]["pnl"] < -1.0  # the last step carries the -1
    assert trading == pytest.approx(-2.0 + info["equity"] / 10_000.0, abs=1e-9)
    # Worse than an episode that never trades and sends nothing but junk (the largest form penalty there is).
    env.reset(seed=5)
    junk, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step("junk")
        junk += reward
        done = terminated or truncated
    assert junk == pytest.approx(-0.125, abs=1e-9) and total < junk - 1.0


def test_format_is_a_penalty_and_form_is_bounded_per_episode():
    assert format_penalty(1.0) == 0.0 and format_penalty(-1.0) == -1.0 and format_penalty(0.7) == pytest.approx(-0.3)
    fn = RewardFunction.from_config(RLAIFEnvConfig(), None)
    # Over a whole episode, perfect reasoning is worth .25 x .15/.5 = 0.075 and unparseable replies cost .25 x .25/.5.
    assert fn.coefficients["reasoning"] * 168 == pytest.approx(0.075)
    assert fn.coefficients["format"] * 168 == pytest.approx(0.125)
    double = RewardFunction.from_config(RLAIFEnvConfig(form_scale=0.5), None)
    assert double.coefficients["format"] == pytest.approx(2 * fn.coefficients["format"])
    assert fn.coefficients["pnl"] == 1.0 and fn.coefficients["risk"] == 1.0
    # A clean reply earns nothing for its form.
    env = gym.make("RLAIF-Text-v0").unwrapped
    env.reset(seed=0)
    info = env.step('<think>Nothing to do, so I wait.</think>{"type": "wait"}')[4]
    assert info["reward_components"]["format"] == 0.0


def test_risk_grows_with_the_exposure_past_the_threshold():
    ones = np.ones(4, bool)
    # Equity 10,000; each action adds 1,000 USD; after it, exposure is 70 %, 85 %, 100 %, 150 % of equity.
    risk = proportional_risk_component(ones, np.array([0.7, 0.85, 1.0, 1.5]), np.full(4, 1000.0), np.zeros(4),
                                       np.full(4, 10_000.0), 10_000.0, 10.0, threshold=0.8, penalty=0.1)
    # Only the part above 80 % pays: 0, 500, 1,000 (capped by what the action added), 1,000 USD -> x 0.1 / 10,000.
    np.testing.assert_allclose(risk, [0.0, -0.005, -0.01, -0.01])
    # A perp's exposure is its notional: 1,000 USD margin at 5x adds 5,000.
    perp = proportional_risk_component(ones[:1], np.array([1.3]), np.array([1000.0]), np.array([5.0]),
                                       np.array([10_000.0]), 10_000.0, 10.0)
    np.testing.assert_allclose(perp, [-0.1 * 5000 / 10_000])
    # Asking for 20x under a 10x cap costs in proportion: -0.1 x (20 / 10 - 1).
    asked = proportional_risk_component(~ones[:1], np.array([0.0]), np.array([0.0]), np.array([20.0]),
                                        np.array([10_000.0]), 10_000.0, 10.0)
    np.testing.assert_allclose(asked, [-0.1])
    # The flat charge of the original scheme is the same for a 1-USD and a 10,000-USD buy.
    assert risk_component(ones[:2], np.array([0.9, 0.9]), np.zeros(2), 10.0).tolist() == [-0.5, -0.5]


def test_informed_sizing_costs_next_to_nothing_and_the_oracle_stays_on_top():
    """Risk is proportional: InformedAgent pays < 5 % of its PnL in risk; the oracle keeps > 50 % of its PnL.

    Equity values shares at what selling them now would fetch, while exposure counts them at the displayed
    price, so a position too big for its pool's depth (the oracle's) pays more risk per dollar of PnL than it
    did when equity marked them at the price too (it kept 84 % then, 55 % now on these seeds)."""
    from rlaif_gym.agents import InformedAgent, OracleAgent
    from rlaif_gym.envs import evaluate_policy

    cfg = RLAIFEnvConfig()
    seeds = list(range(500, 532))
    core = RLAIFCore(cfg, num_worlds=len(seeds))
    for cls, keep in ((InformedAgent, 0.95), (OracleAgent, 0.5)):
        stats = evaluate_policy(cls(core, seed=0), seeds, cfg, core=core)
        trading = stats.final_pnl.mean() / cfg.starting_cash
        assert stats.episode_return.mean() > keep * trading > 0, (cls.__name__, stats.episode_return.mean(), trading)


@pytest.mark.parametrize("seed", range(3))
def test_original_scheme_reproduces_babylons_composite(seed):
    """reward_scheme='original': clip(10 x pnl) + flat risk, normalised over the present weights, -1 on bankruptcy."""
    env = gym.make("RLAIF-Text-v0", reward_scheme="original", num_ticks=60).unwrapped
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    w = {"pnl": 0.5, "format": 0.25, "reasoning": 0.15, "risk": 0.5}
    for _ in range(60):
        _, reward, terminated, truncated, info = env.step(_random_reply(rng, env.view))
        c = info["reward_components"]
        assert c["pnl"] == pytest.approx(float(np.clip(10 * info["pnl_delta"] / 10_000, -1, 1)), abs=1e-12)
        assert c["risk"] in (0.0, -0.5) and -1.0 <= c["format"] <= 1.0
        expected = -1.0 if terminated else float(np.clip(sum(w[k] * c[k] for k in w) / 0.9, -1, 1))
        assert reward == pytest.approx(expected, abs=1e-12)
        assert -1.0 <= reward <= 1.0
        if terminated or truncated:
            break


def test_original_scheme_numbers_match_the_component_functions():
    pnl = np.array([-2000.0, -50.0, 0.0, 30.0, 5000.0])
    np.testing.assert_allclose(pnl_component(pnl, 10_000.0), [-1.0, -0.05, 0.0, 0.03, 1.0])
    np.testing.assert_allclose(trading_component(pnl, np.zeros(5, bool), 10_000.0), pnl / 10_000.0)
    np.testing.assert_allclose(trading_component(pnl[:1], np.ones(1, bool), 10_000.0), [-1.2])


def test_pnl_weight_override_scales_the_trading_part_and_zero_reports_it_only():
    env = gym.make("RLAIF-v0", reward_weights={"pnl": 1.0}).unwrapped
    assert env.reward_function.coefficients["pnl"] == 2.0  # twice the default row's .5
    env = gym.make("RLAIF-v0", reward_scheme="skill", reward_weights={"pnl": 0.0, "risk": 0.0}).unwrapped
    env.reset(seed=2)
    seen = []
    for _ in range(20):
        _, reward, _, _, info = env.step([1, 0, 4, 0])
        assert reward == 0.0
        seen.append(info["reward_components"]["pnl"])
    assert any(v != 0.0 for v in seen)


def test_scheme_defaults_and_bad_scheme():
    from rlaif_gym import ConfigError

    assert RewardFunction.from_config(RLAIFEnvConfig(), None).pnl_scale == 1.0
    assert RewardFunction.from_config(RLAIFEnvConfig(reward_scheme="original"), None).pnl_scale == 10.0
    assert RewardFunction.from_config(RLAIFEnvConfig(reward_scheme="original"), None).risk_penalty == 0.5
    with pytest.raises(ConfigError, match="reward_scheme"):
        RLAIFEnvConfig(reward_scheme="skil")


def test_combine_names_what_is_wrong_with_a_component():
    """An unknown name, a known component without a weight, and a non-finite value each get their own error."""
    fn = RewardFunction.from_config(RLAIFEnvConfig(), None)
    ok = {"pnl": np.array([0.01]), "risk": np.array([0.0])}
    assert fn.combine(ok, np.array([False])).shape == (1,)
    with pytest.raises(KeyError, match="unknown reward component 'bonus'"):
        fn.combine({**ok, "bonus": np.array([1.0])}, np.array([False]))
    unweighted = next(n for n in ("truth_mark", "behavior") if n not in fn.coefficients)
    with pytest.raises(KeyError, match=f"{unweighted}' has no weight"):
        fn.combine({**ok, unweighted: np.array([1.0])}, np.array([False]))
    with pytest.raises(ValueError, match="'pnl' is not finite"):
        fn.combine({**ok, "pnl": np.array([np.nan])}, np.array([False]))
