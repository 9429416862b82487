"""The per-tick constraint (issue 18): a reply the tick's grammar or schema admits is an action the world executes.

Episodes are played with a policy that buys, sells, opens and closes perps and joins groups, so the
prompts show held shares, open positions, joined groups and a social feed. At each tick the grammar
built from that prompt (`TickIds.from_prompt` + `tick_gbnf`) is read back by the independent reader
in gbnf_subset.py and sampled adversarially; every sample is stepped in a copy of the episode
(`get_state` / `set_state`), and the world may refuse it only for its amount (too little cash,
shares or margin, below the minimum order, proceeds under the fee): never as an unknown market,
ticker, group, position or recipient, a closed market, an existing or missing position, a group
already joined, a leverage outside 1 to the cap, or empty text. The same for the JSON schema's
instances and for llama.cpp's own conversion of that schema. The id-agnostic grammar fails the same
check, so the check can tell the two apart.
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
from tick_checks import assert_ids_match_view

from rlaif_gym.encoding.grammar import (
    GrammarLimits,
    TickIds,
    canonical_reply_from_json,
    constraint_body,
    reply_gbnf,
    reply_max_chars,
    tick_gbnf,
    tick_json_schema,
)
from rlaif_gym.encoding.reply import parse_reply
from rlaif_gym.encoding.view import npc_name
from rlaif_gym.envs.text_env import RLAIFTextEnv
from rlaif_gym.sim import ErrorCode
from rlaif_gym.sim import actions as sim_actions

LIMITS = GrammarLimits(think_chars=40, id_chars=24, text_chars=30, int_digits=5)
# What the amount alone decides (`sim.actions.AMOUNT_ERRORS`); a per-tick reply may be refused for these, nothing else.
AMOUNT_ERRORS = sorted(sim_actions.AMOUNT_ERRORS)


def _message_pattern(code: ErrorCode) -> re.Pattern:
    template = sim_actions._MESSAGES[code]  # the sentence `error_message` formats
    return re.compile(re.sub(r"\\\{[^}]*\\\}", ".*", re.escape(template)).replace(r"\{", "{") + "$")


ALLOWED = [_message_pattern(c) for c in AMOUNT_ERRORS]
# llama-cpp-python's JSON-schema converter drops integer bounds (vLLM and OpenAI keep them; serve-local
# sends GBNF), so through it a number may also be 0, negative or above the leverage cap.
UNBOUNDED_NUMBER = [_message_pattern(c) for c in (ErrorCode.NOT_A_NUMBER, ErrorCode.LEVERAGE_BELOW_ONE,
                                                   ErrorCode.LEVERAGE_ABOVE_CAP)]


def _reply(action: dict) -> str:
    return "<think>plan</think>\n" + json.dumps(action)


def _policy(view, rng: np.random.Generator) -> str:
    """A reply that changes what the next prompt shows: trades, positions, groups (ids from the view)."""
    choice = int(rng.integers(6))
    held = [(m.market_id, o) for m in view.markets for o, h in (("YES", m.held_yes), ("NO", m.held_no)) if h > 0]
    open_pos = [p for p in view.perps if p.position_id]
    free = [p for p in view.perps if not p.position_id]
    unjoined = [g for g, joined in view.groups if not joined]
    if choice == 0 or (choice == 1 and not held):
        m = view.markets[int(rng.integers(len(view.markets)))]
        return _reply({"type": "buy_prediction", "market": m.market_id, "outcome": ["YES", "NO"][int(rng.integers(2))],
                       "amount": 150})
    if choice == 1:
        market, outcome = held[int(rng.integers(len(held)))]
        return _reply({"type": "sell_prediction", "market": market, "outcome": outcome, "shares": 20})
    if choice == 2 and free:
        return _reply({"type": "open_perp", "ticker": free[0].ticker, "side": "SHORT", "size": 500, "leverage": 2})
    if choice == 3 and open_pos:
        return _reply({"type": "close_perp", "position_id": open_pos[0].position_id})
    if choice == 4 and unjoined:
        return _reply({"type": "join_group", "group": unjoined[0]})
    return _reply({"type": "wait"})


def _episode_prompts(seed: int, ticks: int, config: dict | None = None):
    """(env, snapshot, system prompt, prompt) at each tick of one episode played by `_policy`."""
    env = RLAIFTextEnv(config)
    prompt, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(ticks):
        yield env, env.get_state(), info.get("system_prompt", env.system_prompt), prompt
        prompt, _, terminated, truncated, info = env.step(_policy(env.view, rng))
        if terminated or truncated:
            return


def _refusal(env: RLAIFTextEnv, snapshot, reply: str) -> str | None:
    """Step `reply` from `snapshot`; the world's refusal message (None: executed)."""
    env.set_state(snapshot)
    parsed = parse_reply(reply)
    assert parsed.ok, f"{reply!r} does not parse: {parsed.errors}"
    info = env.step(reply)[4]
    assert info["parsed_action"] is not None
    return None if info["feedback"]["success"] else info["feedback"]["error"]


def _assert_executable(env, snapshot, reply: str, prompt: str, also: list[re.Pattern] | None = None) -> None:
    error = _refusal(env, snapshot, reply)
    assert error is None or any(p.match(error) for p in ALLOWED + (also or [])), (
        f"the per-tick constraint admitted a reply the world refuses for more than its amount: {error!r}\n"
        f"reply: {reply!r}\nprompt:\n{prompt}")


SCENARIOS = [(seed, None) for seed in (0, 1, 2)] + [(3, {"num_markets": 2, "num_perps": 1, "num_groups": 1}),
                                                    (4, {"num_npcs": 30, "num_markets": 8, "num_perps": 5})]


# -- reading the prompt -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "config"), SCENARIOS)
def test_the_ids_read_from_the_prompt_are_the_views(seed, config):
    """`TickIds.from_prompt` reads back exactly what the prompt was rendered from (catches a prompt change)."""
    seen = {"held": 0, "positions": 0, "joined": 0, "recipients": 0}
    for env, _, system, prompt in _episode_prompts(seed, 30, config):
        view = env.view
        ids = TickIds.from_prompt(prompt, system)
        assert_ids_match_view(ids, view)
        assert ids.max_leverage == env.params.max_leverage
        authors = set(re.findall(r"^- \[t\d+\] @(.+?) \(reputation", prompt, re.MULTILINE))
        assert {npc_name(int(r.split("-")[1])) for r in ids.recipients} == authors
        assert all(int(r.split("-")[1]) < env.params.num_npcs for r in ids.recipients)
        dm_rows = ids.rows()["send_dm"]
        offered = set(dm_rows[0]["recipient"]) if dm_rows else set()
        assert offered == set(ids.recipients) | authors, "a DM may name an NPC by its id or as the feed shows it"
        seen["held"] += bool(ids.held)
        seen["positions"] += bool(ids.positions)
        seen["joined"] += len(ids.groups) < env.params.num_groups
        seen["recipients"] += bool(ids.recipients)
    assert all(seen.values()), f"the episode never showed some kinds of ids: {seen}"


def test_other_text_has_no_tick_ids():
    assert TickIds.from_prompt("What is the capital of France?") is None
    assert TickIds.from_prompt("") is None


# -- the grammar --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "config"), SCENARIOS)
def test_every_sample_of_the_tick_grammar_is_executable(seed, config):
    rng = np.random.default_rng(seed)
    kinds: set[str] = set()
    for env, snapshot, system, prompt in _episode_prompts(seed, 20, config):
        ids = TickIds.from_prompt(prompt, system)
        rules = parse_gbnf(tick_gbnf(ids, LIMITS))
        assert max_length(rules) <= reply_max_chars(LIMITS), "max_tokens = reply_max_chars could cut a reply off"
        for _ in range(30):
            reply = sample(rules, rng)
            _assert_executable(env, snapshot, reply, prompt)
            kinds.add(parse_reply(reply).action.type)
    assert kinds >= {"wait", "buy_prediction", "sell_prediction", "open_perp", "close_perp", "create_post"}, kinds


def test_the_id_agnostic_grammar_fails_the_same_check():
    """Without the per-tick ids, samples name markets, tickers and groups the world does not know."""
    rules = parse_gbnf(reply_gbnf(LIMITS))
    rng = np.random.default_rng(0)
    env, snapshot, _, _ = next(_episode_prompts(0, 1))
    errors = [_refusal(env, snapshot, sample(rules, rng)) for _ in range(200)]
    unknown = [e for e in errors if e is not None and not any(p.match(e) for p in ALLOWED)]
    assert len(unknown) > 50, f"only {len(unknown)} of 200 refused for an id: the check would not see a missing feature"
    assert any(e.startswith("unknown market") for e in unknown)


def test_what_is_not_there_is_not_offered():
    """No shares, no positions, every group joined, nobody in the feed: those action types drop out."""
    ids = TickIds(markets=("market-4",), tickers=("BTCAI",), max_leverage=3.0)
    gbnf = tick_gbnf(ids, LIMITS)
    action = next(line for line in gbnf.splitlines() if line.startswith("action ::="))
    assert action == "action ::= wait | buy-prediction | open-perp | create-post"
    assert 'leverage ::= ( "1" | "2" ) ("." [0-9]{1,2})? | "3"' in gbnf
    schema = tick_json_schema(ids, LIMITS)
    types = {b["properties"]["type"]["enum"][0] for b in schema["properties"]["action"]["anyOf"]}
    assert types == {"wait", "buy_prediction", "open_perp", "create_post"}


def test_blank_post_text_is_not_in_the_grammar():
    regex = re.compile(to_regex(parse_gbnf(tick_gbnf(TickIds(), LIMITS))), re.DOTALL)
    assert regex.fullmatch(_reply({"type": "create_post", "content": "gm"}))
    assert not regex.fullmatch(_reply({"type": "create_post", "content": "   "}))
    assert not regex.fullmatch(_reply({"type": "create_post", "content": " gm"}))


# -- the JSON schema ---------------------------------------------------------------------------------------------


def _instance(schema: dict, rng: np.random.Generator):
    """A random instance of the schema subset the per-tick schema uses."""
    if "anyOf" in schema:
        return _instance(schema["anyOf"][int(rng.integers(len(schema["anyOf"])))], rng)
    if "enum" in schema:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    if schema["type"] == "object":
        return {k: _instance(v, rng) for k, v in schema["properties"].items()}
    if schema["type"] == "integer":
        return int(rng.integers(schema["minimum"], schema["maximum"] + 1))
    pattern = re.compile(schema.get("pattern", ".*"), re.DOTALL)
    n = int(rng.integers(schema["minLength"], schema["maxLength"] + 1))
    pieces = [p for p in (*ADVERSARIAL, "a", "B", "7") if re.fullmatch(r"[^\x00-\x1f]*", p)]
    for _ in range(20):
        out = ""
        while len(out) < n:
            out += pieces[int(rng.integers(len(pieces)))]
        if pattern.fullmatch(out[:n]):
            return out[:n]
    return "a" * n


@pytest.mark.parametrize(("seed", "config"), SCENARIOS[:3] + SCENARIOS[4:])
def test_every_instance_of_the_tick_schema_is_executable(seed, config):
    rng = np.random.default_rng(100 + seed)
    for env, snapshot, system, prompt in _episode_prompts(seed, 12, config):
        schema = tick_json_schema(TickIds.from_prompt(prompt, system), LIMITS)
        for _ in range(25):
            reply = canonical_reply_from_json(json.dumps(_instance(schema, rng)))
            _assert_executable(env, snapshot, reply, prompt)


def test_llama_cpp_reads_the_tick_schema_into_a_grammar_of_executable_replies():
    """llama.cpp's own JSON-schema converter (what its server runs for a schema) keeps the ids (not the
    integer bounds: see UNBOUNDED_NUMBER)."""
    llama_grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="the local-llm extra is not installed")
    rng = np.random.default_rng(21)
    for env, snapshot, system, prompt in _episode_prompts(1, 12):
        schema = tick_json_schema(TickIds.from_prompt(prompt, system), LIMITS)
        rules = parse_gbnf(llama_grammar.json_schema_to_gbnf(json.dumps(schema)))
        for _ in range(20):
            _assert_executable(env, snapshot, canonical_reply_from_json(sample(rules, rng)), prompt, UNBOUNDED_NUMBER)


def test_constraint_body_per_tick():
    ids = TickIds(markets=("market-1",), tickers=("ETHAI",), groups=("Degen Den",))
    assert constraint_body("gbnf", LIMITS, ids) == {"grammar": tick_gbnf(ids, LIMITS)}
    assert constraint_body("guided_json", LIMITS, ids) == {"guided_json": tick_json_schema(ids, LIMITS)}
    rf = constraint_body("response_format", LIMITS, ids)["response_format"]
    assert rf["json_schema"]["schema"] == tick_json_schema(ids, LIMITS) and rf["json_schema"]["strict"] is True
    assert constraint_body("gbnf", LIMITS) == {"grammar": reply_gbnf(LIMITS)}
