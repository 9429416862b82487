"""The `rollout_func` contract: `make_rollout_func` plays each batch's rows token-exactly and `env_return` is the
reward function that returns the env's own episode return.

Part of `rlaif_gym.integrations.trl`, which re-exports every public name.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import datasets
from trl import GRPOTrainer

from ...errors import ConfigError
from .episodes import GrammarOf, TokenGenerator, episode_metrics, play_episodes
from .generation import trainer_generator
from .rows import RowEpisode

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
                      = None, drop_zero_variance: bool = False, constrain: bool = False,
                      grammar_of: GrammarOf | None = None,
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
        constrain: sample each tick's reply under its grammar (see `play_episodes`); needs the transformers
            samplers (`use_vllm=False`): with vLLM, constrain the run with `vllm_structured_outputs` instead.
        grammar_of: the reply grammar of a tick, `(prompt, system_prompt) -> GBNF` (only with `constrain=True`);
            default `tick_grammar`.

    Returns:
        `rollout_func(prompts, trainer)` returning one completion per prompt: `prompt_ids`,
        `completion_ids`, `logprobs`, `env_mask`, and per episode `episode_return`, `pnl`,
        `format_valid_rate`, `executed_rate` and `replies` (forwarded to the reward functions).

    Raises:
        ConfigError: two rows with the same first prompt name different episodes, `grammar_of` without
            `constrain=True`, or (when called) a prompt that is not in `dataset`.
    """
    if grammar_of is not None and not constrain:
        raise ConfigError("grammar_of= chooses the grammar of a constrained reply; pass constrain=True as well (or "
                          "leave grammar_of out to sample unconstrained)")
    index: dict[str, RowEpisode] = {}
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
        same = (row.get("seed"), row.get("config"), row.get("snapshot"), row.get("ticks"), row.get("decisions"),
                row.get("mirrored"))
        if identity.setdefault(key, same) != same:
            raise ConfigError(f"two rows (seeds {identity[key][0]} and {same[0]}) have the same first prompt but "
                              "name different episodes; make_rollout_func finds an episode by its first prompt")
        if key not in index:
            index[key] = RowEpisode.from_row(**row)
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
                                max_reply_tokens=max_reply_tokens, max_total_tokens=limit, constrain=constrain,
                                grammar_of=grammar_of)
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
