"""Named, versioned held-out task sets: the states an eval scores every policy on.

A set is fixed by its seeds, its world config, its filter and what the world's rules make of them, and it
records all of that in a digest: two scorecards with the same digest scored the very same states (the same
prompts, and behind them the same drawn outcomes and hidden probabilities), whatever their package versions.
A change of the rules that changes a point's prompt or outcome changes the digest, and `compare` refuses
to pair such scorecards.

`decisions-v1/held-out-a` and `-b` are the two held-out sets of docs/trl.md: 200 decision points each, from the
seeds 1,000,000.. and 2,000,000.. (`HELD_OUT_SEEDS`; training takes `TRAIN_SEEDS`, 0..999,999), in the decision
world (`DECISION_WORLD`) and the compact prompt style, each point naming a market that resolves within 4 ticks.

`episodes-v1/decision-world-a` and `-b` are whole episodes of the same world from the same seeds (50 each), and
`episodes-v1/default-a` whole episodes of the default world (10 from 1,000,000): the model plays every tick.

Plays the text env through `rlaif_gym.envs.decisions`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..config import RLAIFEnvConfig
from ..envs.decisions import DECISION_WORLD, HELD_OUT_SEEDS, TRAIN_SEEDS, DecisionPoint, decision_points
from ..envs.inputs import MAX_SEED
from ..errors import ConfigError

__all__ = ["DECISION_SETS", "EPISODE_SETS", "MAX_POINTS", "DecisionSet", "EpisodeSet", "decision_set", "task_set"]

SET_VERSION = "decisions-v1"
"""The version of the decision sets' definition (world, filter, search); bumped when any of it changes."""
EPISODE_SET_VERSION = "episodes-v1"
"""The version of the episode sets' definition (worlds, seeds); bumped when any of it changes."""
MAX_SEEDS_PER_POINT = 8
"""A set's search gives up after this many seeds per point asked for (a config that never qualifies)."""
MAX_POINTS = 2_000
"""`points` (--points) at most, in a set of either kind: ten times the named decision sets, whose points are all
built and held before the first call (docs/eval.md gives the time and memory it takes); the seeds the search may
reach stay below 2**63 (`MAX_SEED`)."""


@dataclass(frozen=True)
class DecisionSet:
    """A held-out set of decision points (see the module docstring).

    Attributes:
        name: e.g. "decisions-v1/held-out-a".
        first_seed: the search starts at this reset seed and takes each seed's first qualifying tick.
        points: how many points the set holds.
        world: `RLAIFEnvConfig` overrides (on top of the defaults).
        resolves_within: a point's market resolves within this many ticks (the rollout's horizon reaches it).
        min_evidence: feed items of the prompt naming that market, at least.
    """

    name: str
    first_seed: int
    points: int
    world: Mapping[str, Any] = field(default_factory=lambda: {**DECISION_WORLD, "prompt_style": "compact"})
    resolves_within: int = 4
    min_evidence: int = 1

    @cached_property
    def config(self) -> RLAIFEnvConfig:
        """The world's validated config."""
        return RLAIFEnvConfig.from_any(dict(self.world))

    def build(self) -> list[DecisionPoint]:
        """The set's points: each seed's first qualifying tick, from `first_seed` upward, until `points` are found.

        Raises:
            ConfigError: fewer than `points` points within `MAX_SEEDS_PER_POINT` seeds per point.
        """
        found: list[DecisionPoint] = []
        start, limit = self.first_seed, self.first_seed + MAX_SEEDS_PER_POINT * self.points
        while len(found) < self.points and start < limit:
            need = self.points - len(found)
            stop = min(limit, start + need + need // 4 + 8)  # a few seeds have no qualifying tick
            found += decision_points(range(start, stop), self.config, resolves_within=self.resolves_within,
                                     min_evidence=self.min_evidence, horizon=self.resolves_within)
            start = stop
        if len(found) < self.points:
            raise ConfigError(f"set {self.name}: found {len(found)} decision points in the seeds {self.first_seed:,}"
                              f"..{limit - 1:,}, where {self.points} were asked for; the world config never "
                              "qualifies: loosen its --set overrides or ask for fewer --points")
        return found[:self.points]

    def digest(self, points: list[DecisionPoint]) -> str:
        """sha256 of what the set's states are: the config, the filter, and per point its seed, tick, prompt and
        the hidden truth behind it (each market's drawn outcome and p*). Package versions are not in it."""
        states = []
        for p in points:
            env = p.env()
            hidden = [[m.market_id, int(env.state.pm_outcome[0, m.slot]), float(env.state.pm_truth[0, m.slot])]
                      for m in env.view.markets]
            states.append([p.seed, p.tick, p.prompt, hidden])
        body = {"version": SET_VERSION, "world": self.config.model_dump(mode="json"),
                "filter": {"resolves_within": self.resolves_within, "min_evidence": self.min_evidence},
                "states": states}
        return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def describe(self, points: list[DecisionPoint]) -> dict[str, Any]:
        """The set as a scorecard records it."""
        return {"name": self.name, "digest": self.digest(points), "kind": "decision points",
                "first_seed": self.first_seed, "last_seed": points[-1].seed if points else None,
                "points": len(points), "resolves_within": self.resolves_within, "min_evidence": self.min_evidence,
                "horizon": "resolution: the reply's tick, then waits until every market open at the point resolved",
                "reward_mark": self.config.reward_mark, "world": dict(self.world)}


DECISION_SETS: dict[str, DecisionSet] = {
    f"{SET_VERSION}/held-out-a": DecisionSet(f"{SET_VERSION}/held-out-a", HELD_OUT_SEEDS[0].start, 200),
    f"{SET_VERSION}/held-out-b": DecisionSet(f"{SET_VERSION}/held-out-b", HELD_OUT_SEEDS[1].start, 200),
}
"""The named sets."""


def _custom(first_seed: int, size: int, world: Mapping[str, Any], seeds: int | None, points: int | None,
            overrides: Mapping[str, Any] | None, allow_train_seeds: bool) -> tuple[int, int, dict[str, Any]]:
    """(first seed, size, world) of a set of one's own made from a named one (see `decision_set`)."""
    first = first_seed if seeds is None else int(seeds)
    count = size if points is None else int(points)
    if not 1 <= count <= MAX_POINTS:
        raise ConfigError(f"--points must be in [1, {MAX_POINTS:,}], got {count:,}; score a larger sample as several "
                          "sets (--seeds START --points N each) and compare them")
    last = MAX_SEED - MAX_SEEDS_PER_POINT * count
    if not 0 <= first <= last:
        raise ConfigError(f"--seeds must be in [0, {last:,}] with --points {count:,} (the set's search may reach "
                          f"{MAX_SEEDS_PER_POINT} seeds a point, and a seed is at most 2**63 - 1), got {first:,}")
    if first in TRAIN_SEEDS and not allow_train_seeds:
        raise ConfigError(f"--seeds {first:,} is in the training range {TRAIN_SEEDS.start:,}..{TRAIN_SEEDS.stop - 1:,}"
                          f"; scores there are not held out: start at {HELD_OUT_SEEDS[0].start:,} or above, or pass "
                          "--allow-train-seeds")
    merged = {**world, **(overrides or {})}
    RLAIFEnvConfig.from_any(merged)  # a bad override fails here, naming the field
    return first, count, merged


def decision_set(name: str | None = None, *, seeds: int | None = None, points: int | None = None,
                 overrides: Mapping[str, Any] | None = None, allow_train_seeds: bool = False) -> DecisionSet:
    """A named set, or one of your own: `seeds` (the first seed) and `points` pick other states of the same
    world, `overrides` change the world (each makes a set of its own, with its own digest).

    Raises:
        ConfigError: an unknown name, or a first seed in the training range (`TRAIN_SEEDS`) without
            `allow_train_seeds` (scores there measure memory, not skill).
    """
    name = name or f"{SET_VERSION}/held-out-a"
    if name not in DECISION_SETS:
        raise ConfigError(f"unknown set {name!r}; the sets are {', '.join([*DECISION_SETS, *EPISODE_SETS])} (or give "
                          "--seeds START --points N for others)")
    base = DECISION_SETS[name]
    if seeds is None and points is None and not overrides:
        return base
    first, count, world = _custom(base.first_seed, base.points, base.world, seeds, points, overrides,
                                  allow_train_seeds)
    return DecisionSet(f"{name.split('/')[0]}/custom-{first}-{count}", first, count, world, base.resolves_within,
                       base.min_evidence)


@dataclass(frozen=True)
class EpisodeSet:
    """A held-out set of whole episodes (see the module docstring): one per seed from `first_seed`.

    Attributes:
        name: e.g. "episodes-v1/decision-world-a".
        first_seed: the first reset seed.
        episodes: how many episodes (seeds `first_seed` .. `first_seed + episodes - 1`).
        world: `RLAIFEnvConfig` overrides (on top of the defaults).
    """

    name: str
    first_seed: int
    episodes: int
    world: Mapping[str, Any] = field(default_factory=lambda: {**DECISION_WORLD, "prompt_style": "compact"})

    @cached_property
    def config(self) -> RLAIFEnvConfig:
        """The world's validated config."""
        return RLAIFEnvConfig.from_any(dict(self.world))

    @property
    def seeds(self) -> range:
        return range(self.first_seed, self.first_seed + self.episodes)

    def digest(self, traces: list[list[Any]]) -> str:
        """sha256 of the config and, per episode, what a waiting agent meets: each tick's prompt and the hidden
        truth behind it (each open market's drawn outcome and p*) (`traces`, one per seed, as the eval's wait
        baseline records them). Package versions are not in it."""
        body = {"version": EPISODE_SET_VERSION, "world": self.config.model_dump(mode="json"),
                "states": [[seed, trace] for seed, trace in zip(self.seeds, traces, strict=True)]}
        return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def describe(self, traces: list[list[Any]]) -> dict[str, Any]:
        """The set as a scorecard records it."""
        return {"name": self.name, "digest": self.digest(traces), "kind": "episodes", "first_seed": self.first_seed,
                "last_seed": self.seeds[-1], "points": self.episodes, "ticks": self.config.num_ticks,
                "horizon": "the whole episode: the model answers every tick", "reward_mark": self.config.reward_mark,
                "world": dict(self.world)}


EPISODE_SETS: dict[str, EpisodeSet] = {
    f"{EPISODE_SET_VERSION}/decision-world-a": EpisodeSet(f"{EPISODE_SET_VERSION}/decision-world-a",
                                                          HELD_OUT_SEEDS[0].start, 50),
    f"{EPISODE_SET_VERSION}/decision-world-b": EpisodeSet(f"{EPISODE_SET_VERSION}/decision-world-b",
                                                          HELD_OUT_SEEDS[1].start, 50),
    f"{EPISODE_SET_VERSION}/default-a": EpisodeSet(f"{EPISODE_SET_VERSION}/default-a", HELD_OUT_SEEDS[0].start, 10,
                                                   {}),
}
"""The named episode sets."""


def task_set(name: str | None = None, *, seeds: int | None = None, points: int | None = None,
             overrides: Mapping[str, Any] | None = None, allow_train_seeds: bool = False,
             ) -> DecisionSet | EpisodeSet:
    """A named set of either kind (`DECISION_SETS`, `EPISODE_SETS`), or one of your own as `decision_set` makes it
    (`points` counts episodes in an episode set)."""
    if name not in EPISODE_SETS:
        return decision_set(name, seeds=seeds, points=points, overrides=overrides, allow_train_seeds=allow_train_seeds)
    base = EPISODE_SETS[name]
    if seeds is None and points is None and not overrides:
        return base
    first, count, world = _custom(base.first_seed, base.episodes, base.world, seeds, points, overrides,
                                  allow_train_seeds)
    return EpisodeSet(f"{EPISODE_SET_VERSION}/custom-{name.split('/')[1]}-{first}-{count}", first, count, world)
