"""Train SmolLM2-135M on single decisions of RLAIF-Text-v0 with TRL's GRPO, offline on CPU, and measure it.

    python examples/train_trl_grpo.py --smoke           # CI size: checks the wiring (minutes), not learning
    python examples/train_trl_grpo.py                   # the docs' run (docs/trl.md has its table, time and memory)
    python examples/train_trl_grpo.py --sft-steps 0     # GRPO from the base model (no SFT warm start)
    python examples/train_trl_grpo.py --device cuda --steps 400 --prompts-per-step 8   # on a GPU

One file, top to bottom (CleanRL style). The recipe (docs/trl.md explains each choice with its numbers):

1. **Decision points** (`rlaif_gym.envs.decisions.decision_points`): states of a small world (2 markets that
   resolve within 2-4 ticks, 48-tick episodes) where a market resolves within `--resolves-within` ticks and
   the prompt's news, tips or posts name it. Training points come from seeds `seed ..`; the evaluation uses two
   disjoint held-out sets from 1,000,000 and 2,000,000, which training never touches.
2. **The reward**: `reward_mark="truth"`, the potential-based training reward that credits a bet at its own
   tick with its value under the hidden truth (reward only: the prompt never shows it). Form terms stay scaled
   by the trunk's 48 ticks, so one malformed reply costs 0.0026 against a right bet's +0.01 to +0.04.
3. **Single decisions**: each rollout is one reply; the continuation waits out the horizon (`--ticks`), so a
   rollout is a contextual bandit whose return is what that reply is worth.
4. **SFT warm start** on the offline scripted model's replies at training decision points (`--sft-steps`).
5. **GRPO** (`SharedPromptGRPOTrainer`, TRL's trainer with each group's prompt run once, without gradients;
   rollouts sampled from one shared KV cache per group): groups of `--num-generations` at temperature
   `--temperature`, advantages = return - group mean (`scale_rewards="none"`), zero-variance groups dropped
   and counted (`drop_zero_variance`), `--max-reply-tokens` per reply.
6. **Evaluation** of the base model, after SFT and after SFT+GRPO on both held-out sets (`--eval-points` each,
   `--eval-samples` replies per point): format-valid %, executed %, the share of replies that buy the side p*
   favours minus the share that buy the other side, and the mark-to-truth gain over a wait on the same state,
   with 95 % intervals over points, and SFT+GRPO against SFT paired on the same points; wall time and peak RSS.

Exits non-zero when a loss or reward is not finite.
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

import torch
import tyro
from peft import LoraConfig, get_peft_model
from trl import GRPOConfig

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.envs.decisions import DECISION_WORLD, HELD_OUT_SEEDS, decision_points
from rlaif_gym.integrations.local_llm import model_path
from rlaif_gym.integrations.trl import (
    SharedPromptGRPOTrainer,
    build_dataset,
    decision_sft_records,
    decision_table,
    env_return,
    evaluate_decisions,
    load_gguf_policy,
    make_rollout_func,
    sft_examples,
    sft_train,
    shared_prompt_generator,
    trainer_generator,
)


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`, underscores as dashes; `--help` shows these docstrings)."""

    steps: int = 32
    """GRPO optimizer steps."""
    prompts_per_step: int = 2
    """Decision points (distinct start states) per GRPO step; each is answered num_generations times."""
    num_generations: int = 8
    """GRPO group size: replies per decision point."""
    temperature: float = 1.0
    """Sampling temperature of GRPO's rollouts."""
    learning_rate: float = 3e-4
    """AdamW learning rate of GRPO (of the LoRA adapter, or of all weights with --lora-r 0)."""
    max_reply_tokens: int = 64
    """Token budget of one reply (64 fit a buy after SFT; 48 cut its JSON)."""
    ticks: int = 1
    """Horizon of a rollout: the reply's tick, then the continuation waits (1: the bet's own tick)."""
    resolves_within: int = 4
    """A decision point has a market that resolves within this many ticks, named by the prompt's feed."""
    train_seeds: int = 400
    """Training episodes (seeds seed .. seed + train_seeds - 1), one decision point each, for SFT and GRPO."""
    sft_steps: int = 40
    """SFT warm-start steps on the scripted model's replies at training decision points (0: none)."""
    sft_batch_size: int = 4
    """Replies per SFT step."""
    sft_learning_rate: float = 1e-3
    """AdamW learning rate of the SFT warm start."""
    sft_think: Literal["decision", "evidence"] = "decision"
    """The SFT replies' <think>: "decision" (the scripted model's decision sentence) or "evidence" (the feed
    item it bet on, then the decision; replies need --max-reply-tokens 88)."""
    eval_points: int = 24
    """Decision points per held-out set (two disjoint sets: seeds from 1,000,000 and from 2,000,000)."""
    eval_samples: int = 4
    """Sampled replies per held-out decision point."""
    eval_temperature: float = 1.0
    """Sampling temperature of the evaluations (the policy GRPO optimises samples at --temperature)."""
    lora_r: int = 16
    """LoRA rank; 0 trains every weight."""
    beta: float = 0.0
    """KL coefficient (0: no reference model)."""
    config: str = ""
    """JSON of RLAIFEnvConfig overrides on top of the decision world."""
    seed: int = 0
    """Seed of the training seeds' range, the sampler and the trainer."""
    device: str = "cpu"
    """Torch device: cpu, cuda, ..."""
    threads: int = 0
    """torch CPU threads (0: torch's default)."""
    out: str = "runs/trl-grpo"
    """Where the trainer writes its logs and results.json (no checkpoints are saved)."""
    smoke: bool = False
    """CI size: checks that every stage runs end to end (2 SFT and 2 GRPO steps, groups of 2, 16-token replies,
    1 held-out point per set): the wiring, not learning; its table shows nothing learned."""


SMOKE_NOTE = ("--smoke checks the wiring, not learning: every stage runs end to end (2 SFT and 2 GRPO steps on 4 "
              "decision points, 16-token replies that cannot hold an action, 1 held-out point per set), so the "
              "tables show 0% format-valid and no gain at every stage; the run without --smoke measures learning.")


def parse_args() -> Args:
    """The command line as `Args` (tyro: each field a `--flag`, its docstring the help, with default and choices)."""
    args = tyro.cli(Args, description=__doc__.split("\n\n")[0])
    if args.smoke:
        args = dataclasses.replace(args, steps=2, prompts_per_step=1, num_generations=2, max_reply_tokens=16,
                                   train_seeds=4, sft_steps=min(args.sft_steps, 2), sft_batch_size=1, eval_points=1,
                                   eval_samples=2)
    return args


def evaluate(model, tokenizer, points, args: Args, seed: int):
    """`eval_samples` sampled replies per held-out point (the sampler seeded, so reruns match)."""
    torch.manual_seed(seed)
    model.eval()
    merge = hasattr(model, "merge_adapter")  # a PEFT model: sample from merged weights (faster), then unmerge
    if merge:
        model.merge_adapter()
    try:
        gen = shared_prompt_generator(model, tokenizer, temperature=args.eval_temperature)
        return evaluate_decisions(points, gen, tokenizer, samples=args.eval_samples, ticks=args.ticks,
                                  max_reply_tokens=args.max_reply_tokens)
    finally:
        if merge:
            model.unmerge_adapter()


def _summary(replies) -> dict[str, float]:
    return {"format_valid": statistics.fmean(r.format_valid for r in replies),
            "executed": statistics.fmean(r.executed for r in replies),
            "side": statistics.fmean(r.side for r in replies), "gain": statistics.fmean(r.gain for r in replies)}


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

    # -- the model: the shipped GGUF, dequantised to float32 by transformers
    gguf = model_path()
    model, tokenizer = load_gguf_policy(gguf)
    model.to(args.device)
    print(f"loaded {gguf.name}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters "
          f"({time.perf_counter() - started:.0f} s)")

    # -- decision points: training seeds, and two disjoint held-out sets
    t0 = time.perf_counter()
    config = RLAIFEnvConfig.from_any({**DECISION_WORLD, **json.loads(args.config or "{}")})
    find = functools.partial(decision_points, config=config, resolves_within=args.resolves_within,
                             horizon=args.ticks)
    train_points = find(range(args.seed, args.seed + args.train_seeds))
    held_out = {f"set {k + 1} (seeds from {r.start:,})": find(range(r.start, r.start + 4 * args.eval_points))
                [:args.eval_points] for k, r in enumerate(HELD_OUT_SEEDS)}
    train = build_dataset(points=train_points, ticks=args.ticks, decisions=1)
    prompt_tokens = len(tokenizer.apply_chat_template(train[0]["prompt"], add_generation_prompt=True, tokenize=True,
                                                      return_dict=False))
    stages["decision points"] = time.perf_counter() - t0
    print(f"{len(train_points)} training decision points, held out {[len(p) for p in held_out.values()]}; a prompt "
          f"is {prompt_tokens} tokens ({stages['decision points']:.0f} s)")

    results: dict[str, dict[str, list]] = {name: {} for name in held_out}

    def evaluate_all(column: str) -> None:
        t = time.perf_counter()
        for name, points in held_out.items():
            results[name][column] = evaluate(model, tokenizer, points, args, args.seed + 1)
        stages[f"evaluation, {column}"] = time.perf_counter() - t
        print(f"{column}: " + "; ".join(f"{name} {_summary(r[column])}" for name, r in results.items())
              + f" ({stages[f'evaluation, {column}']:.0f} s)", flush=True)

    evaluate_all("base model")

    # -- SFT warm start: the scripted model's replies at training decision points, LoRA adapter, reply tokens only
    peft = (LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0, task_type="CAUSAL_LM",
                       target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
            if args.lora_r > 0 else None)
    if peft is not None:
        model = get_peft_model(model, peft)
    sft_losses: list[float] = []
    if args.sft_steps > 0:
        t0 = time.perf_counter()
        examples = sft_examples(decision_sft_records(train_points), tokenizer, max_reply_tokens=args.max_reply_tokens,
                                short_think=True if args.sft_think == "decision" else "evidence")
        cut = sum(1 for _, reply in examples if reply[-1] != tokenizer.eos_token_id)
        print(f"SFT data: {len(examples)} scripted replies at training decision points ({cut} cut to "
              f"{args.max_reply_tokens} tokens)")
        sft_losses = sft_train(model, examples, steps=args.sft_steps, batch_size=args.sft_batch_size,
                               learning_rate=args.sft_learning_rate, seed=args.seed, detach_prompt=True,
                               log=lambda step, loss: print(f"  SFT step {step:3d}  loss {loss:.4f}", flush=True))
        stages["SFT"] = time.perf_counter() - t0
        evaluate_all("after SFT")

    # -- GRPO on single decisions
    grpo = GRPOConfig(
        output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=args.prompts_per_step
        * args.num_generations, gradient_accumulation_steps=1, num_generations=args.num_generations,
        learning_rate=args.learning_rate, beta=args.beta, temperature=args.temperature, top_k=0, top_p=1.0,
        scale_rewards="none", max_completion_length=args.max_reply_tokens, logging_steps=1, report_to=[],
        save_strategy="no", use_cpu=args.device == "cpu", seed=args.seed, bf16=False, fp16=False,
        dataloader_num_workers=0, disable_tqdm=True, gradient_checkpointing=False,
    )
    trainer = SharedPromptGRPOTrainer(
        model=model, reward_funcs=[env_return], args=grpo, train_dataset=train, processing_class=tokenizer,
        rollout_func=make_rollout_func(train, max_reply_tokens=args.max_reply_tokens, drop_zero_variance=True,
                                       generator=functools.partial(trainer_generator, shared_prompt=True)),
    )
    t0 = time.perf_counter()
    trainer.train()
    stages["GRPO"] = time.perf_counter() - t0
    model = trainer.model
    logs = [h for h in trainer.state.log_history if "reward" in h]
    curve = [(int(h["step"]), float(h["reward"]), float(h.get("reward_std", float("nan"))),
              float(h.get("rlaif/zero_variance_group", float("nan"))), float(h.get("loss", float("nan"))))
             for h in logs]
    print("\nGRPO curve (step, mean return of the step's replies, its std, share of groups dropped for zero "
          "variance, loss):")
    for step, reward, std, dropped, loss in curve:
        print(f"  {step:4d}  {reward:+.4f}  {std:.4f}  {dropped:.2f}  {loss:+.5f}")
    evaluate_all("after SFT+GRPO" if args.sft_steps > 0 else "after GRPO")

    total_s = time.perf_counter() - started
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    baseline = "after SFT" if args.sft_steps > 0 else "base model"
    for name, columns in results.items():
        print(f"\n**Held-out {name}**\n")
        print(decision_table(columns, baseline=baseline))
    if args.smoke:
        print(f"\n{SMOKE_NOTE}")
    print("\nstages: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items())
          + f"; whole run {total_s:.0f} s on {args.device}; peak RSS {peak_gb:.1f} GB")
    (out / "results.json").write_text(json.dumps({
        "args": dataclasses.asdict(args), "sft_losses": sft_losses, "curve": curve, "stages_s": stages,
        "total_s": total_s, "peak_rss_gb": peak_gb,
        "results": {name: {col: [dataclasses.asdict(r) for r in rs] for col, rs in cols.items()}
                    for name, cols in results.items()},
        "summary": {name: {col: _summary(rs) for col, rs in cols.items()} for name, cols in results.items()},
    }, indent=1))

    finite = (all(math.isfinite(c[1]) and math.isfinite(c[4]) for c in curve) and len(curve) == args.steps
              and all(math.isfinite(x) for x in sft_losses))
    if not finite:
        print("FAILED: a step's loss or reward is not finite, or a step was not logged")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
