"""The original's quality heuristics (`rlaif_gym.babylon.quality`), pinned by hand-computed examples.

The heuristics: docs/babylon.md ("The original's quality heuristics").

Each expected value is worked out in the comment beside its assertion, from the formula in the
function's docstring. The three defect fixes (word boundaries, the action's side, the reachable
-0.5 XML tier) each have tests that show where the original would have answered differently.
"""

from __future__ import annotations

import math
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlaif_gym import babylon
from rlaif_gym.babylon import format_validator, keywords, quality, tick_quality
from rlaif_gym.babylon.quality import (
    REQUIRED_ACTION_FIELDS,
    TICK_QUALITY_WEIGHTS,
    VALID_ACTION_TYPES,
    DifficultyTick,
    FormatReport,
    QualityScore,
    archetype_quality_bonus,
    assess_trajectory_difficulty,
    calculate_detailed_tick_quality,
    calculate_tick_quality_score,
    calculate_trajectory_quality_score,
    check_reasoning_action_alignment,
    check_reasoning_coherence,
    combined_format_score,
    execution_score,
    extract_action_json,
    length_penalties,
    quality_total,
    score_action_json,
    score_length,
    score_reasoning_quality,
    score_response,
    validate_response_format,
    validate_think_tags,
    validate_xml_structure,
)

approx = pytest.approx
VALID_XML = '<decisions><decision ticker="BTC" amount="5"/></decisions>'


def think(n: int, char: str = "a") -> str:
    """A reply whose think block holds exactly `n` characters."""
    return f"<think>{char * n}</think>"


# ---------------------------------------------------------------------------------------------
# Package surface
# ---------------------------------------------------------------------------------------------


def test_package_reexports_every_public_name_of_quality():
    assert set(quality.__all__) <= set(babylon.__all__)
    for name in quality.__all__:
        assert getattr(babylon, name) is getattr(quality, name)


def test_action_vocabulary_matches_spec_2_2():
    assert {
        "buy", "sell", "open_perp", "close_perp", "wait", "trade", "predict", "post", "create_post",
        "send_dm", "dm", "research", "analyze",
    } == VALID_ACTION_TYPES
    assert set(REQUIRED_ACTION_FIELDS) == VALID_ACTION_TYPES
    assert REQUIRED_ACTION_FIELDS["open_perp"] == ("ticker", "size", "direction")
    assert REQUIRED_ACTION_FIELDS["close_perp"] == ("ticker", "size")
    assert REQUIRED_ACTION_FIELDS["send_dm"] == ("recipient",)
    assert REQUIRED_ACTION_FIELDS["research"] == ()


@pytest.mark.parametrize(
    "terms",
    [quality.BULLISH_WORDS, quality.BEARISH_WORDS, quality.WAIT_WORDS, quality.CONCLUSION_MARKERS,
     quality.ANALYSIS_TERMS, quality.DECISION_TERMS, quality.RISK_TERMS, quality.MARKET_TERMS],
    ids=["bullish", "bearish", "wait", "conclusion", "analysis", "decision", "risk", "market"],
)
def test_no_two_terms_of_a_list_share_a_word(terms):
    # quality counts terms with one alternation per list; that equals a search per term only when
    # no match can hide another, i.e. when no two terms share a word.
    words = [{re.sub(r"\W", "", w) for w in term.split()} for term in terms]
    for i, a in enumerate(words):
        for b in words[i + 1 :]:
            assert not a & b, (a, b)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([*quality.ANALYSIS_TERMS, *quality.DECISION_TERMS, *quality.WAIT_WORDS,
                                 "x", " ", "\n", "s", ":", "-"]), max_size=20).map("".join))
def test_one_pass_term_count_equals_a_search_per_term(text):
    pairs = [
        (quality.ANALYSIS_TERMS, keywords._ANALYSIS),
        (quality.DECISION_TERMS, keywords._DECISION),
        (quality.WAIT_WORDS, keywords._WAIT),
        (quality.CONCLUSION_MARKERS, keywords._CONCLUSION),
    ]
    for terms, compiled in pairs:
        per_term = sum(1 for t in terms if re.search(keywords._term_pattern(t), text))
        assert compiled.count(text) == per_term


# ---------------------------------------------------------------------------------------------
# Tick quality: validate_xml_structure
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("", -1.0),  # empty
        ("I buy BTC", -1.0),  # no wrapper at all
        ("<decisions>", -1.0),  # no closing wrapper
        ("<decisions></decisions>", -0.5),  # wrapper, no <decision element: the fixed tier
        ("<decisions>  <decisionsx/> </decisions>", -0.5),  # "<decision" followed by a letter is not one
        ('<decisions><decision ticker="BTC"/></decisions>', -0.2),  # no amount
        ('<decisions><decision amount="5"/></decisions>', -0.2),  # no ticker nor marketId
        ('<decisions><decision ticker="" amount="5"/></decisions>', -0.2),  # empty ticker does not count
        ("<decisions><decision/></decisions>", -0.2),  # element closed by "/": tier 3
        ("<decisions><decision>buy</decision></decisions>", -0.2),  # element closed by ">": tier 3
        (VALID_XML, 0.5),
        ("<decisions><decision marketId='m-1' amount='10'></decision></decisions>", 0.5),  # single quotes
        ('<decisions><decision\n ticker="ETH" amount="1"/></decisions>', 0.5),  # newline after the name
    ],
    ids=lambda v: repr(v)[:40] if isinstance(v, str) else str(v),
)
def test_validate_xml_structure_tiers(response, expected):
    assert validate_xml_structure(response) == expected


# ---------------------------------------------------------------------------------------------
# Tick quality: check_reasoning_action_alignment
# ---------------------------------------------------------------------------------------------


def test_alignment_is_neutral_without_action_or_text():
    assert check_reasoning_action_alignment("bullish, exposure, pnl", None) == 0.5  # no action: no bonus
    assert check_reasoning_action_alignment("", "buy") == 0.5  # no text


def test_alignment_directional_scores():
    assert check_reasoning_action_alignment("bullish breakout", "buy") == approx(0.7)  # bull 1 > bear 0
    assert check_reasoning_action_alignment("bearish, dump it", "buy") == approx(0.0)  # bear 2 > bull 0
    assert check_reasoning_action_alignment("bullish but bearish", "buy") == approx(0.4)  # tie 1-1
    assert check_reasoning_action_alignment("no view at all", "buy") == approx(0.4)  # tie 0-0
    assert check_reasoning_action_alignment("bearish: sell", "sell") == approx(0.7)  # mirrored
    assert check_reasoning_action_alignment("moon soon", "sell_prediction") == approx(0.0)  # bull 1 > bear 0
    assert check_reasoning_action_alignment("Bullish", "BUY") == approx(0.7)  # type and text lower-cased


def test_alignment_wait_and_other_types():
    assert check_reasoning_action_alignment("I will wait for the open", "wait") == approx(0.7)  # wait word
    assert check_reasoning_action_alignment("nothing to do", "hold") == approx(0.5)  # no wait word
    assert check_reasoning_action_alignment("bullish", "create_post") == approx(0.5)  # other type: 0.5


def test_alignment_literacy_bonus():
    # buy with a bullish word: base 0.7; "exposure" +0.15 -> 0.85
    assert check_reasoning_action_alignment("bullish, exposure is fine", "buy") == approx(0.85)
    # base 0.7; "profit" +0.15 -> 0.85 (pnl, profit and loss share one +0.15)
    assert check_reasoning_action_alignment("bullish, profit and loss and pnl", "buy") == approx(0.85)
    # base 0.7 + 0.15 + 0.15 = 1.0, capped at 1
    assert check_reasoning_action_alignment("bullish; exposure and PnL ok", "buy") == approx(1.0)
    # other type: 0.5 + 0.15 + 0.15 = 0.8
    assert check_reasoning_action_alignment("exposure and loss", "post") == approx(0.8)
    # explicit wait with a wait word (per-tick worked example (a)): 0.7 + 0.15 ("exposure") = 0.85
    assert check_reasoning_action_alignment("wait: exposure too high", "wait") == approx(0.85)


def test_alignment_matches_words_not_substrings():
    # The original's substring match found "long" in "belong" (bull 1 -> 0.7); on word boundaries
    # there is no hit at all -> tie -> 0.4.
    assert check_reasoning_action_alignment("I belong here", "buy") == approx(0.4)
    # "buyer" is not "buy": the original read bull 1 > bear 0 -> 0.0 for a sell; now tie -> 0.4.
    assert check_reasoning_action_alignment("The buyer showed up", "sell") == approx(0.4)
    # "seller" is not "sell": the original read bear 1 -> 0.7 for a sell; now tie -> 0.4.
    assert check_reasoning_action_alignment("Find a seller", "sell") == approx(0.4)
    # "shortly" is not "short", so the bullish word wins: 1 > 0 -> 0.7 (the original tied, 0.4).
    assert check_reasoning_action_alignment("bullish, shortly", "buy") == approx(0.7)
    # "losses" is not "loss" and "profitable" is not "profit": no literacy bonus -> 0.7.
    assert check_reasoning_action_alignment("bullish despite losses, profitable", "buy") == approx(0.7)
    # "waiting" is not "wait" -> 0.5 (the original: 0.7).
    assert check_reasoning_action_alignment("I am waiting", "wait") == approx(0.5)


def test_alignment_matches_phrases_as_phrases():
    assert check_reasoning_action_alignment("I need more data", "wait") == approx(0.7)
    assert check_reasoning_action_alignment("I need more\n  data", "wait") == approx(0.7)  # any whitespace
    assert check_reasoning_action_alignment("it needs more data", "wait") == approx(0.5)  # "needs" != "need"


def test_alignment_takes_the_side_into_account():
    bearish, bullish = "bearish, going short", "bullish, to the moon"
    # open_perp SHORT is bearish: bear 2 > bull 0 -> 0.7; bull 2 > bear 0 -> 0.0.
    assert check_reasoning_action_alignment(bearish, "open_perp", "SHORT") == approx(0.7)
    assert check_reasoning_action_alignment(bullish, "open_perp", "SHORT") == approx(0.0)
    assert check_reasoning_action_alignment(bullish, "open_perp", "short") == approx(0.0)  # case-insensitive
    # LONG, or no side (the original's reading), is bullish.
    assert check_reasoning_action_alignment(bullish, "open_perp", "LONG") == approx(0.7)
    assert check_reasoning_action_alignment(bullish, "open_perp") == approx(0.7)
    # buy_prediction NO is bearish; YES is bullish.
    assert check_reasoning_action_alignment(bearish, "buy_prediction", "NO") == approx(0.7)
    assert check_reasoning_action_alignment(bearish, "buy_prediction", "YES") == approx(0.0)
    # close_perp of a LONG is sell-like; closing a SHORT (buying back) is buy-like.
    assert check_reasoning_action_alignment(bearish, "close_perp", "LONG") == approx(0.7)
    assert check_reasoning_action_alignment(bullish, "close_perp", "SHORT") == approx(0.7)
    # A side from the other family is ignored: open_perp "NO" stays bullish.
    assert check_reasoning_action_alignment(bullish, "open_perp", "NO") == approx(0.7)


# ---------------------------------------------------------------------------------------------
# Tick quality: check_reasoning_coherence
# ---------------------------------------------------------------------------------------------


def test_coherence_of_short_text_is_0_1():
    assert check_reasoning_coherence("") == approx(0.1)
    assert check_reasoning_coherence("a" * 19) == approx(0.1)  # < 20 characters


def test_coherence_worked_examples():
    # 33 chars. "1." structure +.25; "therefore" +.25; split(". ") -> 3 parts +.2;
    # 7 words (<= 10) +.1; a number +.15 -> 0.95
    assert check_reasoning_coherence("1. Price is up. Therefore buy now") == approx(0.95)
    # 12 words, 1 unique (ratio 1/12 <= .4) -> -.1; nothing else -> clamped to 0
    assert check_reasoning_coherence(" ".join(["buy"] * 12)) == approx(0.0)
    # 12 ". "-separated parts (> 10) +.1; 12 unique words of 12 (ratio 1 > .4) +.15 -> 0.25
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
             "kilo", "lima"]
    assert check_reasoning_coherence(". ".join(words)) == approx(0.25)
    # "action:" is a marker +.25; 6 words +.1 -> 0.35
    assert check_reasoning_coherence("Next action: wait for the open") == approx(0.35)
    # a hyphen alone is "structure" (kept from the original): +.25; 5 words +.1 -> 0.35
    assert check_reasoning_coherence("a well-known rule applies here") == approx(0.35)


def test_coherence_markers_match_words_not_substrings():
    # "decision" +.25, 7 words +.1 -> 0.35
    assert check_reasoning_coherence("Our decision is made here today ok") == approx(0.35)
    # "decisions" and "finally" are not markers any more: only the 7-word +.1 -> 0.1
    assert check_reasoning_coherence("Our decisions finally made here today ok") == approx(0.1)


# ---------------------------------------------------------------------------------------------
# Tick quality: calculate_detailed_tick_quality (and the per-tick reward's worked example (a))
# ---------------------------------------------------------------------------------------------


def test_worked_example_a_no_action_no_decisions():
    fmt, rsn = calculate_detailed_tick_quality(["I will wait."], [None], None)
    # no <decisions> -> fmt -1; no action -> alignment 0.5; 12 chars -> coherence 0.1;
    # rsn = 0.5 + 0.2 * 0.1 = 0.52
    assert fmt == -1.0
    assert rsn == approx(0.52)
    # worked example (a): reward with weights .5/.3/.2 and pnl 0: 0.5*0 + 0.3*(-1) + 0.2*0.52 = -0.196
    assert 0.5 * 0.0 + 0.3 * fmt + 0.2 * rsn == approx(-0.196)


def test_worked_example_a_with_explicit_wait():
    # a wait action whose text has a wait word: alignment 0.7; rsn = 0.7 + 0.2*0.1 = 0.72
    assert calculate_detailed_tick_quality(["I will wait."], [None], "wait") == (-1.0, approx(0.72))


def test_detailed_tick_quality_edges():
    assert calculate_detailed_tick_quality([], [], None) == (0.0, 0.0)  # no calls: fmt 0, empty text: rsn 0
    # the last response decides fmt, even when an earlier one was valid
    assert calculate_detailed_tick_quality([VALID_XML, "plain"], [None, None], None)[0] == -1.0
    # an empty last response leaves fmt at 0 (the original skipped it)
    assert calculate_detailed_tick_quality([VALID_XML, ""], [None, None], None)[0] == 0.0


def test_detailed_tick_quality_joins_reasoning_response_and_action_reasoning():
    # text "bullish ok" (10 chars): buy alignment 0.7, coherence 0.1 -> 0.7 + 0.02 = 0.72
    assert calculate_detailed_tick_quality(["ok"], ["bullish"], "buy")[1] == approx(0.72)
    # no action: action_reasoning is ignored; alignment 0.5 -> 0.52
    assert calculate_detailed_tick_quality(["ok"], ["bullish"], None, None, "bearish dump")[1] == approx(0.52)
    # "bullish ok bearish dump" (23 chars): bull 1 < bear 2 -> alignment 0; coherence: 4 words +.1
    # -> 0.1; rsn = 0 + 0.02 = 0.02
    rsn = calculate_detailed_tick_quality(["ok"], ["bullish"], "buy", None, "bearish dump")[1]
    assert rsn == approx(0.02)
    # the side is passed through: open_perp SHORT on "bearish ok" -> 0.7 + 0.02
    assert calculate_detailed_tick_quality(["ok"], ["bearish"], "open_perp", "SHORT")[1] == approx(0.72)


def test_detailed_tick_quality_caps_rsn_at_1():
    text = "1. Bullish with exposure and pnl in view. Therefore buy now"
    # alignment 0.7 + 0.3 = 1.0; any coherence pushes past 1 -> capped
    assert calculate_detailed_tick_quality([text], [None], "buy")[1] == 1.0


# ---------------------------------------------------------------------------------------------
# Tick quality: calculate_tick_quality_score and the archetype table
# ---------------------------------------------------------------------------------------------


def test_tick_quality_table_has_13_rows_that_sum_to_1():
    assert len(TICK_QUALITY_WEIGHTS) == 13
    for name, row in TICK_QUALITY_WEIGHTS.items():
        assert set(row) == {"llm_calls", "reasoning", "action", "feedback"}, name
        assert sum(row.values()) == approx(1.0), name
    degen, default = dict(TICK_QUALITY_WEIGHTS["degen"]), dict(TICK_QUALITY_WEIGHTS["default"])
    assert degen == {"llm_calls": 0.2, "reasoning": 0.15, "action": 0.55, "feedback": 0.1}
    assert default == {"llm_calls": 0.4, "reasoning": 0.3, "action": 0.2, "feedback": 0.1}
    assert TICK_QUALITY_WEIGHTS["researcher"]["reasoning"] == 0.45
    with pytest.raises(TypeError, match="does not support item assignment"):
        TICK_QUALITY_WEIGHTS["default"]["action"] = 1.0  # type: ignore[index]


def test_tick_quality_worked_example():
    # fmt 0.5 -> normalized (0.5+1)/1.5 = 1. rsn: the XML text has no direction word -> buy tie 0.4;
    # coherence: "decision " is a marker +.25, 3 words +.1, "5" a number +.15 -> 0.5; rsn = 0.4 + 0.1 = 0.5.
    # success -> action 1; feedback non-empty -> 1.
    kwargs = dict(action_success=True, feedback={"pnl": 1.0})
    assert calculate_detailed_tick_quality([VALID_XML], [None], "buy") == (0.5, approx(0.5))
    # default: .4*1 + .3*.5 + .2*1 + .1*1 = 0.85
    assert calculate_tick_quality_score([VALID_XML], [None], "buy", **kwargs) == approx(0.85)
    # degen: .2*1 + .15*.5 + .55*1 + .1*1 = 0.925
    degen = calculate_tick_quality_score([VALID_XML], [None], "buy", archetype="degen", **kwargs)
    assert degen == approx(0.925)
    # unknown archetype falls back to default
    unknown = calculate_tick_quality_score([VALID_XML], [None], "buy", archetype="pirate", **kwargs)
    assert unknown == approx(0.85)


def test_tick_quality_action_and_feedback_terms():
    # no calls -> fmt 0 -> normalized 2/3; rsn 0; no action 0; no feedback 0 -> .4 * 2/3
    assert calculate_tick_quality_score([], [], None) == approx(0.4 * 2 / 3)
    # an action with an error (still no text, so rsn 0): .4*2/3 + .2*.25
    errored = calculate_tick_quality_score([], [], "buy", action_error="no such market")
    assert errored == approx(0.4 * 2 / 3 + 0.05)
    # an action with neither success nor error: .4*2/3 + .2*.5
    assert calculate_tick_quality_score([], [], "buy") == approx(0.4 * 2 / 3 + 0.1)
    # fmt -1 normalizes to 0: text "plain" (5 chars), no action -> rsn .52 -> .3*.52 = 0.156
    assert calculate_tick_quality_score(["plain"], [None], None) == approx(0.156)


def test_trajectory_quality_is_the_mean_tick_quality():
    assert calculate_trajectory_quality_score([]) == 0.0
    assert calculate_trajectory_quality_score([0.2, 0.4, 0.9]) == approx(0.5)  # 1.5 / 3


# ---------------------------------------------------------------------------------------------
# Tick quality: assess_trajectory_difficulty
# ---------------------------------------------------------------------------------------------


def test_difficulty_of_empty_and_plain_trajectories():
    assert assess_trajectory_difficulty([]) == quality.TrajectoryDifficulty("easy", 0.0, ("Empty trajectory",))
    plain = assess_trajectory_difficulty([DifficultyTick("wait")] * 5)
    assert (plain.level, plain.score, plain.reasons) == ("easy", 0.0, ("Standard complexity",))


def test_difficulty_factors_one_by_one():
    # 21 ticks -> +.2
    long_run = assess_trajectory_difficulty([DifficultyTick()] * 21)
    assert long_run.score == approx(0.2) and long_run.reasons == ("Long trajectory (21 ticks)",)
    assert assess_trajectory_difficulty([DifficultyTick()] * 11).score == approx(0.1)  # 11 ticks -> +.1
    # types {buy, sell} -> +.1; reversals buy->sell->buy = 2 -> +.2; total .3 -> medium
    flip = assess_trajectory_difficulty([DifficultyTick(kind) for kind in ("buy", "sell", "buy")])
    assert (flip.level, flip.score) == ("medium", approx(0.3))
    # complex: leverage "3" (+1) and amount 5000 (+1); "abc" and None do not parse -> 2 -> +.1;
    # types {open_perp, buy} -> +.1; total .2
    mixed = [DifficultyTick("open_perp", leverage="3"), DifficultyTick("buy", amount=5000),
             DifficultyTick("buy", leverage="abc", amount=None)]
    assert assess_trajectory_difficulty(mixed).score == approx(0.2)
    # average reasoning 250 chars -> +.2; 150 -> +.1; 100 -> 0
    assert assess_trajectory_difficulty([DifficultyTick(reasoning_chars=250)]).score == approx(0.2)
    assert assess_trajectory_difficulty([DifficultyTick(reasoning_chars=150)]).score == approx(0.1)
    assert assess_trajectory_difficulty([DifficultyTick(reasoning_chars=100)]).score == approx(0.0)
    # buy_prediction -> sell_prediction is not a reversal (exact names, as in the original): types +.1 only
    assert assess_trajectory_difficulty(
        [DifficultyTick("buy_prediction"), DifficultyTick("sell_prediction")]
    ).score == approx(0.1)


def test_difficulty_hard_example():
    ticks = [DifficultyTick("buy" if i % 2 else "sell", leverage=2, reasoning_chars=300) for i in range(21)]
    # length .2 + types(2) .1 + complex(21) .2 + reversals(20) .2 + reasoning(300) .2 = 0.9 -> hard
    result = assess_trajectory_difficulty(ticks)
    assert (result.level, result.score) == ("hard", approx(0.9))
    assert len(result.reasons) == 4  # the .1 factor (2 types) gives no reason


# ---------------------------------------------------------------------------------------------
# Response format: think tags
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (49, 0.5),  # .5
        (50, 0.7),  # .5 + .2
        (100, 0.85),  # .5 + .2 + .15
        (1000, 0.85),  # not > 1000 yet
        (1001, 0.75),  # .5 + .2 + .15 - .1
        (5, 0.4),  # .5 - .1 ("too short" issue)
    ],
)
def test_think_tag_score_by_length(n, expected):
    assert validate_think_tags(think(n))[0] == approx(expected)


def test_think_tag_degenerate_cases():
    assert validate_think_tags("no tags at all") == (0.0, ())
    assert validate_think_tags("<think>unclosed")[0] == 0.2  # tags but no pair
    assert validate_think_tags("</think> then <think>")[0] == 0.2  # close before open: no pair
    assert validate_think_tags("<THINK>" + "a" * 50 + "</Think>")[0] == approx(0.7)  # case-insensitive
    # two pairs of 60: content "a"*60 + "\n" + "b"*60 -> 121 chars -> .85; one issue (multiple) -> .75
    score, issues = validate_think_tags(think(60) + think(60, "b"))
    assert score == approx(0.75) and issues == ("Multiple think tag pairs detected",)
    # a stray close first: 1 open / 2 close (mismatch) and close-before-open; pair of 60 -> .7 - .2 = .5
    score, issues = validate_think_tags("</think> " + think(60))
    assert score == approx(0.5)
    assert issues == ("Mismatched tags: 1 open, 2 close", "Closing tag before opening tag")


# ---------------------------------------------------------------------------------------------
# Response format: action JSON
# ---------------------------------------------------------------------------------------------


def test_action_json_scores():
    assert score_action_json("no json") == 0.0
    assert extract_action_json("no json") == (None, ("No JSON object found in response",))
    assert score_action_json('{"action": buy}') == 0.2  # found, does not parse
    assert extract_action_json('{"action": buy}')[0] is None
    assert score_action_json('{"action":"buy","market":"m","amount":5}') == approx(0.9)  # .4 + .3 + .2
    assert score_action_json('{"action":"BUY","market":"m"}') == approx(0.6)  # .4 + .3 - .1 (missing amount)
    assert score_action_json('{"action":"fly"}') == approx(0.5)  # .4 + .2 (nothing required) - .1 (unknown)
    assert score_action_json('{"market":"m"}') == approx(0.3)  # .4 - .1 (no action key)
    # digits beyond int()'s limit raise ValueError, not JSONDecodeError: still "does not parse"
    assert score_action_json('{"action":"buy","amount":' + "1" * 5000 + "}") == 0.2


def test_action_json_extraction_order():
    # the first flat object after the last </think> wins over one inside the think block
    reply = '<think>{"action":"wait"}</think> {"action":"buy","market":"m","amount":1}'
    assert extract_action_json(reply)[0] == {"action": "buy", "market": "m", "amount": 1}
    # nothing after </think>: fall back to the first flat object anywhere
    assert extract_action_json('<think>{"action":"wait"}</think> done')[0] == {"action": "wait"}
    # nested objects are skipped: the first *flat* one is the inner {"x": 1}
    assert extract_action_json('{"action": {"x": 1}}')[0] == {"x": 1}


# ---------------------------------------------------------------------------------------------
# Response format: reasoning quality and length
# ---------------------------------------------------------------------------------------------


def test_reasoning_quality_terms():
    assert score_reasoning_quality("") == 0.0
    # analysis: price, volume, trend, risk, market = 5 -> .15; "because" +.2; "risk" +.2;
    # numbers 1, 2, 3% = 3 (> 2) +.15; "btc" +.15 -> 0.85
    text = "Price and volume trend up because risk is low: 1, 2 and 3% on BTC market"
    assert score_reasoning_quality(text) == approx(0.85)
    # all 16 analysis terms: min(.3, .48) = .3; "risk" is also a risk term +.2; "market" +.15 -> 0.65
    assert score_reasoning_quality(" ".join(quality.ANALYSIS_TERMS)) == approx(0.65)
    assert score_reasoning_quality("price 5") == approx(0.13)  # .03 + .1 (one number)
    assert score_reasoning_quality("based on the data") == approx(0.2)  # phrase decision term


def test_reasoning_quality_matches_words_not_substrings():
    # the original found "stop" (risk), "eth" (market) and "since" (decision): .2 + .15 + .2 = .55
    assert score_reasoning_quality("nonstop method sincere") == 0.0


@pytest.mark.parametrize(
    ("response", "thinking", "expected"),
    [
        ("x" * 29, "", 0.4),  # 1 - .4 (total < 30) - .2 (think < 50)
        ("x" * 30, "a" * 50, 1.0),  # no penalty
        ("x" * 30, "a" * 49, 0.8),  # 1 - .2
        ("x" * 2001, "a" * 1001, 0.7),  # 1 - .2 (total > 2000) - .1 (think > 1000)
        ("x" * 2000, "a" * 1000, 1.0),  # both at the limit, not above
    ],
)
def test_length_score(response, thinking, expected):
    assert score_length(response, thinking) == approx(expected)


def test_length_score_extracts_thinking_when_not_given():
    reply = think(50) + "x" * 10  # 7 + 50 + 8 + 10 = 75 chars, think 50 -> 1.0
    assert score_length(reply) == approx(1.0)


# ---------------------------------------------------------------------------------------------
# Response format: validate_response_format
# ---------------------------------------------------------------------------------------------

THOUGHT = "BTC price trend is bullish because momentum is 5% and risk is low."
GOOD_REPLY = f"<think>{THOUGHT} {THOUGHT}</think>" + '{"action":"buy","market":"m","amount":5}'


def test_validate_response_format_worked_example():
    assert len(f"{THOUGHT} {THOUGHT}") == 133
    report = validate_response_format(GOOD_REPLY)
    # think: one pair of 133 chars -> .5 + .2 + .15 = .85
    assert report.think_score == approx(0.85)
    # action: known buy with market and amount -> .9
    assert report.action_score == approx(0.9)
    # length: total 188 >= 30, think 133 >= 50 -> 1.0
    assert report.length_score == 1.0
    # reasoning: price, trend, bullish, momentum, risk = 5 -> .15; because +.2; risk +.2;
    # numbers "5%" twice = 2 -> +.1; btc +.15 -> 0.8
    assert report.reasoning_score == approx(0.8)
    # .35*.85 + .35*.9 + .15*1 + .15*.8 = .2975 + .315 + .15 + .12 = 0.8825
    assert report.format_score == approx(0.8825)
    assert report.is_valid and report.issues == ()
    assert (report.has_thinking, report.has_valid_action, report.action_type, report.thinking_length) == (
        True, True, "buy", 133
    )


def test_validate_response_format_invalid_reply():
    report = validate_response_format('<think>hmm</think>{"action":"x"}')
    # think: pair of 3 chars -> .5 - .1 (too short) = .4; action: .4 + .2 - .1 (unknown) = .5;
    # length: total 32 >= 30, think 3 < 50 -> .8; reasoning: nothing -> 0
    # format = .35*.4 + .35*.5 + .15*.8 + 0 = .14 + .175 + .12 = 0.435
    assert report.format_score == approx(0.435)
    assert not report.is_valid
    assert report.issues == (
        "Thinking content is too short",
        "Unknown action type: x",
        "Limited market analysis vocabulary",
        "No decision justification phrases",
    )


def test_format_report_computes_its_format_score():
    report = FormatReport(think_score=1.0, action_score=0.0, length_score=0.0, reasoning_score=1.0,
                          is_valid=False, issues=())
    assert report.format_score == approx(0.5)  # .35 + .15


# ---------------------------------------------------------------------------------------------
# QualityScorer
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [(29, -0.5), (30, -0.3), (99, -0.3), (100, -0.1), (149, -0.1), (150, 0.0), (600, 0.0), (601, -0.1),
     (1000, -0.1), (1001, -0.2)],
)
def test_thinking_length_penalty_thresholds(n, expected):
    assert length_penalties("a" * n, "x" * 500).thinking == expected


@pytest.mark.parametrize(
    ("n", "expected"),
    [(49, -0.4), (50, -0.2), (149, -0.2), (150, 0.0), (1000, 0.0), (1001, -0.1), (2000, -0.1), (2001, -0.2)],
)
def test_response_length_penalty_thresholds(n, expected):
    assert length_penalties("a" * 200, "x" * n).response == expected


def test_combined_length_penalty():
    # thinking is measured stripped: 29 -> -.5; response 49 -> -.4; .6*-.5 + .4*-.4 = -0.46
    assert length_penalties("  " + "a" * 29 + "\n", "x" * 49).combined == approx(-0.46)
    # 120 -> -.1, 700 -> 0: .6*-.1 = -0.06
    assert length_penalties("a" * 120, "x" * 700).combined == approx(-0.06)


def test_execution_score_without_execution():
    assert execution_score(True, "buy") == 0.6  # valid, non-wait
    assert execution_score(True, "wait") == 0.5
    assert execution_score(True, None) == 0.5
    assert execution_score(False, "buy") == 0.2


@pytest.mark.parametrize(
    ("success", "pnl", "action_type", "expected"),
    [
        (True, 0.0, "buy", 0.65),  # .5 + .1 + .05
        (True, 100.0, "buy", 0.75),  # .5 + .1 + min(.2, .1) + .05
        (True, 5000.0, "buy", 0.8),  # bonus .1 + .2 + .05 = .35 -> clipped to .3
        (True, -500.0, "buy", 0.55),  # .5 + .1 - .1 + .05
        (True, -50.0, "wait", 0.6),  # .5 + .1 (small loss: no penalty; wait: no .05)
        (False, 999.0, "buy", 0.4),  # failure: .5 - .1
    ],
)
def test_execution_score_with_execution(success, pnl, action_type, expected):
    assert execution_score(True, action_type, executed=True, success=success, pnl=pnl) == approx(expected)


def test_quality_total_and_clipping():
    assert quality_total(0.8, 0.6, 0.5, -0.2) == approx(0.58)  # .32 + .18 + .1 - .02
    assert quality_total(1.0, 1.0, 1.0, 0.0) == approx(0.9)  # .4 + .3 + .2
    assert quality_total(2.0, 1.0, 1.0, 0.0) == 1.0  # .8 + .3 + .2 = 1.3 -> clipped to 1
    assert quality_total(0.0, 0.0, 0.0, -0.46) == 0.0  # -.046 -> clipped to 0
    assert quality_total(math.nan, 1.0, 1.0, 0.0) == 0.0  # NaN -> worst


def test_combined_format_score():
    assert combined_format_score(0.8, -0.2) == approx(0.7)  # .8 - .1
    assert combined_format_score(0.1, -0.46) == 0.0  # .1 - .23 < 0 -> 0


def test_score_response_worked_example():
    quality = score_response(GOOD_REPLY)
    # format .8825 and reasoning .8 (above); valid buy, not executed -> .6;
    # thinking 133 -> -.1, response 188 -> 0: combined .6*-.1 = -.06
    assert quality.execution_score == 0.6
    assert quality.length_penalty == approx(-0.06)
    # total = .4*.8825 + .3*.8 + .2*.6 + .1*-.06 = .353 + .24 + .12 - .006 = 0.707
    assert quality.total_score == approx(0.707)
    # combined format = .8825 - .03 = 0.8525
    assert quality.combined_format_score == approx(0.8525)
    executed = score_response(GOOD_REPLY, executed=True, success=True, pnl=100.0)
    assert executed.execution_score == approx(0.75)


def test_archetype_quality_bonus():
    active = QualityScore(format_score=0.8, reasoning_score=0.5, execution_score=0.5, length_penalty=-0.1,
                          has_thinking=True, has_valid_action=True, action_type="buy", thinking_length=151)
    assert archetype_quality_bonus("degen", active) == approx(0.5)  # .2 + .2 + .1
    idle = QualityScore(action_type="wait")
    assert archetype_quality_bonus("degen", idle) == 0.0
    assert archetype_quality_bonus("researcher", active) == approx(0.4)  # .4*.5 + .1 (151 > 150) + .1
    shallow = QualityScore(reasoning_score=0.5, thinking_length=150)
    assert archetype_quality_bonus("analyst", shallow) == approx(0.2)  # .4*.5, 150 is not > 150
    assert archetype_quality_bonus("Social-Butterfly", active) == approx(0.44)  # .3*.8 + .1 + .1 (-.1 > -.2)
    verbose = QualityScore(format_score=0.8, has_thinking=True, length_penalty=-0.2)
    assert archetype_quality_bonus("influencer", verbose) == approx(0.34)  # .24 + .1 (not > -.2)
    # default: total = .32 + .15 + .1 - .01 = .56 -> .2*.56 + .1 (valid and thinking) = 0.212
    assert archetype_quality_bonus("trader", active) == approx(0.212)
    assert archetype_quality_bonus(None, active) == approx(0.212)


# ---------------------------------------------------------------------------------------------
# The linear rewrites answer exactly as the original regexes
# ---------------------------------------------------------------------------------------------

_TAGGY = st.lists(
    st.sampled_from(["<think>", "</think>", "<THINK>", "</Think>", "a", " ", "\n", "<", "/", "think>", "1"]),
    max_size=30,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(_TAGGY)
def test_think_scan_equals_the_original_findall(text):
    original = "\n".join(re.findall(r"<think>(.*?)</think>", text, re.IGNORECASE | re.DOTALL))
    assert format_validator._parse_think(text).content == original


@settings(max_examples=500, deadline=None)
@given(st.text() | _TAGGY)
def test_structure_regex_equals_the_original(text):
    original = re.search(r"(\d+[\.\):]|\-|\*|\•)", text)
    assert bool(tick_quality._STRUCTURE.search(text)) == bool(original)


# ---------------------------------------------------------------------------------------------
# Robustness: any text, every public function, every score in range
# ---------------------------------------------------------------------------------------------

_FRAGMENTS = [
    "<think>", "</think>", "<THINK>", "{", "}", '{"action": "buy"}', '{"action":"open_perp","ticker":"BTC"}',
    '"action"', ":", ",", '"', "<decisions>", "</decisions>", "<decision ", "<decision/>", 'ticker="BTC"',
    "amount='5'", 'marketId="m"', "bullish", "bearish", "buy", "sell", "long", "short", "wait", "belong",
    "need more data", "exposure", "pnl", ". ", "1.", "-", "42%", "\n", "because", "risk", "BTC",
    "\u0130", "\u212a", "</thin\u212a>",  # İ and the Kelvin sign change under lower() and IGNORECASE
    "1" * 5000, "\x00", "\ud7ff", "🚀",
]
TEXT = st.text() | st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=8), max_size=25).map("".join)
ACTION_TYPES = ["buy", "sell", "open_perp", "close_perp", "wait", "buy_prediction", "BUY"]
ACTION = st.none() | st.sampled_from(ACTION_TYPES) | st.text()
SIDE = st.none() | st.sampled_from(["YES", "NO", "LONG", "SHORT", "short"]) | st.text(max_size=5)
UNIT = (0.0, 1.0)


def _in(value, bounds):
    lo, hi = bounds
    return isinstance(value, float) and lo - 1e-12 <= value <= hi + 1e-12


def _check_every_function(text: str, other: str, action, side) -> None:
    assert validate_xml_structure(text) in {-1.0, -0.5, -0.2, 0.5}
    assert _in(check_reasoning_action_alignment(text, action, side), UNIT)
    assert _in(check_reasoning_coherence(text), UNIT)
    fmt, rsn = calculate_detailed_tick_quality([other, text], [text, None], action, side, other)
    assert fmt in {-1.0, -0.5, -0.2, 0.0, 0.5} and _in(rsn, UNIT)
    assert _in(calculate_tick_quality_score([text], [other], action, side, text, action_error=other,
                                            feedback={"x": text}, archetype=other), UNIT)
    difficulty = assess_trajectory_difficulty(
        [DifficultyTick(action, leverage=text, amount=other, reasoning_chars=len(text)),
         DifficultyTick(other)]
    )
    assert _in(difficulty.score, UNIT) and difficulty.level in {"easy", "medium", "hard"}
    score, issues = validate_think_tags(text)
    assert _in(score, UNIT) and all(isinstance(i, str) for i in issues)
    parsed, issues = extract_action_json(text)
    assert parsed is None or isinstance(parsed, dict)
    assert _in(score_action_json(text), UNIT)
    assert _in(score_reasoning_quality(text), UNIT)
    assert _in(score_length(text), UNIT) and _in(score_length(text, other), UNIT)
    report = validate_response_format(text)
    for value in (report.think_score, report.action_score, report.length_score, report.reasoning_score,
                  report.format_score):
        assert _in(value, UNIT)
    penalties = length_penalties(text, other)
    assert -0.5 <= penalties.thinking <= 0 and -0.4 <= penalties.response <= 0
    assert -0.46 - 1e-12 <= penalties.combined <= 0
    quality = score_response(text)
    assert _in(quality.execution_score, (0.2, 0.8))
    assert _in(quality.total_score, UNIT) and quality.combined_format_score >= 0
    assert _in(execution_score(bool(text), action, executed=bool(other), success=bool(text), pnl=len(other)),
               (0.2, 0.8))
    assert _in(quality_total(report.format_score, rsn, quality.execution_score, penalties.combined), UNIT)
    assert combined_format_score(report.format_score, penalties.combined) >= 0
    assert _in(archetype_quality_bonus(text, quality), (0.0, 0.6))
    assert _in(archetype_quality_bonus(action, quality), (0.0, 0.6))
    assert _in(calculate_trajectory_quality_score([report.format_score, quality.total_score]), UNIT)


@settings(max_examples=2000, deadline=None)
@given(text=TEXT, other=TEXT, action=ACTION, side=SIDE)
def test_every_function_accepts_any_text(text, other, action, side):
    _check_every_function(text, other, action, side)


@pytest.mark.parametrize(
    "text",
    [
        "x" * 1_000_000,
        "1" * 1_000_000,  # the original's \d+[.):] backtracked quadratically here
        "</think>" + "<think>" * 125_000,  # the original's lazy findall rescanned from every open tag
        "{" * 1_000_000,
        "need " + " " * 1_000_000 + "data",
        ("bullish buy <decision ticker='A' " + "9" * 40 + ". ") * 12_000,
    ],
    ids=["letters", "digits", "unclosed-think", "braces", "spaces", "mixed"],
)
def test_megabyte_inputs_are_scored_quickly(text):
    start = time.perf_counter()
    _check_every_function(text, text, "open_perp", "SHORT")
    assert time.perf_counter() - start < 30  # linear work; a quadratic path would take hours
