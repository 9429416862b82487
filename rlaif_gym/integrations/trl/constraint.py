"""The env's reply grammar as a constraint for in-process samplers: transformers' `generate`, this package's samplers
(`transformers_generator`, `shared_prompt_generator`, `trainer_generator`) and, as settings, vLLM.

Why: a small policy rarely writes the reply format on its own, and GRPO cannot rank replies that all score as
format errors. The env writes each tick's grammar (`encoding.grammar.tick_gbnf`: the think block, then one JSON
action over the ids the tick's prompt shows); a sampler that draws only tokens the grammar allows writes only replies
`parse_reply` turns into an action the world can act on. The llama.cpp server path sends the same GBNF
(`constraint_body`); here it is compiled by llguidance (the engine vLLM and llama.cpp use) into a token mask.

* `ReplyConstraint`: built once per tokenizer (building llguidance's view of the vocabulary is the costly part;
  `ReplyConstraint.for_tokenizer` keeps one per tokenizer and end-of-turn ids). It compiles each distinct grammar
  text once (a GRPO group shares one) and starts a `ReplyMatcher` per sequence.
* `ReplyMatcher`: one sequence's place in its grammar: `allowed()` the tokens that may come next, `advance(token)`
  the sampled one. Once the reply is complete (`complete`), only the end-of-turn tokens are allowed.
* `GrammarLogitsProcessor`: a transformers `LogitsProcessor` masking each batch row by its own grammar (None: the
  row is left alone), for `model.generate(..., logits_processor=[...])`.
* `vllm_structured_outputs`: the settings that make vLLM decode under the same GBNF.

Masking sets a refused token's logit to -inf before the temperature and the softmax, so the distribution a token is
drawn from, and the logprob a sampler reports for it, is the policy's renormalised over the allowed tokens.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import LogitsProcessor

from ...errors import ConfigError, DependencyNotInstalled, RLAIFError, install_hint

if TYPE_CHECKING:
    import llguidance
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "GrammarLogitsProcessor",
    "GrammarViolation",
    "ReplyConstraint",
    "ReplyMatcher",
    "vllm_structured_outputs",
]


class GrammarViolation(RLAIFError, RuntimeError):
    """A token reached a `ReplyMatcher` that its grammar does not allow at that point: the sampler drew it without
    applying the mask (or from logits wider than the mask covers)."""


def _llguidance() -> Any:
    """llguidance and the two submodules used here, imported on first use: the unconstrained samplers work without
    it."""
    try:
        import llguidance
        import llguidance.hf
        import llguidance.numpy
    except ImportError as exc:
        raise DependencyNotInstalled("constrained sampling (ReplyConstraint) needs llguidance: "
                                     + install_hint("trl")) from exc
    return llguidance


_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], ReplyConstraint]] = weakref.WeakKeyDictionary()


class ReplyConstraint:
    """The reply grammar as a token mask, for one tokenizer and its end-of-turn tokens.

    Building one reads the tokenizer's whole vocabulary into llguidance (the costly part); build it once per
    tokenizer, or take the shared one from `for_tokenizer`. Each distinct grammar text is compiled once
    and kept in a least-recently-used cache of `cache_size` grammars; a sequence's `ReplyMatcher` starts from a copy.

    Args:
        tokenizer: a fast (Rust-backed) Hugging Face tokenizer, the policy's.
        end_token_ids: the tokens that end a reply (the generator's eos ids); allowed once the grammar is complete,
            and only then. Default: the tokenizer's eos token.
        cache_size: how many compiled grammars to keep (a batch of ticks from different states has one each).

    Raises:
        ConfigError: a slow (Python) tokenizer, no end-of-turn token, or `cache_size` < 1.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, end_token_ids: Sequence[int] | None = None,
                 cache_size: int = 64) -> None:
        lib = _llguidance()
        ends = list(end_token_ids) if end_token_ids is not None else [tokenizer.eos_token_id]
        if not ends or any(t is None for t in ends):
            raise ConfigError(f"ReplyConstraint needs the token ids that end a reply, got {ends!r}; pass "
                              "end_token_ids= (the generator's eos ids) for a tokenizer without an eos token")
        if cache_size < 1:
            raise ConfigError(f"cache_size must be >= 1 compiled grammar, got {cache_size}")
        self.end_token_ids: tuple[int, ...] = tuple(dict.fromkeys(int(t) for t in ends))
        """The tokens that end a reply, allowed only once the grammar is complete."""
        try:
            self._tokenizer = lib.hf.from_tokenizer(tokenizer, eos_token=list(self.end_token_ids))
        except ValueError as exc:
            raise ConfigError(f"ReplyConstraint needs a fast (Rust-backed) tokenizer, got {type(tokenizer).__name__}; "
                              "load it with AutoTokenizer.from_pretrained(..., use_fast=True)") from exc
        self.vocab_size: int = self._tokenizer.vocab_size
        """Tokens the mask covers; logits wider than this (a padded embedding) have their extra columns refused."""
        self.cache_size = cache_size
        self._compiled: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()
        self._executor = lib.LLExecutor()

    @classmethod
    def for_tokenizer(cls, tokenizer: PreTrainedTokenizerBase, end_token_ids: Sequence[int] | None = None,
                      ) -> ReplyConstraint:
        """The constraint shared by every caller with this tokenizer (kept while the tokenizer lives) and these
        end-of-turn ids: the samplers take it, so the vocabulary is read and each grammar compiled once per run,
        however often a generator is rebuilt (`trainer_generator` builds one per call)."""
        ends = tuple(int(t) for t in end_token_ids) if end_token_ids is not None else (tokenizer.eos_token_id,)
        per_tokenizer = _SHARED.setdefault(tokenizer, {})
        if ends not in per_tokenizer:
            per_tokenizer[ends] = cls(tokenizer, end_token_ids=list(ends))
        return per_tokenizer[ends]

    def _matcher_of(self, grammar: str) -> llguidance.LLMatcher:
        """The compiled grammar in its start state (cached; never advanced itself)."""
        if not isinstance(grammar, str):
            raise ConfigError(f"a reply grammar is GBNF text (encoding.grammar.tick_gbnf / reply_gbnf), got "
                              f"{type(grammar).__name__}")
        cached = self._compiled.get(grammar)
        if cached is not None:
            self._compiled.move_to_end(grammar)
            return cached
        lib = _llguidance()
        first = next((line for line in grammar.splitlines() if line.strip() and not line.startswith("#")), "")
        try:
            spec = lib.grammar_from("gbnf", grammar)
        except ValueError as exc:
            raise ConfigError(f"the reply grammar is not valid GBNF ({exc}); expected the text tick_gbnf or reply_gbnf "
                              f"writes, got one starting {first[:80]!r}") from exc
        matcher = lib.LLMatcher(self._tokenizer, spec, log_level=0)
        if matcher.is_error():
            raise ConfigError(f"llguidance cannot compile the reply grammar: {matcher.get_error().strip()[:600]}; fix "
                              f"the GBNF (its first rule: {first[:80]!r})")
        self._compiled[grammar] = matcher
        if len(self._compiled) > self.cache_size:
            self._compiled.popitem(last=False)
        return matcher

    def matcher(self, grammar: str) -> ReplyMatcher:
        """A fresh `ReplyMatcher` for one sequence's reply under `grammar` (GBNF text).

        Raises:
            ConfigError: the grammar does not compile (the message carries llguidance's reason).
        """
        return ReplyMatcher(self, self._matcher_of(grammar).deep_copy(), grammar)

    def accepts(self, grammar: str, token_ids: Sequence[int]) -> bool:
        """Whether `token_ids` (a reply, end-of-turn token optional) is a whole reply of `grammar` when fed token by
        token as a sampler writes it: every token allowed at its step and the grammar complete after the last."""
        matcher = self.matcher(grammar)
        for token in token_ids:
            if matcher.ended or not matcher._consume(int(token)):
                return False
        return matcher.complete

    def allowed_tokens(self, matchers: Sequence[ReplyMatcher | None], width: int | None = None) -> torch.Tensor:
        """The tokens each row may sample next, as a bool tensor (rows, `width`) on the CPU.

        A None row, or one whose reply has ended, allows everything (nothing left to constrain); a constrained row
        refuses the columns past `vocab_size`. `width` defaults to `vocab_size` (pass the logits' last dimension).

        Raises:
            GrammarViolation: a constrained row allows nothing (its matcher went into an error state).
        """
        lib = _llguidance()
        width = self.vocab_size if width is None else width
        live = [(m._matcher, i) for i, m in enumerate(matchers) if m is not None and not m.ended]
        out = torch.ones((len(matchers), width), dtype=torch.bool)
        if not live:
            return out
        for m, _ in live:
            if m.is_error():
                raise GrammarViolation(f"the reply matcher is in an error state: {m.get_error().strip()[:400]}")
        bitmask = lib.numpy.allocate_token_bitmask(len(matchers), self.vocab_size)  # int32 words, 32 tokens each
        lib.numpy.fill_next_token_bitmask_par(self._executor, live, bitmask)
        words = torch.from_numpy(bitmask)
        bits = (words.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1  # bit k of word w: token 32 w + k
        allowed = bits.reshape(len(matchers), -1)[:, : min(width, self.vocab_size)].bool()
        rows = [i for _, i in live]
        out[rows, : allowed.size(1)] = allowed[rows]
        out[rows, allowed.size(1):] = False
        empty = [i for i in rows if not out[i].any()]
        if empty:
            raise GrammarViolation(f"rows {empty} allow no token (logits of width {width}, a mask of "
                                   f"{self.vocab_size}); the grammar has no continuation the tokenizer can write")
        return out

    def mask_logits(self, logits: torch.Tensor, matchers: Sequence[ReplyMatcher | None]) -> torch.Tensor:
        """`logits` (rows, vocabulary) with each constrained row's refused tokens at -inf (a new tensor)."""
        allowed = self.allowed_tokens(matchers, logits.size(-1)).to(logits.device)
        return logits.masked_fill(~allowed, float("-inf"))


class ReplyMatcher:
    """One sequence's position in its reply grammar (from `ReplyConstraint.matcher`).

    Attributes:
        grammar: the GBNF text it follows.
        tokens: the tokens advanced through so far (the end token included once sampled).
    """

    def __init__(self, constraint: ReplyConstraint, matcher: llguidance.LLMatcher, grammar: str) -> None:
        self._constraint, self._matcher, self.grammar = constraint, matcher, grammar
        self.tokens: list[int] = []
        self._ended = False

    @property
    def complete(self) -> bool:
        """The reply so far is a whole reply of the grammar: an end-of-turn token may follow (the only token that may,
        once the grammar admits nothing longer)."""
        return self._matcher.is_accepting()

    @property
    def ended(self) -> bool:
        """An end-of-turn token was advanced through: the reply is over and nothing more is constrained."""
        return self._ended

    def allowed(self, width: int | None = None) -> torch.Tensor:
        """The tokens that may come next, a bool vector of `width` (default the constraint's `vocab_size`)."""
        return self._constraint.allowed_tokens([self], width)[0]

    def _consume(self, token: int) -> bool:
        if not self._matcher.consume_token(token):
            return False
        self.tokens.append(token)
        self._ended = token in self._constraint.end_token_ids
        return True

    def advance(self, token: int) -> None:
        """Move past the sampled `token`.

        Raises:
            GrammarViolation: the grammar does not allow `token` here (or the reply already ended).
        """
        token = int(token)
        if self._ended:
            raise GrammarViolation(f"token {token} came after the reply's end-of-turn token; stop advancing a matcher "
                                   "once `ended` is true")
        if not self._consume(token):
            so_far = self._constraint._tokenizer.decode_str(self.tokens)
            piece = self._constraint._tokenizer.decode_str([token]) if token < self._constraint.vocab_size else "?"
            raise GrammarViolation(f"token {token} ({piece!r}) is not allowed after {so_far[-120:]!r}; sample from "
                                   "logits masked by allowed() (or ReplyConstraint.mask_logits)")


class GrammarLogitsProcessor(LogitsProcessor):
    """A transformers `LogitsProcessor` that masks each batch row by its own reply grammar.

    One per `generate` call (it follows the rows' tokens): row i of the batch follows `grammars[i]`, and a None
    entry leaves its row's scores untouched. transformers runs the processors passed to `generate` before its
    temperature, top-k and top-p warpers, so those see the masked scores, and `output_scores` reports the scores
    the token was drawn from: renormalised over the allowed tokens. Greedy decoding takes the best allowed token.

    Args:
        constraint: the tokenizer's `ReplyConstraint` (its end tokens should be the `eos_token_id`s `generate` stops
            on).
        grammars: per batch row, GBNF text or None.
    """

    def __init__(self, constraint: ReplyConstraint, grammars: Sequence[str | None]) -> None:
        self.constraint = constraint
        self.matchers: list[ReplyMatcher | None] = [None if g is None else constraint.matcher(g) for g in grammars]
        self._prompt_width: int | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.size(0) != len(self.matchers):
            raise ConfigError(f"GrammarLogitsProcessor has {len(self.matchers)} grammars but the batch has "
                              f"{input_ids.size(0)} rows; pass one grammar (or None) per row (num_return_sequences "
                              "and beams multiply the rows)")
        if self._prompt_width is None:
            self._prompt_width = input_ids.size(1)
        else:
            for row, matcher in enumerate(self.matchers):
                if matcher is None:
                    continue
                for token in input_ids[row, self._prompt_width + len(matcher.tokens):].tolist():
                    if matcher.ended:  # finished rows are padded: not part of the reply
                        break
                    matcher.advance(token)
        return self.constraint.mask_logits(scores, self.matchers)


def vllm_structured_outputs(grammar: str) -> dict[str, Any]:
    """The vLLM sampling settings that constrain decoding to `grammar` (GBNF text, e.g. `reply_gbnf()`).

    Returns `{"structured_outputs": {"grammar": grammar}}`: vLLM's `SamplingParams(structured_outputs=
    StructuredOutputsParams(grammar=...))`, and the `structured_outputs` field of its OpenAI-compatible
    completions request. vLLM's structured-output backends (llguidance, xgrammar) read GBNF.

    With TRL 1.16 pass it as `GRPOConfig(use_vllm=True, generation_kwargs=vllm_structured_outputs(reply_gbnf()))`:
    in colocate mode TRL turns the dict into `StructuredOutputsParams`, in server mode it goes into the completions
    request. TRL's own field, `vllm_structured_outputs_regex`, takes a regex only. Either way the grammar is one for
    the whole run: TRL's vLLM generation takes no per-prompt settings, so the per-tick grammar (`tick_gbnf`,
    `play_episodes(..., constrain=True)`) needs the transformers samplers; on vLLM use the grammar of any id
    (`reply_gbnf`), which checks the format but not the ids. Leave it out with `use_vllm=False`: transformers'
    `GenerationConfig` has no such field.
    """
    if not isinstance(grammar, str) or not grammar.strip():
        raise ConfigError(f"vllm_structured_outputs needs GBNF text (encoding.grammar.reply_gbnf()), got {grammar!r}")
    return {"structured_outputs": {"grammar": grammar}}
