"""The replay rebuilds what the record lacks (trades, resolutions) and agrees with the world's own books and fills."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from report_runs import SMALL_WORLD

from rlaif_gym.report import ReplayError, load_run, replay
from rlaif_gym.report.replay import replay_many
from rlaif_gym.trajectory import Action, EnvironmentState, Feedback, Trajectory, TrajectoryStep


def _reply(action: dict) -> str:
    return f"<think>test script</think>\n{json.dumps(action)}"


def play(policy, ticks: int, seed: int = 7, config=None):
    """Step the text env with `policy(state, tick) -> reply` and record the steps as the collector does.

    Returns the trajectory and, per step, the env's own books after the step (cash, fees paid).
    """
    config = config or SMALL_WORLD
    env = gym.make("RLAIF-Text-v0", config=config, disable_env_checker=True)
    base = env.unwrapped
    _, info = env.reset(seed=seed)
    steps, books = [], []
    for t in range(ticks):
        state = base.state
        before = EnvironmentState(agent_balance=info["equity"], cash=info["cash"], tick=int(state.tick[0]))
        _, reward, terminated, truncated, info = env.step(policy(state, t))
        parsed = info["parsed_action"]
        steps.append(TrajectoryStep(
            step_number=t, timestamp=0, environment_state=before,
            action=Action(action_type=parsed["type"] if parsed else "invalid",
                          parameters={k: v for k, v in (parsed or {}).items() if k != "type"},
                          success=info["feedback"]["success"], error=info["feedback"]["error"]),
            feedback=Feedback(success=info["feedback"]["success"], pnl_delta=info["pnl_delta"]), reward=reward,
            reward_components=info["reward_components"],
        ))
        books.append({"cash": float(base.state.cash[0]), "fees_paid": float(base.state.fees_paid[0])})
        if terminated or truncated:
            break
    traj = Trajectory(trajectory_id="scripted-by-hand", agent_id="test", steps=steps, env_id="RLAIF-Text-v0",
                      seed=seed, config=base.config.model_dump(mode="json"))
    env.close()
    return traj, books


def test_replay_of_a_hand_scripted_episode_matches_the_worlds_books():
    facts: dict = {}

    def policy(state, t):
        if t == 0:
            facts["cash0"] = float(state.cash[0])
            return _reply({"type": "buy_prediction", "market": f"market-{int(state.pm_serial[0, 0])}",
                           "outcome": "YES", "amount": 100})
        if t == 1:  # sell every share bought at tick 0
            return _reply({"type": "sell_prediction", "market": f"market-{int(state.pm_serial[0, 0])}",
                           "outcome": "YES", "shares": float(state.hold_yes[0, 0])})
        if t == 2:
            facts["cash2"] = float(state.cash[0])
            return _reply({"type": "open_perp", "ticker": "BTCAI", "side": "LONG", "size": 1000, "leverage": 2})
        if t == 3:
            return _reply({"type": "close_perp", "ticker": "BTCAI"})
        if t == 4:  # buy NO in the market that resolves next, and hold it to the resolution
            slot = int(np.argmin(np.where(state.pm_resolve_tick[0] > 5, state.pm_resolve_tick[0], 10**9)))
            facts.update(slot=slot, serial=int(state.pm_serial[0, slot]), outcome=int(state.pm_outcome[0, slot]),
                         truth=float(state.pm_truth[0, slot]), resolve=int(state.pm_resolve_tick[0, slot]))
            return _reply({"type": "buy_prediction", "market": f"market-{facts['serial']}", "outcome": "NO",
                           "amount": 50})
        if t == 5:
            facts["no_shares"] = float(state.hold_no[0, facts["slot"]])
            return "no action in this reply"  # invalid: a no-op
        if t == 6:
            return _reply({"type": "buy_prediction", "market": "market-999", "outcome": "YES", "amount": 10})
        return _reply({"type": "wait"})

    traj, books = play(policy, ticks=16)
    ledger = replay(traj)
    assert facts["resolve"] <= 16, "the test world must resolve the NO position within the episode"
    fees_delta = np.diff([0.0] + [b["fees_paid"] for b in books])
    # Fees per step are exactly the world's own fee account.
    np.testing.assert_allclose(ledger.fees_usd, fees_delta, atol=1e-9)
    assert ledger.fees_usd.sum() == pytest.approx(books[-1]["fees_paid"])
    by_instrument = {t.instrument: t for t in ledger.trades}
    # The prediction round trip: cash out at tick 0, cash back at tick 1 (nothing else moved the cash).
    sold = by_instrument["market-0 YES"]
    assert (sold.kind, sold.open_tick, sold.close_tick, sold.closed_by) == ("prediction", 0, 1, "sold")
    assert sold.cost_usd == pytest.approx(100.0)
    assert sold.pnl_usd == pytest.approx(books[1]["cash"] - facts["cash0"])
    # The perp round trip: margin and fee out at tick 2, margin + PnL - fee back at tick 3.
    perp = by_instrument["BTCAI LONG"]
    assert (perp.kind, perp.open_tick, perp.close_tick, perp.closed_by) == ("perp", 2, 3, "closed")
    assert perp.cost_usd == pytest.approx(1000 / 2 + fees_delta[2])
    assert perp.pnl_usd == pytest.approx(books[3]["cash"] - facts["cash2"])
    # The held NO position resolved: payout is the shares if NO won.
    held = by_instrument[f"market-{facts['serial']} NO"]
    assert (held.open_tick, held.close_tick, held.closed_by) == (4, facts["resolve"], "resolved")
    payout = facts["no_shares"] if facts["outcome"] == 0 else 0.0
    assert held.proceeds_usd == pytest.approx(payout) and held.cost_usd == pytest.approx(50.0)
    assert len(ledger.trades) == 3 and ledger.open_at_end == 0
    mine = [r for r in ledger.resolutions if r.market == f"market-{facts['serial']}"]
    assert len(mine) == 1 and len(ledger.resolutions) == 1  # the only market held at a resolution
    r = mine[0]
    assert (r.outcome, r.tick, r.yes_shares) == (facts["outcome"], facts["resolve"], 0.0)
    assert (r.truth, r.no_shares) == (pytest.approx(facts["truth"]), pytest.approx(facts["no_shares"]))
    assert ledger.payout_usd.sum() == pytest.approx(payout)
    # Traded USD: the buys' amounts, a sell's gross proceeds, the perp notional at open and at close.
    assert ledger.traded_usd[0] == pytest.approx(100.0) and ledger.traded_usd[4] == pytest.approx(50.0)
    assert ledger.traded_usd[1] == pytest.approx(books[1]["cash"] - books[0]["cash"] + fees_delta[1])
    assert ledger.traded_usd[2] == pytest.approx(1000.0)
    assert ledger.traded_usd[3] == pytest.approx(fees_delta[3] / SMALL_WORLD.get("fee_rate", 0.001))
    assert ledger.traded_usd[5:].sum() == 0.0  # the invalid reply and the refused buy moved nothing
    assert ledger.perp_prices.shape == (len(traj.steps) + 1, 3)


def test_a_liquidated_perp_is_a_losing_trade():
    def policy(state, t):
        if t == 0:  # 100x leverage on a volatile world: liquidated within a few ticks
            return _reply({"type": "open_perp", "ticker": "SOLAI", "side": "LONG", "size": 5000, "leverage": 100})
        return _reply({"type": "wait"})

    config = {**SMALL_WORLD, "max_leverage": 100, "perp_volatility": 0.05}
    for seed in range(10):
        traj, _ = play(policy, ticks=12, seed=seed, config=config)
        ledger = replay(traj)
        if ledger.trades:
            break
    else:
        pytest.fail("no seed liquidated a 100x position within 12 ticks")
    (trade,) = ledger.trades
    assert (trade.instrument, trade.closed_by, trade.proceeds_usd) == ("SOLAI LONG", "liquidated", 0.0)
    assert trade.pnl_usd == pytest.approx(-(5000 / 100 + ledger.fees_usd[0]))


def test_replay_of_collected_runs_agrees_with_the_env_fed_the_recorded_replies(scripted_run):
    trajs = load_run(scripted_run)
    results = replay_many(trajs)
    assert set(results) == {t.trajectory_id for t in trajs}
    for t in trajs:
        ledger = results[t.trajectory_id]
        assert not isinstance(ledger, ReplayError), ledger
        # Independently: the text env itself, fed the recorded reply texts, keeps its own fee account.
        env = gym.make("RLAIF-Text-v0", config=t.config, disable_env_checker=True)
        env.reset(seed=t.seed)
        for s in t.steps:
            env.step(s.llm_calls[0].response)
        state = env.unwrapped.state
        assert ledger.fees_usd.sum() == pytest.approx(float(state.fees_paid[0]), abs=1e-9)
        np.testing.assert_allclose(ledger.perp_prices[-1], state.perp_price[0])
        env.close()
    assert sum(len(r.trades) for r in results.values()) > 0, "the scripted model should trade in 14 ticks"


def test_collected_steps_record_fills_that_match_the_envs_books(scripted_run):
    """Each step's feedback carries the action's fill, fee and payout; summed, they match the env's accounts."""
    for t in load_run(scripted_run):
        fills = [s.feedback for s in t.steps]
        assert all(f.fee is not None and f.usd is not None and f.markets_resolved is not None for f in fills)
        buys = [(s, f) for s, f in zip(t.steps, fills, strict=True)
                if s.action.action_type == "buy_prediction" and s.action.success]
        assert buys, "the scripted model buys within 14 ticks"
        assert all(f.shares > 0 and f.usd > 0 and f.fee > 0 for _, f in buys)
        env = gym.make("RLAIF-Text-v0", config=t.config, disable_env_checker=True)
        env.reset(seed=t.seed)
        for s in t.steps:
            env.step(s.llm_calls[0].response)
        state = env.unwrapped.state
        assert sum(f.fee for f in fills) == pytest.approx(float(state.fees_paid[0]), abs=1e-9)
        env.close()


def test_a_recorded_fee_that_disagrees_with_the_world_is_refused(scripted_run):
    traj = load_run(scripted_run)[0]
    traded = next(i for i, s in enumerate(traj.steps) if s.feedback.fee)
    traj.steps[traded].feedback.fee += 0.5
    with pytest.raises(ReplayError, match=f"step {traded}.*fee"):
        replay(traj)


def test_a_record_that_disagrees_with_the_world_is_refused_with_the_step(scripted_run):
    traj = load_run(scripted_run)[0]
    traj.steps[2].feedback.pnl_delta += 5.0
    with pytest.raises(ReplayError, match="step 2"):
        replay(traj)


def test_what_cannot_be_replayed_says_why(scripted_run):
    good = load_run(scripted_run)[0]
    no_seed = good.model_copy(update={"seed": None, "trajectory_id": "no-seed"})
    other_env = good.model_copy(update={"env_id": "Other-v0", "trajectory_id": "other"})
    forked = good.model_copy(deep=True, update={"trajectory_id": "forked"})
    for s in forked.steps:
        s.environment_state.tick = s.environment_state.tick + 5  # a branch recorded from tick 5
    bad_action = good.model_copy(deep=True, update={"trajectory_id": "bad"})
    bad_action.steps[0].action = Action(action_type="buy_prediction", parameters={"colour": "red"}, success=True)
    results = replay_many([good, no_seed, other_env, forked, bad_action])
    assert not isinstance(results[good.trajectory_id], ReplayError)  # the others do not stop it
    assert "no seed or config" in str(results["no-seed"])
    assert "Other-v0" in str(results["other"])
    assert "forked branch" in str(results["forked"])
    assert "not a canonical action" in str(results["bad"])


def test_replay_reads_canonical_actions_not_reply_text(scripted_run):
    """Constrained decoding rewrites replies for the env; the replay uses the recorded action, so it still works."""
    traj = load_run(scripted_run)[0].model_copy(deep=True)
    for s in traj.steps:
        s.llm_calls[0].response = json.dumps({"reasoning": "as JSON", "action": {"type": s.action.action_type}})
    assert replay(traj).fees_usd.shape == (len(traj.steps),)
