"""An SFT warm start: records from the scripted agent or decision points, framed as `play_episodes` frames a tick,
and a plain supervised loop on the reply tokens.

Part of `rlaif_gym.integrations.trl`, which re-exports every public name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch

from ...config import RLAIFEnvConfig
from ...encoding.reply import canonical_reply
from ...envs.decisions import DecisionPoint, decision_messages
from ...errors import ConfigError
from ...llm.scripted import ScriptedLLM

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .episodes import _chat_ids
from .prefix_cache import _forward, _PrefixCache

# -- SFT warm start -----------------------------------------------------------------------------------------------


def decision_sft_records(points: Iterable[DecisionPoint], *,
                         think: Literal["full", "evidence"] = "full") -> list[dict[str, Any]]:
    """SFT records of the offline scripted model's reply at each decision point: `messages` = [system, user,
    assistant] (the text env's system prompt, the point's prompt, the scripted reply), the layout of
    `scripted_sft_records`, so `sft_examples` frames them. The teacher of a warm start for single decisions.

    `think="evidence"` shortens each bet's `<think>` to the strongest feed item the model weighed for the side it
    buys (with the market it names), then its decision, read from the model's evidence and action as data
    (`ScriptedLLM.evidence`): `"Reuters-AI expects market-15 to resolve NO (t24). I buy NO with $483."` (about 70
    tokens with its JSON); a reply that does not bet keeps its decision sentence, as `sft_examples(short_think=True)`
    would."""
    if think not in ("full", "evidence"):
        raise ConfigError(f"decision_sft_records think must be 'full' or 'evidence', got {think!r}")
    model = ScriptedLLM()
    records = []
    for point in points:
        reasoning, action = model.decide(point.prompt)
        if think == "evidence":
            reasoning = _evidence_think(point.prompt, reasoning, action)
        reply = {"role": "assistant", "content": canonical_reply(action, reasoning)}
        records.append({"messages": [*decision_messages(point), reply], "seed": point.seed, "tick": point.tick})
    return records


def _last_sentence(think: str) -> str:
    """The last sentence of a `<think>` block: where the scripted model states its decision."""
    return re.split(r"(?<=[.!?])\s+", think.strip())[-1]


def _evidence_think(prompt: str, think: str, action: Mapping[str, Any]) -> str:
    """The scripted bet's strongest weighed item for its side, then the bet (`decision_sft_records(think=...)`)."""
    if action.get("type") != "buy_prediction":  # a wait, a join or a perp trade: its decision sentence alone
        return _last_sentence(think)
    market, side = action["market"], action["outcome"]
    items = ScriptedLLM.evidence(prompt, market)  # never empty: the model bets only on a market with evidence
    # The strongest item that points the way the bet goes (the strongest of all may point the other way: the side
    # is the sign of the sum, in 5 % of the scripted bets).
    cite = next((e for e in items if (e.weight > 0) == (side == "YES")), items[0]).citation
    cite = cite[0].upper() + cite[1:]
    if market not in cite:  # a post or a tip: say which market it is about
        cite = f"{market}: {cite}"
    return f"{cite}. I buy {side} with ${action['amount']:,.0f}."


def scripted_sft_records(seeds: Iterable[int], config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *,
                         min_reward: float | None = None, temperature: float = 0.7) -> list[dict[str, Any]]:
    """SFT records (`rlaif_gym.storage.exports.to_sft_records`) from episodes that the offline scripted agent
    (`ScriptedLLMAgent`) plays, one episode per seed in `seeds`, through `RolloutCollector`.

    Each record's `messages` are [system, user, assistant]: the text env's system prompt and tick prompt, then
    the scripted reply. `min_reward` keeps only ticks whose step reward reaches it.
    """
    from ...agents.llm import ScriptedLLMAgent
    from ...rollout import RolloutCollector
    from ...storage.exports import to_sft_records

    records: list[dict[str, Any]] = []
    for seed in seeds:  # one collection per seed, so the seeds need not be contiguous
        collector = RolloutCollector(ScriptedLLMAgent(temperature=temperature), env_config=config, num_envs=1,
                                     run_name=f"sft-{seed}")
        collector.collect(1, seed=seed)
        records += to_sft_records(collector.trajectories, min_reward=min_reward)
    return records


def sft_examples(records: Iterable[Mapping[str, Any]], tokenizer: PreTrainedTokenizerBase, *,
                 max_reply_tokens: int | None = None, end_of_turn: int | None = None,
                 short_think: bool = False) -> list[tuple[list[int], list[int]]]:
    """`(prompt_ids, reply_ids)` per SFT record, framed as `play_episodes` frames a tick: the prompt messages
    chat-templated with the generation prompt, then the reply's tokens and the end-of-turn token, so the
    policy learns to write what the sampler will be asked to write. A reply longer than `max_reply_tokens`
    is cut to it (and gets no end-of-turn token), as the sampler would cut it.

    `short_think=True` keeps only the last sentence of a reply's `<think>` block (the scripted agent states
    its decision there), so that replies fit a small token budget (55-64 tokens with its JSON). For the evidence
    the decision follows from as well, build the records with `decision_sft_records(points, think="evidence")`."""
    if short_think == "evidence":
        raise ConfigError("short_think='evidence' moved to the records: build them with "
                          "decision_sft_records(points, think='evidence') and frame them with short_think=False")
    if short_think not in (False, True):
        raise ConfigError(f"short_think must be False or True, got {short_think!r}")
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
                text = f"<think>{_last_sentence(match.group(1))}</think>" + text[match.end():]
        ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], end_of_turn]
        if max_reply_tokens is not None:
            ids = ids[:max_reply_tokens]
        out.append((_chat_ids(tokenizer, prompt, generation_prompt=True), ids))
    return out


def sft_train(model: PreTrainedModel, examples: Sequence[tuple[list[int], list[int]]], *, steps: int,
              batch_size: int = 1, learning_rate: float = 5e-4, seed: int = 0, group: int = 1,
              detach_prompt: bool = False, log: Callable[[int, float], None] | None = None) -> list[float]:
    """A plain supervised loop: `steps` AdamW steps of next-token cross-entropy on the reply tokens only (the
    prompt tokens carry no loss), batches drawn in a seeded shuffled order over `examples`. Trains the
    parameters that require grad (only a LoRA adapter's on a PEFT model). Returns each step's mean loss.

    `group` > 1: `examples` come in runs of `group` consecutive examples drawn together (the same bet on YES and on
    NO at one prompt, say), so every batch holds whole groups and each group's replies weigh the same in every
    step: a warm start that learns the replies' form and, where they part, no preference between them.

    With `detach_prompt` the prompt runs without gradients and the reply attends to its cached keys and values
    (the start the batch's prompts share, the system prompt, runs once per step), so the backward pass covers
    only the reply's tokens (much cheaper for long prompts and short replies; the
    gradient then omits the adapter's effect on the prompt's keys and values)."""
    if steps < 0 or batch_size < 1:
        raise ConfigError(f"steps must be >= 0 and batch_size >= 1, got {steps} and {batch_size}")
    if steps and not examples:
        raise ConfigError("sft_train got no examples")
    if group < 1 or batch_size % group or len(examples) % group:
        raise ConfigError(f"sft_train group={group} must divide batch_size ({batch_size}) and the number of "
                          f"examples ({len(examples)}): the examples come in runs of `group` drawn together")
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
        for _ in range(batch_size // group):
            if not order:
                order = torch.randperm(len(examples) // group, generator=gen).tolist()
            first = order.pop() * group
            batch += examples[first:first + group]
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
                logits = model(input_ids=ids, logits_to_keep=len(reply)).logits.float()  # the reply's positions
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


