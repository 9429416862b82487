"""Several learning agents in one world: per-agent accounts around the shared market state.

The single-agent engine keeps the agent's account (cash, shares, perp positions, group
memberships, social counters) in the `WorldState` next to the shared world (pools, perps, NPCs,
feeds). Here A agents share each world: their accounts live in `Accounts` (arrays with a leading
agent dimension), and a tick loads one account at a time into the state and runs the engine's own
functions on it, so there is still one implementation of every rule.

Order of a multi-agent tick (each world independently):

1. **Actions, one agent after another**, in a fresh random order per world and tick drawn from the
   world's counter-based stream (`agent_order`): a pure function of the world key and the tick, so
   it is reproducible, cannot be gamed by agent id, and every agent is first equally often on
   average. Each order executes against the pools as the previous agents left them: a large order
   moves the price the next agent pays.
2. **The world's tick once** (`engine.tick`): perp prices, NPC trades, news, resolutions. Funding,
   liquidations and resolution payouts are applied to every account in agent-index order.

Orders are sized when they are decided (at the start of the tick, from the agent's own account and
the prices it observed); only execution is sequential. Each agent's `pnl_delta` covers the whole
tick: its own fill, the other agents' price impact on its holdings, and the world's move.
With A = 1 the result is bit-identical to `engine.step` (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import engine, rng
from .actions import ActionBatch
from .params import WorldParams
from .state import WorldState

__all__ = ["ACCOUNT_FIELDS", "Accounts", "agent_order", "step_agents"]

ACCOUNT_FIELDS: tuple[str, ...] = (
    "cash", "hold_yes", "hold_no", "cost_yes", "cost_no", "realized_pnl", "fees_paid",
    "pos_side", "pos_notional", "pos_entry", "pos_leverage", "pos_margin", "pos_serial", "next_pos_serial",
    "joined", "posts_created", "dms_sent", "followers", "reputation",
)
"""The `WorldState` fields that belong to one agent's account; every other field is the shared world."""

_ORDER_STREAM = 1 << 42  # + tick: the per-tick permutation of agents


@dataclass
class Accounts:
    """A agents' accounts in B worlds: `arrays[name]` has shape (A, B, ...) for each account field."""

    arrays: dict[str, np.ndarray]

    @classmethod
    def fresh(cls, state: WorldState, num_agents: int) -> Accounts:
        """Every agent starts with the account a fresh `reset` gives (starting cash, nothing held)."""
        return cls({name: np.repeat(getattr(state, name)[None], num_agents, axis=0) for name in ACCOUNT_FIELDS})

    @property
    def num_agents(self) -> int:
        """Number of agents A."""
        return int(self.arrays["cash"].shape[0])

    def load(self, state: WorldState, agents: np.ndarray | int) -> None:
        """Put agent `agents[b]` (or one agent for all worlds) into world b's account slots."""
        idx = self._index(state, agents)
        for name in ACCOUNT_FIELDS:
            getattr(state, name)[...] = self.arrays[name][idx]

    def save(self, state: WorldState, agents: np.ndarray | int) -> None:
        """Write world b's account slots back to agent `agents[b]`."""
        idx = self._index(state, agents)
        for name in ACCOUNT_FIELDS:
            self.arrays[name][idx] = getattr(state, name)

    def copy(self) -> Accounts:
        """A deep copy (for forking a multi-agent world)."""
        return Accounts({name: arr.copy() for name, arr in self.arrays.items()})

    @staticmethod
    def _index(state: WorldState, agents: np.ndarray | int):
        worlds = np.arange(state.batch_size)
        return np.broadcast_to(np.asarray(agents, dtype=np.int64), worlds.shape), worlds


def agent_order(state: WorldState, num_agents: int) -> np.ndarray:
    """The order in which agents act this tick, per world: shape (B, A), a permutation per row.

    A pure function of (world key, tick): the same world at the same tick always orders its agents
    the same way, whatever else runs in the batch.
    """
    u = rng.uniforms(state.key, _ORDER_STREAM + state.tick, num_agents)
    return np.argsort(u, axis=1, kind="stable")


def _select(batches: list[ActionBatch], agents: np.ndarray) -> ActionBatch:
    """Row b of the result is row b of `batches[agents[b]]`."""
    worlds = np.arange(len(agents))
    out = {}
    for name in ("kind", "target", "side", "amount", "leverage", "pre_error", "pre_a", "pre_b"):
        out[name] = np.stack([getattr(b, name) for b in batches])[agents, worlds]
    return ActionBatch(**out)


def step_agents(state: WorldState, accounts: Accounts, actions: list[ActionBatch], params: WorldParams,
                order: np.ndarray | None = None) -> list[engine.StepOutcome]:
    """One tick of B worlds shared by A agents; returns one `StepOutcome` per agent (each over B worlds).

    Args:
        state: the shared worlds; their account slots are scratch space (overwritten).
        accounts: the agents' accounts, updated in place.
        actions: one `ActionBatch` per agent (decoded against that agent's own account).
        order: (B, A) execution order; default `agent_order(state, A)`.
    """
    n = accounts.num_agents
    if len(actions) != n:
        raise ValueError(f"step_agents needs one ActionBatch per agent: {n} agents, got {len(actions)} batches")
    order = agent_order(state, n) if order is None else np.asarray(order)
    eq0 = []
    for a in range(n):  # every agent's equity before the tick, before anyone acts
        accounts.load(state, a)
        eq0.append(engine.equity(state, params))
    rounds = []
    for r in range(n):
        who = order[:, r]
        accounts.load(state, who)
        rounds.append(engine._act(state, params, _select(actions, who)))
        accounts.save(state, who)
    position = np.argsort(order, axis=1)  # position[b, a]: the round in which agent a acted in world b
    phases = [_gather(rounds, position[:, a], eq0[a]) for a in range(n)]

    def each_account(fn):
        results = []
        for a in range(n):
            accounts.load(state, a)
            results.append(fn())
            accounts.save(state, a)
        return results

    liquidated, payouts, resolved = engine.tick(state, params, each_account)
    outcomes = []
    for a in range(n):
        accounts.load(state, a)
        outcomes.append(engine._outcome(phases[a], engine.equity(state, params), liquidated[a], resolved, payouts[a],
                                        params))
    return outcomes


def _gather(rounds: list, rounds_of: np.ndarray, eq0: np.ndarray) -> engine._ActionPhase:
    """One agent's action results: world b's from the round `rounds_of[b]` in which it acted there."""
    worlds = np.arange(len(rounds_of))

    def pick(get):
        return np.stack([get(x) for x in rounds])[rounds_of, worlds]

    r = engine._Result(ActionBatch.waits(len(worlds)))
    for name in ("err", "ea", "eb", "shares", "usd", "fee"):
        setattr(r, name, pick(lambda x, name=name: getattr(x.r, name)))
    return engine._ActionPhase(eq0=eq0, r=r, success=pick(lambda x: x.success), added=pick(lambda x: x.added),
                               lev=pick(lambda x: x.lev), exposure_ratio=pick(lambda x: x.exposure_ratio))
