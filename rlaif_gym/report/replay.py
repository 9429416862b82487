"""Rebuild an episode's ground truth by replaying its recorded actions: fees, trades, resolutions.

The trajectory record keeps each step's fill, fee and payout (`Feedback`; older records lack them)
but not which markets resolved with what outcome, nor the positions behind them (see
`rlaif_gym.metrics`). The world is a pure function of the seed and the actions, so
`replay` re-runs the recorded canonical actions (`step.action`, not the reply text, so any reply
format or constrained-decoding rewrite replays alike) on the recorded seed and config, and reads
the answers off the engine's `StepOutcome` and state. Every tick is checked against the record
(equity before the action, the action's success, the transition's `pnl_delta`, and the recorded
fill, fee and payout where the record has them); the first
disagreement raises `ReplayError` and no ledger is produced, so a trajectory written by another
version of the world is reported as such rather than with made-up numbers.

The replay uses the numpy backend whatever the record says (the compiled backend equals it within
1e-9 USD), skips prompt rendering and the judge, which do not change the world, and steps every
trajectory of a config together as one batch of worlds (`replay_many`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import sim
from ..config import RLAIFEnvConfig
from ..envs import RLAIFCore, seed_keys
from ..envs.glue import action_row
from ..errors import RLAIFError
from ..metrics import ClosedTrade, EpisodeLedger, Resolution
from ..trajectory import Trajectory, TrajectoryStep

__all__ = ["REPLAYABLE_ENV_IDS", "ReplayError", "replay", "replay_many"]

REPLAYABLE_ENV_IDS = frozenset({"RLAIF-Text-v0"})
"""Env ids whose recorded actions are canonical text-face actions on the standard world."""

_TOLERANCE_USD = 1e-6
"""Recorded and replayed equity may differ by this much (plus 1e-9 of the amount) and still agree."""


class ReplayError(RLAIFError):
    """A trajectory cannot be replayed, or its replay disagrees with the record."""


@dataclass
class _Open:
    instrument: str
    kind: str
    open_tick: int
    cost: float = 0.0
    proceeds: float = 0.0

    def close(self, tick: int, how: str) -> ClosedTrade:
        return ClosedTrade(self.instrument, self.kind, self.open_tick, tick, self.cost, self.proceeds, how)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _TOLERANCE_USD + 1e-9 * max(abs(a), abs(b))


def _action(step: TrajectoryStep) -> sim.Action | None:
    """The step's canonical action (None: the reply had no executable action)."""
    a = step.action
    if a is None or a.action_type == "invalid":
        return None
    try:
        return sim.Action(type=a.action_type, **a.parameters)
    except TypeError as exc:
        raise ReplayError(f"step {step.step_number}: recorded action {a.action_type} {a.parameters} is not a "
                          f"canonical action ({exc})") from None


def _config(traj: Trajectory) -> RLAIFEnvConfig:
    if traj.env_id is not None and traj.env_id not in REPLAYABLE_ENV_IDS:
        raise ReplayError(f"env {traj.env_id!r} is not replayable (expected one of {sorted(REPLAYABLE_ENV_IDS)})")
    if traj.seed is None or not traj.config:
        raise ReplayError("the trajectory records no seed or config (written by another tool?), so it cannot be "
                          "replayed")
    start = (traj.steps[0].environment_state.model_extra or {}).get("tick", 0) if traj.steps else 0
    if start:
        raise ReplayError(f"the trajectory starts at tick {start} (a forked branch recorded without its trunk), so "
                          "the actions before it are not in the record; collect with include_trunk to replay it")
    try:
        return RLAIFEnvConfig.from_any(traj.config, backend="numpy")
    except (RLAIFError, ValueError) as exc:
        raise ReplayError(f"its recorded config is not valid here: {exc}") from None


def replay(traj: Trajectory) -> EpisodeLedger:
    """Replay `traj` and return its ledger (fees, traded USD, payouts, closed trades, resolutions, perp prices).

    Raises:
        ReplayError: no seed or config, an env that is not replayable, an action that is not
            canonical, or a tick where the replay disagrees with the record (the message names it).
    """
    result = replay_many([traj])[traj.trajectory_id]
    if isinstance(result, ReplayError):
        raise result
    return result


def replay_many(trajs: Sequence[Trajectory]) -> dict[str, EpisodeLedger | ReplayError]:
    """Replay many trajectories at once: those sharing a config step together as one batch of worlds.

    Returns trajectory id -> its ledger, or the `ReplayError` that explains why it has none (one
    trajectory's failure does not stop the others).
    """
    out: dict[str, EpisodeLedger | ReplayError] = {}
    groups: dict[str, tuple[RLAIFEnvConfig, list[Trajectory]]] = {}
    for t in trajs:
        try:
            cfg = _config(t)
        except ReplayError as exc:
            out[t.trajectory_id] = exc
            continue
        groups.setdefault(cfg.model_dump_json(), (cfg, []))[1].append(t)
    for cfg, members in groups.values():
        for book in _replay_batch(cfg, members):
            try:
                out[book.traj.trajectory_id] = book.ledger()
            except ReplayError as exc:
                out[book.traj.trajectory_id] = exc
    return out


class _Book:
    """One world's bookkeeping during a batched replay."""

    def __init__(self, traj: Trajectory, num_perps: int, first_prices: np.ndarray) -> None:
        self.traj = traj
        n = len(traj.steps)
        self.fees, self.traded, self.payouts = np.zeros(n), np.zeros(n), np.zeros(n)
        self.prices = [first_prices]
        self.positions: dict[tuple, _Open] = {}
        self.trades: list[ClosedTrade] = []
        self.resolutions: list[Resolution] = []
        self.tickers = sim.PERP_TICKERS[:num_perps]
        self.error: ReplayError | None = None

    def active(self, i: int) -> bool:
        return self.error is None and i < len(self.traj.steps)

    def ledger(self) -> EpisodeLedger:
        if self.error is not None:
            raise self.error
        if any(not math.isfinite(x) for x in (*self.fees, *self.traded)):
            raise ReplayError("replay produced non-finite fees or traded amounts")
        return EpisodeLedger(self.fees, self.traded, self.payouts, tuple(self.trades), len(self.positions),
                             tuple(self.resolutions), np.array(self.prices))

    def book(self, i: int, b: int, row: sim.ResolvedAction, before: _Before, out: sim.StepOutcome,
             after: sim.WorldState) -> None:
        """Account for step i of world b: check it against the record, then record fees, trades, resolutions."""
        step = self.traj.steps[i]
        tick = int(before.tick[b])
        kind, target, side = sim.ActionType(int(row[0])), int(row[1]), int(row[2])
        ok = bool(out.success[b])
        recorded_ok = bool(step.action.success) if step.action is not None else ok
        pnl_delta = float(out.pnl_delta[b])
        recorded_delta = step.feedback.pnl_delta if step.feedback is not None else pnl_delta
        if ok != recorded_ok or not _close(pnl_delta, recorded_delta):
            raise ReplayError(f"replay disagrees with the record at step {i} (tick {tick}): the action "
                              f"{'succeeded' if ok else 'failed'} with pnl_delta {pnl_delta:.6f} USD, the record says "
                              f"{'succeeded' if recorded_ok else 'failed'} with {recorded_delta:.6f}")
        serial, hold, positions = before.serial[b], before.hold[:, b, :].copy(), self.positions  # hold: [side, slot]
        fee, usd, shares = float(out.fee[b]), float(out.filled_usd[b]), float(out.filled_shares[b])
        fb = step.feedback
        if fb is not None and fb.fee is not None:  # records since fills were kept: they must agree too
            replayed = {"fee": fee, "usd": usd, "shares": shares, "payout": float(out.payout[b])}
            off = [k for k, v in replayed.items() if getattr(fb, k) is not None and not _close(v, getattr(fb, k))]
            if off or fb.markets_resolved not in (None, int(out.resolved[b])):
                raise ReplayError(f"replay disagrees with the record at step {i} (tick {tick}): "
                                  f"{', '.join(off) or 'markets_resolved'} differ(s) from the recorded fill")
        self.fees[i] = fee
        if ok and kind == sim.ActionType.BUY_PREDICTION:
            key = ("pm", int(serial[target]), side)
            label = f"market-{key[1]} {'YES' if side == 0 else 'NO'}"
            pos = positions.setdefault(key, _Open(label, "prediction", tick))
            pos.cost += usd
            hold[side, target] += shares
            self.traded[i] = usd
        elif ok and kind == sim.ActionType.SELL_PREDICTION:
            key = ("pm", int(serial[target]), side)
            if key not in positions:
                raise ReplayError(f"step {i} (tick {tick}) sold market-{key[1]} shares the replay never saw bought")
            positions[key].proceeds += usd
            held = hold[side, target]
            hold[side, target] = max(held - shares, 0.0)
            self.traded[i] = usd + fee
            if hold[side, target] <= 1e-12 * max(held, 1.0):
                self.trades.append(positions.pop(key).close(tick, "sold"))
        elif ok and kind == sim.ActionType.OPEN_PERP:
            label = f"{self.tickers[target]} {'LONG' if side == 0 else 'SHORT'}"
            positions[("perp", target)] = _Open(label, "perp", tick, cost=usd + fee)
            self.traded[i] = float(row[3])
        elif ok and kind == sim.ActionType.CLOSE_PERP:
            if ("perp", target) not in positions:
                raise ReplayError(f"step {i} (tick {tick}) closed a {self.tickers[target]} position the replay "
                                  "never saw")
            pos = positions.pop(("perp", target))
            pos.proceeds += usd
            self.traded[i] = float(before.pos_notional[b, target] * before.perp_price[b, target]
                                   / before.pos_entry[b, target])
            self.trades.append(pos.close(tick, "closed"))
        # The world's tick: resolutions pay the shares held after the action.
        paid = 0.0
        for m in np.nonzero(before.due[b])[0]:
            yes_sh, no_sh = float(hold[0, m]), float(hold[1, m])
            outcome = int(before.outcome[b, m])
            if yes_sh + no_sh > 0:
                self.resolutions.append(Resolution(f"market-{int(serial[m])}", tick + 1, outcome,
                                                   float(before.truth[b, m]), float(before.price[b, m]), yes_sh, no_sh))
            for s in (0, 1):
                payout = float(hold[s, m]) if (s == 0) == (outcome == 1) else 0.0
                paid += payout
                key = ("pm", int(serial[m]), s)
                if key in positions:
                    positions[key].proceeds += payout
                    self.trades.append(positions.pop(key).close(tick + 1, "resolved"))
        liquidated = 0
        for t in range(len(self.tickers)):
            if ("perp", t) in positions and after.pos_side[b, t] == 0:
                self.trades.append(positions.pop(("perp", t)).close(tick + 1, "liquidated"))
                liquidated += 1
        if not _close(paid, float(out.payout[b])) or liquidated != int(out.liquidated[b]):
            raise ReplayError(f"replay bookkeeping disagrees with the engine at step {i} (tick {tick}): payout "
                              f"{paid:.6f} vs {float(out.payout[b]):.6f} USD, liquidations {liquidated} vs "
                              f"{int(out.liquidated[b])}")
        self.payouts[i] = paid
        self.prices.append(after.perp_price[b].copy())


@dataclass
class _Before:
    """The batch's state before a step (the action and the tick mutate it in place)."""

    tick: np.ndarray
    serial: np.ndarray
    due: np.ndarray
    outcome: np.ndarray
    truth: np.ndarray
    price: np.ndarray
    hold: np.ndarray  # (2, B, M): YES, NO
    pos_notional: np.ndarray
    pos_entry: np.ndarray
    perp_price: np.ndarray

    @classmethod
    def of(cls, st: sim.WorldState) -> _Before:
        return cls(st.tick.copy(), st.pm_serial.copy(), st.pm_resolve_tick <= (st.tick + 1)[:, None],
                   st.pm_outcome.copy(), st.pm_truth.copy(), sim.yes_price(st.pm_yes, st.pm_no),
                   np.stack([st.hold_yes, st.hold_no]).astype(np.float64), st.pos_notional.copy(),
                   st.pos_entry.copy(), st.perp_price.copy())


def _replay_batch(cfg: RLAIFEnvConfig, trajs: list[Trajectory]) -> list[_Book]:
    core = RLAIFCore(cfg, num_worlds=len(trajs))
    core.reset(seed_keys([int(t.seed) for t in trajs]))
    params = core.params
    books = [_Book(t, params.num_perps, core.state.perp_price[b].copy()) for b, t in enumerate(trajs)]
    for i in range(max(len(t.steps) for t in trajs)):
        st = core.state
        equity = sim.equity(st, params)
        rows: list[sim.ResolvedAction] = []
        for b, book in enumerate(books):
            row = sim.ResolvedAction.wait()  # worlds that are done or failed wait; nothing they do is read
            if book.active(i):
                step = book.traj.steps[i]
                try:
                    if not _close(float(equity[b]), step.environment_state.agent_balance):
                        raise ReplayError(f"replay disagrees with the record at step {i} (tick {int(st.tick[b])}): "
                                          f"equity before the action is {float(equity[b]):.6f} USD, the record says "
                                          f"{step.environment_state.agent_balance:.6f}")
                    row = action_row(st, params, b, _action(step))  # as the text env resolves the reply's action
                except ReplayError as exc:
                    book.error, row = exc, sim.ResolvedAction.wait()
            rows.append(row)
        before = _Before.of(st)
        out = core.step_batch(sim.ActionBatch.from_rows(rows)).outcome
        for b, book in enumerate(books):
            if book.active(i):
                try:
                    book.book(i, b, rows[b], before, out, core.state)
                except ReplayError as exc:
                    book.error = exc
    return books
