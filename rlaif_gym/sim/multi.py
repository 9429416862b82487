"""Several learning agents in one world: per-agent accounts around the shared market state.

The single-agent world keeps the agent's account (cash, shares, perp positions, group
memberships, social counters) in the `WorldState` next to the shared world (pools, perps, NPCs,
feeds). Here A agents share each world: their accounts live in `Accounts` (arrays with a leading
agent dimension), and a tick loads one account at a time into the state and runs the world step's own
phases on it (`sim.rules`'s stages: compiled, or as Python), so there is still one text of every rule.

Order of a multi-agent tick (each world independently):

1. **Actions, one agent after another**, in a fresh random order per world and tick drawn from the
   world's counter-based stream (`agent_order`): a pure function of the world key and the tick, so
   it is reproducible, cannot be gamed by agent id, and every agent is first equally often on
   average. Each order executes against the pools as the previous agents left them: a large order
   moves the price the next agent pays.
2. **The world's tick once** (`sim.rules.tick_stage`, in the step's order): perp prices, NPC trades, news,
   resolutions. Funding, liquidations and resolution payouts are applied to every account in agent-index order.

Orders are sized when they are decided (at the start of the tick, from the agent's own account and
the prices it observed); only execution is sequential. Each agent's `pnl_delta` covers the whole
tick: its own fill, the other agents' price impact on its holdings, and the world's move.
With A = 1 the result is bit-identical to `sim.step` (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import rng, rules
from .actions import ActionBatch
from .packing import OUT_B, OUT_F, OUT_I, StepOutcome, outcome_of
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
                order: np.ndarray | None = None, *, compiled: bool = True) -> list[StepOutcome]:
    """One tick of B worlds shared by A agents; returns one `StepOutcome` per agent (each over B worlds).

    Args:
        state: the shared worlds; their account slots are scratch space (overwritten).
        accounts: the agents' accounts, updated in place.
        actions: one `ActionBatch` per agent (decoded against that agent's own account).
        order: (B, A) execution order; default `agent_order(state, A)`.
        compiled: run the phases compiled (numba), or as Python (``backend="numpy"``).
    """
    n = accounts.num_agents
    if len(actions) != n:
        raise ValueError(f"step_agents needs one ActionBatch per agent: {n} agents, got {len(actions)} batches")
    order = agent_order(state, n) if order is None else np.asarray(order)

    def each_account(run):
        results = []
        for a in range(n):
            accounts.load(state, a)
            results.append(run())
            accounts.save(state, a)
        return results

    eq0 = each_account(lambda: rules.equities(state, params, compiled=compiled))  # before anyone acts
    rounds = []
    for r in range(n):
        who = order[:, r]
        accounts.load(state, who)
        rounds.append(rules.act(state, _select(actions, who), params, compiled=compiled))
        accounts.save(state, who)
    worlds = np.arange(state.batch_size)
    position = np.argsort(order, axis=1)  # position[b, a]: the round in which agent a acted in world b
    lmove = np.empty((state.batch_size, params.num_markets))
    rules.tick_stage(rules.STAGE_PERPS, state, params, lmove, lmove, compiled=compiled)
    liquidated = each_account(lambda: rules.tick_stage(rules.STAGE_FUNDING, state, params, lmove, lmove,
                                                      compiled=compiled)[0])
    rules.tick_stage(rules.STAGE_FEED, state, params, lmove, lmove, compiled=compiled)
    paid = []

    def pay():
        ap = np.empty_like(lmove)
        paid.append(ap)
        return rules.tick_stage(rules.STAGE_PAY, state, params, lmove, ap, compiled=compiled)

    payouts = each_account(pay)
    total = paid[0] if n == 1 else np.sum(paid, axis=0)  # every account's payout by market, in agent order
    rules.tick_stage(rules.STAGE_SETTLE, state, params, lmove, total, compiled=compiled)
    eq1 = each_account(lambda: rules.equities(state, params, compiled=compiled))
    outcomes = []
    for a in range(n):
        out_f, out_i, out_b = (np.stack([x[i] for x in rounds])[position[:, a], :, worlds].T for i in range(3))
        out_f[OUT_F.index("equity_before")] = eq0[a]
        out_f[OUT_F.index("equity_after")] = eq1[a]
        out_f[OUT_F.index("pnl_delta")] = eq1[a] - eq0[a]
        out_f[OUT_F.index("payout")] = payouts[a][1]
        out_i[OUT_I.index("resolved")] = payouts[a][0]
        out_i[OUT_I.index("liquidated")] = liquidated[a]
        out_b[OUT_B.index("bankrupt")] = eq1[a] < params.min_fee
        outcomes.append(outcome_of(out_f, out_i, out_b))
    return outcomes
