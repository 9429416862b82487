"""Regressions for engine bugs found after the property suite was written."""

from __future__ import annotations

import numpy as np

from rlaif_gym.sim import ActionBatch, NpcBehaviour, WorldParams, reset, step
from rlaif_gym.sim.engine import npc_behaviours


def _money(s):
    return (s.cash + s.npc_cash.sum(-1) + s.pm_collateral.sum(-1) + s.fees_collected + s.house_cash
            + s.pos_margin.sum(-1))


def _open(target: int) -> ActionBatch:
    return ActionBatch(kind=np.array([3]), target=np.array([target]), side=np.array([0]), amount=np.array([2000.0]),
                       leverage=np.array([10.0]), pre_error=np.array([0]))


def test_two_liquidations_in_one_world_in_one_tick_lose_both_margins_and_keep_the_money():
    p = WorldParams()
    s = reset(p, np.array([7], np.uint64))
    step(s, _open(0), p)
    step(s, _open(1), p)
    margins = s.pos_margin[0, :2].sum()
    before_money, before_realized, before_cash = _money(s)[0], s.realized_pnl[0], s.cash[0]
    s.perp_price[0, :2] *= 0.5  # both far past their liquidation prices
    out = step(s, ActionBatch.waits(1), p)
    assert out.liquidated[0] == 2
    assert _money(s)[0] == np.float64(before_money) or abs(_money(s)[0] - before_money) < 1e-6
    assert s.realized_pnl[0] - before_realized == -margins
    assert s.cash[0] - before_cash == out.payout[0]  # liquidations pay nothing into cash


def test_momentum_npcs_follow_the_previous_tick_move():
    p = WorldParams()
    momentum = np.nonzero(npc_behaviours(p) == NpcBehaviour.MOMENTUM)[0]
    assert len(momentum)
    s = reset(p, np.arange(1, 33, dtype=np.uint64))
    for _ in range(20):
        step(s, ActionBatch.waits(32), p)
    held = s.npc_yes[:, momentum].sum() + s.npc_no[:, momentum].sum()
    assert held > 0, "momentum traders never traded"
