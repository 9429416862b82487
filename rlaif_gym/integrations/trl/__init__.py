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

The package, one module per job: `rows` (dataset rows and `RowEpisode`), `tool_env` (`RLAIFTRLEnv`),
`episodes` (token-exact episodes), `rollout` (`make_rollout_func`, `env_return`), `decisions` (held-out
decision points, evaluated), `generation` (generation backends, the GGUF policy), `constraint` (the reply grammar as
a token mask for those backends, and as vLLM settings), `sft` (the warm start) and
`grpo` with `prefix_cache` (`SharedPromptGRPOTrainer`: training machinery pinned to TRL's version). Every
public name is importable from here, as before the split.
"""

from __future__ import annotations

from ...errors import DependencyNotInstalled, install_hint

try:
    import datasets  # noqa: F401
    import torch  # noqa: F401
    import trl  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled(
        "rlaif_gym.integrations.trl needs TRL: " + install_hint("trl")
    ) from exc

from ...envs.decisions import DecisionReply, decision_messages, score_decision_replies
from .constraint import (
    GrammarLogitsProcessor,
    GrammarViolation,
    ReplyConstraint,
    ReplyMatcher,
    vllm_structured_outputs,
)
from .decisions import decision_table, evaluate_decisions
from .episodes import EpisodeResult, GrammarOf, TokenGenerator, episode_metrics, play_episodes, tick_grammar
from .generation import load_gguf_policy, shared_prompt_generator, trainer_generator, transformers_generator
from .grpo import SharedPromptGRPOTrainer, shared_prompt_logps
from .rollout import env_return, make_rollout_func
from .rows import Contract, RowEpisode, build_dataset, dataset_rows
from .sft import decision_sft_records, scripted_sft_records, sft_examples, sft_train
from .tool_env import EPISODE_ENDED, EpisodeFaultError, RLAIFTRLEnv

__all__ = [
    "EPISODE_ENDED",
    "Contract",
    "DecisionReply",
    "EpisodeFaultError",
    "EpisodeResult",
    "GrammarLogitsProcessor",
    "GrammarOf",
    "GrammarViolation",
    "RLAIFTRLEnv",
    "ReplyConstraint",
    "ReplyMatcher",
    "RowEpisode",
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
    "tick_grammar",
    "trainer_generator",
    "transformers_generator",
    "vllm_structured_outputs",
]


def __getattr__(name: str) -> object:
    """`EpisodeSpec`, this package's name for `RowEpisode` before `rlaif_gym.rollout.EpisodeSpec` (a collection's plan
    entry) was the only class of that name: still given out, with a `DeprecationWarning`."""
    if name == "EpisodeSpec":
        import warnings

        warnings.warn("rlaif_gym.integrations.trl.EpisodeSpec is RowEpisode now (rlaif_gym.rollout.EpisodeSpec is the "
                      "collector's plan entry); import RowEpisode", DeprecationWarning, stacklevel=2)
        return RowEpisode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
