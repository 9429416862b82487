"""What does a decision point's reward pay for? The feed's items against the drawn outcome and against p*, and the
gain over waiting of five replies under two credits (no LLM, half a minute on a CPU).

    python examples/decision_study.py                  # 200 points per held-out set (about 30 s on 2 cores)
    python examples/decision_study.py --points 50 --first-seeds 7000000 8000000

The world draws each market's outcome at creation from its hidden true probability p*, and writes every news item,
NPC post and group tip from that drawn outcome at its source's reliability, never from p* (`sim.rules._information`).
With `reward_mark="truth"` a bet is credited on its own tick at p*. This script measures what that means for the
decision points the GRPO example trains on (`rlaif_gym.envs.decisions`: DECISION_WORLD, a market resolving within
`--resolves-within` ticks and named by the prompt's feed), on two disjoint sets of held-out seeds:

1. per source, the share of the feed items naming an open market whose side is the drawn outcome's, and the share
   whose side is p*'s relative to the market's YES price (p* > price: YES), at the points' prompts and over the
   episodes up to the points (each item once, at the first prompt that shows it);
2. the mean gain over a wait on the same state, with 95 % intervals over points, of the scripted teacher's reply
   (`ScriptedLLM().decide`), the evidence rule (5 % of cash on the side of the sum of +1/-1 over the prompt's news,
   tips and posts naming the point's market, unweighted; a wait on a tie), a random side at 5 % of cash, 5 % on p*'s
   side (the bet the horizon-1 truth mark pays most) and the hindsight ceiling (5 % on the drawn outcome's side),
   and the paired difference evidence - random; at horizon 1 with the truth mark (the reply's own tick) and at
   `--ticks` (the reply, then clean waits, `WAIT_REPLY`) with the truth and the market mark, which agree once every
   bet has resolved inside the horizon (the script counts the points where they do not); then the same split by
   whether the point's market resolves on the reply's tick or later.

The hidden state (`env.state.pm_outcome`, `env.state.pm_truth`) is read here for the analysis and the two oracle rows
only; the teacher and the rules decide from the prompt (the rules read its feed through `env.view`). The rules'
replies share one reasoning text, so their form terms match and their paired gaps are trading.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import tyro

from rlaif_gym import RLAIFEnvConfig, RLAIFTextEnv
from rlaif_gym.encoding.reply import canonical_reply
from rlaif_gym.envs.decisions import DECISION_WORLD, TRAIN_SEEDS, WAIT_REPLY, DecisionPoint, decision_points
from rlaif_gym.llm import ScriptedLLM
from rlaif_gym.sim import GROUP_NAMES, NEWS_SOURCES, NPC_ROSTER, POST_HONESTY, NpcBehaviour, npc_name


@dataclass
class Args:
    """Command-line arguments (each field is a `--flag`, underscores as dashes; `--help` shows these docstrings)."""

    points: int = 200
    """Decision points per held-out set (at most one per seed; seeds are taken in order until there are enough)."""
    first_seeds: tuple[int, int] = (5_000_000, 6_000_000)
    """The first seed of each of the two held-out sets (disjoint from TRAIN_SEEDS, and from each other)."""
    resolves_within: int = 4
    """A decision point has a market that resolves within this many ticks, named by the prompt's feed."""
    ticks: int = 4
    """The long horizon: the reply, then clean waits; at least --resolves-within, so the point's market resolves."""
    stake: float = 0.05
    """The rules' bet, as a share of the cash at the point."""
    random_seed: int = 0
    """Seed of the random-side rule's generator (numpy default_rng([seed, set index]))."""


ROWS = ("teacher", "evidence rule", "random side", "p*'s side", "hindsight ceiling")
CREDITS = ("H=1, truth", "H={ticks}, truth", "H={ticks}, market")
OUTCOME_ROW = "(the drawn outcome itself)"
BEHAVIOURS = {NpcBehaviour.INFORMED: "informed", NpcBehaviour.DECEIVER: "deceiver", NpcBehaviour.NOISE: "noise",
              NpcBehaviour.MOMENTUM: "momentum"}


def interval(values: list[float]) -> float:
    return 1.96 * statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")


def find_points(first: int, n: int, config: RLAIFEnvConfig, args: Args) -> list[DecisionPoint]:
    """The first `n` decision points from seeds `first`, `first + 1`, ... (never reaching the other set's seeds)."""
    stop = min((s for s in args.first_seeds if s > first), default=None)
    points: list[DecisionPoint] = []
    start = first
    while len(points) < n:
        chunk = max(n - len(points), 8)
        if stop is not None and start + chunk > stop:
            raise SystemExit(f"the set from seed {first:,} would reach the other set's seeds ({stop:,}): put "
                             "--first-seeds further apart")
        points += decision_points(range(start, start + chunk), config, resolves_within=args.resolves_within,
                                  horizon=args.ticks)
        start += chunk
    return points[:n]


def market_snapshot(point: DecisionPoint, config: RLAIFEnvConfig, tally: dict[str, list[int]]):
    """The point's state in an env with `config` (another reward mark): its trunk replayed from `reset(seed)`.

    On the way, every feed item the trunk's prompts show goes into `tally` once (`feed_rows`)."""
    env = RLAIFTextEnv(config)
    prompt, _ = env.reset(seed=point.seed)
    seen: set = set()
    feed_rows(env, tally, seen)
    for reply in point.replies:
        prompt, *_ = env.step(reply)
        feed_rows(env, tally, seen)
    assert prompt == point.prompt, f"seed {point.seed}: the replayed trunk does not reach the point's prompt"
    return env.get_state()


def play(snapshot, reply: str, ticks: int) -> float:
    """The return of `reply` then `ticks - 1` waits from `snapshot`."""
    env = RLAIFTextEnv(snapshot.config)
    env.set_state(snapshot)
    total = 0.0
    for i in range(ticks):
        _, reward, terminated, truncated, _ = env.step(reply if i == 0 else WAIT_REPLY)
        total += reward
        if terminated or truncated:
            break
    return total


def bet(market: str, side: str, amount: float, stake: float) -> str:
    """A rule's reply: the same reasoning text for every rule, so their form terms match and paired gaps are trading."""
    think = (f"The feed on {market} makes {side} worth more than its price to me, so I put {100 * stake:g}% of my "
             f"cash on {side}.")
    action = {"type": "buy_prediction", "market": market, "outcome": side, "amount": round(amount, 2)}
    return canonical_reply(action, think)


def side_of(sign: float) -> str:
    return "YES" if sign > 0 else "NO"


def feed_rows(env: RLAIFTextEnv, tally: dict[str, list[int]], seen: set | None = None) -> None:
    """Add the prompt's feed items that name an open market to `tally`: source -> [items, outcome's side, p*'s side].

    With `seen` (one set per episode), an item (and a market, for the reference row) counts once, at the first prompt
    that shows it."""
    view, state = env.view, env.state
    behaviour = {npc_name(k): NPC_ROSTER[k % len(NPC_ROSTER)][1] for k in range(env.params.num_npcs)}

    def add(name: str, key: tuple, slot: int, price: float, direction: int) -> None:
        if seen is not None:
            if (name, *key) in seen:
                return
            seen.add((name, *key))
        outcome = 1 if int(state.pm_outcome[0, slot]) == 1 else -1
        truth = 1 if float(state.pm_truth[0, slot]) > price else -1
        row = tally.setdefault(name, [0, 0, 0])
        row[0], row[1], row[2] = row[0] + 1, row[1] + (direction == outcome), row[2] + (direction == truth)

    for m in view.markets:  # the reference row: the drawn outcome itself, on each open market
        add(OUTCOME_ROW, (m.market_id,), m.slot, m.yes_price, 1 if int(state.pm_outcome[0, m.slot]) == 1 else -1)
    for item in (*view.news, *view.posts, *view.tips):
        m = view.market(item.subject)
        if m is None:
            continue  # a perp, or a market already resolved
        key = (item.kind, item.tick, item.subject, item.source, item.direction)
        if item.kind == "post":
            add("NPC posts (all)", key, m.slot, m.yes_price, item.direction)
            add(f"  posts by {BEHAVIOURS[behaviour[item.source]]} NPCs", key, m.slot, m.yes_price, item.direction)
        else:
            add(item.source if item.kind == "news" else f"group tips ({item.source})", key, m.slot, m.yes_price,
                item.direction)


def evidence(env: RLAIFTextEnv, market: str) -> int:
    """The evidence score of `market`: +1 for each feed item of the prompt naming it YES, -1 for each naming it NO."""
    view = env.view
    return sum(item.direction for item in (*view.news, *view.tips, *view.posts) if item.subject == market)


def column(gains: dict[str, list[float]], row: str) -> list[float]:
    """A row's gains per point; "evidence - random" is the paired difference."""
    if row == "evidence - random":
        return [a - b for a, b in zip(gains["evidence rule"], gains["random side"], strict=True)]
    return gains[row]


def share(k: int, n: int) -> str:
    p = k / n if n else float("nan")
    return f"{100 * p:.1f} % (± {196 * (p * (1 - p) / n) ** 0.5:.1f})" if n else "-"


def study(first: int, index: int, config: RLAIFEnvConfig, market_config: RLAIFEnvConfig, args: Args) -> None:
    teacher = ScriptedLLM()
    rng = np.random.default_rng([args.random_seed, index])
    points = find_points(first, args.points, config, args)
    tally: dict[str, list[int]] = {}  # at the points' prompts
    episodes: dict[str, list[int]] = {}  # over the episodes up to the points, each item once
    gains = {credit: {row: [] for row in ROWS} for credit in CREDITS}
    resolves = {}
    later_flags: list[bool] = []  # the point's market resolves after the reply's tick
    teacher_bets = evidence_bets = evidence_right = evidence_truth_side = 0
    disagree: dict[str, int] = {row: 0 for row in ROWS}
    for point in points:
        env = point.env()
        feed_rows(env, tally)
        market = point.market
        view = env.view.market(market)
        resolves[point.markets[0][1]] = resolves.get(point.markets[0][1], 0) + 1
        later_flags.append(point.markets[0][1] > 1)
        outcome = "YES" if int(env.state.pm_outcome[0, view.slot]) == 1 else "NO"
        truth_side = "YES" if float(env.state.pm_truth[0, view.slot]) > view.yes_price else "NO"
        amount = args.stake * env.view.cash
        think, action = teacher.decide(point.prompt)
        teacher_bets += action.get("type") == "buy_prediction"
        score = evidence(env, market)
        evidence_bets += score != 0
        evidence_right += score != 0 and side_of(score) == outcome
        evidence_truth_side += score != 0 and side_of(score) == truth_side
        replies = {
            "teacher": canonical_reply(action, think),
            "evidence rule": bet(market, side_of(score), amount, args.stake) if score else WAIT_REPLY,
            "random side": bet(market, "YES" if rng.random() < 0.5 else "NO", amount, args.stake),
            "p*'s side": bet(market, truth_side, amount, args.stake),
            "hindsight ceiling": bet(market, outcome, amount, args.stake),
        }
        snapshots = {"truth": point.snapshot, "market": market_snapshot(point, market_config, episodes)}
        for credit in CREDITS:
            ticks = 1 if credit.startswith("H=1") else args.ticks
            snapshot = snapshots["truth" if credit.endswith("truth") else "market"]
            wait = play(snapshot, WAIT_REPLY, ticks)
            for row, reply in replies.items():
                gains[credit][row].append(play(snapshot, reply, ticks) - wait)
        long_truth, long_market = gains[CREDITS[1]], gains[CREDITS[2]]
        for row in ROWS:
            disagree[row] += abs(long_truth[row][-1] - long_market[row][-1]) > 1e-9

    n = len(points)
    print(f"\n## Held-out seeds from {first:,}: {n} decision points (seeds {points[0].seed:,}-{points[-1].seed:,})\n")
    print("What the feed predicts: items naming an open market, at the points' prompts and over the episodes up to "
          "the points (each item once, at the first prompt that shows it, against the YES price there)\n")
    print("| source | reliability | items at the points | side = drawn outcome's | side = p*'s vs the price | "
          "items in the episodes | side = drawn outcome's | side = p*'s vs the price |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    reliability = {**{name: f"{r:.2f}" for name, r in NEWS_SOURCES},
                   **{f"group tips ({name})": f"{r:.2f}" for name, r in GROUP_NAMES},
                   "NPC posts (all)": f"{min(POST_HONESTY):.1f}-{max(POST_HONESTY):.1f}",
                   **{f"  posts by {kind} NPCs": f"{POST_HONESTY[code]:.2f}" for code, kind in BEHAVIOURS.items()},
                   OUTCOME_ROW: "1.00"}
    names = set(tally) | set(episodes)
    order = [name for name, _ in NEWS_SOURCES] + ["NPC posts (all)"] + sorted(
        k for k in names if k.startswith("  posts")) + sorted(k for k in names if k.startswith("group")) + [OUTCOME_ROW]
    for name in order:
        if name in names:
            cells = []
            for counts in (tally, episodes):
                items, right, truth = counts.get(name, [0, 0, 0])
                cells += [f"{items:,}", share(right, items), share(truth, items)]
            print(f"| {name} | {reliability.get(name, '')} | " + " | ".join(cells) + " |")
    print(f"| evidence rule's side, the point's market (ties left out) | | {evidence_bets} | "
          f"{share(evidence_right, evidence_bets)} | {share(evidence_truth_side, evidence_bets)} | | | |")
    later = n - resolves.get(1, 0)
    print(f"\nThe point's market resolves on the reply's own tick at {resolves.get(1, 0)} of {n} points "
          f"({100 * resolves.get(1, 0) / n:.0f} %), 2-{args.resolves_within} ticks later at {later} "
          f"({100 * later / n:.0f} %: " + ", ".join(f"{k} ticks: {resolves.get(k, 0)}" for k in
                                                   range(2, args.resolves_within + 1)) + ").")
    print(f"The teacher bets at {teacher_bets} points; the evidence rule at {evidence_bets} (it waits on a tie).\n")
    credits = [c.format(ticks=args.ticks) for c in CREDITS]
    print("Gain over a wait on the same state (units of starting cash), 95 % intervals over points\n")
    print("| reply | " + " | ".join(credits) + " |")
    print("|---|" + "---:|" * len(credits))
    for row in (*ROWS, "evidence - random"):
        cells = [f"{statistics.fmean(v):+.4f} (± {interval(v):.4f})" for v in (column(gains[c], row) for c in CREDITS)]
        print(f"| {row}{', paired' if row == 'evidence - random' else ''} | " + " | ".join(cells) + " |")
    print("\nThe same gains, the points split by when their market resolves (evidence - random paired)\n")
    split = [(f"{c}, {label}", c, flag) for flag, label in ((False, "on the reply's tick"),
                                                            (True, f"2-{args.resolves_within} ticks later"))
             for c in CREDITS[:2]]
    print("| reply | " + " | ".join(name.format(ticks=args.ticks) for name, _, _ in split) + " |")
    print("|---|" + "---:|" * len(split))
    for row in (*ROWS, "evidence - random"):
        cells = []
        for _, c, flag in split:
            v = [g for g, f in zip(column(gains[c], row), later_flags, strict=True) if f == flag]
            cells.append(f"{statistics.fmean(v):+.4f} (± {interval(v):.4f})")
        print(f"| {row} | " + " | ".join(cells) + " |")
    print(f"\nH={args.ticks}, truth vs market mark: the gains differ (by more than 1e-9) at "
          + ", ".join(f"{disagree[row]} of {n} points for the {row}" for row in ROWS) + ".")


def main() -> None:
    args = tyro.cli(Args, description=__doc__.split("\n\n")[0])
    if args.ticks < args.resolves_within:
        print(f"note: --ticks {args.ticks} < --resolves-within {args.resolves_within}: the long horizon does not "
              "reach every point's resolution")
    if min(args.first_seeds) < TRAIN_SEEDS.stop or args.first_seeds[0] == args.first_seeds[1]:
        raise SystemExit(f"--first-seeds must be two different seeds at or past {TRAIN_SEEDS.stop:,} (the training "
                         "seeds are below)")
    config = RLAIFEnvConfig.from_any(DECISION_WORLD)
    market_config = RLAIFEnvConfig.from_any({**DECISION_WORLD, "reward_mark": "market"})
    started = time.perf_counter()
    for index, first in enumerate(args.first_seeds):
        study(first, index, config, market_config, args)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
