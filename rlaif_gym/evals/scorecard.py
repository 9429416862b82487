"""The scorecard: every policy's metrics on one set's states, with 95 % intervals, and paired differences.

Per point, a policy's value of a metric is the mean over its replies there (`--samples`); means and intervals
are over points (so several samples of one point count once: the interval is clustered by point), and a paired
difference is taken point by point on the points both sides scored. The interval is the normal one,
mean ± 1.96 standard errors (lm-eval-harness reports the same standard error).

The metrics (docs/eval.md defines each):

* `gain_over_wait`: the reply's return minus a clean wait's on the same state, over a horizon that reaches every
  open market's resolution (so a bet is paid at the drawn outcome).
* `format_valid`: 1 if the reply parsed without a format error (a failed call is no reply: it is counted in
  `calls.failed` and never scored).
* `executed`: 1 if the world executed the reply's action.
* `right_minus_wrong`: +1 for a bet on the side its market resolves to, -1 for the other side, 0 for no bet.

On an episode set a "point" is an episode, and the metrics (`EPISODE_METRICS`) are `pnl` (final equity minus the
starting cash, USD), `return` (the episode's summed reward) and the shares of its ticks whose reply was
format-valid and whose action executed.

`scorecard.json` is written with sorted keys and no timings, so the same replies give the same bytes; the
timings go to `timing.json` and the Markdown table.

The standard library and `rlaif_gym.envs.decisions` only.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ..envs.decisions import DecisionReply
from ..errors import ConfigError
from ..metrics import Interval, interval

__all__ = ["EPISODE_METRICS", "METRICS", "METRIC_RANGES", "SCORECARD_SCHEMA", "EvalFileError", "Interval",
           "build_scorecard", "compare_runs", "interval", "point_values", "scorecard_markdown", "strict_json"]

SCORECARD_SCHEMA = "rlaif-gym.scorecard/1"
"""The version of `scorecard.json`'s layout (docs/eval.md); bumped when a field changes meaning."""
METRICS = ("gain_over_wait", "format_valid", "executed", "right_minus_wrong")
"""The decision-point metrics, in a scorecard's order."""
EPISODE_METRICS = ("pnl", "return", "format_valid", "executed")
"""The whole-episode metrics, in a scorecard's order."""
_FORMATS = {"gain_over_wait": "{:+.4f}", "format_valid": "{:.0%}", "executed": "{:.0%}",
            "right_minus_wrong": "{:+.2f}", "pnl": "{:+,.0f}", "return": "{:+.3f}"}


def reply_metrics(reply: DecisionReply) -> dict[str, float]:
    """One reply's value of each metric."""
    return {"gain_over_wait": reply.gain, "format_valid": float(reply.format_valid),
            "executed": float(reply.executed), "right_minus_wrong": float(reply.outcome_side)}


def point_values(replies: Iterable[DecisionReply]) -> dict[int, dict[str, float]]:
    """Per point (its index in the set), the mean of each metric over its replies there."""
    by_point: dict[int, list[dict[str, float]]] = {}
    for r in replies:
        by_point.setdefault(r.point, []).append(reply_metrics(r))
    return {p: {m: statistics.fmean(v[m] for v in vs) for m in METRICS} for p, vs in sorted(by_point.items())}


def _paired(a: Mapping[int, Mapping[str, float]], b: Mapping[int, Mapping[str, float]], metric: str) -> Interval:
    """a - b of `metric`, point by point over the points both have."""
    return interval([a[p][metric] - b[p][metric] for p in sorted(a.keys() & b.keys())])


def build_scorecard(values: Mapping[str, Mapping[int, Mapping[str, float]]], *, meta: Mapping[str, Any],
                    reference: str = "model", metrics: Sequence[str] = METRICS) -> dict[str, Any]:
    """The scorecard of `values` (policy -> point -> metric -> value, e.g. `point_values`): `rows`, one per policy
    and metric; `paired`, one per other policy and metric, of `reference` minus it; and `meta` (set, model,
    sampling, calls, command, ...)."""
    rows = [{"policy": name, "metric": m, **interval([v[m] for v in per_point.values()]).to_dict()}
            for name, per_point in values.items() for m in metrics]
    paired = [{"policy": reference, "baseline": name, "metric": m,
               **_paired(values[reference], per_point, m).to_dict()}
              for name, per_point in values.items() if name != reference and reference in values for m in metrics]
    return {"schema": SCORECARD_SCHEMA, "package_version": __version__, **meta, "rows": rows, "paired": paired}


def _cell(stat: Mapping[str, Any], metric: str) -> str:
    fmt = _FORMATS[metric]
    if stat["mean"] is None:
        return "n/a"
    if stat["ci95_low"] is None:
        return fmt.format(stat["mean"])
    half = (stat["ci95_high"] - stat["ci95_low"]) / 2
    return f"{fmt.format(stat['mean'])} (± {fmt.format(half).lstrip('+')})"


def scorecard_markdown(card: Mapping[str, Any], timing: Mapping[str, Any] | None = None) -> str:
    """The scorecard as a Markdown table a person can paste: one column per policy, then the model's paired
    differences from each baseline."""
    policies = list(dict.fromkeys(r["policy"] for r in card["rows"]))
    metrics = _metrics(card)
    cell = {(r["policy"], r["metric"]): r for r in card["rows"]}
    s = card["set"]
    unit = "point" if s.get("kind", "decision points") == "decision points" else "episode"
    lines = [f"**{s['name']}** ({s['points']} {s.get('kind', 'decision points')}, seeds from {s['first_seed']:,}; "
             f"digest `{s['digest'][:19]}`); model `{card['model'].get('model') or card['model'].get('name')}`, "
             f"{card['samples']} sample(s) per {unit}, temperature {card['sampling'].get('temperature')}", "",
             "| metric | " + " | ".join(policies) + " |", "|---|" + "---:|" * len(policies)]
    for m in metrics:
        lines.append(f"| {m} | " + " | ".join(_cell(cell[(p, m)], m) for p in policies) + " |")
    if card["paired"]:
        baselines = list(dict.fromkeys(r["baseline"] for r in card["paired"]))
        pair = {(r["baseline"], r["metric"]): r for r in card["paired"]}
        lines += ["", "| model minus, paired | " + " | ".join(baselines) + " |", "|---|" + "---:|" * len(baselines)]
        for m in metrics:
            lines.append(f"| {m} | " + " | ".join(_cell(pair[(b, m)], m) for b in baselines) + " |")
    calls = card.get("calls", {})
    failed = calls.get("failed", 0)
    left_out = (f"{failed} failed, an outage left out of the model's score" if failed else "0 failed") + \
        (f" ({calls['unanswered_points']} {unit}s without an answer)" if calls.get("unanswered_points") else "")
    lines += ["", f"± is the 95 % interval over {unit}s. Calls: {calls.get('calls', 0)} ({left_out}, "
              f"{calls.get('retried_attempts', 0)} retried attempts), tokens {calls.get('prompt_tokens', 0):,} "
              f"in / {calls.get('completion_tokens', 0):,} out."]
    if timing:
        lines.append(f"Wall time {timing['wall_s']:.1f} s; call latency median {timing['latency_median_s']:.2f} s "
                     f"(p90 {timing['latency_p90_s']:.2f} s); CPU {timing['cpu_model']}, load "
                     f"{timing['load_average']}.")
    return "\n".join(lines)


def _metrics(card: Mapping[str, Any]) -> list[str]:
    """The scorecard's metrics, in its rows' order."""
    return list(dict.fromkeys(r["metric"] for r in card["rows"]))


class EvalFileError(ConfigError):
    """A file of an eval's folder that the package reads back (`replies.jsonl`, `scorecard.json`, `points.jsonl`)
    holds what no eval writes: a line that is not JSON, a point outside the set, a value that is not a finite number
    in its metric's range, a row twice. Raised before anything is computed or written; the message names the file
    (and line), what was expected, what is there, and the fix (`--overwrite`, which writes the eval again).

    Attributes:
        path: the file.
        line: the line (1-based) of a JSON Lines file, or None for a whole file.
    """

    def __init__(self, path: Path | str, line: int | None, problem: str, fix: str) -> None:
        self.path, self.line = Path(path), line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}; {fix}")


METRIC_RANGES: dict[str, tuple[float, float]] = {
    "gain_over_wait": (-1e15, 1e15), "format_valid": (0.0, 1.0), "executed": (0.0, 1.0),
    "right_minus_wrong": (-1.0, 1.0), "pnl": (-1e15, 1e15), "return": (-1e15, 1e15)}
"""The values a point's metric can take: a share in [0, 1], a side in [-1, 1], money and returns within 1e15 (a
config's money is at most 1e12 USD: docs/config.md), so that no sum over points overflows."""


def strict_json(text: str) -> Any:
    """`json.loads` that refuses what no eval writes: `NaN`, `Infinity` (Python's reader takes them) and nesting
    too deep to read (a `ValueError` for each, as for any broken JSON)."""
    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        return json.loads(text, parse_constant=constant)
    except RecursionError:
        raise ValueError("JSON nested deeper than the reader handles") from None


def _kind(value: Any) -> str:
    """`value` as a message shows it: short, with its JSON type."""
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return f"{text[:60]}{'...' if len(text) > 60 else ''} ({type(value).__name__})"


def metric_value(value: Any, metric: str) -> float | None:
    """`value` as the finite number of `metric` it must be (`METRIC_RANGES`), or None when it is not one."""
    low, high = METRIC_RANGES[metric]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and low <= value <= high else None


def _read_values(run: Path) -> tuple[dict[str, Any], dict[int, dict[str, float]]]:
    """(scorecard.json, the model's value of each metric per point from points.jsonl), each checked as input: what
    compare reads must be what an eval writes (`EvalFileError` otherwise, naming the file, the line and the fix)."""
    card_path, values_path = run / "scorecard.json", run / "points.jsonl"
    if not card_path.is_file() or not values_path.is_file():
        raise ConfigError(f"{run} holds no finished eval (scorecard.json and points.jsonl); run rlaif-gym eval "
                          f"--out {run} first")
    fix = f"the file is not as the eval wrote it: run rlaif-gym eval --out {run} --overwrite (with its options) " \
          "to write it again"
    try:
        card = strict_json(card_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise EvalFileError(card_path, None, f"not JSON ({exc})", fix) from None
    if not isinstance(card, dict):
        raise EvalFileError(card_path, None, f"expected a JSON object, got {_kind(card)}", fix)
    s, model, rows = card.get("set"), card.get("model"), card.get("rows")
    if not isinstance(s, dict) or not isinstance(s.get("name"), str) or not isinstance(s.get("digest"), str) \
            or not s["digest"].startswith("sha256:") or len(s["digest"]) != 71:
        raise EvalFileError(card_path, None, f"expected \"set\" with a \"name\" and a \"digest\" "
                            f"(sha256:<64 hex digits>), got {_kind(s)}", fix)
    points = s.get("points")
    if isinstance(points, bool) or not isinstance(points, int) or points < 1:
        raise EvalFileError(card_path, None, f"expected \"set\".\"points\", an integer >= 1, got {_kind(points)}",
                            fix)
    if not isinstance(model, dict):
        raise EvalFileError(card_path, None, f"expected \"model\", a JSON object, got {_kind(model)}", fix)
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and r.get("metric") in METRIC_RANGES
                                                         for r in rows):
        raise EvalFileError(card_path, None, f"expected \"rows\", a non-empty list of objects whose \"metric\" is "
                            f"one of {', '.join(METRIC_RANGES)}, got {_kind(rows)}", fix)
    metrics = _metrics(card)
    model_values: dict[int, dict[str, float]] = {}
    try:
        lines = values_path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise EvalFileError(values_path, None, f"not UTF-8 text ({exc})", fix) from None
    for number, line in enumerate(lines, 1):
        try:
            row = strict_json(line)
        except ValueError as exc:
            raise EvalFileError(values_path, number, f"not JSON ({exc})", fix) from None
        if not isinstance(row, dict) or not isinstance(row.get("policy"), str):
            raise EvalFileError(values_path, number, f"expected a JSON object with a \"policy\", got {_kind(row)}",
                                fix)
        if row["policy"] != "model":
            continue
        point = row.get("point")
        if isinstance(point, bool) or not isinstance(point, int) or not 0 <= point < points:
            raise EvalFileError(values_path, number, f"expected \"point\", an integer in [0, {points - 1}] (the "
                                f"set's {points} points), got {_kind(point)}", fix)
        if point in model_values:
            raise EvalFileError(values_path, number, f"a second row of the model at point {point}", fix)
        values = {}
        for m in metrics:
            value = metric_value(row.get(m), m)
            if value is None:
                low, high = METRIC_RANGES[m]
                raise EvalFileError(values_path, number, f"expected \"{m}\", a finite number in [{low:g}, "
                                    f"{high:g}], got {_kind(row.get(m))}", fix)
            values[m] = value
        model_values[point] = values
    return card, model_values


def compare_runs(a: Path | str, b: Path | str) -> dict[str, Any]:
    """B's model minus A's, point by point, on the points both scored (e.g. A before training, B after).

    Raises:
        ConfigError: a run without a finished eval, or two runs on different states (their sets' digests differ:
            the message says which sets they are).
        EvalFileError: a scorecard.json or points.jsonl that is not as an eval writes it (the message names the
            file, the line and the fix).
    """
    (card_a, va), (card_b, vb) = _read_values(Path(a)), _read_values(Path(b))
    da, db = card_a["set"]["digest"], card_b["set"]["digest"]
    if da != db:
        raise ConfigError(f"{a} and {b} scored different states ({card_a['set']['name']} {da[:19]} vs "
                          f"{card_b['set']['name']} {db[:19]}): a paired difference needs the same set, world and "
                          "rules; evaluate both models with the same --set-name, --seeds, --points and --set")
    if _metrics(card_a) != _metrics(card_b):
        raise ConfigError(f"{a} and {b} score other metrics ({', '.join(_metrics(card_a))} vs "
                          f"{', '.join(_metrics(card_b))}) on the same states; write both with this rlaif-gym "
                          "(rlaif-gym eval --overwrite)")
    shared = sorted(va.keys() & vb.keys())
    return {"a": str(a), "b": str(b), "set": card_a["set"]["name"], "digest": da, "points": len(shared),
            "model_a": card_a["model"], "model_b": card_b["model"],
            "b_minus_a": [{"metric": m, **interval([vb[p][m] - va[p][m] for p in shared]).to_dict()}
                          for m in _metrics(card_a)]}


def compare_markdown(result: Mapping[str, Any]) -> str:
    """`compare_runs`' result as a Markdown table."""
    lines = [f"B minus A on {result['points']} shared points of {result['set']} (`{result['digest'][:19]}`)", "",
             "| metric | B - A, paired | 95 % interval |", "|---|---:|---:|"]
    for r in result["b_minus_a"]:
        fmt = _FORMATS[r["metric"]]
        low = "n/a" if r["ci95_low"] is None else fmt.format(r["ci95_low"])
        high = "n/a" if r["ci95_high"] is None else fmt.format(r["ci95_high"])
        lines.append(f"| {r['metric']} | {fmt.format(r['mean'])} | [{low}, {high}] |")
    return "\n".join(lines)
