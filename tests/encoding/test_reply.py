"""The reply parser: canonical and legacy layouts, lenient formatting, and no guessing."""

from __future__ import annotations

import json

import pytest

from rlaif_gym.encoding.reply import MAX_REPLY_CHARS, parse_reply

BUY = '{"type": "buy_prediction", "market": "market-3", "outcome": "YES", "amount": 250}'


@pytest.mark.parametrize(
    ("reply", "layout", "action"),
    [
        (f"<think>cheap</think>\n{BUY}", "think+json", {"type": "buy_prediction", "market": "market-3",
                                                         "outcome": "YES", "amount": 250.0}),
        (f"<THINK> cheap </THINK>```json\n{BUY}\n```", "think+json", {"type": "buy_prediction"}),
        (f"<thinking>cheap</thinking>{BUY}", "thinking+json", {"type": "buy_prediction"}),
        ('<think>x</think>{"action": "buy_yes", "marketId": "market-3", "amount": "1,000"}', "think+json",
         {"type": "buy_prediction", "outcome": "YES", "amount": 1000.0}),
        ('<think>x</think>{"action": {"type": "open_short", "ticker": "ethai", "size": 500, "leverage": 3}}',
         "think+json", {"type": "open_perp", "side": "SHORT", "ticker": "ethai", "leverage": 3.0}),
        ('<decisions><decision action="buy" marketId="market-2" side="no" amount="100"/></decisions>',
         "decisions", {"type": "buy_prediction", "market": "market-2", "outcome": "NO", "amount": 100.0}),
        ('<think>x</think>{"type": "close_position", "positionId": "pos-4"}', "think+json",
         {"type": "close_perp", "position_id": "pos-4"}),
        ('<think>x</think>{"type": "hold"}', "think+json", {"type": "wait"}),
    ],
)
def test_accepted_layouts_and_vocabularies(reply, layout, action):
    parsed = parse_reply(reply)
    assert parsed.layout == layout
    assert parsed.action is not None, parsed.errors
    for key, value in action.items():
        assert parsed.action.to_dict()[key] == value


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("", "empty"),
        ("   \n ", "empty"),
        ("<think>I like market-3</think>", "no action found"),
        ('<think>x</think>{"type": "buy_prediction", "market": "market-3", "outcome": "YES"}', "needs amount"),
        ('<think>x</think>{"type": "teleport"}', "unknown action type"),
        ('<think>x</think>{"type": "buy_prediction", "market": "market-1", "outcome": "MAYBE", "amount": 5}',
         "YES or NO"),
        ('<think>x</think>{"type": "buy_prediction", "market": "market-1", "outcome": "YES", "amount": NaN}',
         "finite"),
        ('<think>x</think>{"type": "wait"} {"type": "wait"}', "2 actions"),
        ('<think>x</think>{"type": "buy_prediction", "market": "market-1", "outcome": "YES", "amount": 5',
         "no action found"),
    ],
)
def test_rejected_replies_explain_what_was_expected(reply, error):
    parsed = parse_reply(reply)
    assert parsed.action is None
    assert any(error in e for e in parsed.errors), parsed.errors


def test_reasoning_is_extracted_and_unbalanced_tags_are_reported():
    parsed = parse_reply(f"<think>market-3 looks cheap{BUY}")
    assert parsed.think_closed is False
    assert any("unbalanced" in e for e in parsed.errors)
    assert parse_reply(f"Because of the news, I buy. {BUY}").reasoning == "Because of the news, I buy."


def test_a_one_megabyte_reply_is_cut_and_reported():
    parsed = parse_reply("<think>" + "a" * 1_000_000 + "</think>" + BUY)
    assert any(f"{MAX_REPLY_CHARS:,}" in e for e in parsed.errors)


def test_json_inside_the_reasoning_is_not_taken_as_the_action():
    reply = '<think>I considered {"type": "wait"} but the news is strong.</think>' + BUY
    assert parse_reply(reply).action.type == "buy_prediction"


def test_backticks_inside_a_json_string_survive_and_fences_around_the_json_still_parse():
    fenced = parse_reply('<think>post it</think>\n```json\n{"type": "create_post", "content": "see ```code``` '
                         'and ```json here", "market": "market-1"}\n```')
    assert fenced.action is not None and fenced.action.content == "see ```code``` and ```json here"
    assert fenced.errors == ()


@pytest.mark.parametrize(
    "content",
    ["I <think> this is cheap", "closing </think> early", "<think>a second block</think>",
     "<thinking>", "<decisions><decision action='wait'/></decisions>"],
    ids=["open-tag", "close-tag", "whole-block", "thinking-tag", "decisions-block"],
)
def test_tags_inside_a_json_string_are_data_not_markup(content):
    """A post that quotes a think tag or a decisions block is a valid canonical reply, posted verbatim."""
    import json

    action = json.dumps({"type": "create_post", "content": content})
    parsed = parse_reply(f"<think>quote the tag</think>\n{action}")
    assert parsed.errors == (), parsed.errors
    assert parsed.layout == "think+json" and parsed.think_closed
    assert parsed.reasoning == "quote the tag"
    assert parsed.action is not None and parsed.action.type == "create_post" and parsed.action.content == content
    # With no think block the JSON-only layout is still read, and the tag inside it is not a block.
    bare = parse_reply(action)
    assert bare.layout == "json" and bare.think_closed and bare.action.content == content


def test_tags_inside_json_in_the_reasoning_do_not_split_the_block():
    reply = '<think>I drafted {"type": "create_post", "content": "</think>"} and chose to buy.</think>' + BUY
    parsed = parse_reply(reply)
    assert parsed.think_closed and parsed.errors == (), parsed.errors
    assert parsed.reasoning.endswith("and chose to buy.") and parsed.action.type == "buy_prediction"


@pytest.mark.parametrize("think", ["I buy YES: two sources say so.", None])
@pytest.mark.parametrize("action", [
    {"type": "buy_prediction", "market": "market-1", "outcome": "YES", "amount": 12.5},
    {"type": "post", "content": 'a quoted "</think>" and {braces}'},
    {"type": "wait"},
])
def test_the_canonical_layout_is_the_one_the_parser_reads_first(action, think):
    """`canonical_reply` is every writer's layout (the offline models, the baselines, the runner's fallback): it
    parses back to the same action and reasoning, as the canonical think+json layout, or as bare JSON without a
    think block (what the compact prompt style asks for)."""
    from rlaif_gym.encoding.reply import canonical_reply
    from rlaif_gym.sim import normalize_action

    text = canonical_reply(action, think)
    parsed = parse_reply(text, think_required=think is not None)
    assert parsed.ok, parsed.errors
    assert parsed.layout == ("think+json" if think is not None else "json")
    assert parsed.action.to_dict() == normalize_action(action).to_dict()
    assert parsed.reasoning == (think or "")
    assert text == (f"<think>{think}</think>\n" if think is not None else "") + json.dumps(action)
