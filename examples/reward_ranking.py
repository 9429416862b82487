"""Print the reward-ranking tables of docs/reward.md: does a higher default return mean a better trader?

    python examples/reward_ranking.py                    # 100 held-out seeds per row, both faces (~15 min, 2 cores)
    python examples/reward_ranking.py --original         # the same policies under reward_scheme="original" too
    python examples/reward_ranking.py --seeds 20 --groups 4   # a quick look

Every row plays one whole episode per seed, the same seeds for every policy (from --first-seed,
1,000,000 by default: no example or training run resets there). Tables, in order: the numeric face
(the baseline agents), the text face (the offline scripted model, judge-gaming replies, a
boilerplate hold, random trades, a social poster, unparseable replies), the text face under the
`trader` and `social-butterfly` archetypes, and the agreement of return and PnL inside GRPO groups.
Each table is followed by its expected orderings (`rlaif_gym.ranking.EXPECTED_ORDERS`) with the gap
in paired standard errors, and the Spearman correlation between episode return and final PnL.
"""

from __future__ import annotations

import argparse
import time

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.ranking import (
    ARCHETYPE_POLICIES,
    EXPECTED_ORDERS,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="episodes (seeds) per row")
    parser.add_argument("--first-seed", type=int, default=1_000_000, help="seeds are first-seed .. first-seed+seeds-1")
    parser.add_argument("--workers", type=int, default=2, help="processes for the text face (one policy each)")
    parser.add_argument("--groups", type=int, default=20, help="GRPO groups of 8 for the agreement check (0: skip)")
    parser.add_argument("--no-text", action="store_true", help="numeric face only (seconds)")
    parser.add_argument("--original", action="store_true", help='also the tables under reward_scheme="original"')
    args = parser.parse_args()

    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    schemes = ["skill", "original"] if args.original else ["skill"]
    start = time.perf_counter()
    for scheme in schemes:
        config = RLAIFEnvConfig(reward_scheme=scheme)
        tag = "default reward" if scheme == "skill" else 'reward_scheme="original"'
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
            arch = RLAIFEnvConfig(archetype=archetype)
            report(f"Text face, archetype={archetype!r}, {len(seeds)} seeds",
                   text_ranking(seeds, arch, ARCHETYPE_POLICIES, workers=args.workers), arch,
                   EXPECTED_ORDERS[archetype], spearman=archetype == "trader")
    if args.groups and not args.no_text:
        g = grpo_agreement(args.groups, seed=args.first_seed)
        print(f"\n### GRPO groups\n\n{g.groups} groups of {g.members} forked at tick 24 (scripted model, temperature "
              f"0.9): the members' return order agrees with their PnL order in {g.agreeing} of {g.pairs} pairs "
              f"({100 * g.rate:.1f} %) whose PnL differs by more than 1 % of starting cash.")
    print(f"\n<!-- {time.perf_counter() - start:.0f} s -->")


if __name__ == "__main__":
    main()
