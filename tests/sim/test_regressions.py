"""Regressions for engine bugs found after the property suite was written."""

from __future__ import annotations

import numpy as np

from rlaif_gym.sim import ActionBatch, NpcBehaviour, WorldParams, npc_behaviours, reset, step


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


def test_a_dm_reaches_the_npc_by_the_name_the_feed_shows():
    """The prompt's feed names NPCs ("@Vitalik Butterin"); a DM by that name used to be refused as an
    unknown recipient, because the engine knew only "agent-3" and the archetype ("researcher")."""
    from rlaif_gym.sim import Action, ErrorCode, npc_name, resolve_action

    p = WorldParams(num_npcs=20)
    s = reset(p, np.array([3], np.uint64))

    def target(recipient: str) -> tuple[int, int]:
        _, tgt, _, _, _, code, _, _ = resolve_action(s, p, 0, Action(type="send_dm", recipient=recipient, content="hi"))
        return tgt, code

    for k in (0, 3, 11, 12, 19):
        assert target(npc_name(k)) == (k, ErrorCode.OK), npc_name(k)
        assert target(f"agent-{k}") == (k, ErrorCode.OK)
    assert npc_name(12) == "Satoshi Nakamotoe 2" and target("vitalik butterin") == (3, ErrorCode.OK)
    assert target("researcher") == (3, ErrorCode.OK), "the archetype still resolves, as before"
    assert target("Nobody Atall")[1] == ErrorCode.UNKNOWN_RECIPIENT
