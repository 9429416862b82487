"""Print the reward-ranking tables of docs/reward.md: does a higher default return mean a better trader?

    python examples/reward_ranking.py                    # 100 held-out seeds per row, both faces (~15 min, 2 cores)
    python examples/reward_ranking.py --original         # the same policies under reward_scheme="original" too
    python examples/reward_ranking.py --truth --signal   # + reward_mark="truth", and the learning-signal tables
    python examples/reward_ranking.py --seeds 20 --groups 4   # a quick look
    python examples/reward_ranking.py --prompt-style compact --groups 0   # the text face in the compact prompt style

Every row plays one whole episode per seed, the same seeds for every policy (from --first-seed,
1,000,000 by default: no example or training run resets there). Tables, in order: the numeric face
(the baseline agents), the text face (the offline scripted model, judge-gaming replies, a
boilerplate hold, random trades, a social poster, unparseable replies), the text face under the
`trader` and `social-butterfly` archetypes, and the agreement of return and PnL inside GRPO groups;
with `--truth` both faces again under the training option `reward_mark="truth"`; with `--signal` the
learning-signal tables (a blind end-of-episode buyer, and right and wrong bets against waiting from fork
states at horizons of 1, 2 and 4 ticks, in the default and a short world). Each table is followed by
its expected orderings (`rlaif_gym.ranking.EXPECTED_ORDERS`) with the gap in paired standard errors,
and the Spearman correlation between episode return and final PnL.
"""

from __future__ import annotations

import argparse
import time

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.agents import PassiveAgent
from rlaif_gym.ranking import (
    ARCHETYPE_POLICIES,
    EXPECTED_ORDERS,
    LateBlindBuyer,
    bet_signal,
    grpo_agreement,
    markdown_table,
    numeric_ranking,
    orderings_table,
    pooled_spearman,
    text_ranking,
)


def report(title: str, scores, config: RLAIFEnvConfig, orders, spearman: bool = True) -> None:
    print(f"\n### {title}\n")
    print(markdown_table(scores, config.starting_cash))
    if orders:
        print()
        print(orderings_table(scores, orders))
    if spearman:
        print(f"\nSpearman(return, final PnL) over all {sum(len(s.seeds) for s in scores.values())} episodes: "
              f"{pooled_spearman(scores.values()):.3f}")


SHORT_WORLD = {"num_ticks": 48, "num_markets": 2, "market_duration_min": 12, "market_duration_max": 36}
"""A short world for the signal table: 48 ticks, 2 markets that resolve within 12-36 ticks."""


def signal_tables(seeds: list[int]) -> None:
    """The learning-signal tables of docs/reward.md: can a reward-maximiser learn the side of a bet?"""
    print("\n### A blind buy at the end of the episode\n")
    print("| seeds | mean PnL (USD) | episodes with PnL > 0 | mean return | PassiveAgent's return |")
    print("|---|---:|---:|---:|---:|")
    half = len(seeds) // 2
    for name, part in (("first half", seeds[:half]), ("second half", seeds[half:])):
        s = numeric_ranking(part, policies={"late": LateBlindBuyer, "passive": PassiveAgent})
        late = s["late"]
        se = late.final_pnl.std() / len(part) ** 0.5
        print(f"| {name} ({part[0]:,}-{part[-1]:,}) | {late.mean_pnl:+,.0f} (± {2 * se:,.0f}) "
              f"| {100 * (late.final_pnl > 0).mean():.0f} % | {late.mean_return:+.4f} | "
              f"{s['passive'].mean_return:+.4f} |")
    print("\n### A right and a wrong bet against waiting, from fork states\n")
    print("| world | reward | H | states | right bet beats wait | wrong bet beats wait | right - wait | wrong - wait |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for world, cfg, forks in (("default", {}, (8, 24, 48, 96)), ("short", SHORT_WORLD, (8, 16, 24, 32))):
        for mark in ("market", "truth"):
            for h in (1, 2, 4):
                r = bet_signal(seeds[:64], {**cfg, "reward_mark": mark}, horizon=h, fork_ticks=forks)
                print(f"| {world} | {mark} | {h} | {r.states} | {100 * r.right_beats_wait:.0f} % | "
                      f"{100 * r.wrong_beats_wait:.0f} % | {r.right_gain:+.4f} | {r.wrong_gain:+.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="episodes (seeds) per row")
    parser.add_argument("--first-seed", type=int, default=1_000_000, help="seeds are first-seed .. first-seed+seeds-1")
    parser.add_argument("--workers", type=int, default=2, help="processes for the text face (one policy each)")
    parser.add_argument("--groups", type=int, default=20, help="GRPO groups of 8 for the agreement check (0: skip)")
    parser.add_argument("--no-text", action="store_true", help="numeric face only (seconds)")
    parser.add_argument("--original", action="store_true", help='also the tables under reward_scheme="original"')
    parser.add_argument("--truth", action="store_true", help='also both faces under reward_mark="truth"')
    parser.add_argument("--signal", action="store_true", help="also the learning-signal tables")
    parser.add_argument("--prompt-style", choices=("full", "compact"), default="full",
                        help="the text face's prompt style (the numeric face has no prompt: its tables do not change)")
    parser.add_argument("--no-default", action="store_true", help="skip the default-reward tables (with --truth, "
                        "--signal)")
    args = parser.parse_args()

    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    style = "" if args.prompt_style == "full" else f', prompt_style="{args.prompt_style}"'
    schemes = ([] if args.no_default else ["skill"]) + (["original"] if args.original else [])
    start = time.perf_counter()
    for scheme in schemes:
        config = RLAIFEnvConfig(reward_scheme=scheme, prompt_style=args.prompt_style)
        tag = ("default reward" if scheme == "skill" else 'reward_scheme="original"') + style
        check = scheme == "skill"
        report(f"Numeric face (RLAIF-v0), {tag}, {len(seeds)} seeds", numeric_ranking(seeds, config), config,
               EXPECTED_ORDERS["numeric"] if check else None)
        if args.no_text:
            continue
        report(f"Text face (RLAIF-Text-v0), {tag}, {len(seeds)} seeds",
               text_ranking(seeds, config, workers=args.workers), config, EXPECTED_ORDERS["text"] if check else None)
        if scheme != "skill":
            continue
        for archetype in ("trader", "social-butterfly"):
            arch = RLAIFEnvConfig(archetype=archetype, prompt_style=args.prompt_style)
            report(f"Text face, archetype={archetype!r}, {len(seeds)} seeds",
                   text_ranking(seeds, arch, ARCHETYPE_POLICIES, workers=args.workers), arch,
                   EXPECTED_ORDERS[archetype], spearman=archetype == "trader")
    if args.truth:
        config = RLAIFEnvConfig(reward_mark="truth", prompt_style=args.prompt_style)
        tag = 'reward_mark="truth"' + style
        report(f"Numeric face (RLAIF-v0), {tag}, {len(seeds)} seeds", numeric_ranking(seeds, config), config,
               EXPECTED_ORDERS["numeric"])
        if not args.no_text:
            report(f"Text face (RLAIF-Text-v0), {tag}, {len(seeds)} seeds",
                   text_ranking(seeds, config, workers=args.workers), config, EXPECTED_ORDERS["text"])
    if args.signal:
        signal_tables(seeds)
    if args.groups and not args.no_text:
        g = grpo_agreement(args.groups, seed=args.first_seed)
        print(f"\n### GRPO groups\n\n{g.groups} groups of {g.members} forked at tick 24 (scripted model, temperature "
              f"0.9): the members' return order agrees with their PnL order in {g.agreeing} of {g.pairs} pairs "
              f"({100 * g.rate:.1f} %) whose PnL differs by more than 1 % of starting cash.")
    print(f"\n<!-- {time.perf_counter() - start:.0f} s -->")


if __name__ == "__main__":
    main()
