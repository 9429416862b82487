"""Train SmolLM2-135M with GRPO on whole short episodes of the decision world (several replies per rollout), sized
for a GPU, and score it on the held-out episode sets before and after RL.

    python examples/train_trl_episodes.py --smoke                     # CPU, CI size: every stage runs, nothing learned
    python examples/train_trl_episodes.py --device cuda               # the GPU run (the defaults below)
    python examples/train_trl_episodes.py --device cuda --train-seeds 2000 --grpo-steps 300 --ticks 8

No GPU result of this recipe is recorded yet (docs/trl.md, "Multi-turn episodes (GPU)"): the defaults are sized,
not tuned. One file, top to bottom (CleanRL style); `examples/train_trl_grpo.py` is its single-decision sibling.

1. **Rows**: fork points of the decision world (`DECISION_WORLD`, 2 markets that resolve within 2-4 ticks, news
   every tick) in the compact prompt style under the task rule `fixed_stake` (`--fraction`: every bet stakes 5 % of
   cash, the reply names the market and the side only), from training seeds (`TRAIN_SEEDS`, never the held-out
   ones). A row starts at a decision point (`decision_points`: a market the feed names resolves soon, so the
   episode has news from its first tick) and lasts `--ticks` ticks, of which the model answers `--decisions`
   (default: every one); a clean wait plays the rest (`build_dataset(points=..., ticks=T, decisions=D)`).
2. **SFT warm start** on the format-only teacher (`FormatOnlyLLM(writes_amount=False)`): its JSON-only replies at
   every tick of the training rows (a bet on the market the feed names most, the side a coin flip; a wait where
   there is nothing to bet on), so the sampler bets from the first GRPO step and the side is left to RL.
3. **GRPO on episodes** (`SharedPromptGRPOTrainer`: TRL's `GRPOTrainer`, each group's prompt run once; TRL's
   loss, `beta=0`, `scale_rewards="none"`): `make_rollout_func` plays each row token-exactly, one reply per
   answered tick, each sampled under its tick's JSON-only grammar (`tick_gbnf(..., think="never")`: every sample
   is an action on ids the prompt shows), the env's tokens between replies masked out of the loss (`env_mask`).
   The reward is the episode return (`env_return`); groups whose returns are all equal are dropped and counted.
   A step's groups are sampled together and trained as `--prompts-per-step` micro-batches of `--num-generations`
   episodes each (TRL shuffles them across the micro-batches), so a GPU holds 8 episodes' logits at once, never
   the whole step's 64.
4. **Scoring** on the episode sets (`episodes-v1/decision-world-a` and `-b`: 50 held-out episodes each, every tick
   answered) through `rlaif_gym.evals.run_episode_eval`, the `rlaif-gym eval` path, under the same `fixed_stake`
   rule (so each set is the named one with that override: its digest is its own). The model answers greedily and
   unconstrained (its format-valid share is its own), as an in-process agent whose concurrent calls run as one
   batched `generate`. Each tick is one chat turn there (system prompt and tick prompt; the prompt carries the last
   action's result), while a GRPO rollout keeps the episode's earlier turns in context: the first tick of every
   rollout is the eval's framing, the later ones are not. Per set: mean return with its 95 % interval,
   format-valid share, the baselines on the same seeds, and the paired difference trained - SFT over episodes.

GPU defaults (`--device cuda`): 2000 training rows of 8 ticks, SFT 64 steps of 16 replies, 300 GRPO steps of
8 rows x 8 samples (at most 8 x 40 sampled tokens and about 8 x 150 env tokens a sample), LoRA on all 30 layers;
expected to take about an hour on one H100 (an estimate, not measured), under 20 GB of GPU memory.

Exits non-zero when a loss or return is not finite, or when the trained model's greedy replies are format-valid at
under `--min-format-valid` of the ticks of some set.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import math
import os
import resource
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: the GGUF ships in a package
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16

import numpy as np
import torch
import tyro
from peft import LoraConfig, get_peft_model
from trl import GRPOConfig

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.agents import LLMAgent
from rlaif_gym.benchmark import cpu_model, load_average
from rlaif_gym.encoding.grammar import TickIds, tick_gbnf
from rlaif_gym.envs.decisions import DECISION_WORLD, TRAIN_SEEDS, DecisionPoint, decision_points
from rlaif_gym.envs.text_env import RLAIFTextEnv
from rlaif_gym.evals.episodes import run_episode_eval
from rlaif_gym.evals.sets import EPISODE_SETS, task_set
from rlaif_gym.integrations.trl import (
    SharedPromptGRPOTrainer,
    build_dataset,
    env_return,
    load_gguf_policy,
    make_rollout_func,
    sft_examples,
    sft_train,
    trainer_generator,
    transformers_generator,
)
from rlaif_gym.llm import Completion, FormatOnlyLLM, SamplingParams
from rlaif_gym.metrics import interval


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`, underscores as dashes; `--help` shows these docstrings)."""

    train_seeds: int = 2000
    """Training rows: one decision point per seed from `seed` upward (within TRAIN_SEEDS), each the start of an
    episode of --ticks ticks."""
    ticks: int = 8
    """Ticks a training episode lasts (its horizon), from its decision point."""
    decisions: int | None = None
    """Ticks of the horizon the model answers, from the first (None: every tick); a clean wait plays the rest."""
    resolves_within: int = 4
    """A row's start names a market that resolves within this many ticks (`decision_points`)."""
    fraction: float = 0.05
    """The task rule `fixed_stake`: every bet stakes this share of cash (the reply names market and side only), in
    training, SFT and the eval sets alike."""
    max_reply_tokens: int = 40
    """Token budget of one reply (a JSON-only bet is about 30 tokens)."""
    sft_steps: int = 64
    """SFT steps on the format-only teacher's replies at the training rows' ticks."""
    sft_batch_size: int = 16
    """Replies per SFT step."""
    sft_learning_rate: float = 1e-3
    """AdamW learning rate of SFT (of the LoRA adapter)."""
    grpo_steps: int = 300
    """GRPO optimizer steps."""
    prompts_per_step: int = 8
    """Rows per GRPO step, each answered --num-generations times; also the step's micro-batches (gradient
    accumulation), each of --num-generations episodes."""
    num_generations: int = 8
    """GRPO group size: sampled episodes per row."""
    temperature: float = 1.0
    """Sampling temperature of the groups (under each tick's grammar)."""
    learning_rate: float = 2e-4
    """AdamW learning rate of GRPO (of the LoRA adapter)."""
    lora_r: int = 16
    """LoRA rank."""
    lora_layers: int = 30
    """LoRA on the top this many of the model's 30 layers."""
    eval_sets: tuple[str, ...] = ("episodes-v1/decision-world-a", "episodes-v1/decision-world-b")
    """The episode sets scored before and after RL (`rlaif_gym.evals.sets.EPISODE_SETS`), each under --fraction's
    fixed_stake rule."""
    eval_episodes: int | None = None
    """Episodes per set (None: the set's own, 50), from the set's first seed."""
    eval_ticks: int | None = None
    """Ticks per eval episode (None: the world's own, 48)."""
    eval_batch: int = 50
    """Eval episodes in flight at once; their calls are generated as one batch."""
    min_format_valid: float = 0.9
    """Exit 1 (after writing results.json) unless the trained model's greedy replies are format-valid at this share of
    ticks or more, on every set."""
    seed: int = 0
    """First training seed, and the seed of the teacher's coins, the optimizers and the sampler."""
    device: str = "cpu"
    """Torch device: cpu, cuda, ..."""
    threads: int = 0
    """torch CPU threads (0: torch's default)."""
    precision: Literal["bf16", "fp32"] = "bf16"
    """Compute precision of every forward pass: "bf16" autocasts matrix products to bfloat16 (weights, optimizer
    state and losses stay float32); "fp32" throughout (for CPUs without native bfloat16)."""
    out: str = "runs/trl-episodes"
    """Where results.json, the eval run folders and the trainer's logs go (no checkpoints are saved)."""
    results_json: str = ""
    """Where to write results.json (default: --out/results.json)."""
    smoke: bool = False
    """CI size: every stage end to end (2 rows of 3 ticks, 2 GRPO steps, 2 short episodes of one eval set) on a
    CPU in a few minutes; it checks the wiring, not learning."""


SMOKE_NOTE = ("--smoke checks the wiring, not learning: every stage runs end to end (SFT, GRPO on episodes, the "
              "episode-set evaluations) on 2 rows of 3 ticks with 2 GRPO steps and 2 short eval episodes, so its "
              "tables show nothing learned; the run without --smoke (on a GPU) measures learning.")


def parse_args() -> Args:
    """The command line as `Args`, checked; `--smoke` shrinks every stage to CI size."""
    args = tyro.cli(Args, description=__doc__.split("\n\n")[0])
    if args.smoke:
        args = dataclasses.replace(args, train_seeds=2, ticks=3, decisions=None, sft_steps=2, sft_batch_size=2,
                                   grpo_steps=2, prompts_per_step=1, num_generations=2, lora_layers=4,
                                   eval_sets=args.eval_sets[:1], eval_episodes=2, eval_ticks=3, eval_batch=2,
                                   min_format_valid=0.0)
    if args.seed < TRAIN_SEEDS.start or args.seed + args.train_seeds > TRAIN_SEEDS.stop:
        raise SystemExit(f"--seed {args.seed} with --train-seeds {args.train_seeds} reaches outside the training "
                         f"seeds {TRAIN_SEEDS.start:,}..{TRAIN_SEEDS.stop - 1:,}; lower them")
    if args.decisions is not None and not 1 <= args.decisions <= args.ticks:
        raise SystemExit(f"--decisions counts answered ticks of the horizon, 1 to --ticks ({args.ticks}), got "
                         f"{args.decisions}; or leave it out to answer every tick")
    unknown = [s for s in args.eval_sets if s not in EPISODE_SETS]
    if unknown:
        raise SystemExit(f"--eval-sets {unknown} are not episode sets; choose from {', '.join(EPISODE_SETS)}")
    if args.num_generations < 2:
        raise SystemExit(f"--num-generations is GRPO's group size, 2 or more (a group of one has no spread to rank), "
                         f"got {args.num_generations}")
    return args


def autocast(args: Args):
    """bfloat16 autocast on `args.device` for `--precision bf16` (a no-op for fp32); no cast cache, so a loop of
    optimizer steps inside one context runs each step's weights."""
    return torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=args.precision == "bf16",
                          cache_enabled=False)


def with_lora(model, args: Args):
    """`model` with a LoRA adapter of rank `lora_r` on every projection of its top `lora_layers` layers."""
    layers = model.config.num_hidden_layers
    return get_peft_model(model, LoraConfig(
        r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0, task_type="CAUSAL_LM",
        layers_to_transform=list(range(max(0, layers - args.lora_layers), layers)),
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))


def json_tick_grammar(prompt: str, system_prompt: str) -> str:
    """The reply grammar of one tick, JSON only (no think block, as the format-only teacher writes): an action on the
    ids the prompt shows. Every row of this recipe starts at a rendered tick, so any other text is a bug."""
    ids = TickIds.from_prompt(prompt, system_prompt)
    if ids is None:
        raise RuntimeError(f"expected a rendered tick prompt to build its reply grammar from, got {prompt[:80]!r}; "
                           "the rows must come from build_dataset(points=...)")
    return tick_gbnf(ids, think="never")


# -- SFT on the format-only teacher, along the training rows -------------------------------------------------------


def teacher_records(points: Sequence[DecisionPoint], teacher: FormatOnlyLLM, ticks: int, seed: int,
                    ) -> list[dict[str, Any]]:
    """The format-only teacher's reply at every tick of each training row, played from its fork point for `ticks`
    ticks (the teacher's own replies move the world): one [system, user, assistant] record per tick, so SFT sees
    the later ticks' states (holdings, resolved markets) as well as the first. The coins are seeded by the run's
    seed, the row's seed and the tick."""
    records = []
    for point in points:
        env = RLAIFTextEnv(point.config)
        env.set_state(point.snapshot)
        prompt = env.prompt
        for k in range(ticks):
            reply = teacher.decide(prompt, np.random.default_rng([seed, point.seed, point.tick + k]))
            records.append({"messages": [{"role": "system", "content": env.system_prompt},
                                         {"role": "user", "content": prompt},
                                         {"role": "assistant", "content": reply}]})
            prompt, _, terminated, truncated, _ = env.step(reply)
            if terminated or truncated:
                break
    return records


# -- the in-process agent of the episode sets ---------------------------------------------------------------------


class BatchedGreedyClient:
    """A `ChatClient` (rlaif_gym.llm) over an in-process transformers model: the greedy reply to each call, the
    calls that arrive together generated as one batch.

    The rollout collector runs the set's episodes concurrently (one asyncio task each); every call waits on a
    future, and a flush runs once no new call has arrived for `settle_s` seconds (the other episodes' env steps
    are done and their calls queued), so a batch holds about one call per episode in flight.
    """

    def __init__(self, model, tokenizer, args: Args, name: str, settle_s: float = 0.002) -> None:
        self.model = name  # the name recorded in each call (ChatClient's `model`)
        self.tokenizer = tokenizer
        self.args = args
        self.settle_s = settle_s
        self.generate = transformers_generator(model, tokenizer, do_sample=False)
        self.pending: list[tuple[list[int], asyncio.Future]] = []
        self.flush: asyncio.Task | None = None
        self.batch_sizes: list[int] = []

    def describe(self) -> dict[str, Any]:
        """What each trajectory records about the policy."""
        return {"kind": "in-process transformers, greedy", "model": self.model,
                "max_reply_tokens": self.args.max_reply_tokens}

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        """The greedy reply to `messages` (chat-templated with the generation prompt), at most --max-reply-tokens."""
        ids = list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                      return_dict=False))
        future = asyncio.get_running_loop().create_future()
        self.pending.append((ids, future))
        if self.flush is None:
            self.flush = asyncio.create_task(self._flush())
        reply = await future
        return Completion(self.tokenizer.decode(reply, skip_special_tokens=True), self.model,
                          finish_reason="stop" if reply and reply[-1] == self.tokenizer.eos_token_id else "length",
                          prompt_tokens=len(ids), completion_tokens=len(reply), total_tokens=len(ids) + len(reply))

    async def _flush(self) -> None:
        seen = -1
        while len(self.pending) != seen:  # until a settle interval passes with no new call
            seen = len(self.pending)
            await asyncio.sleep(self.settle_s)
        batch, self.pending, self.flush = self.pending, [], None
        self.batch_sizes.append(len(batch))
        try:
            with autocast(self.args):
                replies, _ = self.generate([ids for ids, _ in batch], self.args.max_reply_tokens)
        except Exception as exc:  # every waiting call fails with it (the collector records the failed episodes)
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if not future.done():
                future.set_result(reply)


def score_on_sets(model, tokenizer, args: Args, column: str, out: Path) -> dict[str, dict[int, dict[str, float]]]:
    """`column`'s greedy play of every eval set through `run_episode_eval` (the model merged with its adapter while it
    plays); returns per set, per policy (the model as `column`, and each baseline), per episode its metrics
    (`return`, `pnl`, `format_valid`, `executed`), read back from the run folder's points.jsonl."""
    merge = hasattr(model, "merge_adapter")
    if merge:
        model.merge_adapter()
    scored: dict[str, dict[int, dict[str, float]]] = {}
    try:
        for name in args.eval_sets:
            eset = eval_set(name, args)
            client = BatchedGreedyClient(model, tokenizer, args, name=column)
            agent = LLMAgent(client, SamplingParams(temperature=0.0, max_tokens=args.max_reply_tokens,
                                                    logprobs=False), name=column)
            folder = out / "eval" / column.replace(" ", "-").replace("+", "-") / name.replace("/", "-")
            t0 = time.perf_counter()
            run_episode_eval(agent, eset, folder, concurrency=args.eval_batch, overwrite=True, preflight=False)
            points = [json.loads(line) for line in (folder / "points.jsonl").read_text().splitlines()]
            by_policy: dict[str, dict[int, dict[str, float]]] = {}
            for p in points:
                policy = column if p["policy"] == "model" else p["policy"]
                by_policy.setdefault(policy, {})[p["point"]] = p
            scored[name] = by_policy
            print(f"{column} on {eset.name}: {eset.episodes} episodes of {eset.config.num_ticks} ticks in "
                  f"{time.perf_counter() - t0:.0f} s, mean batch {statistics.fmean(client.batch_sizes):.1f} calls",
                  flush=True)
    finally:
        if merge:
            model.unmerge_adapter()
    return scored


def eval_set(name: str, args: Args):
    """The named episode set under the run's fixed_stake rule (and, with --eval-episodes / --eval-ticks, fewer or
    shorter episodes): a set of its own, with its own name and digest."""
    overrides = {"fixed_stake": args.fraction, **({"num_ticks": args.eval_ticks} if args.eval_ticks else {})}
    return task_set(name, points=args.eval_episodes, overrides=overrides)


def column_summary(per_episode: dict[int, dict[str, float]]) -> dict[str, Any]:
    """A policy on one set: mean return with its 95 % interval over episodes, mean pnl (USD), and the format-valid
    and executed shares of its ticks (means of the per-episode shares: every episode has the same ticks)."""
    values = [per_episode[k] for k in sorted(per_episode)]
    return {"return": interval([v["return"] for v in values]).to_dict(),
            "pnl": statistics.fmean(v["pnl"] for v in values),
            "format_valid": statistics.fmean(v["format_valid"] for v in values),
            "executed": statistics.fmean(v["executed"] for v in values)}


def paired(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]]) -> dict[str, Any]:
    """The paired difference of the episode return, a - b, episode by episode (same seeds), with its 95 % interval."""
    if sorted(a) != sorted(b):
        raise RuntimeError(f"paired columns must hold the same episodes, got {sorted(a)} and {sorted(b)}")
    return interval([a[k]["return"] - b[k]["return"] for k in sorted(a)]).to_dict()


def fmt(stat: dict[str, Any]) -> str:
    """`mean [low, high]` of an interval (NaN bounds, with one episode, as n/a)."""
    low, high = stat["ci95_low"], stat["ci95_high"]
    bounds = "n/a" if low is None else f"{low:+.4f}, {high:+.4f}"
    return f"{stat['mean']:+.4f} [{bounds}]"


# -- the run --------------------------------------------------------------------------------------------------------


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    if args.smoke:
        print(SMOKE_NOTE, flush=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stages: dict[str, float] = {}

    def stage(name: str, t0: float) -> None:
        stages[name] = time.perf_counter() - t0
        print(f"[{name}: {stages[name]:.0f} s]", flush=True)

    # -- rows: decision points of the training seeds, each the start of a short episode
    t0 = time.perf_counter()
    config = RLAIFEnvConfig.from_any({**DECISION_WORLD, "prompt_style": "compact", "fixed_stake": args.fraction})
    points = decision_points(range(args.seed, args.seed + args.train_seeds), config,
                             resolves_within=args.resolves_within, horizon=args.ticks)
    train = build_dataset(points=points, ticks=args.ticks, decisions=args.decisions)
    print(f"{len(train)} training rows of {args.ticks} ticks, the model answering "
          f"{args.decisions or args.ticks} of them")
    stage("rows", t0)

    # -- the model: the shipped GGUF with a LoRA adapter, warm-started on the format-only teacher
    model, tokenizer = load_gguf_policy()
    model.to(args.device)
    model = with_lora(model, args)
    t0 = time.perf_counter()
    teacher = FormatOnlyLLM(fraction=args.fraction, writes_amount=False)
    records = teacher_records(points, teacher, args.decisions or args.ticks, args.seed)
    examples = sft_examples(records, tokenizer, max_reply_tokens=args.max_reply_tokens)
    bets = statistics.fmean('"buy_prediction"' in r["messages"][-1]["content"] for r in records)
    print(f"SFT: {len(examples)} teacher replies ({bets:.0%} bets, the rest waits), {args.sft_steps} steps of "
          f"{args.sft_batch_size}")
    with autocast(args):
        sft_losses = sft_train(model, examples, steps=args.sft_steps, batch_size=args.sft_batch_size,
                               learning_rate=args.sft_learning_rate, seed=args.seed, detach_prompt=True,
                               log=lambda step, loss: print(f"  SFT step {step:3d}  loss {loss:.4f}", flush=True))
    stage("SFT", t0)

    t0 = time.perf_counter()
    scores = {name: dict(per) for name, per in score_on_sets(model, tokenizer, args, "after SFT", out).items()}
    stage("evaluation, after SFT", t0)

    # -- GRPO on whole episodes
    t0 = time.perf_counter()
    grpo = GRPOConfig(
        output_dir=str(out), max_steps=args.grpo_steps, per_device_train_batch_size=args.num_generations,
        gradient_accumulation_steps=args.prompts_per_step, num_generations=args.num_generations,
        learning_rate=args.learning_rate, beta=0.0, temperature=args.temperature, top_k=0, top_p=1.0,
        scale_rewards="none", max_completion_length=args.max_reply_tokens, logging_steps=1, report_to=[],
        save_strategy="no", use_cpu=args.device == "cpu", seed=args.seed, bf16=args.precision == "bf16", fp16=False,
        dataloader_num_workers=0, disable_tqdm=True, gradient_checkpointing=False,
    )
    trainer = SharedPromptGRPOTrainer(
        model=model, reward_funcs=[env_return], args=grpo, train_dataset=train, processing_class=tokenizer,
        rollout_func=make_rollout_func(train, max_reply_tokens=args.max_reply_tokens, constrain=True,
                                       grammar_of=json_tick_grammar, drop_zero_variance=True,
                                       generator=functools.partial(trainer_generator, shared_prompt=True)),
    )
    trainer.train()
    model = trainer.model
    model.eval()
    curve = [{"step": int(h["step"]), "mean_return": float(h["reward"]), "loss": float(h.get("loss", math.nan)),
              "zero_variance": float(h.get("rlaif/zero_variance_group", math.nan)),
              "format_valid": float(h.get("rlaif/format_valid_rate", math.nan)),
              "executed": float(h.get("rlaif/executed_rate", math.nan))}
             for h in trainer.state.log_history if "reward" in h]
    for row in curve:
        print(f"  GRPO step {row['step']:4d}  mean return {row['mean_return']:+.4f}  zero-variance "
              f"{row['zero_variance']:.2f}  executed {row['executed']:.2f}  loss {row['loss']:+.5f}")
    stage("GRPO", t0)

    t0 = time.perf_counter()
    trained = "after SFT+GRPO"
    for name, per in score_on_sets(model, tokenizer, args, trained, out).items():
        scores[name][trained] = per[trained]
    stage(f"evaluation, {trained}", t0)

    # -- the tables and results.json
    sets: dict[str, Any] = {}
    for name, cols in scores.items():
        eset = eval_set(name, args)
        order = ["after SFT", trained, *(c for c in cols if c not in ("after SFT", trained))]
        print(f"\n**{eset.name}** ({eset.episodes} episodes of {eset.config.num_ticks} ticks, greedy, fixed stake "
              f"{args.fraction:.0%})\n")
        print("| policy | mean return [95 % interval] | pnl (USD) | format-valid | executed |")
        print("|---|---|---|---|---|")
        summaries = {c: column_summary(cols[c]) for c in order}
        for c, s in summaries.items():
            print(f"| {c} | {fmt(s['return'])} | {s['pnl']:+.2f} | {s['format_valid']:.0%} | {s['executed']:.0%} |")
        diff = paired(cols[trained], cols["after SFT"])
        print(f"\n  trained - SFT, paired over episodes: {fmt(diff)} (n={diff['n']})")
        sets[name] = {"set": eset.name, "episodes": eset.episodes, "ticks": eset.config.num_ticks,
                      "columns": summaries, "paired": {"trained_minus_sft": diff},
                      "format_valid": summaries[trained]["format_valid"]}
    total_s = time.perf_counter() - started
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    if args.smoke:
        print(f"\n{SMOKE_NOTE}")
    print("\nstages: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items())
          + f"; whole run {total_s:.0f} s on {args.device}; peak RSS {peak_gb:.1f} GB")
    results_path = Path(args.results_json) if args.results_json else out / "results.json"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps({
        "args": dataclasses.asdict(args), "rows": len(train), "sets": sets, "sft_losses": sft_losses,
        "curve": curve, "stages_s": stages, "wall_s": total_s, "peak_rss_gb": peak_gb, "cpu_model": cpu_model(),
        "load_average": load_average(), "torch_threads": torch.get_num_threads(),
    }, indent=1))
    print(f"wrote {results_path}")

    finite = all(math.isfinite(r["mean_return"]) and math.isfinite(r["loss"]) for r in curve) and \
        all(math.isfinite(x) for x in sft_losses)
    if not finite:
        print("FAILED: a loss or return is not finite")
        return 1
    valid = min(s["format_valid"] for s in sets.values())
    if valid < args.min_format_valid:
        print(f"FAILED: after GRPO the model's greedy replies are format-valid at {valid:.0%} of the ticks (the worst "
              f"set), under --min-format-valid {args.min_format_valid:.0%}: RL broke the reply's form; lower "
              f"--learning-rate (now {args.learning_rate:g})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
