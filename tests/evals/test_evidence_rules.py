"""The evidence rules of `rlaif_gym.evals.baselines` at real decision points: which points a deceiver's post
touches, and that the calibrated rule counts such a post against its side where the naive rule counts it for it."""

from __future__ import annotations

import json

import pytest

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.envs.decisions import DECISION_WORLD, decision_points
from rlaif_gym.evals.baselines import baseline_reply, deceiver_on_market
from rlaif_gym.llm import FormatOnlyLLM
from rlaif_gym.sim import NpcBehaviour, npc_behaviours, npc_name


@pytest.fixture(scope="module")
def points():
    config = RLAIFEnvConfig.from_any({**DECISION_WORLD, "prompt_style": "compact"})
    return decision_points(range(60), config=config, resolves_within=4, horizon=4)


def _side(reply: str) -> str | None:
    try:
        return json.loads(reply)["outcome"]
    except (ValueError, KeyError, TypeError):
        return None  # the wait


def test_deceiver_on_market_flags_the_points_where_a_deceivers_post_names_the_bet(points):
    flagged = 0
    for point in points:
        env = point.env()
        bet = FormatOnlyLLM().bet(point.prompt)
        deceivers = {npc_name(k) for k, b in enumerate(npc_behaviours(env.params)) if b == NpcBehaviour.DECEIVER}
        expected = bet is not None and any(p.subject == bet[0] and p.source in deceivers
                                           for p in env.shown_view.posts)
        assert deceiver_on_market(point) is expected, point.seed
        flagged += expected
    assert 0 < flagged < len(points)  # the world's own draw has both kinds (about 22 % flagged)


def test_the_calibrated_rule_counts_a_lone_deceivers_post_against_its_side(points):
    """Where the deceiver's post is the only item naming the bet's market, the naive rule bets the post's side and
    the calibrated rule the other one."""
    checked = 0
    for point in points:
        if not deceiver_on_market(point):
            continue
        env = point.env()
        market = FormatOnlyLLM().bet(point.prompt)[0]
        view = env.shown_view
        items = [i for i in (*view.news, *view.tips, *view.posts) if i.subject == market]
        if len(items) != 1:
            continue
        said = "YES" if items[0].direction > 0 else "NO"
        assert _side(baseline_reply("informed", point)) == said
        assert _side(baseline_reply("calibrated", point)) == ("NO" if said == "YES" else "YES")
        checked += 1
    if not checked:
        pytest.skip("no point of these seeds has the deceiver's post as its market's only item")
