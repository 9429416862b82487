"""Each action kind is declared once (`sim.ACTION_SPECS`), and every face reads that declaration.

The faces' own behaviour is tested where it lives (masks against the world's feedback, the grammar by sampling,
the fused step bit for bit); these tests hold the faces to the declaration: what a kind declares is what the
numeric space, the decoder, the system prompt, the per-tick grammar and SB3's action table offer, and a
declaration that cannot work is refused when it is made, with the reason.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rlaif_gym import sim
from rlaif_gym.encoding import ACTION_KINDS, action_nvec, decode_actions
from rlaif_gym.encoding import grammar as grammar_mod
from rlaif_gym.encoding.action import KIND_READS
from rlaif_gym.encoding.grammar import TickIds, reply_gbnf
from rlaif_gym.encoding.prompt import system_prompt
from rlaif_gym.sim.actions import PROMPT_IDS, ActionSpec


def test_every_action_type_is_declared_once_in_order():
    assert [spec.kind for spec in sim.ACTION_SPECS] == list(sim.ActionType)
    assert set(sim.SPEC_OF) == set(sim.ACTION_TYPES)
    assert {spec.name for spec in sim.ACTION_SPECS if spec.trade} == sim.TRADE_TYPES
    assert {"buy_prediction", "sell_prediction", "open_perp", "close_perp"} <= sim.TRADE_TYPES


@pytest.mark.parametrize(("fields", "message"), [
    ({"required": ("colour",)}, "unknown field 'colour'"),
    ({"optional": ("ticker",), "one_of": ("group",)}, "one_of names 'group'"),
    ({"required": ("group",), "example": {"market": "market-1"}}, "example field 'market'"),
    ({"numeric_target": "npc"}, "numeric_target 'npc'"),
    ({"numeric_target": "perp", "numeric_size": "held"}, "numeric_target must be 'market'"),
    ({"numeric_size": "all"}, "numeric_size 'all'"),
    ({"prompt_ids": "everything"}, "prompt_ids 'everything'"),
])
def test_a_declaration_that_cannot_work_is_refused_with_its_reason(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        ActionSpec(sim.ActionType.JOIN_GROUP, **fields)
    assert "JOIN_GROUP" in str(err.value)


@pytest.mark.parametrize("spec", sim.ACTION_SPECS, ids=lambda s: s.name)
def test_each_example_is_an_action_of_its_kind_and_the_system_prompt_shows_it(spec):
    example = {"type": spec.name, **spec.example}
    action = sim.normalize_action(example)
    assert action.type == spec.name
    assert f"  {json.dumps(example)}" in system_prompt(sim.WorldParams())
    state = sim.reset(sim.WorldParams(), sim.draw_keys(np.random.default_rng(0), 1))
    assert sim.resolve_action(state, sim.WorldParams(), 0, action).kind == spec.kind


def test_the_numeric_face_offers_exactly_the_numeric_kinds_with_what_they_read():
    params = sim.WorldParams(num_markets=2, num_perps=5, num_groups=3)
    numeric = [spec for spec in sim.ACTION_SPECS if spec.numeric]
    assert list(ACTION_KINDS) == [spec.kind for spec in numeric]
    counts = {"market": 2, "perp": 5, "group": 3}
    assert action_nvec(params).tolist() == [len(numeric), max(counts[s.numeric_target] for s in numeric
                                                               if s.numeric_target), 5, 2]
    for i, spec in enumerate(numeric):
        assert KIND_READS[i].tolist() == [spec.numeric_target is not None, spec.numeric_size is not None,
                                          spec.numeric_side]


def test_the_decoder_prices_each_kind_by_its_size_rule():
    params = sim.WorldParams()
    state = sim.reset(params, sim.draw_keys(np.random.default_rng(3), 1))
    state.hold_no[0, 1] = 40.0
    eq = float(sim.equity(state, params)[0])
    for i, spec in enumerate(s for s in sim.ACTION_SPECS if s.numeric):
        batch = decode_actions(np.array([[i, 1, 2, 1]]), state, params, perp_leverage=3.0)
        expected = {None: 0.0, "equity": 0.05 * eq, "leveraged": 0.05 * eq * 3.0, "held": 0.5 * 40.0}
        assert batch.kind[0] == spec.kind
        assert batch.amount[0] == pytest.approx(expected[spec.numeric_size], rel=1e-12), spec.name


def test_every_prompt_ids_value_gives_the_per_tick_grammar_its_rows(monkeypatch):
    ids = TickIds(markets=("market-1",), held=(("market-1", "NO"),), tickers=("BTCAI",),
                  positions=(("ETHAI", "pos-2"),), groups=("Alpha Insiders",), recipients=("agent-2",))
    for value in (None, *PROMPT_IDS):
        specs = tuple(dataclasses.replace(spec, prompt_ids=value) if spec.kind == sim.ActionType.WAIT else spec
                      for spec in sim.ACTION_SPECS)
        monkeypatch.setattr(grammar_mod, "ACTION_SPECS", specs)
        rows = ids.rows()
        assert set(rows) == set(sim.ACTION_TYPES)
        assert rows["wait"], f"prompt_ids {value!r} offered nothing although the tick shows one of each id"
    monkeypatch.undo()
    rows = ids.rows()
    assert rows["close_perp"] == [{"ticker": ("ETHAI",), "position_id": ("pos-2",)}]
    assert rows["sell_prediction"] == [{"market": ("market-1",), "outcome": ("NO",)}]


def test_the_reply_grammar_has_a_rule_per_declared_kind():
    rules = dict(line.split(" ::= ", 1) for line in reply_gbnf().splitlines() if " ::= " in line)
    assert rules["action"].split(" | ") == [spec.name.replace("_", "-") for spec in sim.ACTION_SPECS]
    for spec in sim.ACTION_SPECS:
        assert f'\\"type\\": \\"{spec.name}\\"' in rules[spec.name.replace("_", "-")]


def test_sb3_action_table_has_a_row_per_kind_and_entry_it_reads():
    pytest.importorskip("stable_baselines3")
    from rlaif_gym.integrations.sb3 import canonical_actions, discrete_action_table

    params = sim.WorldParams()
    table = discrete_action_table(params)
    numeric = [spec for spec in sim.ACTION_SPECS if spec.numeric]
    counts = {None: 1, "market": params.num_markets, "perp": params.num_perps, "group": params.num_groups}
    for i, spec in enumerate(numeric):
        rows = table[table[:, 0] == i]
        per_target = (5 if spec.numeric_size else 1) * (2 if spec.numeric_side else 1)
        assert len(rows) == counts[spec.numeric_target] * per_target, spec.name
        assert np.array_equal(canonical_actions(rows), rows)  # only the entries the kind reads vary
