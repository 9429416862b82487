"""Judge validation: does a judge's score order trajectories the way the money they made does?

A judge's scores mean something only against trajectories whose worth is known. Here the world supplies it: on a
decision set, every point becomes one GRPO group whose members share the point's state and differ only in the reply
at the decision tick; then each waits (the clean `WAIT_REPLY`) until every market open there has resolved
(`DecisionPoint.resolution_horizon`), so a member's PnL is what its reply earned at the outcome the world drew. The
members are a skill ladder, best first by construction:

* `truth` (the oracle): the bet on the side the market resolves to, read from the hidden outcome;
* `teacher`: the scripted teacher (`ScriptedLLM`), a well-weighted evidence aggregator;
* `informed`: the evidence rule (the side the feed items naming the market point to);
* `wait` (passive): the clean wait;
* `random`: the format-only teacher's bet, on a side drawn at random;
* `model`: the eval's model (its first sample's reply), where there is one.

The judge reads the trajectories the collector records (it never sees which rung wrote one), and its scores are
compared with the realised PnL:

* **within groups** (what GRPO trains on): pairwise accuracy (the share of member pairs whose PnL differs by more than
  `margin` that the judge orders the same way; a tie in the judge's scores counts one half) and the Spearman
  correlation, each a mean over groups with its 95 % interval over groups;
* **overall**: the Spearman correlation over every scored trajectory, with a 95 % interval from a bootstrap over
  groups (seeded: the same scores give the same bytes), and the pairwise accuracy over all pairs;
* **per rung**: the mean PnL gain over the group's wait and the mean judge score, with intervals over points, and the
  Spearman correlation of the two columns (does the judge rank the ladder's rungs in their order of worth?).

Judges: `rule` (the rule judge the env trains with, `RuleJudge`: a trajectory's mean reasoning score) and an
`LLMJudge` in any mode, through its tape, so a re-run asks nothing the tape already holds. docs/judge.md reports both.

Plays the ladder with the rollout collector, scores it with the judges (llm_judge, judge).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np

from ..agents import LLMAgent
from ..envs.decisions import WAIT_REPLY, DecisionPoint
from ..errors import ConfigError
from ..llm import SamplingParams
from ..llm.format_teacher import FormatOnlyLLM
from ..llm.scripted import offline_completion
from ..llm_judge import LLMJudge, judge_health
from ..llm_judge.health import rule_score, spearman
from ..rollout import RolloutCollector
from ..storage._files import atomic_write_bytes
from ..trajectory import Trajectory
from .baselines import BET_FRACTION, baseline_reply
from .scorecard import interval

__all__ = ["LADDER", "VALIDATION_SCHEMA", "JudgeValidation", "judge_validation", "ladder_replies",
           "ladder_trajectories", "rule_judge_scores", "run_judge_validation", "validation_markdown",
           "write_validation"]

LADDER = ("truth", "teacher", "informed", "wait", "random")
"""The ladder's baseline rungs, best first by construction (the model's rung, `model`, comes first when there is
one)."""
VALIDATION_SCHEMA = "rlaif-gym.judge-validation/1"
"""The `schema` of a validation's JSON; a change of its fields changes the version."""
BOOTSTRAP_RESAMPLES = 1000
"""Resamples of the groups for the overall Spearman correlation's interval."""

_REPLY: ContextVar[str] = ContextVar("rlaif_gym_ladder_reply", default=WAIT_REPLY)


class _LadderClient:
    """The ladder's chat model: the reply the agent set for the call in flight (the current task's context)."""

    model = "skill-ladder"

    def describe(self) -> dict[str, Any]:
        return {"kind": "skill-ladder", "model": self.model}

    async def complete(self, messages, params):
        return offline_completion(_REPLY.get(), messages, self.model)


class _LadderAgent(LLMAgent):
    """Answers a group's member `m` at its decision tick with its rung's reply, and with the clean wait elsewhere.

    The reply is chosen by the call's id (`<trajectory id>-t<tick>`, the collector's), never by the prompt's text:
    a member's later state can repeat another point's prompt, and must still wait."""

    def __init__(self, first: Mapping[str, str]) -> None:
        super().__init__(_LadderClient(), SamplingParams(temperature=0.0, max_tokens=None, logprobs=False),
                         name="skill-ladder")
        self.first = dict(first)

    async def act(self, system_prompt, prompt, *, seed=None, call_id=""):
        token = _REPLY.set(self.first.get(call_id, WAIT_REPLY))
        try:
            return await super().act(system_prompt, prompt, seed=seed, call_id=call_id)
        finally:
            _REPLY.reset(token)


def ladder_replies(points: Sequence[DecisionPoint], model_replies: Sequence[str] | None = None, *,
                   seed: int = 0) -> dict[str, list[str]]:
    """Each rung's reply at each point: `model` (when `model_replies`, one per point, are given), then `LADDER`.

    The random rung's side is drawn per point from `seed` and the point's seed and tick."""
    if model_replies is not None and len(model_replies) != len(points):
        raise ConfigError(f"model_replies: one per point expected, got {len(model_replies)} for {len(points)} points")
    out: dict[str, list[str]] = {} if model_replies is None else {"model": list(model_replies)}
    for rung in LADDER:
        if rung == "random":
            teacher = FormatOnlyLLM(fraction=BET_FRACTION)
            out[rung] = [teacher.decide(p.prompt, np.random.default_rng([seed, p.seed, p.tick])) for p in points]
        else:
            out[rung] = [baseline_reply(rung, p) for p in points]
    return out


def _slots(rungs: int, point: DecisionPoint, seed: int) -> list[int]:
    """Which rung each member slot of a point's group plays: a permutation drawn from `seed` and the point, so that
    no rung always comes first (a listwise judge with a bias for the first trajectory shown would otherwise look
    like a good judge)."""
    return [int(k) for k in np.random.default_rng([seed, point.seed, point.tick, 1]).permutation(rungs)]


def ladder_trajectories(points: Sequence[DecisionPoint], replies: Mapping[str, Sequence[str]], *,
                        run_name: str = "ladder", seed: int = 0) -> list[Trajectory]:
    """Play the ladder: one group per point (id `<run_name>-s<seed>-t<tick>`), one member per rung of `replies`
    (in an order drawn per point from `seed`), each to the point's resolution horizon; every trajectory's
    `agent_id` is its rung.

    Returns the trajectories group by group, members in their group's order."""
    rungs = list(replies)
    if not points or not rungs:
        return []
    out: dict[str, Trajectory] = {}
    by_horizon: dict[int, list[int]] = {}
    for i, p in enumerate(points):
        by_horizon.setdefault(p.resolution_horizon, []).append(i)
    for horizon, members in sorted(by_horizon.items()):
        chosen = [points[i] for i in members]
        agent = _LadderAgent({})
        collector = RolloutCollector(agent, env_config=chosen[0].config, group_size=len(rungs),
                                     num_envs=len(rungs) * 4, run_name=run_name)
        slots = {i: _slots(len(rungs), points[i], seed) for i in members}
        agent.first = {f"{spec.trajectory_id}-t{group.fork_tick}": replies[rungs[slots[i][spec.member]]][i]
                       for i, group in zip(members, collector.plan_decisions(chosen, horizon), strict=True)
                       for spec in group.members}
        collector.collect_decisions(chosen, horizon=horizon)
        point_of = {f"{run_name}-s{points[i].seed}-t{points[i].tick}": i for i in members}
        for t in collector.trajectories:
            rung = rungs[slots[point_of[t.group_id]][t.group_index]]
            out[t.trajectory_id] = t.model_copy(update={"agent_id": rung})
    order = {f"{run_name}-s{p.seed}-t{p.tick}": k for k, p in enumerate(points)}
    return sorted(out.values(), key=lambda t: (order[t.group_id], t.group_index))


def rule_judge_scores(trajectories: Sequence[Trajectory]) -> dict[str, float | None]:
    """The rule judge's score of each trajectory: its mean reasoning score per step (`RuleJudge`, what the env's
    reasoning component pays), None for a trajectory without one."""
    return {t.trajectory_id: rule_score(t) for t in trajectories}


def _pair_agreement(judge: Sequence[float], pnl: Sequence[float], margin: float) -> tuple[float, int]:
    """(the summed agreement of the pairs whose PnL differs by more than `margin`, how many there are): 1 when the
    judge orders a pair as its PnL does, 1/2 on a tie of the judge's, 0 otherwise."""
    j, p = np.asarray(judge, np.float64), np.asarray(pnl, np.float64)
    a, b = np.triu_indices(len(j), k=1)
    dp, dj = p[a] - p[b], j[a] - j[b]
    counted = np.abs(dp) > margin
    agree = np.where(dj == 0, 0.5, (np.sign(dj) == np.sign(dp)).astype(np.float64))
    return float(agree[counted].sum()), int(counted.sum())


def _num(x: float | None) -> float | None:
    """As JSON: None for an undefined value (NaN)."""
    return None if x is None or not math.isfinite(x) else float(x)


JudgeValidation = dict[str, Any]
"""A validation as `judge_validation` returns it (and `write_validation` writes it): see docs/judge.md."""


def judge_validation(trajectories: Sequence[Trajectory], scores: Mapping[str, float | None], *,
                     judge: Mapping[str, Any], margin: float = 1.0, seed: int = 0,
                     meta: Mapping[str, Any] | None = None) -> JudgeValidation:
    """How well `scores` (trajectory id -> the judge's score, None when it gave none) order the ladder's PnL.

    Args:
        trajectories: the ladder (`ladder_trajectories`): groups of members that share a state.
        scores: the judge's scores.
        judge: what the judge is (recorded as given: name, mode, model).
        margin: USD; a pair counts for pairwise accuracy when its members' PnL differ by more than this.
        seed: the bootstrap's seed.
        meta: more to record (the set, its digest, the command).

    Returns:
        A JSON-able dict (no timings: the same scores give the same dict); see docs/judge.md.
    """
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(str(t.group_id), []).append(t)
    scored = {gid: [(t, float(scores[t.trajectory_id])) for t in members if scores.get(t.trajectory_id) is not None]
              for gid, members in groups.items()}
    accuracy, rho = [], []
    for members in scored.values():
        agree, pairs = _pair_agreement([s for _, s in members], [t.final_pnl for t, _ in members], margin)
        if pairs:
            accuracy.append(agree / pairs)
        r = spearman([s for _, s in members], [t.final_pnl for t, _ in members]) if len(members) >= 3 else None
        if r is not None:
            rho.append(r)
    flat = [(gid, t, s) for gid, members in scored.items() for t, s in members]
    judge_all, pnl_all = [s for _, _, s in flat], [t.final_pnl for _, t, _ in flat]
    agree_all, pairs_all = _pair_agreement(judge_all, pnl_all, margin)
    overall = spearman(judge_all, pnl_all) if len(flat) >= 3 else None
    # bootstrap over groups for the overall Spearman's interval
    rng = np.random.default_rng(seed)
    ids = [gid for gid in scored if scored[gid]]
    boot = []
    if overall is not None and len(ids) >= 2:
        for _ in range(BOOTSTRAP_RESAMPLES):
            pick = rng.integers(0, len(ids), size=len(ids))
            js = [s for k in pick for _, s in scored[ids[k]]]
            ps = [t.final_pnl for k in pick for t, _ in scored[ids[k]]]
            r = spearman(js, ps)
            if r is not None:
                boot.append(r)
    low, high = (np.quantile(boot, [0.025, 0.975]) if boot else (math.nan, math.nan))
    # per rung: PnL gain over the group's wait, and the judge's score
    present = set(t.agent_id for t in trajectories)
    rungs = [r for r in ("model", *LADDER) if r in present] + sorted(present - {"model", *LADDER})
    gain: dict[str, list[float]] = {r: [] for r in rungs}
    mean_score: dict[str, list[float]] = {r: [] for r in rungs}
    for members in groups.values():
        wait = next((t.final_pnl for t in members if t.agent_id == "wait"), None)
        for t in members:
            if wait is not None:
                gain[t.agent_id].append(t.final_pnl - wait)
            if scores.get(t.trajectory_id) is not None:
                mean_score[t.agent_id].append(float(scores[t.trajectory_id]))
    rung_rows = [{"rung": r, "pnl_gain_over_wait_usd": interval(gain[r]).to_dict(),
                  "judge_score": interval(mean_score[r]).to_dict()} for r in rungs]
    means = [(interval(gain[r]).mean, interval(mean_score[r]).mean) for r in rungs if gain[r] and mean_score[r]]
    return {
        "schema": VALIDATION_SCHEMA,
        **dict(meta or {}),
        "judge": dict(judge),
        "ladder": rungs,
        "margin_usd": margin,
        "groups": len(groups),
        "trajectories": len(trajectories),
        "scored": len(flat),
        "missing": len(trajectories) - len(flat),
        "within_groups": {
            "pairwise_accuracy": interval(accuracy).to_dict(),
            "spearman": interval(rho).to_dict(),
        },
        "overall": {
            "spearman": {"mean": _num(overall), "ci95_low": _num(float(low)), "ci95_high": _num(float(high)),
                         "n": len(flat), "interval": f"bootstrap over groups, {BOOTSTRAP_RESAMPLES} resamples"},
            "pairwise_accuracy": {"mean": _num(agree_all / pairs_all if pairs_all else math.nan), "n": pairs_all},
        },
        "rung_order_spearman": _num(spearman([g for g, _ in means], [s for _, s in means])
                                    if len(means) >= 3 else None),
        "rungs": rung_rows,
    }


def _fmt(iv: Mapping[str, Any], digits: int = 2, signed: bool = True) -> str:
    if iv.get("mean") is None:
        return "n/a"
    mean = f"{iv['mean']:+.{digits}f}" if signed else f"{iv['mean']:.{digits}f}"
    if iv.get("ci95_low") is None or iv.get("ci95_high") is None:
        return mean
    return f"{mean} ({iv['ci95_low']:+.{digits}f}, {iv['ci95_high']:+.{digits}f})"


def validation_markdown(report: JudgeValidation) -> str:
    """The validation as Markdown: the headline numbers, then one row per rung."""
    j = report["judge"]
    name = j.get("name", "judge") + (f" ({j['mode']}, {j['model']})" if j.get("mode") else "")
    w, o = report["within_groups"], report["overall"]
    acc = o["pairwise_accuracy"]
    verdicts = j.get("verdicts")
    asked = "" if not verdicts else " (verdicts asked: " + ", ".join(f"{v} {k}" for k, v in verdicts.items() if v) + ")"
    lines = [
        f"**Judge validation: {name}** on {report['groups']} groups x {len(report['ladder'])} rungs "
        f"({report['scored']} of {report['trajectories']} trajectories scored{asked})",
        "",
        "| against realised PnL | value (95 % interval) | n |",
        "|---|---:|---:|",
        f"| pairwise accuracy within groups | {_fmt(w['pairwise_accuracy'], signed=False)} | "
        f"{w['pairwise_accuracy']['n']} groups |",
        f"| Spearman within groups | {_fmt(w['spearman'])} | {w['spearman']['n']} groups |",
        f"| Spearman overall | {_fmt(o['spearman'])} | {o['spearman']['n']} trajectories |",
        f"| pairwise accuracy overall | {_fmt(acc, signed=False)} | {acc['n']} pairs |",
        f"| rung order (Spearman of the rungs' means) | {_fmt({'mean': report['rung_order_spearman']})} | "
        f"{len(report['rungs'])} rungs |",
        "",
        "| rung | PnL gain over wait (USD) | judge score |",
        "|---|---:|---:|",
    ]
    lines += [f"| {r['rung']} | {_fmt(r['pnl_gain_over_wait_usd'])} | {_fmt(r['judge_score'], 3)} |"
              for r in report["rungs"]]
    lines += ["", f"(a pair counts when its PnL differs by more than ${report['margin_usd']:g}; a judge's tie counts "
              "1/2; intervals are over groups)"]
    return "\n".join(lines)


def write_validation(report: JudgeValidation, out: Path | str, stem: str) -> tuple[Path, Path]:
    """Write `<stem>.json` (sorted keys: the same report, the same bytes) and `<stem>.md` into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / f"{stem}.json", out / f"{stem}.md"
    atomic_write_bytes(js, (json.dumps(report, sort_keys=True, indent=1) + "\n").encode("utf-8"))
    atomic_write_bytes(md, (validation_markdown(report) + "\n").encode("utf-8"))
    return js, md



def run_judge_validation(points: Sequence[DecisionPoint], out: Path | str, *, judge: LLMJudge | None = None,
                         model_replies: Sequence[str] | None = None, seed: int = 0, margin: float = 1.0,
                         meta: Mapping[str, Any] | None = None) -> JudgeValidation:
    """Play the ladder on `points` (with the model's replies as a rung, when given), score it with `judge` (None:
    the rule judge) and write into `out`: `ladder.jsonl` (the trajectories judged), `validation.<judge>.json` and
    `.md`, and for an LLM judge `health.<mode>.json` (`judge_health`: calls from the tape and the network, parse
    failures, tokens). The LLM judge's tape is the caller's (`LLMJudge(..., tape=JudgeTape(path))`): a re-run
    with the same tape asks the judge nothing it has answered.

    Returns the validation (as written)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trajectories = ladder_trajectories(points, ladder_replies(points, model_replies, seed=seed), seed=seed)
    atomic_write_bytes(out / "ladder.jsonl", "".join(t.model_dump_json() + "\n" for t in trajectories).encode())
    if judge is None:
        scores, described, stem = rule_judge_scores(trajectories), {"name": "rule"}, "rule"
    else:
        batch = judge.score(trajectories)
        scores, stem = batch.scores(), f"llm-{batch.mode}"
        described = {"name": "llm", "mode": batch.mode, "model": batch.model, "template": batch.template}
        health = judge_health(batch, trajectories)
        described["verdicts"] = {k: health[f"calls_{k}"] for k in ("ok", "malformed", "error", "deadline", "expired",
                                                                    "missing_tape")}
        atomic_write_bytes(out / f"health.{batch.mode}.json",
                           (json.dumps(health, sort_keys=True, indent=1) + "\n").encode())
    report = judge_validation(trajectories, scores, judge=described, margin=margin, seed=seed, meta=meta)
    write_validation(report, out, f"validation.{stem}")
    return report
