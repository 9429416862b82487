"""Decision points (issue 28, item 3): states where an open market resolves soon and the prompt names evidence
about it, found reproducibly from disjoint seed ranges, each rebuildable from its seed and trunk replies."""

from __future__ import annotations

import dataclasses
import re

import pytest

from rlaif_gym import ConfigError, RLAIFTextEnv
from rlaif_gym.encoding.prompt import render_prompt
from rlaif_gym.encoding.view import mirror_view
from rlaif_gym.envs.decisions import (
    DECISION_WORLD,
    HELD_OUT_SEEDS,
    TRAIN_SEEDS,
    decision_messages,
    decision_points,
    evidence_counts,
)
from rlaif_gym.llm import FormatOnlyLLM

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
    with pytest.raises(ConfigError, match=r"resolves_within must be an integer in \[1, "):
        decision_points([0], SHORT, resolves_within=0)
    with pytest.raises(ConfigError, match="leaves no tick"):
        decision_points([0], {"num_ticks": 3}, min_tick=2, horizon=2)


# -- issue 37 row D2: every argument checked as `reset` checks it (`rlaif_gym.envs.inputs`) ---------------------

BAD_SEEDS = [-1, None, 2**64 + 5, "7", True, 1.5]


@pytest.mark.parametrize("seed", BAD_SEEDS, ids=repr)
def test_a_bad_seed_is_a_config_error_naming_its_place(seed):
    """Was numpy's ValueError (-1), a TypeError (None), or accepted: 2**64+5, '7', True and 1.5 were cut to ints."""
    with pytest.raises(ConfigError, match=r"^decision_points seeds\[2\] must be an integer in \[0, 2\*\*63 - 1\]") \
            as err:
        decision_points([0, 1, seed], SHORT)
    assert f"got {seed!r}" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("seeds", [5, "7", b"7", {"seed": 1}], ids=repr)
def test_seeds_that_are_no_list_of_seeds_are_refused(seeds):
    with pytest.raises(ConfigError, match=r"^decision_points seeds must be a list or range of integer seeds"):
        decision_points(seeds, SHORT)


def test_a_seed_range_is_checked_at_its_ends_without_being_read():
    with pytest.raises(ConfigError, match=r"decision_points seeds\[0\] must be .* got -1"):
        decision_points(range(-1, 5), SHORT)
    with pytest.raises(ConfigError, match=r"decision_points seeds\[3\] must be .* got -1"):
        decision_points(range(2, -2, -1), SHORT)
    assert decision_points(range(0), SHORT) == []


@pytest.mark.parametrize(("option", "value"), [
    ("per_seed", 1.5), ("per_seed", 0), ("per_seed", -1), ("per_seed", True), ("per_seed", "2"),
    ("resolves_within", 0), ("resolves_within", 2.0), ("resolves_within", "3"), ("min_evidence", -1),
    ("min_evidence", None), ("min_tick", -2), ("min_tick", 1.5), ("horizon", 0), ("horizon", False),
    ("per_seed", 10**7), ("max_ticks_searched", 0), ("max_ticks_searched", 2.5),
])
def test_a_bad_option_is_a_config_error_naming_it(option, value):
    """per_seed=1.5 and True reached numpy (TypeError); resolves_within='3' a comparison (TypeError)."""
    with pytest.raises(ConfigError, match=rf"^decision_points {option} must be an integer in \[") as err:
        decision_points([0], SHORT, **{option: value})
    assert f"got {value!r}" in str(err.value)


def test_a_bad_config_deadline_or_cancel_is_named():
    with pytest.raises(ConfigError, match=r"^decision_points config must be an object"):
        decision_points([0], 5)
    with pytest.raises(ConfigError, match=r"^decision_points config: .*num_tiks"):
        decision_points([0], {"num_tiks": 5})
    with pytest.raises(ConfigError, match=r"^decision_points deadline must be a time.monotonic\(\) instant"):
        decision_points([0], SHORT, deadline="soon")
    with pytest.raises(ConfigError, match=r"^decision_points cancel must be a threading.Event"):
        decision_points([0], SHORT, cancel=True)


def test_whole_numbers_of_any_integer_type_find_the_same_points():
    """The checks refuse what is not a whole number; they change no point (numpy seeds read as before)."""
    import numpy as np

    ref = decision_points([30, 31], SHORT, per_seed=2, min_evidence=1)
    alt = decision_points(np.array([30, 31]), SHORT, per_seed=np.int64(2), min_evidence=np.int32(1))
    assert [(p.seed, p.tick, p.markets) for p in ref] == [(p.seed, p.tick, p.markets) for p in alt]
    assert all(type(p.seed) is int for p in alt)


# -- issue 37 row D1: a search's work is bounded (ticks, deadline, cancel) ----------------------------------------

NEVER = {"min_evidence": 10**6}  # no prompt names a market a million times: no tick qualifies


def test_a_search_stops_at_its_tick_cap(ticks_played):
    from rlaif_gym.errors import SearchLimitError

    played = ticks_played
    cfg = {**SHORT, "num_ticks": 400}
    with pytest.raises(SearchLimitError, match="played its cap of 200 ticks") as err:  # seed 3 starts at 91
        decision_points([3], cfg, min_tick=0, max_ticks_searched=200, **NEVER)
    assert (err.value.reason, err.value.ticks_searched, played[0]) == ("ticks", 200, 200)
    played[0] = 0
    with pytest.raises(SearchLimitError, match=r"starts at tick \d+ .* past the 50 ticks it may play") as err:
        decision_points([3], {**SHORT, "num_ticks": 10**6}, max_ticks_searched=50, **NEVER)
    assert (err.value.reason, err.value.ticks_searched, played[0]) == ("ticks", 0, 0)  # refused before a tick
    assert decision_points([3], cfg, min_tick=0, **NEVER) == [] and played[0] == 400  # no cap: the whole episode


def test_a_search_stops_at_its_deadline_and_when_cancelled(monkeypatch, ticks_played):
    import threading
    import time

    from rlaif_gym.errors import SearchCancelled, SearchLimitError

    played = ticks_played
    cfg = {**SHORT, "num_ticks": 10**6}
    with pytest.raises(SearchLimitError, match="ran past its deadline") as err:
        decision_points([3], cfg, deadline=time.monotonic() - 1, **NEVER)
    assert (err.value.reason, err.value.ticks_searched, played[0]) == ("deadline", 0, 0)
    cancel = threading.Event()
    step = RLAIFTextEnv.step

    def cancelled_at_tick_20(self, action):
        if played[0] == 19:
            cancel.set()  # as the server does from another thread when the client leaves
        return step(self, action)

    monkeypatch.setattr(RLAIFTextEnv, "step", cancelled_at_tick_20)
    with pytest.raises(SearchCancelled, match="cancelled after 20 ticks") as err:
        decision_points([3], cfg, cancel=cancel, **NEVER)
    assert (err.value.reason, err.value.ticks_searched, played[0]) == ("cancelled", 20, 20)


def test_bounds_that_are_not_reached_change_no_point():
    import threading
    import time

    ref = decision_points(range(30, 36), SHORT, per_seed=2)
    bounded = decision_points(range(30, 36), SHORT, per_seed=2, max_ticks_searched=10**6,
                              deadline=time.monotonic() + 3600, cancel=threading.Event())
    assert [(p.seed, p.tick, p.markets, p.prompt) for p in ref] == [(p.seed, p.tick, p.markets, p.prompt)
                                                                   for p in bounded]


# -- the YES/NO mirror of a point (the TRL example's `--mirror-share`) ----------------------------------------------

_SIDED = re.compile(r'(market-\d+)(?: is expected to resolve | is going | resolves )(YES|NO)')
_PRICE = re.compile(r"(market-\d+)(?: \"[^\"]*\")?: YES (\d+\.\d)¢")


@pytest.mark.parametrize("style", ["compact", "full"])
def test_a_points_mirror_swaps_every_side_and_nothing_else(style):
    world = {**DECISION_WORLD, "prompt_style": style}
    points = decision_points(range(40, 52), world, resolves_within=4, horizon=4)
    assert len(points) >= 10
    swap = {"YES": "NO", "NO": "YES"}
    held = 0
    for p in points:
        mirror = p.mirrored_prompt
        assert mirror != p.prompt
        # every feed line about a market points the other way, in the same order
        assert [(m, swap[s]) for m, s in _SIDED.findall(p.prompt)] == _SIDED.findall(mirror)
        # every YES price p is 1 - p
        for (m, a), (n, b) in zip(_PRICE.findall(p.prompt), _PRICE.findall(mirror), strict=True):
            assert m == n and abs(float(a) + float(b) - 100.0) <= 0.1 + 1e-9
        held += "You hold" in p.prompt
        assert mirror.count(" YES (cost") == p.prompt.count(" NO (cost")
        # cash, equity and the perps are the same lines; the format-only teacher bets the same market and amount
        for section in ("## Perpetual futures", "## Portfolio"):
            assert mirror.split(section)[1].split("##")[0] == p.prompt.split(section)[1].split("##")[0]
        assert FormatOnlyLLM().bet(mirror) == FormatOnlyLLM().bet(p.prompt) is not None
        # the mirror of the mirror is the point's own prompt
        view = mirror_view(mirror_view(p.env().view))
        assert render_prompt(view, p.prompt.split("## Last action\n")[1], style) == p.prompt
        assert decision_messages(p, mirrored=True)[1]["content"] == mirror
    assert held  # some points hold shares, so the holdings' swap is exercised


def test_a_point_whose_prompt_is_not_its_states_has_no_mirror():
    point = decision_points(range(40, 42), {**DECISION_WORLD, "prompt_style": "compact"}, resolves_within=4)[0]
    forged = dataclasses.replace(point, prompt=point.prompt.replace("## News", "## News\n- [t1] forged"))
    with pytest.raises(ValueError, match="not its state's rendering"):
        _ = forged.mirrored_prompt
