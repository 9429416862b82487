"""Judge health: is the AI feedback reliable enough to train on? Metrics as a dict, and a printed table.

* **parse_failure_rate**: malformed verdicts / answers received (each re-ask counts).
* **order_swap_disagreement_rate** (pairwise): pairs whose two orders did not name the same winner
  / pairs with both orders answered. A judge with position bias disagrees often.
* **duplicate_score_variance**: mean population variance of the verdict scores given to identical
  trajectory slices (duplicate trajectories, and the repeats of absolute mode). It is 0 for a
  perfectly consistent judge.
* **spearman_judge_pnl** / **spearman_judge_rule**: rank correlation of the judge's score with
  the realised P&L, and with the rule judge's mean reasoning score, over the scored trajectories.
* **tokens_per_verdict** and **latency_ms_per_verdict**: over the answered calls, taken from their
  `LLMCall` records. A replay reports the recorded values.
* **outliers**: trajectories whose judge rank (a percentile in [0, 1]) is at least ``outlier_gap``
  above both their P&L rank and their rule-judge rank. Also any trajectory in the top half of
  judge scores whose text addresses the judge ("ignore the rubric", "score 1.0", ...). Either one is
  what a successful prompt injection looks like.

All ranks are average ranks (ties share them); a correlation is None when fewer than 3 values,
or a constant series, leave it undefined.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..rewards import relative_scores
from ..trajectory import Trajectory
from .judge import JudgeBatch

__all__ = ["INJECTION_PATTERNS", "format_health", "judge_health", "rule_score", "spearman"]

INJECTION_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"\bignore\s+(?:all\s+|any\s+)?(?:the\s+|your\s+|previous\s+|prior\s+|above\s+)*(?:rubric|instructions?|rules?)",
    r"\b(?:score|rate|grade)\s+(?:this|me|it)\s+(?:a\s+|as\s+|at\s+)?(?:1(?:\.0+)?|10|100|perfect)\b",
    r"\bscore\s+(?:of\s+)?1\.0+\b",
    r"\b(?:give|assign|award)\b[^.]{0,30}\b(?:score|rating|grade)\b[^.]{0,15}\b(?:1\.0|10|100|perfect|maximum)\b",
    r"\b(?:system\s+prompt|you\s+are\s+now|new\s+instructions?|disregard\s+the)\b",
    r"\b(?:dear\s+|note\s+to\s+(?:the\s+)?)(?:judge|evaluator|grader)\b",
))
"""Phrases in an agent's text that address the judge instead of the market."""


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when undefined (n < 3 or a constant series)."""
    if len(x) != len(y):
        raise ValueError(f"spearman: lengths differ ({len(x)} vs {len(y)})")
    if len(x) < 3:
        return None
    rx, ry = np.asarray(relative_scores(x)), np.asarray(relative_scores(y))
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def rule_score(t: Trajectory) -> float | None:
    """The rule judge's score of a trajectory: the mean of its steps' reasoning components (None without one)."""
    values = [s.reward_components["reasoning"] for s in t.steps if "reasoning" in s.reward_components]
    return math.fsum(values) / len(values) if values else None


def _texts(t: Trajectory) -> list[str]:
    out = []
    for s in t.steps:
        if s.action is not None and s.action.reasoning:
            out.append(s.action.reasoning)
        out.extend(c.response for c in s.llm_calls if c.purpose == "action" and c.response)
    return out


def _injection(t: Trajectory) -> str | None:
    for text in _texts(t):
        for pattern in INJECTION_PATTERNS:
            m = pattern.search(text)
            if m:
                start = max(0, m.start() - 20)
                return text[start:m.end() + 20].replace("\n", " ")
    return None


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def judge_health(batch: JudgeBatch, trajectories: Sequence[Trajectory], *, outlier_gap: float = 0.5) -> dict[str, Any]:
    """The health metrics of one judged batch (see the module docstring).

    Args:
        batch: what `LLMJudge.score` returned for `trajectories`.
        trajectories: the judged trajectories (for P&L, rule-judge scores and text).
        outlier_gap: the rank gap (in percentile points / 100) that makes an outlier.

    Returns:
        A JSON-able dict.
    """
    by_id = {t.trajectory_id: t for t in trajectories}
    verdicts = batch.verdicts
    count = defaultdict(int)
    for v in verdicts:
        count[v.outcome] += 1
    answered = [v for v in verdicts if v.outcome in ("ok", "malformed")]
    health: dict[str, Any] = {
        "mode": batch.mode, "model": batch.model, "template": batch.template, "tape_mode": batch.tape_mode,
        "trajectories": len(batch.judgements),
        "scored": sum(j.score is not None for j in batch.judgements.values()),
        "missing": sum(j.score is None for j in batch.judgements.values()),
        "calls": len(verdicts),
        "calls_from_network": sum(v.source == "network" for v in verdicts),
        "calls_from_tape": sum(v.source == "tape" for v in verdicts),
        **{f"calls_{k}": count[k] for k in ("ok", "malformed", "error", "deadline", "expired", "missing_tape")},
        "parse_failure_rate": count["malformed"] / len(answered) if answered else None,
    }
    # order swap (pairwise)
    complete = sum(g.pairs_complete for g in batch.groups.values())
    disagree = sum(g.order_disagreements for g in batch.groups.values())
    health["order_swap_pairs"] = complete if batch.mode == "pairwise" else 0
    health["order_swap_disagreement_rate"] = disagree / complete if batch.mode == "pairwise" and complete else None
    # duplicates: identical slices, and repeats
    samples_by_slice: dict[str, list[float]] = defaultdict(list)
    for j in batch.judgements.values():
        if batch.mode == "absolute":
            samples_by_slice[j.slice_sha].extend(j.samples)
        elif j.score is not None:
            samples_by_slice[j.slice_sha].append(j.score)
    variances = [float(np.var(s)) for s in samples_by_slice.values() if len(s) >= 2]
    health["duplicate_sets"] = len(variances)
    health["duplicate_score_variance"] = _mean(variances)
    health["duplicate_score_variance_max"] = max(variances) if variances else None
    # groups
    groups = list(batch.groups.values())
    health["groups"] = len(groups)
    health["groups_scored"] = sum(g.scored >= 2 for g in groups)
    health["groups_zero_variance"] = sum(g.zero_variance for g in groups)
    health["groups_disconnected"] = sum((g.bt_components or 1) > 1 for g in groups)
    # correlations
    scored = [(tid, j.score) for tid, j in batch.judgements.items() if j.score is not None and tid in by_id]
    judge = [s for _, s in scored]
    pnl = [by_id[tid].final_pnl for tid, _ in scored]
    health["spearman_judge_pnl"] = spearman(judge, pnl)
    rule_pairs = [(s, rule_score(by_id[tid])) for tid, s in scored]
    rule_pairs = [(s, r) for s, r in rule_pairs if r is not None]
    health["spearman_judge_rule"] = spearman([s for s, _ in rule_pairs], [r for _, r in rule_pairs])
    # cost
    def per_verdict(attr: str) -> float | None:
        values = [getattr(v, attr) for v in answered if getattr(v, attr) is not None]
        return _mean([float(x) for x in values])

    health["tokens_per_verdict"] = {"prompt": per_verdict("prompt_tokens"),
                                    "completion": per_verdict("completion_tokens"),
                                    "total": per_verdict("total_tokens")}
    latencies = [float(v.latency_ms) for v in answered if v.latency_ms is not None]
    health["latency_ms_per_verdict"] = {"mean": _mean(latencies), "p50": _percentile(latencies, 50),
                                        "p95": _percentile(latencies, 95)}
    health["outliers"] = _outliers(scored, by_id, outlier_gap)
    return health


def _outliers(scored: list[tuple[str, float]], by_id: dict[str, Trajectory], gap: float) -> list[dict[str, Any]]:
    if not scored:
        return []
    ids = [tid for tid, _ in scored]
    judge_rank = relative_scores([s for _, s in scored]) if len(scored) >= 2 else [0.5]
    pnl_rank = relative_scores([by_id[t].final_pnl for t in ids]) if len(scored) >= 2 else [0.5]
    rules = [rule_score(by_id[t]) for t in ids]
    rule_known = [r for r in rules if r is not None]
    rule_rank_known = relative_scores(rule_known) if len(rule_known) >= 2 else []
    it = iter(rule_rank_known)
    rule_rank = [next(it) if r is not None and rule_rank_known else None for r in rules]
    out = []
    for n, tid in enumerate(ids):
        reasons = []
        others = [pnl_rank[n]] + ([rule_rank[n]] if rule_rank[n] is not None else [])
        if len(scored) >= 3 and judge_rank[n] - max(others) >= gap:
            reasons.append(f"judge rank {judge_rank[n]:.2f} is {judge_rank[n] - max(others):.2f} above its P&L rank "
                           f"{pnl_rank[n]:.2f}" + (f" and rule-judge rank {rule_rank[n]:.2f}"
                                                   if rule_rank[n] is not None else ""))
        injection = _injection(by_id[tid])
        if injection is not None and judge_rank[n] >= 0.5:
            reasons.append(f"its text addresses the judge: {injection!r}")
        if reasons:
            out.append({"trajectory_id": tid, "judge_score": scored[n][1], "judge_rank": judge_rank[n],
                        "pnl_rank": pnl_rank[n], "rule_rank": rule_rank[n], "final_pnl": by_id[tid].final_pnl,
                        "reasons": reasons})
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_health(health: dict[str, Any]) -> str:
    """The health dict as a plain-text table (two columns), outliers listed below it."""
    rows = [
        ("mode / model", f"{health['mode']} / {health['model']}"),
        ("trajectories: scored / missing", f"{health['scored']} / {health['missing']}"),
        ("calls: network / tape", f"{health['calls_from_network']} / {health['calls_from_tape']}"),
        ("calls: ok / malformed / error / deadline",
         f"{health['calls_ok']} / {health['calls_malformed']} / {health['calls_error']} / {health['calls_deadline']}"),
        ("calls: expired / missing on tape", f"{health['calls_expired']} / {health['calls_missing_tape']}"),
        ("parse-failure rate", _fmt(health["parse_failure_rate"])),
        ("order-swap disagreement rate", f"{_fmt(health['order_swap_disagreement_rate'])} "
                                         f"({health['order_swap_pairs']} pairs)"),
        ("score variance on duplicates", f"{_fmt(health['duplicate_score_variance'])} "
                                         f"({health['duplicate_sets']} sets)"),
        ("Spearman judge vs PnL", _fmt(health["spearman_judge_pnl"])),
        ("Spearman judge vs rule judge", _fmt(health["spearman_judge_rule"])),
        ("groups: total / scored / zero variance", f"{health['groups']} / {health['groups_scored']} / "
                                                   f"{health['groups_zero_variance']}"),
        ("tokens per verdict (prompt / completion)", f"{_fmt(health['tokens_per_verdict']['prompt'])} / "
                                                     f"{_fmt(health['tokens_per_verdict']['completion'])}"),
        ("latency per verdict ms (mean / p95)", f"{_fmt(health['latency_ms_per_verdict']['mean'])} / "
                                                f"{_fmt(health['latency_ms_per_verdict']['p95'])}"),
        ("outliers", str(len(health["outliers"]))),
    ]
    width = max(len(name) for name, _ in rows)
    vwidth = max(len(value) for _, value in rows)
    line = "+" + "-" * (width + 2) + "+" + "-" * (vwidth + 2) + "+"
    lines = ["judge health", line]
    lines += [f"| {name:<{width}} | {value:>{vwidth}} |" for name, value in rows]
    lines.append(line)
    for o in health["outliers"]:
        lines.append(f"OUTLIER {o['trajectory_id']}: judge score {o['judge_score']:.3f}, final PnL "
                     f"{o['final_pnl']:+,.2f}; " + "; ".join(o["reasons"]))
    return "\n".join(lines)
