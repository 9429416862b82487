"""Episode behaviour metrics for one world, and the `behavior` reward component they drive.

The original scored an archetype's behaviour once per trajectory
(docs/babylon.md ("The original's archetypes")). Inside `step` we pay it as potential-based shaping:
the component at tick t is score(metrics after t) - score(metrics before t), so the per-step rewards
add up to the episode's behaviour score exactly, and no tick is paid twice for the same behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .. import sim
from ..encoding import decode_actions
from ..rewards.archetypes import BehaviorMetrics, behavior_score
from .core import CoreStep, RLAIFCore

__all__ = ["BatchBehavior", "BehaviorTracker"]


class _Before(NamedTuple):
    """The pre-step arrays `BehaviorTracker.update` needs, over all worlds of a batch."""

    pm_serial: np.ndarray
    realized_pnl: np.ndarray
    hold_yes: np.ndarray
    hold_no: np.ndarray
    pm_outcome: np.ndarray

_TRADES = {spec.kind for spec in sim.ACTION_SPECS if spec.trade}


@dataclass
class BehaviorTracker:
    """Accumulates one world's episode behaviour; `metrics()` gives the original's `BehaviorMetrics`.

    Per-trade PnL samples are realized PnL events: each sale, each perp close or liquidation and
    each resolution payout (net of the position's cost) counts as one sample.
    """

    archetype: str
    start_reputation: float = 50.0
    trades: int = 0
    ticks: int = 0
    samples: list[float] = field(default_factory=list)
    markets: set[str] = field(default_factory=set)
    sizes: list[float] = field(default_factory=list)
    recipients: set[int] = field(default_factory=set)
    groups: int = 0
    dms: int = 0
    posts: int = 0
    predictions: int = 0
    correct: int = 0
    followers: int = 0
    reputation: float = 50.0
    last_score: float = 0.0

    def reset(self) -> None:
        """Forget the episode (called at env reset)."""
        fresh = BehaviorTracker(self.archetype)
        self.__dict__.update(fresh.__dict__)
        self.last_score = behavior_score(self.archetype, self.metrics())

    @staticmethod
    def snapshot(state: sim.WorldState) -> _Before:
        """The pre-step fields `update` compares against, for every world (copies, not the state)."""
        return _Before(state.pm_serial.copy(), state.realized_pnl.copy(), state.hold_yes.copy(),
                       state.hold_no.copy(), state.pm_outcome.copy())

    def update(self, before: _Before, after: sim.WorldState, batch: sim.ActionBatch,
               out: sim.StepOutcome, world: int = 0) -> float:
        """Record world `world`'s step and return its behaviour component (the change in score).

        Args:
            before: `snapshot(state)` taken before the step.
            after: the state after the step.
            batch: the actions applied.
            out: the step's outcome.
            world: which world of the batch this tracker follows (0 for a single env).
        """
        w = world
        self.ticks += 1
        kind = sim.ActionType(int(batch.kind[w]))
        if out.success[w]:
            if kind in _TRADES:
                self.trades += 1
            target = int(batch.target[w])
            if kind in (sim.ActionType.BUY_PREDICTION, sim.ActionType.SELL_PREDICTION):
                self.markets.add(f"market-{int(before.pm_serial[w, target])}")
            elif kind in (sim.ActionType.OPEN_PERP, sim.ActionType.CLOSE_PERP):
                self.markets.add(sim.PERP_TICKERS[target])
            if kind in (sim.ActionType.BUY_PREDICTION, sim.ActionType.OPEN_PERP):
                self.sizes.append(float(batch.amount[w]))
            if kind == sim.ActionType.BUY_PREDICTION:
                self.predictions += 1
            elif kind == sim.ActionType.JOIN_GROUP:
                self.groups += 1
            elif kind == sim.ActionType.CREATE_POST:
                self.posts += 1
            elif kind == sim.ActionType.SEND_DM:
                self.dms += 1
                self.recipients.add(target)
        realized = float(after.realized_pnl[w] - before.realized_pnl[w])
        if realized != 0.0:
            self.samples.append(realized)
        # A market that resolved this tick was called right if the agent held more winning shares.
        resolved = after.pm_serial[w] != before.pm_serial[w]
        for m in np.nonzero(resolved)[0]:
            yes, no = before.hold_yes[w, m], before.hold_no[w, m]
            if yes > 0 or no > 0:
                self.correct += int((yes > no) == bool(before.pm_outcome[w, m]))
        self.followers = int(after.followers[w])
        self.reputation = float(after.reputation[w])
        score = behavior_score(self.archetype, self.metrics())
        delta, self.last_score = score - self.last_score, score
        return delta

    def metrics(self) -> BehaviorMetrics:
        """The episode so far as the original's behaviour metrics."""
        wins = [s for s in self.samples if s > 0]
        losses = [s for s in self.samples if s <= 0]
        social = self.dms + self.posts + self.groups
        return BehaviorMetrics(
            trades_executed=self.trades,
            profitable_trades=len(wins),
            win_rate=len(wins) / len(self.samples) if self.samples else 0.0,
            total_pnl=float(sum(self.samples)),
            pnl_variance=float(np.var(self.samples)) if len(self.samples) >= 2 else 0.0,
            largest_win=max(wins, default=0.0),
            largest_loss=min(losses, default=0.0),
            markets_traded=len(self.markets),
            avg_position_size=float(np.mean(self.sizes)) if self.sizes else 0.0,
            unique_users_interacted=len(self.recipients),
            group_chats_joined=self.groups,
            dms_initiated=self.dms,
            posts_created=self.posts,
            followers_gained=self.followers,
            reputation_delta=self.reputation - self.start_reputation,
            predictions_made=self.predictions,
            correct_predictions=self.correct,
            prediction_accuracy=min(1.0, self.correct / self.predictions) if self.predictions else 0.0,
            actions_per_tick=(self.trades + social) / max(self.ticks, 1),
            social_to_trade_ratio=social / self.trades if self.trades else float(social),
            episode_length=self.ticks,
        )


class BatchBehavior:
    """One `BehaviorTracker` per world of a batched core: the `behavior` component of batched envs.

    The native vector env and the SB3 VecEnv step through `step`, which pays each world exactly
    what a single env with the same archetype would. The trackers are a Python loop over worlds
    (tens of µs per world and tick), so archetype configs step several times slower.
    """

    def __init__(self, archetype: str, num_worlds: int) -> None:
        self.trackers = [BehaviorTracker(archetype) for _ in range(num_worlds)]

    def reset(self, worlds=None) -> None:
        """Forget the episodes of `worlds` (indices; None: every world), as their worlds reset."""
        for i in range(len(self.trackers)) if worlds is None else worlds:
            self.trackers[int(i)].reset()

    def step(self, core: RLAIFCore, actions: np.ndarray, stepped: np.ndarray | None = None) -> CoreStep:
        """`core.step(actions)` with the behavior component added.

        Args:
            core: the batched core (its state is advanced).
            actions: integer actions, shape (B, 4).
            stepped: worlds whose transition counts (None: all). A world being autoreset is stepped
                by the batch but its transition is discarded: its tracker is left alone and its
                component is 0.
        """
        batch = decode_actions(actions, core.state, core.params, core.config.numeric_perp_leverage)
        return core.step_batch(batch, None, self.hook(core, batch, stepped))

    def hook(self, core: RLAIFCore, batch: sim.ActionBatch, stepped: np.ndarray | None = None):
        """The `post` hook of `core.step_batch(batch, ...)` that adds the behavior component.

        Call it before the step (it snapshots the pre-step state); see `step` for `stepped`.
        """
        before = BehaviorTracker.snapshot(core.state)
        worlds = range(len(self.trackers)) if stepped is None else np.nonzero(stepped)[0]

        def post(out: sim.StepOutcome) -> dict[str, np.ndarray]:
            comp = np.zeros(len(self.trackers))
            for i in worlds:
                comp[i] = self.trackers[i].update(before, core.state, batch, out, int(i))
            return {"behavior": comp}

        return post
