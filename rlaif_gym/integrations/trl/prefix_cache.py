"""The KV cache of the tokens a batch's prompts share, run once without a graph and copied per prompt (the SFT loop,
the shared-prompt sampler and `SharedPromptGRPOTrainer` use it; a decision prompt's system part is about half of it).

Part of `rlaif_gym.integrations.trl`.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any

import torch


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
                self.cache = _forward(model, input_ids=torch.tensor([keys[0][:self.length]], device=device),
                                      logits_to_keep=1)[1]

    def extend(self, key: tuple[int, ...], upto: int, *, grad: bool = False) -> tuple[torch.Tensor | None, Any]:
        """(logits of the last token run, shape (1, 1, vocabulary), cache) holding `key[:upto]`, without gradients
        (with `grad`, the tokens beyond the shared prefix run with them: build the cache with no keys, so the whole
        prompt does); logits None when nothing beyond the shared prefix had to run. Only the last token's logits are
        computed: the vocabulary's projection over a whole prompt is a fifth of its forward pass."""
        cache = copy.deepcopy(self.cache) if self.cache is not None else None
        rest = key[self.length:upto]
        if not rest:
            return None, cache
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            logits, cache = _forward(self.model, input_ids=torch.tensor([rest], device=self.device), cache=cache,
                                     logits_to_keep=1)
        return logits, cache


