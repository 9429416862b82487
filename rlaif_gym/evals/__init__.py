"""`rlaif-gym eval`: score any model (and its baselines, on the same states) against the world's hidden truth.

* `sets`: the named, versioned held-out sets and their digests (`decision_set`, `DECISION_SETS`).
* `baselines`: wait, the scripted teacher, the informed evidence rule and the truth-informed ceiling.
* `runner`: `run_decision_eval`, one call per point and sample, resumable, written to a run folder.
* `episodes`: `run_episode_eval`, whole episodes played by the model through the rollout collector.
* `scorecard`: the intervals, the paired differences, the Markdown table and `compare_runs`.
* `judging`: judge validation, a skill ladder on the same points scored by a judge against the PnL it made.

docs/eval.md is the user's page.
"""

from __future__ import annotations

from .baselines import BASELINES, baseline_reply
from .episodes import run_episode_eval
from .judging import LADDER, judge_validation, run_judge_validation
from .runner import EvalResult, FailedCallsError, run_decision_eval
from .scorecard import (
    EPISODE_METRICS,
    METRICS,
    SCORECARD_SCHEMA,
    EvalFileError,
    Interval,
    build_scorecard,
    compare_runs,
    interval,
    point_values,
)
from .sets import DECISION_SETS, EPISODE_SETS, DecisionSet, EpisodeSet, decision_set, task_set

__all__ = ["BASELINES", "DECISION_SETS", "EPISODE_METRICS", "EPISODE_SETS", "LADDER", "METRICS", "SCORECARD_SCHEMA",
           "DecisionSet", "EpisodeSet", "EvalFileError", "EvalResult", "FailedCallsError", "Interval",
           "baseline_reply", "build_scorecard", "compare_runs", "decision_set", "interval", "judge_validation",
           "point_values", "run_decision_eval", "run_episode_eval", "run_judge_validation", "task_set"]
