"""`rlaif-gym eval`: score any model (and its baselines, on the same states) against the world's hidden truth.

* `sets`: the named, versioned held-out sets and their digests (`decision_set`, `DECISION_SETS`).
* `baselines`: wait, the scripted teacher, the informed evidence rule and the truth-informed ceiling.
* `runner`: `run_decision_eval`, one call per point and sample, resumable, written to a run folder.
* `scorecard`: the intervals, the paired differences, the Markdown table and `compare_runs`.

docs/eval.md is the user's page; layer L6 (beside the report).
"""

from __future__ import annotations

from .baselines import BASELINES, baseline_reply
from .runner import EvalResult, run_decision_eval
from .scorecard import METRICS, SCORECARD_SCHEMA, Interval, build_scorecard, compare_runs, interval, point_values
from .sets import DECISION_SETS, DecisionSet, decision_set

__all__ = ["BASELINES", "DECISION_SETS", "METRICS", "SCORECARD_SCHEMA", "DecisionSet", "EvalResult", "Interval",
           "baseline_reply", "build_scorecard", "compare_runs", "decision_set", "interval", "point_values",
           "run_decision_eval"]
