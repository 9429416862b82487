"""Decision points credited at the outcome, and the format-only teacher (issue 38, items 1 and 3).

* `DecisionPoint.resolution_horizon` reaches the resolution of every market open at the point: a bet played
  that long is paid at the drawn outcome, so a bet on the outcome's side gains over a wait and the other side
  loses, at every point (tests/rewards/test_truth_mark_horizon.py checks that the mark no longer matters there);
* `FormatOnlyLLM` writes canonical JSON-only bets whose market and size do not depend on the side, and whose
  side is a coin flip: across seeds both sides come, and the side agrees with the feed no more than chance.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.encoding.reply import parse_reply
from rlaif_gym.envs.decisions import DECISION_WORLD, WAIT_REPLY, decision_points
from rlaif_gym.llm import FormatOnlyLLM, ScriptedLLM, bet_reply


@pytest.fixture(scope="module")
def points():
    return decision_points(range(700_000, 700_040), RLAIFEnvConfig.from_any(DECISION_WORLD), resolves_within=4,
                           horizon=4)


def _return(point, reply: str, ticks: int) -> float:
    env = point.env()
    total = 0.0
    for t in range(ticks):
        total += env.step(reply if t == 0 else WAIT_REPLY)[1]
    return total


def _outcome_bets(point, teacher: FormatOnlyLLM) -> tuple[str, str, str]:
    market, amount = teacher.bet(point.prompt)
    env = point.env()
    won = "YES" if int(env.state.pm_outcome[0, env.view.market(market).slot]) == 1 else "NO"
    lost = "NO" if won == "YES" else "YES"
    return market, bet_reply(market, won, amount), bet_reply(market, lost, amount)


def test_the_resolution_horizon_pays_every_bet_at_the_drawn_outcome(points):
    teacher = FormatOnlyLLM()
    assert len(points) >= 30
    still_open_at_one = 0
    for point in points:
        h = point.resolution_horizon
        assert 1 <= h <= 4
        market, right, wrong = _outcome_bets(point, teacher)
        wait = _return(point, WAIT_REPLY, h)
        assert _return(point, right, h) > wait > _return(point, wrong, h), point.seed
        env = point.env()
        open_ids = {m.market_id for m in env.view.markets}
        for _ in range(h):
            env.step(WAIT_REPLY)
        assert not open_ids & {m.market_id for m in env.view.markets}  # every market open at the point resolved
        still_open_at_one += point.env().view.market(market).resolves_in > 1
    assert still_open_at_one >= 10  # the horizon matters: many bets would still be open after one tick


def test_the_format_only_teacher_bets_in_form_and_draws_the_side(points):
    teacher = FormatOnlyLLM(fraction=0.05)
    scripted = ScriptedLLM()
    sides, agree = [], []
    for k, point in enumerate(points):
        reply = teacher.decide(point.prompt, np.random.default_rng(k))
        parsed = parse_reply(reply, think_required=False)
        assert not parsed.errors and parsed.layout == "json" and parsed.reasoning == ""
        action = json.loads(reply)
        market, amount = teacher.bet(point.prompt)
        assert (action["type"], action["market"], action["amount"]) == ("buy_prediction", market, amount)
        assert market == point.market  # the market the feed names most
        cash = float(point.env().view.cash)
        assert amount == pytest.approx(0.05 * cash, abs=0.01)
        # the same prompt with another coin: same market and size, the side free
        other = json.loads(teacher.decide(point.prompt, np.random.default_rng(10_000 + k)))
        assert (other["market"], other["amount"]) == (market, amount)
        sides.append(action["outcome"])
        _, informed = scripted.decide(point.prompt)
        if informed.get("type") == "buy_prediction" and informed["market"] == market:
            agree.append(informed["outcome"] == action["outcome"])
    assert 0.25 < sides.count("YES") / len(sides) < 0.75
    assert len(agree) >= 10 and sum(agree) / len(agree) < 0.8  # no more in line with the evidence than chance
    # a bare JSON action is a format error where <think> is required, and canonical where it is optional
    assert parse_reply(bet_reply("market-1", "YES", 10.0)).errors
    assert not parse_reply(bet_reply("market-1", "YES", 10.0), think_required=False).errors


def test_the_format_only_teacher_waits_only_with_nothing_to_bet_on():
    teacher = FormatOnlyLLM()
    assert json.loads(teacher.decide("## Prediction markets\n\n## Portfolio\nCash $100.00 | Equity $100.00",
                                     np.random.default_rng(0))) == {"type": "wait"}
    assert teacher.bet('- market-3: YES 50.0¢, +0.0¢ last hour, resolves in 2h.\nCash $10.00 | Equity $9.00') is None
    with pytest.raises(ValueError, match="fraction"):
        FormatOnlyLLM(fraction=0.0)


def test_the_format_only_teacher_answers_chat_messages_with_the_calls_seed(points):
    import asyncio

    from rlaif_gym.llm import SamplingParams

    teacher = FormatOnlyLLM()
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": points[0].prompt}]
    sides = set()
    for seed in range(8):
        done = asyncio.run(teacher.complete(messages, SamplingParams(seed=seed)))
        assert done.text == teacher.decide(points[0].prompt, np.random.default_rng(seed))
        assert done.model == "format-only-v1" and done.completion_tokens == len(done.text.split())
        sides.add(json.loads(done.text)["outcome"])
    assert sides == {"YES", "NO"}
