"""The scorecard: every policy's metrics on one set's states, with 95 % intervals, and paired differences.

Per point, a policy's value of a metric is the mean over its replies there (`--samples`); means and intervals
are over points (so several samples of one point count once: the interval is clustered by point), and a paired
difference is taken point by point on the points both sides scored. The interval is the normal one,
mean ± 1.96 standard errors (lm-eval-harness reports the same standard error).

The metrics (docs/eval.md defines each):

* `gain_over_wait`: the reply's return minus a clean wait's on the same state, over a horizon that reaches every
  open market's resolution (so a bet is paid at the drawn outcome).
* `format_valid`: 1 if the reply parsed without a format error (a failed call is an empty, invalid reply).
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
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ..envs.decisions import DecisionReply
from ..errors import ConfigError
from ..metrics import Interval, interval

__all__ = ["EPISODE_METRICS", "METRICS", "SCORECARD_SCHEMA", "Interval", "build_scorecard", "compare_runs",
           "interval", "point_values", "scorecard_markdown"]

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
    lines += ["", f"± is the 95 % interval over {unit}s. Calls: {calls.get('calls', 0)} ({calls.get('failed', 0)} "
              f"failed, {calls.get('retried_attempts', 0)} retried attempts), tokens {calls.get('prompt_tokens', 0):,} "
              f"in / {calls.get('completion_tokens', 0):,} out."]
    if timing:
        lines.append(f"Wall time {timing['wall_s']:.1f} s; call latency median {timing['latency_median_s']:.2f} s "
                     f"(p90 {timing['latency_p90_s']:.2f} s); CPU {timing['cpu_model']}, load "
                     f"{timing['load_average']}.")
    return "\n".join(lines)


def _metrics(card: Mapping[str, Any]) -> list[str]:
    """The scorecard's metrics, in its rows' order."""
    return list(dict.fromkeys(r["metric"] for r in card["rows"]))


def _read_values(run: Path) -> tuple[dict[str, Any], dict[int, dict[str, float]]]:
    card_path, values_path = run / "scorecard.json", run / "points.jsonl"
    if not card_path.is_file() or not values_path.is_file():
        raise ConfigError(f"{run} holds no finished eval (scorecard.json and points.jsonl); run rlaif-gym eval "
                          f"--out {run} first")
    try:
        card = json.loads(card_path.read_text(encoding="utf-8"))
        _ = (card["set"]["digest"], card["set"]["name"], card["model"])  # what compare reads
        model: dict[int, dict[str, float]] = {}
        for line in values_path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("policy") == "model":
                model[int(row["point"])] = {m: float(row[m]) for m in _metrics(card)}
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise ConfigError(f"{run}: scorecard.json or points.jsonl is not an eval's ({type(exc).__name__}: {exc}); "
                          f"run rlaif-gym eval --out {run} --overwrite to write it again") from None
    return card, model


def compare_runs(a: Path | str, b: Path | str) -> dict[str, Any]:
    """B's model minus A's, point by point, on the points both scored (e.g. A before training, B after).

    Raises:
        ConfigError: a run without a finished eval, or two runs on different states (their sets' digests differ:
            the message says which sets they are).
    """
    (card_a, va), (card_b, vb) = _read_values(Path(a)), _read_values(Path(b))
    da, db = card_a["set"]["digest"], card_b["set"]["digest"]
    if da != db:
        raise ConfigError(f"{a} and {b} scored different states ({card_a['set']['name']} {da[:19]} vs "
                          f"{card_b['set']['name']} {db[:19]}): a paired difference needs the same set, world and "
                          "rules; evaluate both models with the same --set-name, --seeds, --points and --set")
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
