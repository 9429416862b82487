"""Single decisions, evaluated: greedy replies at held-out decision points and their table (docs/trl.md).

Part of `rlaif_gym.integrations.trl`, which re-exports every public name.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ...envs.decisions import DecisionPoint, DecisionReply, decision_messages, score_decision_replies
from ...metrics import interval

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

from .episodes import TokenGenerator, _chat_ids

# -- single decisions, evaluated -------------------------------------------------------------------------------


def evaluate_decisions(points: Sequence[DecisionPoint], generate: TokenGenerator, tokenizer: PreTrainedTokenizerBase,
                       *, samples: int = 4, ticks: int | None = None, max_reply_tokens: int = 64,
                       batch: int | None = None) -> list[DecisionReply]:
    """`samples` sampled replies per decision point, each scored against a wait on the same state.

    Args:
        points: the decision points (held out: from `rlaif_gym.envs.decisions.HELD_OUT_SEEDS`).
        generate: the sampler (`transformers_generator` with `do_sample=True`; `shared_prompt_generator` with
            `temperature=0` for greedy replies).
        tokenizer: the policy's tokenizer (its chat template frames the prompt, as `play_episodes` does).
        samples: replies per point.
        ticks: the horizon (`score_decision_replies`; None: each point's resolution horizon).
        max_reply_tokens: the budget of one reply.
        batch: sequences per `generate` call (None: all in one call, so `shared_prompt_generator` runs the
            system prompt they share once).

    Returns:
        One `DecisionReply` per sample, point by point; `decision_table` summarises them.
    """
    prompts = [_chat_ids(tokenizer, decision_messages(p), generation_prompt=True) for p in points]
    jobs = [(i, prompts[i]) for i in range(len(points)) for _ in range(samples)]
    replies: list[tuple[int, str]] = []
    size = batch or max(len(jobs), 1)
    for start in range(0, len(jobs), size):
        chunk = jobs[start:start + size]
        ids, _ = generate([seq for _, seq in chunk], max_reply_tokens)
        replies += [(i, tokenizer.decode(reply_ids, skip_special_tokens=True))
                    for (i, _), reply_ids in zip(chunk, ids, strict=True)]
    return score_decision_replies(points, replies, ticks=ticks)


def _clustered(values: Sequence[float], clusters: Sequence[int]) -> tuple[float, float]:
    """Mean of per-cluster means and the half-width of its 95 % interval (`metrics.interval`, over clusters)."""
    groups: dict[int, list[float]] = {}
    for v, c in zip(values, clusters, strict=True):
        groups.setdefault(c, []).append(v)
    iv = interval([statistics.fmean(g) for g in groups.values()])
    return iv.mean, (iv.ci95_high - iv.ci95_low) / 2


def decision_table(results: Mapping[str, Sequence[DecisionReply]], *, baseline: str | None = None) -> str:
    """A markdown table of `evaluate_decisions` results, one column per model (e.g. base, after SFT, after
    SFT+GRPO): format-valid %, executed %, right-side share minus wrong-side share (against p*'s side of the
    price, and against the drawn outcome), and the paired gain over waiting, each with its 95 % interval over
    decision points; with `baseline`, each column's paired gain over the baseline column's on the same points."""
    names = list(results)
    rows = [("format-valid", lambda r: float(r.format_valid), "{:.0%}"),
            ("executed", lambda r: float(r.executed), "{:.0%}"),
            ("right side - wrong side (share of replies)", lambda r: float(r.side), "{:+.2f}"),
            ("outcome's side - the other (share of replies)", lambda r: float(r.outcome_side), "{:+.2f}"),
            ("gain over waiting (return)", lambda r: r.gain, "{:+.4f}")]
    lines = ["| on held-out decision points | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, value, fmt in rows:
        cells = []
        for name in names:
            rs = results[name]
            mean, half = _clustered([value(r) for r in rs], [r.point for r in rs])
            cells.append(f"{fmt.format(mean)} (± {fmt.format(half).lstrip('+')})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if baseline is not None:
        base = {r.point: [] for r in results[baseline]}
        for r in results[baseline]:
            base[r.point].append(r.gain)
        cells = []
        for name in names:
            diffs = [statistics.fmean([r.gain for r in results[name] if r.point == p]) - statistics.fmean(g)
                     for p, g in base.items()]
            mean, half = _clustered(diffs, list(range(len(diffs))))
            cells.append("" if name == baseline else f"{mean:+.4f} (± {half:.4f})")
        lines.append(f"| gain over {baseline}, paired | " + " | ".join(cells) + " |")
    n_points = len({r.point for r in results[names[0]]}) if names else 0
    lines.append(f"\n({n_points} decision points x {len(results[names[0]]) // max(n_points, 1)} samples each; "
                 "± is the 95 % interval over points)" if names else "")
    return "\n".join(lines)


