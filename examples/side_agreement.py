"""Which evidence does a trained model's side follow? Its greedy replies (a `train_trl_grpo.py` results.json) against
the naive feed majority, the calibrated evidence rule and the drawn outcome, point by point (no model, a minute).

    python examples/train_trl_grpo.py --out runs/trl-grpo          # writes runs/trl-grpo/results.json
    python examples/side_agreement.py runs/trl-grpo/results.json

For each held-out set and each trained column, the share of points where the reply's side (YES/NO) equals:

* the naive majority: the side of the feed items naming the bet's market, each +1/-1 (`evals` baseline `informed`);
* the calibrated rule: the same items weighted by their sources' true reliabilities, so a deceiver's post counts
  against its side (`evals` reference `calibrated`; `POST_HONESTY`);
* the calibrated rule at the points where a deceiver NPC's post names the market (where the two rules part);
* the drawn outcome (read from the hidden state, for the analysis only).

The last column is the column's lean: its YES bets out of all its bets, then the calibrated rule's YES bets at the
same points (a model that reads the evidence and leans to neither side bets YES about as often as the rule).

Points where a rule has no side (a tie, or nothing to bet) are left out of its share; the counts are printed.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.envs.decisions import DECISION_WORLD, decision_points
from rlaif_gym.evals.baselines import deceiver_on_market, reply_at

_SIDE = re.compile(r'"outcome":\s*"(YES|NO)"')


def side(reply: str) -> str | None:
    """The side a reply bets on, or None (a wait, or no valid bet)."""
    match = _SIDE.search(reply)
    return match.group(1) if match else None


def share(pairs: list[tuple[str | None, str | None]]) -> str:
    kept = [a == b for a, b in pairs if a is not None and b is not None]
    return f"{statistics.fmean(kept):.0%} of {len(kept)}" if kept else "-"


def lean(sides: list[str | None], rule: list[str | None]) -> str:
    """A column's YES bets of all its bets, and the calibrated rule's YES bets at the same points."""
    bets = [s for s in sides if s is not None]
    return f"{bets.count('YES')} of {len(bets)} ({rule.count('YES')})"


def main(path: str) -> int:
    try:
        results = json.loads(Path(path).read_text())
        args = results["args"]
        replies = results["replies"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"side_agreement: {path} is not a results.json of examples/train_trl_grpo.py with its replies "
              f"({type(exc).__name__}: {exc}); pass the one a training run wrote (not --baselines-only, which writes "
              "none)", file=sys.stderr)
        return 2
    overrides = json.loads(args["config"] or "{}")
    config = RLAIFEnvConfig.from_any({**DECISION_WORLD, "prompt_style": "compact", **overrides})
    spare = args["eval_points"] // 4 + 8  # as the training script finds them
    print("| set | column | naive majority | calibrated rule | calibrated, a deceiver's post on the market | "
          "drawn outcome | YES bets (the calibrated rule's) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for start, columns in replies.items():
        first = int(start)
        points = decision_points(range(first, first + args["eval_points"] + spare), config=config,
                                 resolves_within=args["resolves_within"], horizon=args["resolves_within"])
        points = points[:args["eval_points"]]
        rows = []
        for point in points:
            env = point.env()
            rows.append((side(reply_at("informed", point.prompt, env)), side(reply_at("calibrated", point.prompt, env)),
                         side(reply_at("truth", point.prompt, env)), deceiver_on_market(point)))
        for name, replies in columns.items():
            if not name.startswith("after"):
                continue
            both = list(zip([side(r["reply"]) for r in replies], rows, strict=True))
            print(f"| {first:,} | {name} | {share([(m, r[0]) for m, r in both])} | "
                  f"{share([(m, r[1]) for m, r in both])} | {share([(m, r[1]) for m, r in both if r[3]])} | "
                  f"{share([(m, r[2]) for m, r in both])} | {lean([m for m, _ in both], [r[1] for _, r in both])} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if len(sys.argv) == 2 else 2)
    raise SystemExit(main(sys.argv[1]))
