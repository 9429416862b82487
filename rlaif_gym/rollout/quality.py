"""Rollout quality validation after the original's rules, reported, never used to drop.

The original's rules: docs/babylon.md ("The original's rollout validation").

Checks per trajectory: at least `min_ticks` ticks; at least one LLM call per tick (and calls >=
ticks); every call has a system prompt, a user prompt and a response; and a mean tick quality of at
least `min_quality`. Tick quality uses the original's formula (`calculate_tick_quality_score`'s
weights: llm .4, reasoning .3, action .2, feedback .1) with the format term taken from the rule
judge, because the original's `<decisions>` XML check would fail every canonical reply.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..trajectory import Trajectory

__all__ = ["QualityReport", "QualityTally", "summarize_quality", "validate_trajectory"]


@dataclass
class QualityReport:
    """The checks of one trajectory."""

    valid: bool
    quality_score: float
    issues: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-able form stored in `Trajectory.quality`."""
        return {"valid": self.valid, "quality_score": self.quality_score, "issues": list(self.issues)}


def _tick_quality(step) -> float:
    """The original's tick quality from the judge's format score in [-1, 1] (mapped to [0, 1]) and reasoning.

    The format score comes from the judge's breakdown (`step.judge["format"]`), which has the same
    scale under every reward scheme; trajectories recorded without it fall back on the `format`
    component (the original scheme's [-1, 1]).
    """
    comps = step.reward_components
    score = step.judge.get("format", comps.get("format", -1.0))
    fmt = (score + 1.0) / 2.0
    rsn = comps.get("reasoning", 0.0)
    action = 0.0 if step.action is None else (1.0 if step.action.success else 0.25 if step.action.error else 0.5)
    feedback = 1.0 if step.feedback is not None else 0.0
    return min(1.0, max(0.0, 0.4 * fmt + 0.3 * rsn + 0.2 * action + 0.1 * feedback))


def validate_trajectory(traj: Trajectory, min_ticks: int = 5, min_quality: float = 0.5) -> QualityReport:
    """The original's rollout checks for one trajectory."""
    issues: list[str] = []
    ticks = len(traj.steps)
    calls = sum(len(s.llm_calls) for s in traj.steps)
    if traj.final_status == "failed":
        issues.append(f"failed: {'; '.join(traj.errors) or 'no reason recorded'}")
    if ticks < min_ticks:
        issues.append(f"too short: {ticks} ticks < {min_ticks}")
    if calls < ticks:
        issues.append(f"too few LLM calls: {calls} < {ticks} ticks")
    for step in traj.steps:
        if not step.llm_calls:
            issues.append(f"no LLM call: step {step.step_number}")
        for call in step.llm_calls:
            for name in ("system_prompt", "user_prompt", "response"):
                if not getattr(call, name).strip():
                    issues.append(f"empty {name}: step {step.step_number}")
    score = sum(_tick_quality(s) for s in traj.steps) / ticks if ticks else 0.0
    if score < min_quality:
        issues.append(f"low quality: {score:.3f} < {min_quality}")
    return QualityReport(valid=not issues, quality_score=score, issues=issues)


class QualityTally:
    """A running `summarize_quality`: constant memory however many trajectories are added."""

    def __init__(self) -> None:
        self.trajectories = self.valid = 0
        self.score_sum = 0.0
        self.kinds: Counter[str] = Counter()

    def add(self, report: dict) -> None:
        """Count one `Trajectory.quality` dict."""
        self.trajectories += 1
        self.valid += bool(report.get("valid"))
        self.score_sum += report.get("quality_score", 0.0)
        self.kinds.update(issue.split(":")[0] for issue in report.get("issues", []))

    def summary(self) -> dict:
        """Valid count, mean score and the ten most frequent issue kinds."""
        n = self.trajectories
        return {"trajectories": n, "valid": self.valid, "mean_quality": self.score_sum / n if n else 0.0,
                "top_issues": self.kinds.most_common(10)}


def summarize_quality(reports: list[dict]) -> dict:
    """Aggregate `Trajectory.quality` dicts: valid count, mean score, the top issue kinds."""
    tally = QualityTally()
    for report in reports:
        tally.add(report)
    return tally.summary()
