"""What could GRPO learn above its SFT teacher? The scripted teacher's replies at held-out decision points, one lever
varied at a time, each scored against a wait on the same state (no LLM, seconds on a CPU).

    python examples/decision_levers.py                 # 120 seeds per held-out set (about 15 s)
    python examples/decision_levers.py --seeds 400

The GRPO example (`examples/train_trl_grpo.py`, docs/trl.md) warm-starts SmolLM2 on the offline scripted model's
replies at decision points (`rlaif_gym.envs.decisions`), then asks GRPO to improve on them. This script measures
where improvement could come from, on the same states and the same reward (the decision world's
`reward_mark="truth"`, horizon 1): the teacher's own reply, the same reply with its bet scaled (x0.25, x0.5, x2) or
capped at 100 USD (the size levers), the same bet on the other side (what the side is worth), and the bet on the
side the hidden truth favours at the teacher's size (the oracle's headroom). Each row is the mean gain over waiting
and the paired difference from the teacher, with 95 % intervals over points.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import tyro

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.encoding.reply import canonical_reply
from rlaif_gym.envs.decisions import DECISION_WORLD, HELD_OUT_SEEDS, WAIT_REPLY, DecisionPoint, decision_points
from rlaif_gym.llm import ScriptedLLM


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`, underscores as dashes; `--help` shows these docstrings)."""

    seeds: int = 120
    """Episodes per held-out set (one decision point each at most; seeds from 1,000,000 and from 2,000,000)."""
    resolves_within: int = 4
    """A decision point has a market that resolves within this many ticks, named by the prompt's feed."""


def gain(point: DecisionPoint, reply: str, wait: float) -> float:
    """The reply's return over its own tick (the decision world's mark-to-truth reward) minus a wait's."""
    _, reward, *_ = point.env().step(reply)
    return reward - wait


def variants(point: DecisionPoint, action: dict) -> dict[str, dict]:
    """The teacher's action and its one-lever changes (a wait or a perp trade stays as it is)."""
    out = {"teacher": action}
    if action.get("type") != "buy_prediction":
        return {**out, **{k: action for k in ("x0.25", "x0.5", "x2", "cap 100 USD", "other side", "truth's side")}}
    amount = float(action["amount"])
    other = "NO" if action["outcome"] == "YES" else "YES"
    env = point.env()
    view = env.view.market(str(action["market"]))
    favoured = "YES" if float(env.state.pm_truth[0, view.slot]) > view.yes_price else "NO"
    sized = {"x0.25": amount / 4, "x0.5": amount / 2, "x2": amount * 2, "cap 100 USD": min(amount, 100.0)}
    return {**out, **{k: {**action, "amount": round(v, 2)} for k, v in sized.items()},
            "other side": {**action, "outcome": other}, "truth's side": {**action, "outcome": favoured}}


def interval(values: list[float]) -> float:
    return 1.96 * statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")


def main() -> None:
    args = tyro.cli(Args, description=__doc__.split("\n\n")[0])
    config = RLAIFEnvConfig.from_any(DECISION_WORLD)
    teacher = ScriptedLLM()
    for seeds in HELD_OUT_SEEDS:
        points = decision_points(range(seeds.start, seeds.start + args.seeds), config,
                                 resolves_within=args.resolves_within)
        gains: dict[str, list[float]] = {}
        bets = 0
        for point in points:
            wait = gain(point, WAIT_REPLY, 0.0)
            think, action = teacher.decide(point.prompt)
            bets += action.get("type") == "buy_prediction"
            for name, act in variants(point, action).items():
                gains.setdefault(name, []).append(gain(point, canonical_reply(act, think), wait))
        base = gains["teacher"]
        print(f"\nHeld-out seeds from {seeds.start:,}: {len(points)} decision points, the teacher bets at {bets}\n")
        print("| reply | gain over waiting | minus the teacher's, paired |\n|---|---:|---:|")
        for name, values in gains.items():
            diff = [a - b for a, b in zip(values, base, strict=True)]
            paired = "" if name == "teacher" else f"{statistics.fmean(diff):+.4f} (± {interval(diff):.4f})"
            print(f"| {name} | {statistics.fmean(values):+.4f} (± {interval(values):.4f}) | {paired} |")


if __name__ == "__main__":
    main()
