"""Teach SmolLM2-135M the side of a bet from the env's reward, on two CPU cores, and measure it on held-out states.

    python examples/train_trl_grpo.py --smoke           # CI size: every stage runs (minutes), nothing is learned
    python examples/train_trl_grpo.py                   # the docs' run (docs/trl.md: its table, curve, time, memory)
    python examples/train_trl_grpo.py --rl grpo         # the sampled variant: TRL's GRPOTrainer instead
    python examples/train_trl_grpo.py --baselines-only  # the held-out sets' reference columns only (no model, seconds)
    python examples/train_trl_grpo.py --device cuda --rl grpo --grpo-steps 400 --prompts-per-step 16   # on a GPU

One file, top to bottom (CleanRL style). The recipe (docs/trl.md gives each choice's measurements):

1. **Decision points** (`rlaif_gym.envs.decisions`) of a small world (2 markets that resolve within 2-4 ticks,
   news every tick), in the compact prompt style (`prompt_style="compact"`: the rules in under 80 tokens, and
   per tick only the open markets, cash, holdings and the feed items naming an open market). Training points
   come from seeds `seed ..`, drawn so that half of them have a deceiver NPC's post on the bet's market (the
   curriculum, `--deceived-share`: where reading the feed naively goes wrong, about 22 % of points in the world's
   own draw); two disjoint held-out sets (`--held-out-seeds`, the world's own draw) are only evaluated.
2. **Credit that pays what the evidence is about**: each rollout is one reply, then clean waits until every
   market open at the point has resolved (`DecisionPoint.resolution_horizon`), so a bet is paid at the outcome
   the world drew, which the feed is written from (never at the hidden p*, which the feed does not predict).
3. **SFT on a format-only teacher** (`rlaif_gym.llm.FormatOnlyLLM`): JSON-only bets on the market the feed
   names most, 5 % of cash, the side a coin flip (`--sft-sides both` teaches both sides of every bet instead). The
   model learns to answer in form and to bet, nothing about the side; the run stops before RL unless the SFT model
   bets at >= 90 % of held-out points (greedy).
4. **RL on the side**, one of:
   - `--rl exact` (default): both sides of the format-only teacher's bet (the same bet on YES and on NO) scored
     by the env at the forked state, so every point says exactly which side was worth how much: no sampling
     noise, no zero-variance groups. The policy is the model's next-token distribution at the side token,
     renormalised over YES and NO (the wait is left out: the decision RL learns is the side). Its loss
     (`--objective weighted`) is minus log pi(better side) times |R_YES - R_NO|, the full-information bandit's
     cost-sensitive log loss, plus a form anchor: the cross-entropy of the reply's other tokens. Every batch
     holds 4 points, each beside its YES/NO mirror (`--mirror-pairs`, `DecisionPoint.mirrored_prompt`: prices,
     holdings and feed with the sides swapped, the two sides' returns swapped), so a step cannot lower the loss
     by leaning to one side; 1.5 passes. One forward and backward pass per prompt, with gradients through the
     prompt. `--objective pg` takes the exact policy gradient of the expected return instead (it saturates on one
     side: docs/trl.md).
   - `--rl grpo`: TRL's `GRPOTrainer` (`SharedPromptGRPOTrainer`: each group's prompt run once) with sampled
     groups; zero-variance groups dropped and counted.
5. **Evaluation** of every model by its own greedy free-text reply at each held-out point, sent to the env and
   scored against a wait on the same state (never the enumerated scores), beside the teachers' replies at the
   same points (the format-only teacher, the full scripted teacher), the calibrated evidence rule (the format-only
   teacher's bet on the side of the feed's log-odds at each source's true reliability: the ceiling of a side learner
   that reads the prompt) and the hindsight bet on the drawn outcome.
   `results.json` has, per held-out set, the paired differences (trained - SFT, - format-only teacher,
   - scripted teacher) with 95 % intervals over points; a PNG of the training curve is written beside it.

Exits non-zero when a loss or return is not finite, when the SFT model does not bet, or when the trained model's
replies are not format-valid (`--min-format-valid`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import resource
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: the GGUF ships in a package
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16

import numpy as np
import torch
import tyro
from peft import LoraConfig, get_peft_model
from trl import GRPOConfig

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.benchmark import cpu_model, load_average
from rlaif_gym.encoding.grammar import TickIds, tick_gbnf
from rlaif_gym.envs.decisions import DECISION_WORLD, DecisionPoint, decision_points
from rlaif_gym.evals import baseline_reply, interval
from rlaif_gym.evals.baselines import deceiver_on_market
from rlaif_gym.integrations.trl import (
    DecisionReply,
    SharedPromptGRPOTrainer,
    build_dataset,
    decision_messages,
    decision_table,
    env_return,
    load_gguf_policy,
    make_rollout_func,
    score_decision_replies,
    sft_examples,
    sft_train,
    trainer_generator,
    transformers_generator,
)
from rlaif_gym.llm import FormatOnlyLLM, bet_reply


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`, underscores as dashes; `--help` shows these docstrings)."""

    rl: Literal["exact", "grpo", "both"] = "exact"
    """The RL variant: "exact" (policy gradient over the enumerated bets), "grpo" (TRL's sampled groups), or both
    (each from the same SFT start, evaluated side by side)."""
    train_seeds: int = 1000
    """Training decision points (one per episode, from seed `seed` upward), for SFT and RL."""
    deceived_share: float | None = 0.5
    """The curriculum: the share of training points at which a deceiver NPC's post names the bet's market (where the
    naive feed majority and the calibrated rule part), drawn by skipping seeds; None: every seed in turn (the world's
    own share, about 22 %). The held-out sets always keep the world's share."""
    held_out_seeds: tuple[int, int] = (1_000_000, 2_000_000)
    """The first seed of each held-out set (two disjoint sets; results.json keys them by it)."""
    eval_points: int = 200
    """Decision points per held-out set."""
    resolves_within: int = 4
    """A decision point has a market that resolves within this many ticks, named by the prompt's feed."""
    fraction: float = 0.05
    """The share of cash every taught bet stakes (the format-only teacher's and the enumerated replies')."""
    fixed_stake: bool = True
    """The stake is the task's, not the reply's: the env's `fixed_stake` rule at --fraction (every bet stakes that
    share of cash; the system prompt says so, the reply names the market and the side, and an amount a reply writes
    is replaced), for every stage and every column. So no reply, sampled or greedy, can lower a wrong bet's loss by
    betting less. --no-fixed-stake: the reply writes the amount (the runs before issue 58)."""
    max_reply_tokens: int = 40
    """Token budget of one reply (a JSON-only bet is about 30 tokens)."""
    sft_steps: int = 32
    """SFT steps on the format-only teacher's replies at the training points."""
    sft_batch_size: int = 8
    """Replies per SFT step."""
    sft_learning_rate: float = 1e-3
    """AdamW learning rate of SFT."""
    sft_sides: Literal["coin", "both"] = "coin"
    """What SFT is taught at each point: "coin": the format-only teacher's reply, its side a coin flip; "both": both
    sides of its bet (the same bet on YES and on NO, drawn together, equal weight: no side in the teaching by
    construction; its start still bet NO at most held-out points, and RL learned less from it: docs/trl.md)."""
    min_format_valid: float = 0.95
    """Exit 1 (after writing results.json) unless the trained model's greedy replies are format-valid at this share of
    held-out points or more, on every set: RL that breaks the reply's form is a failed run."""
    min_bet_share: float = 0.9
    """Stop before RL unless the SFT model's greedy replies bet at this share of held-out points or more."""
    epochs: float = 1.5
    """--rl exact: passes over the training points (a fraction ends the last pass part way through its shuffled
    order: 1.5 runs one whole pass and half of a second). With --mirror-pairs each pass costs two forward passes a
    point, so 1.5 costs what 3 passes of single points do (--no-mirror-pairs: raise it to 3)."""
    mirror_share: float = 0.0
    """--rl exact: in each pass, each training point is shown as its YES/NO mirror with this probability (a seeded
    coin per point and pass; `DecisionPoint.mirrored_prompt`: prices, holdings and feed with YES and NO swapped,
    its better side the other). The world treats the sides alike, so the mirror is as likely a state; it balances
    the sides RL sees at every point (0: every point as drawn). At 0.5 the trained model's lean moved from NO to
    YES instead of going away (docs/trl.md), so the default stays 0 (it needs --no-mirror-pairs)."""
    mirror_pairs: bool = True
    """--rl exact: every batch holds each of its points together with its YES/NO mirror (`--points-per-step` / 2
    points, each twice), in place of --mirror-share's coin. The pair's two side losses pull a lean one way and the
    other, so for a model that reads both orientations alike the step's side gradient vanishes only at zero lean; a
    pass costs twice as many forward passes. The documented run's: with it the trained model beat its SFT start
    and the format-only teacher on both held-out sets (docs/trl.md); --no-mirror-pairs shows each point once."""
    points_per_step: int = 8
    """--rl exact: decision points per optimizer step."""
    objective: Literal["weighted", "pg"] = "weighted"
    """--rl exact: the side's loss. "weighted": minus log pi(better side) times |R_YES - R_NO| (the full-information
    bandit's cost-sensitive log loss; its optimum bets the side of higher expected return). "pg": minus the
    expected return over the two sides (the exact policy gradient; it saturates: docs/trl.md)."""
    anchor: float = 1.0
    """--rl exact: weight of the form anchor, the cross-entropy of the teacher's reply tokens other than the side's
    (what keeps RL from breaking the reply's form)."""
    learning_rate: float = 5e-4
    """AdamW learning rate of RL (of the LoRA adapter)."""
    lr_scheduler: Literal["linear", "constant"] = "linear"
    """--rl grpo: TRL's learning-rate schedule (`GRPOConfig.lr_scheduler_type`): "linear" decays to 0 over
    --grpo-steps (TRL's default), "constant" keeps --learning-rate (as the exact variant's AdamW does)."""
    grpo_steps: int = 40
    """--rl grpo: optimizer steps."""
    prompts_per_step: int = 4
    """--rl grpo: decision points per step, each answered --num-generations times."""
    num_generations: int = 4
    """--rl grpo: group size."""
    temperature: float = 1.0
    """--rl grpo: sampling temperature of the groups."""
    common_draws: bool = False
    """--rl grpo: the k-th reply of a point's group and of its mirror's sample from the same uniform numbers
    (common random numbers, `shared_prompt_generator(common_draws=2)`), each pair its own: the two draw the same
    count of each side wherever the policy gives both the same odds, so a lean's gradient cancels within the pair
    (needs --grpo-mirror-pairs; the runs of 2026-12-07 before this rule shared one set among all of a step's
    groups: docs/trl.md)."""
    grpo_mirror_pairs: bool = True
    """--rl grpo: every step holds each of its points beside its YES/NO mirror (`build_dataset(mirrors=True)`: the
    mirrored prompt, the reply's sides swapped back before the env plays it), the points in a seeded shuffled order
    of pairs; --prompts-per-step counts both (so it must be even)."""
    constrain: bool = True
    """--rl grpo: the groups are sampled under the tick's reply grammar (`encoding.grammar.tick_gbnf`, JSON only),
    so every sample is a valid action; each token's reported log-probability is under the distribution
    renormalised over the tokens the grammar allows (what it was drawn from)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_layers: int = 15
    """LoRA on the top this many of the model's 30 layers (the backward pass stops below them: 15 costs about 1.25 s
    a point on two cores, against 1.5 s for all 30)."""
    eval_base: bool = False
    """Evaluate the base model too (its replies run to the token budget: 7 minutes on two cores)."""
    eval_batch: int = 16
    """Held-out points per greedy generation batch."""
    config: str = ""
    """JSON of RLAIFEnvConfig overrides on top of the decision world in the compact prompt style."""
    seed: int = 0
    """Seed of the training seeds' range, the format-only teacher's coins, the optimizers and the sampler."""
    device: str = "cpu"
    """Torch device: cpu, cuda, ..."""
    threads: int = 0
    """torch CPU threads (0: torch's default)."""
    precision: Literal["bf16", "fp32"] = "bf16"
    """Compute precision of every forward pass (SFT, RL, evaluation). "bf16": matrix products autocast to bfloat16,
    while the weights, the optimizer's state and the losses stay float32 (about 1.5x faster on a CPU with native
    bfloat16, AVX512-BF16 or AMX: docs/trl.md); "fp32" throughout (for CPUs without it, where bf16 is emulated)."""
    out: str = "runs/trl-grpo"
    """Where results.json, the curve's PNG and the trainer's logs go (no checkpoints are saved)."""
    results_json: str = ""
    """Where to write results.json (default: --out/results.json)."""
    smoke: bool = False
    """CI size: every stage end to end (both RL variants, a few points, 2 steps each), not learning."""
    baselines_only: bool = False
    """Only the held-out sets' reference columns (the teachers, the calibrated and the naive evidence rule, the
    hindsight bet) and their paired differences: no model is loaded or trained (about a minute)."""


SMOKE_NOTE = ("--smoke checks the wiring, not learning: every stage runs end to end (SFT, both RL variants, the "
              "evaluations) on a few decision points with 2 steps each, so its tables show nothing learned; the "
              "run without --smoke measures learning.")
TRAINED = {"exact": "after SFT+RL (exact)", "grpo": "after SFT+GRPO (sampled)"}


def autocast(args: Args):
    """The context every forward pass runs in: bfloat16 autocast on `args.device` for `--precision bf16`, a no-op
    for fp32. Its cast cache is off: a cached bfloat16 copy of a weight would outlive the optimizer's steps inside
    one context (the whole SFT loop runs in one), so every step would run the first step's weights."""
    return torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=args.precision == "bf16",
                          cache_enabled=False)


def with_lora(model, args: Args):
    """`model` with a LoRA adapter of rank `lora_r` on every projection of its top `lora_layers` layers (the only
    weights SFT and RL train)."""
    layers = model.config.num_hidden_layers
    return get_peft_model(model, LoraConfig(
        r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0, task_type="CAUSAL_LM",
        layers_to_transform=list(range(max(0, layers - args.lora_layers), layers)),
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))


def parse_args() -> Args:
    """The command line as `Args` (tyro: each field a `--flag`, its docstring the help, with default and choices)."""
    args = tyro.cli(Args, description=__doc__.split("\n\n")[0])
    if args.deceived_share is not None and not 0.0 <= args.deceived_share <= 1.0:
        raise SystemExit(f"--deceived-share is a share of the training points, from 0 to 1 (or None for the world's "
                         f"own draw), got {args.deceived_share}")
    if not 0.0 <= args.mirror_share <= 1.0:
        raise SystemExit(f"--mirror-share is a probability, from 0 to 1, got {args.mirror_share}")
    if args.mirror_pairs and (args.mirror_share or args.points_per_step % 2):
        raise SystemExit(f"--mirror-pairs (the default) puts each point beside its mirror in one batch: it needs an "
                         f"even --points-per-step (got {args.points_per_step}) and no --mirror-share coin (got "
                         f"{args.mirror_share}); for the coin, pass --no-mirror-pairs (and --epochs 3)")
    if not 0 < args.epochs < math.inf:
        raise SystemExit(f"--epochs counts passes over the training points, a finite number above 0 (1.5: a pass and "
                         f"a half), got {args.epochs}")
    if args.grpo_mirror_pairs and args.prompts_per_step % 2:
        raise SystemExit(f"--grpo-mirror-pairs (the default) puts each point beside its mirror in one step: it needs "
                         f"an even --prompts-per-step (got {args.prompts_per_step}); or pass --no-grpo-mirror-pairs")
    if args.common_draws and not args.grpo_mirror_pairs:
        raise SystemExit("--common-draws gives a point's group and its mirror's the same random numbers: it needs "
                         "--grpo-mirror-pairs (the default)")
    if args.points_per_step < 1:
        raise SystemExit(f"--points-per-step counts decision points per optimizer step, 1 or more (2 or more, even, "
                         f"with --mirror-pairs), got {args.points_per_step}")
    if args.smoke:
        args = dataclasses.replace(args, rl="both", train_seeds=6, eval_points=2, sft_steps=2, sft_batch_size=2,
                                   epochs=1, points_per_step=2 if args.mirror_pairs else 3,
                                   mirror_share=0.0 if args.mirror_pairs else 0.5, grpo_steps=2,
                                   prompts_per_step=2 if args.grpo_mirror_pairs else 1,
                                   num_generations=2, min_bet_share=0.0, min_format_valid=0.0, eval_batch=2,
                                   eval_base=True)
    return args


def training_points(find, args: Args) -> list[DecisionPoint]:
    """`train_seeds` decision points from seed `seed` upward; with `deceived_share`, seeds are skipped so that that
    share of them (rounded) has a deceiver's post on the bet's market (`deceiver_on_market`), in seed order."""
    if args.deceived_share is None:
        return find(range(args.seed, args.seed + args.train_seeds))
    want = {True: round(args.deceived_share * args.train_seeds)}
    want[False] = args.train_seeds - want[True]
    kept: list[DecisionPoint] = []
    start = args.seed
    while any(want.values()):
        if start - args.seed > 100 * args.train_seeds:
            raise SystemExit(f"--deceived-share {args.deceived_share}: found {len(kept)} of {args.train_seeds} "
                             "points in 100 seeds a point; lower it (the world's own share is about 0.22)")
        for point in find(range(start, start + args.train_seeds)):
            deceived = deceiver_on_market(point)
            if want[deceived]:
                want[deceived] -= 1
                kept.append(point)
        start += args.train_seeds
    return kept


# -- the teachers and the enumerated replies ------------------------------------------------------------------------


def format_teacher_reply(teacher: FormatOnlyLLM, point: DecisionPoint, seed: int) -> str:
    """The format-only teacher's reply at a point: its coin is seeded by the run's seed and the point's seed."""
    return teacher.decide(point.prompt, np.random.default_rng([seed, point.seed, point.tick]))


def both_sides(teacher: FormatOnlyLLM, point: DecisionPoint) -> list[str]:
    """The format-only teacher's bet at a point on YES and on NO (`--sft-sides both`); its own reply (a wait) twice
    where it has nothing to bet on (so every point gives two replies)."""
    bet = teacher.bet(point.prompt)
    if bet is None:
        return [format_teacher_reply(teacher, point, 0)] * 2
    return [bet_reply(bet[0], side, bet[1] if teacher.writes_amount else None) for side in ("YES", "NO")]


@dataclass
class SideChoice:
    """One training point of the exact variant: the format-only teacher's bet, and what each side of it earns.

    `ids` are the chat-templated prompt and the teacher's reply (its coin's side); `reply_start` is where the reply
    begins; the token at `side_at` is the first where the YES and NO replies differ (`side_tokens`: YES's, NO's);
    `returns` each side's return over the resolution horizon minus a wait's (the env's scores at the forked
    state)."""

    ids: list[int]
    reply_start: int
    side_at: int
    side_tokens: tuple[int, int]
    returns: tuple[float, float]


def side_choices(points: list[DecisionPoint], tokenizer, teacher: FormatOnlyLLM, seed: int,
                 mirrors: bool = False) -> list[tuple[SideChoice, ...]]:
    """The enumerated bets of every point that has one (the format-only teacher's market and size, both sides):
    per point, the point as drawn and, with `mirrors`, its YES/NO mirror (`DecisionPoint.mirrored_prompt`), whose
    sides' returns are the point's swapped (buying YES there earns what buying NO earns here; not scored again). The
    mirror names the same markets and shows the same cash, so the replies (the two sides and the taught one) are
    the same texts."""
    out = []
    bets = [(i, teacher.bet(p.prompt)) for i, p in enumerate(points)]
    replies = [(i, bet_reply(b[0], side, b[1] if teacher.writes_amount else None)) for i, b in bets if b is not None
               for side in ("YES", "NO")]
    scored = score_decision_replies(points, replies)

    def choice(k: int, mirrored: bool) -> SideChoice:
        i = replies[k][0]
        taught = format_teacher_reply(teacher, points[i], seed)
        records = [{"messages": [*decision_messages(points[i], mirrored=mirrored),
                                 {"role": "assistant", "content": reply}]}
                   for reply in (replies[k][1], replies[k + 1][1], taught)]
        (prompt, yes), (_, no), (_, reply) = sft_examples(records, tokenizer)
        at = next(n for n in range(min(len(yes), len(no))) if yes[n] != no[n])
        returns = (scored[k].gain, scored[k + 1].gain)
        return SideChoice(prompt + reply, len(prompt), len(prompt) + at, (yes[at], no[at]),
                          returns[::-1] if mirrored else returns)

    for k in range(0, len(replies), 2):
        out.append((choice(k, False), *([choice(k, True)] if mirrors else [])))
    return out


def choice_losses(model, choice: SideChoice, scale: float, objective: str) -> tuple[torch.Tensor, torch.Tensor,
                                                                                      torch.Tensor]:
    """(the side's loss, the form anchor's, the policy over the two sides) at one point, from one forward pass of
    its prompt and reply with gradients through every token (the prompt's included).

    The policy is the model's next-token distribution at the side token, renormalised over YES's and NO's. The
    side's loss is, for `objective="weighted"`, minus log pi(the better side) times |R_YES - R_NO| / `scale`;
    for `"pg"`, minus the expected return sum_s pi(s) R_s / `scale` (its gradient is the exact policy
    gradient). The anchor is the mean cross-entropy of the teacher's reply tokens other than the side token: the
    form the SFT taught, held while the side moves."""
    device = next(model.parameters()).device
    ids = torch.tensor([choice.ids], device=device)
    # Only the reply's positions need logits: the vocabulary's projection over the prompt would cost about a fifth
    # of the forward pass and its backward, for nothing.
    keep = len(choice.ids) - choice.reply_start + 1
    logits = model(input_ids=ids, logits_to_keep=keep).logits[0, :-1].float()
    logps = torch.log_softmax(logits, dim=-1)
    at = choice.side_at - choice.reply_start
    policy = torch.log_softmax(logits[at, list(choice.side_tokens)], dim=-1)
    returns = torch.tensor(choice.returns, device=device) / scale
    if objective == "pg":
        side = -(policy.exp() * returns).sum()
    else:
        better = 0 if choice.returns[0] >= choice.returns[1] else 1
        side = -(returns[0] - returns[1]).abs() * policy[better]
    taken = logps.gather(-1, ids[0, choice.reply_start:].unsqueeze(-1)).squeeze(-1)
    form = torch.cat([taken[:at], taken[at + 1:]])
    return side, -form.mean(), policy.detach().exp()


def exact_batches(n_points: int, args: Args, gen: torch.Generator) -> list[tuple[int, list[tuple[int, int]]]]:
    """The exact variant's batches in training order, each as (its pass, 1-based; its (point, choice) pairs), choice
    0 the point as drawn and 1 its mirror. Every pass shuffles the points; a point shows its mirror on a coin of
    `mirror_share` (drawn only when it is above 0, so a run without mirrors takes the order it took before they
    existed), or, with `mirror_pairs`, both: `points_per_step / 2` points a batch, each beside its mirror. A
    fractional `epochs` cuts the last pass's order."""
    batches = []
    per_step = args.points_per_step // 2 if args.mirror_pairs else args.points_per_step
    for epoch in range(math.ceil(args.epochs)):
        order = torch.randperm(n_points, generator=gen).tolist()
        order = order[:round(min(1.0, args.epochs - epoch) * n_points)]
        mirrored = (torch.rand(n_points, generator=gen) < args.mirror_share).tolist() if args.mirror_share \
            else [False] * n_points
        for start in range(0, len(order), per_step):
            ks = order[start:start + per_step]
            batches.append((epoch + 1, [(k, m) for k in ks for m in (0, 1)] if args.mirror_pairs
                            else [(k, int(mirrored[k])) for k in ks]))
    return batches


def train_exact(model, choices: list[tuple[SideChoice, ...]], args: Args, log) -> list[dict[str, float]]:
    """The exact variant: one AdamW step per batch of `exact_batches` on the side's loss plus `anchor` times the
    form's (`choice_losses`). Returns one curve row per batch: its choices' expected return under the policy
    before the step, the share whose better side the policy prefers (points it has not been trained on yet in the
    first epoch), the share whose sides score alike, and the loss."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    # The returns' unit: the spread of R_YES - R_NO over the training points (a fixed scale keeps the gradient
    # exact for "pg" and the weights comparable across batches for "weighted").
    scale = statistics.pstdev([c[0].returns[0] - c[0].returns[1] for c in choices]) or 1.0
    curve = []
    model.train()
    for epoch, picks in exact_batches(len(choices), args, gen):
        batch = [choices[k][m] for k, m in picks]
        optimizer.zero_grad()
        total, expected, best = 0.0, 0.0, 0.0
        for c in batch:
            with autocast(args):
                side, form, policy = choice_losses(model, c, scale, args.objective)
            loss = (side + args.anchor * form) / len(batch)
            loss.backward()
            total += float(loss.detach())
            expected += float(policy[0] * c.returns[0] + policy[1] * c.returns[1]) / len(batch)
            best += float((policy[0] >= policy[1]) == (c.returns[0] >= c.returns[1])) / len(batch)
        optimizer.step()
        row = {"update": len(curve) + 1, "epoch": epoch, "mean_return": expected,
               "zero_variance": statistics.fmean(c.returns[0] == c.returns[1] for c in batch),
               "best_side_share": best, "loss": total}
        curve.append(row)
        log(row)
    model.eval()
    return curve


def json_only_grammar(prompt: str, system_prompt: str) -> str:
    """The tick's reply grammar without the think block (the form the format-only teacher writes and SFT taught):
    the ids the prompt shows, and under the fixed stake a bet without an amount."""
    return tick_gbnf(TickIds.from_prompt(prompt, system_prompt), think="never")


def train_grpo(model, tokenizer, points: list[DecisionPoint], args: Args, out: Path):
    """The sampled variant: TRL's GRPO on single decisions (the reply, then waits to the resolution horizon), with
    TRL's loss; with --grpo-mirror-pairs each step holds its points beside their mirrors, in a seeded order of
    pairs (TRL's own shuffle would split them)."""
    if args.grpo_mirror_pairs:
        order = torch.randperm(len(points), generator=torch.Generator().manual_seed(args.seed)).tolist()
        points = [points[k] for k in order]
    train = build_dataset(points=points, decisions=1, mirrors=args.grpo_mirror_pairs)
    grpo = GRPOConfig(
        output_dir=str(out), max_steps=args.grpo_steps, per_device_train_batch_size=args.prompts_per_step
        * args.num_generations, gradient_accumulation_steps=1, num_generations=args.num_generations,
        learning_rate=args.learning_rate, lr_scheduler_type=args.lr_scheduler, beta=0.0,
        temperature=args.temperature, top_k=0, top_p=1.0,
        scale_rewards="none", max_completion_length=args.max_reply_tokens, logging_steps=1, report_to=[],
        save_strategy="no", use_cpu=args.device == "cpu", seed=args.seed, bf16=args.precision == "bf16", fp16=False,
        dataloader_num_workers=0, disable_tqdm=True, gradient_checkpointing=False,
        shuffle_dataset=not args.grpo_mirror_pairs,
    )
    trainer = SharedPromptGRPOTrainer(
        model=model, reward_funcs=[env_return], args=grpo, train_dataset=train, processing_class=tokenizer,
        rollout_func=make_rollout_func(train, max_reply_tokens=args.max_reply_tokens, drop_zero_variance=True,
                                       generator=functools.partial(trainer_generator, shared_prompt=True,
                                                                   common_draws=2 if args.common_draws else False),
                                       constrain=args.constrain,
                                       grammar_of=json_only_grammar if args.constrain else None),
    )
    trainer.train()
    curve = [{"update": int(h["step"]), "mean_return": float(h["reward"]),
              "zero_variance": float(h.get("rlaif/zero_variance_group", float("nan"))),
              "loss": float(h.get("loss", float("nan")))} for h in trainer.state.log_history if "reward" in h]
    return trainer.model, curve


# -- evaluation ---------------------------------------------------------------------------------------------------


def greedy_replies(model, tokenizer, points: list[DecisionPoint], args: Args) -> list[DecisionReply]:
    """Each point's greedy reply from `model` (its free text, up to the token budget), scored by the env."""
    merge = hasattr(model, "merge_adapter")  # a PEFT model: generate from merged weights (faster), then unmerge
    if merge:
        model.merge_adapter()
    try:
        generate = transformers_generator(model, tokenizer, do_sample=False)
        replies = []
        for start in range(0, len(points), args.eval_batch):
            chunk = list(range(start, min(start + args.eval_batch, len(points))))
            prompts = [tokenizer.apply_chat_template(decision_messages(points[i]), add_generation_prompt=True,
                                                     tokenize=True, return_dict=False) for i in chunk]
            with autocast(args):
                ids, _ = generate([list(p) for p in prompts], args.max_reply_tokens)
            replies += [(i, tokenizer.decode(r, skip_special_tokens=True)) for i, r in zip(chunk, ids, strict=True)]
    finally:
        if merge:
            model.unmerge_adapter()
    return score_decision_replies(points, replies)


def summary(replies: list[DecisionReply]) -> dict[str, float]:
    """The shares and means of one column (one reply per point)."""
    return {"format_valid": statistics.fmean(r.format_valid for r in replies),
            "executed": statistics.fmean(r.executed for r in replies),
            "bets": statistics.fmean(r.outcome_side != 0 for r in replies),
            "yes_bets": statistics.fmean(r.outcome_side != 0 and '"outcome": "YES"' in r.reply for r in replies),
            "outcome_side": statistics.fmean(r.outcome_side for r in replies),
            "gain": statistics.fmean(r.gain for r in replies)}


def paired(a: list[DecisionReply], b: list[DecisionReply]) -> dict[str, float]:
    """The paired difference of the gain over waiting, a - b, point by point."""
    assert [r.point for r in a] == [r.point for r in b]
    return interval([x.gain - y.gain for x, y in zip(a, b, strict=True)]).to_dict()


def reference_pairs(cols: dict[str, list[DecisionReply]]) -> dict[str, dict[str, float]]:
    """The headroom of a side learner at these points: the calibrated evidence rule and the scripted teacher, each
    minus the format-only teacher (paired, point by point)."""
    return {"calibrated_minus_format_teacher": paired(cols["calibrated evidence rule"], cols["format-only teacher"]),
            "scripted_teacher_minus_format_teacher": paired(cols["scripted teacher"], cols["format-only teacher"])}


def plot_curve(curves: dict[str, list[dict[str, float]]], path: Path) -> None:
    """Mean return per update and the zero-variance share, one line per RL variant (matplotlib, off-screen)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for name, curve in curves.items():
        x = [c["update"] for c in curve]
        top.plot(x, [c["mean_return"] for c in curve], label=name, lw=1)
        bottom.plot(x, [c["zero_variance"] for c in curve], label=name, lw=1)
    top.axhline(0.0, color="grey", lw=0.5)
    top.set_ylabel("mean return (gain over a wait)")
    bottom.set_ylabel("zero-variance share")
    bottom.set_xlabel("update")
    top.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    if args.smoke:
        print(SMOKE_NOTE, flush=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    stages: dict[str, float] = {}

    def stage(name: str, t0: float) -> None:
        stages[name] = time.perf_counter() - t0
        print(f"[{name}: {stages[name]:.0f} s]", flush=True)

    # -- decision points in the compact prompt style: training seeds, and two disjoint held-out sets
    t0 = time.perf_counter()
    config = RLAIFEnvConfig.from_any({**DECISION_WORLD, "prompt_style": "compact",
                                      **({"fixed_stake": args.fraction} if args.fixed_stake else {}),
                                      **json.loads(args.config or "{}")})
    find = functools.partial(decision_points, config=config, resolves_within=args.resolves_within,
                             horizon=args.resolves_within)
    train_points = training_points(find, args)
    spare = args.eval_points // 4 + 8  # a few seeds have no qualifying tick
    held_out = {start: find(range(start, start + args.eval_points + spare))[:args.eval_points]
                for start in args.held_out_seeds}
    print(f"{len(train_points)} training decision points ({sum(map(deceiver_on_market, train_points))} with a "
          f"deceiver's post on the bet's market), held out {[len(p) for p in held_out.values()]}")
    stage("decision points", t0)

    # -- the teachers and the ceiling, on the held-out points
    t0 = time.perf_counter()
    teacher = FormatOnlyLLM(fraction=args.fraction, writes_amount=config.fixed_stake is None)
    columns: dict[int, dict[str, list[DecisionReply]]] = {start: {} for start in held_out}
    for start, points in held_out.items():
        columns[start]["format-only teacher"] = score_decision_replies(
            points, [(i, format_teacher_reply(teacher, p, args.seed)) for i, p in enumerate(points)])
        columns[start]["scripted teacher"] = score_decision_replies(
            points, [(i, baseline_reply("teacher", p)) for i, p in enumerate(points)])
        columns[start]["calibrated evidence rule"] = score_decision_replies(
            points, [(i, baseline_reply("calibrated", p, fraction=args.fraction)) for i, p in enumerate(points)])
        columns[start]["hindsight (drawn outcome)"] = score_decision_replies(
            points, [(i, baseline_reply("truth", p, fraction=args.fraction)) for i, p in enumerate(points)])
    stage("teachers' replies", t0)
    if args.baselines_only:
        for start, cols in columns.items():
            # and the naive evidence rule: the unweighted majority of the feed items (the eval's `informed`)
            cols["naive evidence rule"] = score_decision_replies(held_out[start], [
                (i, baseline_reply("informed", p, fraction=args.fraction)) for i, p in enumerate(held_out[start])])
            print(f"\n**Held-out set: seeds from {start:,}** ({len(held_out[start])} points, one reply each)\n")
            print(decision_table(cols, baseline="format-only teacher"))
            pairs = {**reference_pairs(cols), "naive_minus_format_teacher": paired(cols["naive evidence rule"],
                                                                                  cols["format-only teacher"])}
            for name, d in pairs.items():
                print(f"  {name}: {d['mean']:+.4f} [{d['ci95_low']:+.4f}, {d['ci95_high']:+.4f}] (n={d['n']})")
        return 0

    # -- the model: the shipped GGUF, dequantised to float32 by transformers
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_gguf_policy()
    model.to(args.device)
    tokens = [len(tokenizer.apply_chat_template(decision_messages(p), add_generation_prompt=True, tokenize=True,
                                                return_dict=False)) for p in train_points[:100]]
    print(f"a prompt is {statistics.median(tokens):.0f} tokens chat-templated ({min(tokens)}-{max(tokens)})")

    def evaluate_all(column: str) -> None:
        t = time.perf_counter()
        for start, points in held_out.items():
            columns[start][column] = greedy_replies(model, tokenizer, points, args)
        print(f"{column}: " + "; ".join(f"set {s:,} {summary(c[column])}" for s, c in columns.items()), flush=True)
        stage(f"evaluation, {column}", t)

    if args.eval_base:
        evaluate_all("base model")

    # -- SFT on the format-only teacher: form and betting, not the side
    t0 = time.perf_counter()
    model = with_lora(model, args)
    taught = [[format_teacher_reply(teacher, p, args.seed)] if args.sft_sides == "coin" else both_sides(teacher, p)
              for p in train_points]
    records = [{"messages": [*decision_messages(p), {"role": "assistant", "content": reply}]}
               for p, replies in zip(train_points, taught, strict=True) for reply in replies]
    examples = sft_examples(records, tokenizer, max_reply_tokens=args.max_reply_tokens)
    with autocast(args):
        sft_losses = sft_train(model, examples, steps=args.sft_steps, batch_size=args.sft_batch_size,
                               group=len(taught[0]), learning_rate=args.sft_learning_rate, seed=args.seed,
                               detach_prompt=True,
                               log=lambda step, loss: print(f"  SFT step {step:3d}  loss {loss:.4f}", flush=True))
    stage("SFT", t0)
    evaluate_all("after SFT")
    sft_state = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}
    bet_share = min(summary(c["after SFT"])["bets"] for c in columns.values())
    if bet_share < args.min_bet_share:
        print(f"FAILED: after SFT the model bets at {bet_share:.0%} of held-out points (greedy), under the "
              f"{args.min_bet_share:.0%} RL needs to have sides to rank; raise --sft-steps (now {args.sft_steps})")
        return 1

    # -- RL on the side
    curves: dict[str, list[dict[str, float]]] = {}
    variants = ["exact", "grpo"] if args.rl == "both" else [args.rl]
    for variant in variants:
        model.load_state_dict(sft_state, strict=False)  # every variant starts from the same SFT weights
        t0 = time.perf_counter()
        torch.manual_seed(args.seed)
        if variant == "exact":
            choices = side_choices(train_points, tokenizer, teacher, args.seed,
                                   mirrors=args.mirror_share > 0 or args.mirror_pairs)
            shown = "each beside its mirror" if args.mirror_pairs else \
                f"each point as its mirror at {args.mirror_share:.0%}"
            print(f"exact RL: {len(choices)} training points, {args.epochs:g} epochs of {args.points_per_step} a "
                  f"step, {shown}")
            curves[variant] = train_exact(model, choices, args, lambda row: print(
                f"  update {row['update']:4d}  expected return {row['mean_return']:+.4f}  best side "
                f"{row['best_side_share']:.2f}  alike {row['zero_variance']:.2f}", flush=True))
        else:
            model, curves[variant] = train_grpo(model, tokenizer, train_points, args, out)
            for row in curves[variant]:
                print(f"  GRPO step {row['update']:4d}  mean return {row['mean_return']:+.4f}  zero-variance "
                      f"{row['zero_variance']:.2f}  loss {row['loss']:+.5f}")
        stage(f"RL ({variant})", t0)
        evaluate_all(TRAINED[variant])

    # -- the tables, results.json and the curve
    total_s = time.perf_counter() - started
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    main_variant = variants[0]
    trained = TRAINED[main_variant]
    sets = {}
    for start, cols in columns.items():
        print(f"\n**Held-out set: seeds from {start:,}** ({len(held_out[start])} points, one greedy reply each)\n")
        print(decision_table(cols, baseline="after SFT"))
        t = cols[trained]
        sets[str(start)] = {
            "points": len(held_out[start]),
            "variant": main_variant,
            "paired": {"trained_minus_sft": paired(t, cols["after SFT"]),
                       "trained_minus_format_teacher": paired(t, cols["format-only teacher"]),
                       "trained_minus_scripted_teacher": paired(t, cols["scripted teacher"]),
                       "trained_minus_calibrated_rule": paired(t, cols["calibrated evidence rule"]),
                       **reference_pairs(cols),
                       **({"grpo_minus_sft": paired(cols[TRAINED["grpo"]], cols["after SFT"])}
                          if "grpo" in variants and main_variant != "grpo" else {})},
            "format_valid": summary(t)["format_valid"],
            "executed": summary(t)["executed"],
            "columns": {name: {**summary(c), "gain_ci95": interval([r.gain for r in c]).to_dict()}
                        for name, c in cols.items()},
        }
        for name, p in sets[str(start)]["paired"].items():
            print(f"  {name}: {p['mean']:+.4f} [{p['ci95_low']:+.4f}, {p['ci95_high']:+.4f}] (n={p['n']})")
    if args.smoke:
        print(f"\n{SMOKE_NOTE}")
    print("\nstages: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items())
          + f"; whole run {total_s:.0f} s on {args.device}; peak RSS {peak_gb:.1f} GB")
    results_path = Path(args.results_json) if args.results_json else out / "results.json"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    plot_curve(curves, results_path.with_suffix(".png"))
    results_path.write_text(json.dumps({
        "args": dataclasses.asdict(args), "sets": sets, "wall_s": total_s, "peak_rss_gb": peak_gb,
        "cpu_model": cpu_model(), "load_average": load_average(), "torch_threads": torch.get_num_threads(),
        "stages_s": stages, "sft_losses": sft_losses, "curves": curves,
        "replies": {str(s): {name: [dataclasses.asdict(r) for r in c] for name, c in cols.items()}
                    for s, cols in columns.items()},
    }, indent=1))
    print(f"wrote {results_path} and {results_path.with_suffix('.png')}")

    finite = (all(math.isfinite(row["mean_return"]) and math.isfinite(row["loss"]) for c in curves.values()
                  for row in c) and all(math.isfinite(x) for x in sft_losses))
    if not finite:
        print("FAILED: a loss or return is not finite")
        return 1
    valid = min(one["format_valid"] for one in sets.values())
    if valid < args.min_format_valid:
        print(f"FAILED: after RL the model's greedy replies are format-valid at {valid:.0%} of held-out points (the "
              f"worst set), under --min-format-valid {args.min_format_valid:.0%}: RL broke the reply's form; lower "
              f"--learning-rate (now {args.learning_rate:g}) or raise --anchor (now {args.anchor:g})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
