"""The truth mark over a horizon that reaches the market's resolution pays the drawn outcome (docs/reward.md, "Why p*
at horizon 1 pays what the prompt cannot know"; examples/decision_study.py measures it on 2 x 200 points).

From a decision point of DECISION_WORLD (its market resolves within 4 ticks), a bet then clean waits up to 4 ticks
has the same return under `reward_mark="truth"` as under the default market mark: every position it opened has
resolved, so the potential it adds is 0 again and the sum is the market return, which pays the drawn outcome. At
horizon 1 the two differ where the market resolves later: there the truth mark pays p*.
"""

from __future__ import annotations

import json

import pytest

from rlaif_gym import RLAIFEnvConfig, RLAIFTextEnv
from rlaif_gym.envs.decisions import DECISION_WORLD, TRAIN_SEEDS, WAIT_REPLY, DecisionPoint, decision_points

TRUTH = RLAIFEnvConfig.from_any(DECISION_WORLD)
MARKET = RLAIFEnvConfig.from_any({**DECISION_WORLD, "reward_mark": "market"})
SEEDS = range(TRAIN_SEEDS.start + 700, TRAIN_SEEDS.start + 706)


def _env(point: DecisionPoint, config: RLAIFEnvConfig) -> RLAIFTextEnv:
    """The point's state under `config`, rebuilt from its seed and trunk replies (public API only)."""
    env = RLAIFTextEnv(config)
    prompt, _ = env.reset(seed=point.seed)
    for reply in point.replies:
        prompt, *_ = env.step(reply)
    assert prompt == point.prompt
    return env


def _return(point: DecisionPoint, config: RLAIFEnvConfig, reply: str, ticks: int) -> float:
    env = _env(point, config)
    total = 0.0
    for i in range(ticks):
        _, reward, terminated, truncated, _ = env.step(reply if i == 0 else WAIT_REPLY)
        total += reward
        assert i == ticks - 1 or not (terminated or truncated)  # a point leaves at least `ticks` ticks
    return total


def _bet(point: DecisionPoint, side: str) -> str:
    cash = point.env().view.cash
    action = {"type": "buy_prediction", "market": point.market, "outcome": side, "amount": round(0.05 * cash, 2)}
    return f"<think>I put 5% of my cash on {side} in {point.market}.</think>\n{json.dumps(action)}"


@pytest.fixture(scope="module")
def points() -> list[DecisionPoint]:
    found = decision_points(SEEDS, TRUTH, resolves_within=4, horizon=4)
    assert len(found) >= 4
    assert any(p.markets[0][1] > 1 for p in found), "no point's market resolves after the reply's tick"
    return found


def test_over_a_horizon_that_reaches_resolution_the_truth_mark_pays_the_drawn_outcome(points):
    for point in points:
        state = point.env().state
        slot = point.env().view.market(point.market).slot
        won = "YES" if int(state.pm_outcome[0, slot]) == 1 else "NO"
        lost = "NO" if won == "YES" else "YES"
        gains = {}
        for side in (won, lost):
            truth = _return(point, TRUTH, _bet(point, side), 4) - _return(point, TRUTH, WAIT_REPLY, 4)
            market = _return(point, MARKET, _bet(point, side), 4) - _return(point, MARKET, WAIT_REPLY, 4)
            assert truth == pytest.approx(market, abs=1e-9), (point.seed, side)
            gains[side] = market
        # non-trivial bets: the winner's shares pay 1 USD each, the loser loses its 5 % stake (over 1e-3 of cash)
        assert gains[won] > 1e-3 and gains[lost] < -0.04, (point.seed, gains)


def test_at_horizon_1_the_marks_differ_where_the_market_resolves_later(points):
    later = [p for p in points if p.markets[0][1] > 1]
    for point in later:
        bet = _bet(point, "YES")
        truth = _return(point, TRUTH, bet, 1) - _return(point, TRUTH, WAIT_REPLY, 1)
        market = _return(point, MARKET, bet, 1) - _return(point, MARKET, WAIT_REPLY, 1)
        assert abs(truth - market) > 1e-4, point.seed  # the truth mark credits p* before the market resolves
