"""Decision points (issue 28, item 3): states where an open market resolves soon and the prompt names evidence
about it, found reproducibly from disjoint seed ranges, each rebuildable from its seed and trunk replies."""

from __future__ import annotations

import pytest

from rlaif_gym import ConfigError, RLAIFTextEnv
from rlaif_gym.envs.decisions import HELD_OUT_SEEDS, TRAIN_SEEDS, decision_points, evidence_counts

SHORT = {"num_ticks": 48, "num_markets": 2, "market_duration_min": 12, "market_duration_max": 36}


def test_every_point_has_a_market_that_resolves_soon_and_that_its_prompt_talks_about():
    points = decision_points(range(10, 22), SHORT, resolves_within=8, min_evidence=2, per_seed=2, horizon=2)
    assert len(points) >= 12
    for p in points:
        env = p.env()
        assert env.prompt == p.prompt and p.tick == int(env.state.tick[0]) and 2 <= p.tick <= 48 - 2
        counts = evidence_counts(env)
        for market, resolves_in, evidence in p.markets:
            view = env.view.market(market)
            assert view is not None and view.resolves_in == resolves_in and 0 < resolves_in <= 8
            assert counts[market] == evidence >= 2
            assert market in p.prompt
        assert "(none yet)" not in p.prompt.split("## News")[1].split("##")[0]  # the feed is not empty


def test_points_are_reproducible_and_rebuild_from_their_seed_and_replies():
    a = decision_points(range(30, 36), SHORT)
    b = decision_points(range(30, 36), SHORT)
    assert [(p.seed, p.tick, p.markets, p.prompt) for p in a] == [(p.seed, p.tick, p.markets, p.prompt) for p in b]
    for p in a:
        env = RLAIFTextEnv(SHORT)
        prompt, _ = env.reset(seed=p.seed)
        for reply in p.replies:
            prompt, *_ = env.step(reply)
        assert prompt == p.prompt and len(p.replies) == p.tick


def test_the_train_and_held_out_ranges_are_disjoint():
    first, second = HELD_OUT_SEEDS
    assert TRAIN_SEEDS.stop <= first.start and first.stop <= second.start


def test_bad_arguments_are_refused_with_the_reason():
    with pytest.raises(ConfigError, match="resolves_within >= 1"):
        decision_points([0], SHORT, resolves_within=0)
    with pytest.raises(ConfigError, match="leaves no tick"):
        decision_points([0], {"num_ticks": 3}, min_tick=2, horizon=2)
