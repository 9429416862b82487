"""Training machinery pinned to TRL 1.16 (the `[trl]` extra pins it): `SharedPromptGRPOTrainer`, TRL's
`GRPOTrainer` with each group's prompt run once, which overrides one of TRL's private methods
(`_get_per_token_logps_and_entropies`), so a TRL upgrade must re-run `tests/integrations/test_trl.py`, which
checks its log-probabilities against TRL's own.

Part of `rlaif_gym.integrations.trl`, which re-exports every public name.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from trl import GRPOTrainer

from .prefix_cache import _forward, _PrefixCache

_log = logging.getLogger(__name__)

# -- GRPO with one prompt forward per group ----------------------------------------------------------------------


def shared_prompt_logps(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                        compute_entropy: bool = False, temperature: float = 1.0,
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of the last `logits_to_keep` tokens of each row, running each
    distinct prompt once for all the rows that share it.

    Both are under the policy at `temperature` (the logits divided by it before the softmax), as TRL's fused head
    computes them at the trainer's `temperature`: the loss of a run sampled at 2.0 is TRL's at 2.0, not at 1.

    `input_ids` is TRL's layout: left-padded prompts, then right-padded completions of `logits_to_keep` tokens.
    Rows whose prompt (its unpadded ids) is the same, as a GRPO group's are, share one forward pass of the
    prompt (its keys and values, repeated per row), and the completions run on that cache. The values are those
    of a full forward pass (RoPE depends only on relative positions, so the left padding does not matter). Where
    gradients are on (the training step), each prompt runs with its graph, so the gradient is TRL's too: the
    rows' losses reach the adapter through the shared keys and values as they would through each row's own
    (tests/integrations/test_trl.py checks both against TRL's computation); the group's prompt costs one forward
    and backward pass instead of one per completion. Without gradients (the old and reference log-probabilities),
    the prompts' common start (the system prompt) also runs once for the batch.
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
    grad = torch.is_grad_enabled()
    shared = _PrefixCache(model, [] if grad else list(groups), input_ids.device)  # a graph cannot be deep-copied
    for key, rows in groups.items():
        prompt = torch.tensor([key], dtype=input_ids.dtype, device=input_ids.device)
        n = len(rows)
        _, cache = shared.extend(key, len(key) - 1, grad=grad)
        if cache is not None:
            cache.batch_repeat_interleave(n)
        completion = input_ids[rows, p:]
        step = torch.cat([prompt[:, -1:].expand(n, 1), completion[:, :-1]], dim=1)
        mask = torch.cat([torch.ones((n, len(key)), dtype=attention_mask.dtype, device=attention_mask.device),
                          attention_mask[rows, p:-1]], dim=1)
        logits = _forward(model, input_ids=step, attention_mask=mask, cache=cache)[0].float()
        if temperature != 1.0:
            logits = logits / temperature
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
    """TRL's `GRPOTrainer`, computing each group's prompt once (`shared_prompt_logps`): the same log-probabilities
    and the same gradient, at one prompt pass per group instead of one per completion.

    For single-decision rows (one short reply after a long prompt) that is what makes GRPO fit two CPU cores
    with gradients through the prompt (the side of a bet is read from the prompt). Everything else is TRL's:
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
        return (*self.policy_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy), None)

    def policy_logps(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                     compute_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The per-token log-probabilities (and entropies) this trainer's loss takes, in TRL's layout: those of
        `shared_prompt_logps` at the trainer's temperature, under its autocast. The public face of the TRL 1.16
        override above (tests compare it with TRL's own computation)."""
        with self.accelerator.autocast():
            return shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy,
                                       temperature=self.temperature)


