"""Token-exact episodes: `play_episodes` plays a batch in lockstep with any `TokenGenerator` and returns the ids,
logprobs and env mask GRPO trains on, with the env's scores.

Part of `rlaif_gym.integrations.trl`, which re-exports every public name.
"""

from __future__ import annotations

import inspect
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ... import sim
from ...encoding.grammar import TickIds, reply_gbnf, tick_gbnf
from ...envs.decisions import WAIT_REPLY, mirror_reply
from ...errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

from .rows import RowEpisode

TokenGenerator = Callable[[list[list[int]], int], tuple[list[list[int]], list[list[float]]]]
"""`generate(sequences, max_new_tokens) -> (completion ids, logprobs)`: one sampled continuation per
sequence, ending with an end-of-turn token when the model produced one, and the log-probability of
each sampled token under the distribution it was sampled from.

The generators of this package also take `grammars=` (per sequence a reply grammar, GBNF text, or None):
a constrained continuation follows its grammar, and its logprobs are under the distribution renormalised
over the tokens the grammar allows. `play_episodes(..., constrain=True)` passes it."""

GrammarOf = Callable[[str, str], str]
"""`grammar_of(prompt, system_prompt) -> GBNF text`: the reply grammar of one tick, from the tick's prompt and
the env's system prompt (`play_episodes(..., constrain=True)`; default `tick_grammar`)."""


def tick_grammar(prompt: str, system_prompt: str) -> str:
    """The reply grammar of one tick: `tick_gbnf` over the ids the prompt shows (and the leverage cap the system
    prompt states); the grammar of any id (`reply_gbnf`) for text that is not a rendered tick."""
    ids = TickIds.from_prompt(prompt, system_prompt)
    return reply_gbnf() if ids is None else tick_gbnf(ids)


def _takes_grammars(generate: Callable[..., Any]) -> bool:
    """Whether `generate` accepts a `grammars` keyword (True when its signature cannot be read)."""
    try:
        params = inspect.signature(generate).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "grammars" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


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


def play_episodes(specs: Sequence[RowEpisode], generate: TokenGenerator, tokenizer: PreTrainedTokenizerBase, *,
                  max_reply_tokens: int = 96, max_total_tokens: int | None = None,
                  end_of_turn: int | None = None, constrain: bool = False, grammar_of: GrammarOf | None = None,
                  ) -> list[EpisodeResult]:
    """Play `specs` in lockstep, one `generate` call per tick for every episode still running.

    Each episode's sequence is `prompt_ids` (system prompt and first tick, chat-templated with the
    generation prompt) followed by its completion: per tick, the sampled reply (its end-of-turn token
    included when the model produced one; added as an environment token when the reply hit
    `max_reply_tokens`), then the template's turn tokens with the next prompt. The env receives each
    reply decoded without special tokens. After a spec's last decision (`RowEpisode.decisions`) the
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
        constrain: sample each reply under its tick's grammar: `generate` gets `grammars=` (one GBNF text per
            sequence, `grammar_of(prompt, env.system_prompt)` of the tick it answers), so every reply the grammar
            lets complete parses to an action on ids the prompt shows. A grammar's reasoning may run longer than
            `max_reply_tokens` (`reply_max_chars` bounds a reply in characters, hence tokens); a reply cut off
            there is scored as written. Default off: the model writes what it likes.
        grammar_of: the reply grammar of a tick (only with `constrain=True`); default `tick_grammar`, i.e.
            `tick_gbnf(TickIds.from_prompt(prompt, system_prompt))`. Pass another to choose the grammar's
            options (its limits, or its think block).

    Raises:
        ConfigError: `grammar_of` without `constrain=True`, or `constrain=True` with a `generate` that takes
            no `grammars` keyword.
    """
    if grammar_of is not None and not constrain:
        raise ConfigError("grammar_of= chooses the grammar of a constrained reply; pass constrain=True as well (or "
                          "leave grammar_of out to sample unconstrained)")
    if constrain and not _takes_grammars(generate):
        raise ConfigError(f"constrain=True passes each tick's grammar as generate(..., grammars=[...]), but "
                          f"{getattr(generate, '__name__', type(generate).__name__)} takes no `grammars` keyword; "
                          "use transformers_generator, shared_prompt_generator or trainer_generator, or add it")
    grammar_of = (grammar_of or tick_grammar) if constrain else None
    end_of_turn = tokenizer.eos_token_id if end_of_turn is None else end_of_turn
    if max_total_tokens is None:
        limit = getattr(tokenizer, "model_max_length", None)
        max_total_tokens = limit if isinstance(limit, int) and limit < 1_000_000 else None
    turns = _TurnTemplate(tokenizer, end_of_turn)
    envs, results, left, prompts = [], [], [], []
    for spec in specs:
        env, prompt = spec.start()
        prompts.append(prompt)
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
        sequences = [results[i].prompt_ids + results[i].completion_ids for i in running]
        if grammar_of is None:
            outs, lps = generate(sequences, max_reply_tokens)
        else:
            grammars: dict[tuple[str, str], str] = {}  # a GRPO group's episodes share their state's grammar
            for i in running:
                key = (prompts[i], envs[i].system_prompt)
                if key not in grammars:
                    grammars[key] = grammar_of(*key)
            outs, lps = generate(sequences, max_reply_tokens,
                                 grammars=[grammars[(prompts[i], envs[i].system_prompt)] for i in running])
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
            if specs[i].mirrored:  # the reply to the mirrored prompt, played in the world itself
                reply = mirror_reply(reply)
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
                prompts[i] = prompt  # the tick the next reply answers
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


