"""The `fixed_stake` task rule (issue 58): the stake is the task's, so no reply can change it.

* every reply that bets (any amount, none, nonsense, any vocabulary) executes at the stake, with the same reward and
  info as the bet without an amount;
* the system prompt states the rule, `TickIds.from_prompt` reads it back, and the per-tick grammar (any think mode)
  then writes no amount: its samples execute at the stake;
* the rule is off by default (the amount is the reply's), and its bounds are checked.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlaif_gym.encoding.grammar import THINK_MODES, TickIds, tick_gbnf
from rlaif_gym.encoding.prompt import stake_rule
from rlaif_gym.envs import RLAIFTextEnv
from rlaif_gym.envs.decisions import DECISION_WORLD
from rlaif_gym.envs.glue import fixed_stake_amount
from rlaif_gym.errors import ConfigError, InvalidActionError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "encoding"))
from gbnf_subset import parse_gbnf, sample

CONFIG = {**DECISION_WORLD, "prompt_style": "compact", "fixed_stake": 0.05}


@pytest.fixture(scope="module")
def start():
    env = RLAIFTextEnv(CONFIG)
    env.reset(seed=11)
    env.step('{"type": "wait"}')  # a tick in, so the state is not the reset's
    return env.get_state(), env.prompt, float(env.state.cash[0]), env.view.markets[0].market_id


def _step(snapshot, reply: str):
    env = RLAIFTextEnv(CONFIG)
    env.set_state(snapshot)
    _, reward, _, _, info = env.step(reply)
    return reward, info


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(amount=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**9, 10**9),
                        st.text(max_size=8), st.just("1e999")),
       field=st.sampled_from(["amount", "amountUsd", "size", "usd"]),
       layout=st.sampled_from(["json", "think", "prose", "legacy"]))
def test_no_reply_changes_the_stake(start, amount, field, layout):
    snapshot, _, cash, market = start
    bare_reward, bare = _step(snapshot, json.dumps({"type": "buy_prediction", "market": market, "outcome": "YES"}))
    assert bare["fill"]["usd"] == fixed_stake_amount(0.05, cash) > 0
    action = {"type": "buy_prediction", "market": market, "outcome": "YES"}
    if amount is not None:
        action[field] = amount
    if layout == "legacy":
        action = {"action": "buy_yes", "marketId": market, **({field: amount} if amount is not None else {})}
    body = json.dumps(action, default=str)
    reply = {"json": body, "think": f"<think>all in</think>\n{body}", "prose": f"I bet big: {body}",
             "legacy": body}[layout]
    reward, info = _step(snapshot, reply)
    assert info["fill"]["usd"] == bare["fill"]["usd"], (reply, info["format_errors"])
    assert info["parsed_action"]["amount"] == fixed_stake_amount(0.05, cash)
    if layout == "json":  # the canonical reply: the same step as the bet without an amount, bit for bit
        assert reward == bare_reward and _same(info["reward_components"], bare["reward_components"])


def test_the_prompt_states_the_rule_and_the_grammar_leaves_the_amount_out(start):
    snapshot, prompt, cash, _ = start
    env = RLAIFTextEnv(CONFIG)
    assert stake_rule(0.05) in env.system_prompt and '"amount"' not in env.system_prompt
    ids = TickIds.from_prompt(prompt, env.system_prompt)
    assert ids.fixed_stake and not TickIds.from_prompt(prompt, RLAIFTextEnv(DECISION_WORLD).system_prompt).fixed_stake
    rng = np.random.default_rng(0)
    bets = 0
    for think in THINK_MODES:
        grammar = tick_gbnf(ids, think=think)
        buy = next(line for line in grammar.splitlines() if line.startswith("buy-prediction ::="))
        assert "amount" not in buy
        rules = parse_gbnf(grammar)
        for _ in range(40):
            reply = sample(rules, rng)
            assert reply.startswith("<think>") == (think == "required") or think == "optional"
            _, info = _step(snapshot, reply)
            assert info["parsed_action"] is not None and not info["format_errors"], reply
            if info["parsed_action"]["type"] == "buy_prediction":
                bets += 1
                assert info["feedback"]["success"] and info["fill"]["usd"] == fixed_stake_amount(0.05, cash)
    assert bets > 10


def test_off_by_default_and_bounded():
    env = RLAIFTextEnv({**DECISION_WORLD, "prompt_style": "compact"})
    env.reset(seed=11)
    market = env.view.markets[0].market_id
    info = env.step(json.dumps({"type": "buy_prediction", "market": market, "outcome": "NO", "amount": 123}))[4]
    assert info["fill"]["usd"] == 123.0
    assert not re.search("Every bet stakes", env.system_prompt)
    no_amount = env.step(json.dumps({"type": "buy_prediction", "market": market, "outcome": "NO"}))[4]
    assert no_amount["parsed_action"] is None and "amount" in no_amount["format_errors"][0]
    for bad in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="fixed_stake"):
            RLAIFTextEnv({"fixed_stake": bad})


def test_normalize_action_fixed_fields_fill_and_replace():
    from rlaif_gym.sim import normalize_action

    fixed = {"buy_prediction": {"amount": 7.5}}
    assert normalize_action({"type": "buy_prediction", "market": "m", "outcome": "YES"}, fixed=fixed).amount == 7.5
    assert normalize_action({"action": "buy_no", "marketId": "m", "amount": 9e9}, fixed=fixed).amount == 7.5
    assert normalize_action({"type": "open_perp", "ticker": "T", "side": "LONG", "size": 3}, fixed=fixed).size == 3
    with pytest.raises(InvalidActionError):
        normalize_action({"type": "buy_prediction", "market": "m", "outcome": "YES"})
