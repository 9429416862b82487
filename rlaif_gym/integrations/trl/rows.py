"""Dataset rows for both of GRPOTrainer's contracts: `RowEpisode` (one episode a row names), `dataset_rows` and
`build_dataset`, each column checked as the OpenEnv server checks the same input.

Part of `rlaif_gym.integrations.trl`, which re-exports every public name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import datasets

from ...config import RLAIFEnvConfig
from ...envs.decisions import DecisionPoint, mirrored_prompt
from ...envs.inputs import check_config, check_items, check_seed, check_seeds, check_snapshot, check_ticks
from ...envs.rlaif_env import EnvSnapshot
from ...envs.text_env import RLAIFTextEnv
from ...errors import ConfigError

Contract = Literal["rollout_func", "environment_factory"]
"""Which of GRPOTrainer's environment contracts a dataset row is for."""


def _column(name: str) -> str:
    return f"dataset row column {name!r}"


# -- episodes and dataset rows ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RowEpisode:
    """One episode a dataset row names: where it starts and how many ticks it lasts (the rollout collector's
    `rlaif_gym.rollout.EpisodeSpec` is something else: one entry of a collection's plan).

    Attributes:
        seed: the reset seed (for a fork point, the seed of the episode it was taken from).
        config: the env config.
        snapshot: a fork point (`env.get_state()` of an `RLAIFTextEnv`); None starts at `reset(seed)`.
        ticks: ticks to play from the start point; None plays until the episode ends.
        decisions: how many of those ticks the model answers (None: all); the rest of the horizon is
            played by the continuation policy, a clean wait (`rlaif_gym.envs.decisions.WAIT_REPLY`). With
            1 a rollout is a single decision: one reply, whose return is what that reply is worth over the
            horizon (a contextual bandit; the backward pass covers one reply).
        mirrored: the model sees the start's prompt in the YES/NO mirror of its world
            (`rlaif_gym.envs.decisions.mirrored_prompt`), and its reply is played in the world itself with its
            sides swapped back (`mirror_reply`): the same decision with the evidence and the better side
            reversed. A single decision only (`decisions=1`), from a fork point.
    """

    seed: int | None
    config: RLAIFEnvConfig
    snapshot: EnvSnapshot | None = None
    ticks: int | None = None
    decisions: int | None = None
    mirrored: bool = False

    def __post_init__(self) -> None:
        check_seed(self.seed, "seed", recorded=self.snapshot is not None)
        check_ticks(self.ticks, "ticks")
        check_ticks(self.decisions, "decisions")
        if not isinstance(self.mirrored, bool):
            raise ConfigError(f"mirrored must be True or False, got {self.mirrored!r}")
        if self.mirrored and (self.decisions != 1 or self.snapshot is None):
            raise ConfigError("a mirrored row is one decision at a fork point (decisions=1 and a snapshot): later "
                              f"prompts would show the world unmirrored; got decisions={self.decisions}, "
                              f"snapshot={'set' if self.snapshot is not None else 'None'}")
        if not isinstance(self.config, RLAIFEnvConfig):
            raise ConfigError(f"config must be an RLAIFEnvConfig, got {type(self.config).__name__}; build one with "
                              "RLAIFEnvConfig(**fields) or RowEpisode.from_row(...)")
        if self.snapshot is not None:
            if not isinstance(self.snapshot, EnvSnapshot) or self.snapshot.env_class is not RLAIFTextEnv:
                raise ConfigError("a fork point must be the get_state() of an RLAIFTextEnv (the text face)")
            if self.snapshot.config != self.config:
                raise ConfigError("the snapshot's config differs from the row's config; build the row with "
                                  "snapshot.config")

    @classmethod
    def from_row(cls, seed: int | None = None, config: str | Mapping[str, Any] | None = None,
                 snapshot: bytes | None = None, ticks: int | None = None, decisions: int | None = None,
                 mirrored: bool | None = None, **_: Any) -> RowEpisode:
        """The spec a dataset row names (`build_dataset`'s columns; other columns are ignored).

        Each column is checked as the OpenEnv server checks the same input (`rlaif_gym.envs.inputs`):
        nothing is converted, so `seed=1.5`, `seed=True` or `ticks=1.7` are refused, never truncated.

        Raises:
            ConfigError: a column of the wrong type or out of range, naming the column.
            SnapshotFormatError: a `snapshot` column that is not a text-env snapshot's bytes.
        """
        seed = check_seed(seed, _column("seed"), recorded=snapshot is not None)
        cfg, ticks = check_config(config, _column("config")), check_ticks(ticks, _column("ticks"))
        if mirrored is not None and not isinstance(mirrored, bool):
            raise ConfigError(f"{_column('mirrored')} must be true, false or null, got {mirrored!r}")
        return cls(seed, cfg, check_snapshot(snapshot, RLAIFTextEnv, _column("snapshot")), ticks,
                   check_ticks(decisions, _column("decisions")), bool(mirrored))

    def start(self, env: RLAIFTextEnv | None = None) -> tuple[RLAIFTextEnv, str]:
        """An env at the start point and its prompt there (`env` is reused when its config matches)."""
        if env is None or env.config != self.config:
            env = RLAIFTextEnv(self.config)
        if self.snapshot is None:
            prompt, _ = env.reset(seed=self.seed)
        else:
            env.set_state(self.snapshot)
            prompt = mirrored_prompt(env) if self.mirrored else env.prompt  # what the snapshotted env was showing
        return env, prompt

    def row(self, contract: Contract = "rollout_func") -> dict[str, Any]:
        """This episode as a dataset row for `contract` (see `build_dataset`)."""
        env, prompt = self.start()
        user = prompt if contract == "rollout_func" else ""
        return {
            "prompt": [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": user}],
            "seed": self.seed,
            "config": json.dumps(self.config.model_dump(mode="json", exclude_unset=True), sort_keys=True),
            "snapshot": self.snapshot.to_bytes() if self.snapshot is not None else None,
            "ticks": self.ticks,
            "decisions": self.decisions,
            "mirrored": self.mirrored,
        }


def dataset_rows(seeds: Iterable[int] = (), *, config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
                 snapshots: Iterable[EnvSnapshot] = (), ticks: int | None = None,
                 contract: Contract = "rollout_func", points: Iterable[DecisionPoint] = (),
                 decisions: int | None = None, mirrors: bool = False) -> list[dict[str, Any]]:
    """The rows of `build_dataset` as plain dicts.

    Every argument is checked as `reset` checks the same value (`rlaif_gym.envs.inputs`), before a row is built.

    Raises:
        ConfigError: an argument of the wrong type or out of range, named (``build_dataset seeds[2]``).
    """
    if contract not in ("rollout_func", "environment_factory"):
        raise ConfigError(f"build_dataset contract must be 'rollout_func' or 'environment_factory', got "
                          f"{contract!r}")
    seeds = check_seeds(seeds, "build_dataset seeds", unseeded=True)
    cfg = check_config(config, "build_dataset config")
    ticks = check_ticks(ticks, "build_dataset ticks")
    decisions = check_ticks(decisions, "build_dataset decisions")
    if not isinstance(mirrors, bool):
        raise ConfigError(f"build_dataset mirrors must be True or False, got {mirrors!r}")
    snapshots = check_items(snapshots, "build_dataset snapshots", EnvSnapshot,
                            "pass the get_state() of an RLAIFTextEnv")
    points = check_items(points, "build_dataset points", DecisionPoint,
                         "pass what rlaif_gym.envs.decisions.decision_points(seeds, config) returns")
    specs = [RowEpisode(s, cfg, None, ticks, decisions) for s in seeds]
    specs += [RowEpisode(s.np_random_seed, s.config, s, ticks, decisions) for s in snapshots]
    specs += [RowEpisode(p.snapshot.np_random_seed, p.config, p.snapshot, p.resolution_horizon if ticks is None
                          else ticks, decisions, mirrored) for p in points for mirrored in (False, True)[:1 + mirrors]]
    if not specs:
        raise ConfigError("build_dataset needs at least one seed, snapshot or decision point")
    return [spec.row(contract) for spec in specs]


def build_dataset(seeds: Iterable[int] = (), *, config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
                  snapshots: Iterable[EnvSnapshot] = (), ticks: int | None = None,
                  contract: Contract = "rollout_func", points: Iterable[DecisionPoint] = (),
                  decisions: int | None = None, mirrors: bool = False) -> datasets.Dataset:
    """A `datasets.Dataset` of episodes: one row per seed (a fresh episode), per fork point and per decision point.

    For GRPO on single decisions: `build_dataset(points=decision_points(seeds, config), decisions=1)`
    (`rlaif_gym.envs.decisions`): each row starts where a market resolves soon and the prompt talks about
    it, the model writes one reply, and the continuation waits out the horizon.

    Args:
        seeds: reset seeds of fresh episodes, played with `config`.
        config: the env config of the seeded rows (a mapping of overrides or an `RLAIFEnvConfig`).
        snapshots: fork points (`RLAIFTextEnv.get_state()`); each row keeps its snapshot's config.
        ticks: the horizon of every row; None plays a seed's or snapshot's episode to its end (`num_ticks`) and
            a decision point to its `resolution_horizon` (every bet the reply can make is then paid at the outcome
            the world drew, which the prompt's feed is written from; docs/reward.md).
        points: decision points (`rlaif_gym.envs.decisions.decision_points`), rows like fork points.
        decisions: ticks of the horizon the model answers (None: all); the continuation waits out the rest.
        mirrors: each decision point's row is followed by its YES/NO mirror's (`RowEpisode.mirrored`; needs
            `decisions=1`): the same state with the evidence and the better side reversed, so a batch that holds
            both cannot lower its loss by leaning to one side.
        contract: `"rollout_func"` puts the first prompt in the row's user message (what
            `make_rollout_func` reads); `"environment_factory"` leaves the user message empty, because
            `RLAIFTRLEnv.reset` returns the prompt and TRL appends it there.

    Returns:
        Columns `prompt` (system and user messages), `seed`, `config` (JSON), `snapshot`
        (`EnvSnapshot.to_bytes()`, data only, or None), `ticks`, `decisions` and `mirrored`.
    """
    return datasets.Dataset.from_list(dataset_rows(seeds, config=config, snapshots=snapshots, ticks=ticks,
                                                   contract=contract, points=points, decisions=decisions,
                                                   mirrors=mirrors))


