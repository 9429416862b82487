"""The constrained-decoding grammar and schema cannot drift from the action schema and the reply parser.

The GBNF text is read back by an independent reader (gbnf_subset.py), sampled adversarially, and
every sample must parse with `parse_reply` into the action the sample spells out. The JSON schema's
instances, rewritten by `canonical_reply_from_json`, must parse the same way.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gbnf_subset import ADVERSARIAL, max_length, parse_gbnf, sample, to_regex

from rlaif_gym.encoding import grammar
from rlaif_gym.encoding.grammar import (
    GrammarLimits,
    action_variants,
    canonical_reply_from_json,
    constraint_body,
    reply_gbnf,
    reply_json_schema,
    reply_max_chars,
)
from rlaif_gym.encoding.prompt import system_prompt
from rlaif_gym.encoding.reply import parse_reply
from rlaif_gym.errors import ConfigError
from rlaif_gym.sim import ActionType, WorldParams, normalize_action
from rlaif_gym.sim import actions as sim_actions

SMALL = GrammarLimits(think_chars=40, id_chars=12, text_chars=30, int_digits=4)


def _rules(limits: GrammarLimits | None = None) -> dict:
    return parse_gbnf(reply_gbnf(limits))


def _check_reply(text: str) -> None:
    parsed = parse_reply(text)
    assert parsed.ok and parsed.layout == "think+json", f"{text!r} -> errors {parsed.errors}, layout {parsed.layout}"
    written = json.loads(text.split("</think>\n", 1)[1])
    assert parsed.action == normalize_action(written), f"{text!r}: parsed {parsed.action}, wrote {written}"
    assert parsed.action.type == written["type"]


def test_every_action_type_has_its_own_alternative():
    rules = _rules()
    action = rules["action"]
    assert len(action.options) == len(ActionType), f"{len(action.options)} alternatives for {len(ActionType)} types"
    rng = np.random.default_rng(0)
    seen = []
    for k in range(len(action.options)):
        text = sample(rules, rng, "action", option=k)
        seen.append(json.loads(text)["type"])
    assert seen == [t.name.lower() for t in ActionType]


@pytest.mark.parametrize("limits", [None, SMALL], ids=["default", "small"])
def test_adversarial_samples_all_parse_to_the_action_they_spell(limits):
    rules = _rules(limits)
    rng = np.random.default_rng(1234)
    kinds, variants = set(), set()
    for _ in range(600):
        text = sample(rules, rng)
        _check_reply(text)
        written = json.loads(text.split("</think>\n", 1)[1])
        kinds.add(written["type"])
        variants.add((written["type"], tuple(written)[1:]))
    expected = {(k, v) for k, vs in action_variants().items() for v in vs}
    assert kinds == {t.name.lower() for t in ActionType}
    assert variants == expected, f"never sampled: {expected - variants}"


def test_the_sampler_does_stress_the_parser():
    """The samples really contain the snippets that break naive parsers (so the test above means something)."""
    rules = _rules(SMALL)
    rng = np.random.default_rng(7)
    texts = [sample(rules, rng) for _ in range(300)]
    thinks = [t[len("<think>"):t.index("</think>")] for t in texts]
    for snippet in ('{"type": "wait"}', "```json", '"', "{"):
        assert any(snippet in t for t in thinks), f"no think block contains {snippet!r}"
    assert any("{" in json.loads(t.split("</think>\n")[1]).get("content", "") for t in texts)


def test_grammar_excludes_what_the_parser_rejects():
    regex = re.compile(to_regex(_rules()), re.DOTALL)
    good = '<think>ok</think>\n{"type": "buy_prediction", "market": "market-3", "outcome": "YES", "amount": 250}'
    assert regex.fullmatch(good)
    bad = [
        '<think>ok</think>\n{"type": "buy_prediction", "market": "market-3", "outcome": "MAYBE", "amount": 250}',
        '<think>ok</think>\n{"type": "buy_prediction", "market": "market-3", "outcome": "YES"}',
        '<think>ok</think>\n{"type": "teleport"}',
        '<think>ok</think>\n{"type": "wait"}{"type": "wait"}',
        '<think>ok</think>\n{"type": "close_perp"}',
        '{"type": "wait"}',
        "<think></think>\n" + '{"type": "wait"}',
    ]
    for text in bad:
        assert not regex.fullmatch(text), f"the grammar accepts {text!r}"
        assert not parse_reply(text).ok or "<think></think>" in text, f"parse_reply accepts {text!r}"
    # Stricter than the parser on purpose: constrained posts carry no tag-like text (the parser reads a
    # tag inside a JSON string as data, so it accepts this reply).
    plain_only = '<think>ok</think>\n{"type": "create_post", "content": "see <think>"}'
    assert not regex.fullmatch(plain_only) and parse_reply(plain_only).ok


def test_the_system_prompt_examples_are_in_the_grammar():
    """The reply the model is shown, and every action example in the prompt, are grammar strings."""
    rules = _rules()
    root = re.compile(to_regex(rules), re.DOTALL)
    action = re.compile(to_regex(rules, "action"), re.DOTALL)
    prompt = system_prompt(WorldParams())
    examples = re.findall(r"^\s*(\{.*?\})", prompt, re.MULTILINE)
    assert len(examples) >= len(ActionType), examples
    for ex in examples:
        if '"..."' in ex:
            ex = ex.replace('"..."', '"gm"')
        assert action.fullmatch(ex), f"prompt example {ex!r} is not in the grammar"
    reply = prompt[prompt.index("Example reply:") + len("Example reply:"):].strip()
    assert root.fullmatch(reply), f"the prompt's example reply is not in the grammar: {reply!r}"
    _check_reply(reply)


@pytest.mark.parametrize("limits", [None, SMALL, GrammarLimits(think_chars=200, text_chars=120)])
def test_reply_max_chars_is_the_grammars_longest_string(limits):
    assert reply_max_chars(limits) == max_length(_rules(limits))


def test_the_grammar_follows_the_action_schema(monkeypatch):
    """Generated, not copied: a new required field in the sim appears in the grammar and the schema."""
    monkeypatch.setitem(sim_actions._REQUIRED, "join_group", ("group", "recipient"))
    assert '"{\\"type\\": \\"join_group\\", \\"group\\": " id ", \\"recipient\\": " id "}"' in reply_gbnf()
    branch = next(b for b in reply_json_schema()["properties"]["action"]["anyOf"]
                  if b["properties"]["type"]["enum"] == ["join_group"])
    assert branch["required"] == ["type", "group", "recipient"]


def test_unknown_mode_and_bad_limits_are_config_errors():
    with pytest.raises(ConfigError, match="gbnf, guided_json, response_format"):
        constraint_body("regex")
    with pytest.raises(ConfigError, match="think_chars"):
        GrammarLimits(think_chars=0)


# -- the JSON-schema variant ----------------------------------------------------------------------------------


def _schema_instance(schema: dict, rng: np.random.Generator):
    """A random instance of the schema subset `reply_json_schema` uses (object, anyOf, enum, string, number)."""
    if "anyOf" in schema:
        return _schema_instance(schema["anyOf"][int(rng.integers(len(schema["anyOf"])))], rng)
    if "enum" in schema:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    kind = schema["type"]
    if kind == "object":
        assert schema["additionalProperties"] is False and schema["required"] == list(schema["properties"])
        return {k: _schema_instance(v, rng) for k, v in schema["properties"].items()}
    if kind == "integer":
        return int(rng.choice([schema["minimum"], 250, schema["maximum"]]))
    assert kind == "string"
    pattern = re.compile(schema.get("pattern", ".*"), re.DOTALL)
    n = int(rng.integers(schema["minLength"], schema["maxLength"] + 1))
    pieces = [p for p in (*ADVERSARIAL, "a", "B", "7") if pattern.fullmatch(p)]
    out = ""
    while len(out) < n:
        out += pieces[int(rng.integers(len(pieces)))]
    return out[:n] if pattern.fullmatch(out[:n]) else "a" * n


def test_json_schema_instances_become_canonical_replies_that_parse():
    schema = reply_json_schema(SMALL)
    branches = schema["properties"]["action"]["anyOf"]
    assert {b["properties"]["type"]["enum"][0] for b in branches} == {t.name.lower() for t in ActionType}
    assert len(branches) == sum(len(v) for v in action_variants().values())
    rng = np.random.default_rng(5)
    for _ in range(400):
        instance = _schema_instance(schema, rng)
        reply = canonical_reply_from_json(json.dumps(instance))
        parsed = parse_reply(reply)
        assert parsed.ok, f"{instance!r} -> {reply!r}: {parsed.errors}"
        assert parsed.action == normalize_action(instance["action"])
        assert parsed.reasoning.replace("‹", "<") == instance["reasoning"].strip()


def test_non_json_replies_pass_through_unchanged():
    for text in ("<think>x</think>\n{\"type\": \"wait\"}", "not json", '{"reasoning": 3, "action": {}}', "[1]", ""):
        assert canonical_reply_from_json(text) == text


def test_constraint_bodies():
    assert constraint_body("gbnf") == {"grammar": reply_gbnf()}
    assert constraint_body("guided_json") == {"guided_json": reply_json_schema()}
    rf = constraint_body("response_format", SMALL)["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == reply_json_schema(SMALL)
    assert grammar.CONSTRAIN_MODES == ("gbnf", "guided_json", "response_format")


def test_llama_cpp_reads_the_json_schema_into_a_grammar_of_parsing_replies():
    """llama.cpp's own JSON-schema converter (what its server runs for a schema) yields only good replies."""
    llama_grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="the local-llm extra is not installed")
    gbnf = llama_grammar.json_schema_to_gbnf(json.dumps(reply_json_schema(SMALL)))
    rules = parse_gbnf(gbnf)
    rng = np.random.default_rng(11)
    kinds = set()
    for _ in range(300):
        text = sample(rules, rng)
        instance = json.loads(text, strict=False)  # its strings may hold raw control characters
        reply = canonical_reply_from_json(text)
        parsed = parse_reply(reply)
        assert parsed.ok, f"{text!r} -> {reply!r}: {parsed.errors}"
        assert parsed.action == normalize_action(instance["action"])
        kinds.add(parsed.action.type)
    assert kinds == {t.name.lower() for t in ActionType}
