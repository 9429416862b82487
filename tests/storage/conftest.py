"""Hand-built trajectories for the storage tests: several steps, a failed call, token ids, unicode."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from rlaif_gym.trajectory import (
    Action,
    EnvironmentState,
    Feedback,
    LLMCall,
    LLMCallError,
    Observation,
    Trajectory,
    TrajectoryStep,
    sim_timestamp_ms,
)

SYSTEM = "You trade prediction markets. Reply with <think>…</think> then one JSON action."
GROUND_TRUTH = "GROUND-TRUTH: market-3 resolves YES at tick 40"


def state_prompt(tick: int, cash: float) -> str:
    return f"Tick {tick}. Cash ${cash:,.2f}. Markets: market-3 « Will ETH close > $4k? » YES 0.42 / NO 0.58 📈"


def call(user: str, response: str, *, purpose: str = "action", error: bool = False, tokens: bool = False,
         call_id: str = "", messages: bool = False) -> LLMCall:
    extra = {}
    if tokens:
        extra = {"completion_token_ids": [101, 7, 2048], "completion_logprobs": [-0.25, -1.5, -0.0625],
                 "prompt_token_ids": [1, 2, 3]}
    if messages:
        extra["messages"] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    return LLMCall(
        call_id=call_id, model="qwen2.5-3b-instruct", system_prompt=SYSTEM, user_prompt=user,
        response="" if error else response, reasoning="thinking about ETH ☕" if not error else None,
        temperature=0.7, max_tokens=512, seed=7, purpose=purpose, latency_ms=12.5, prompt_tokens=90,
        completion_tokens=3, finish_reason=None if error else "stop",
        error=LLMCallError(type="timeout", message="read timed out after 30 s", retryable=True) if error else None,
        attempts=3 if error else 1, **extra,
    )


def step(n: int, calls: list[LLMCall], reward: float, cash: float = 10_000.0, action: str = "wait") -> TrajectoryStep:
    return TrajectoryStep(
        step_number=n, timestamp=sim_timestamp_ms(n),
        environment_state=EnvironmentState(agent_balance=cash, agent_pnl=cash - 10_000.0, open_positions=n,
                                           active_markets=4, equity=cash + 1.25),
        llm_calls=calls,
        action=Action(action_type=action, parameters={"market": "market-3", "amount": 250.0}, success=True,
                      result={"filled": 250.0}, reasoning="cheap YES"),
        reward=reward,
        observation=Observation(text=state_prompt(n, cash), numeric=[0.42, 0.58, cash / 10_000.0]),
        feedback=Feedback(success=True, pnl_delta=12.75),
        reward_components={"pnl": 0.25, "format": 1.0, "reasoning": 0.5},
        format_errors=[] if n else ["missing </think>"],
        judge={"format": 1.0},
    )


def rich_trajectory(tid: str = "traj-rich-0") -> Trajectory:
    """Three steps: a failed call then a success with token ids; a reasoning call; unicode everywhere."""
    steps = [
        step(0, [call(state_prompt(0, 10_000.0), "", error=True, call_id="c0"),
                 call(state_prompt(0, 10_000.0), '<think>YES is cheap</think>{"type":"buy_prediction"}',
                      tokens=True, call_id="c1")], 0.5, action="buy_prediction"),
        step(1, [call(state_prompt(1, 9_750.0), "Risk looks fine ✓", purpose="reasoning", call_id="c2"),
                 call(state_prompt(1, 9_750.0), '<think>hold — trend up</think>{"type":"wait"}', call_id="c3",
                      messages=True)], -0.125, cash=9_750.0),
        step(2, [call(state_prompt(2, 9_762.75), '<think>市场 up</think>{"type":"wait"}', call_id="c4")], 0.0625,
             cash=9_762.75),
    ]
    return Trajectory(
        trajectory_id=tid, agent_id="agent-ü", id=f"row-{tid}", window_id="2026-01-01T00:00",
        scenario_id="scn-1", episode_id="ep-1", group_id="g-rich", group_index=0,
        start_time=datetime(2026, 1, 1, tzinfo=timezone.utc), end_time=datetime(2026, 1, 1, 3, tzinfo=timezone.utc),
        duration_ms=10_800_000, steps=steps, total_reward=0.4375, final_pnl=-237.25, final_balance=9_762.75,
        trades_executed=1, successful_trades=1, episode_length=3, final_status="completed", archetype="trader",
        env_id="RLAIF-Text-v0", seed=123, config={"market": {"n_markets": 4}, "hidden": GROUND_TRUTH},
        package_version="0.1.0", reward_weights={"pnl": 0.5, "format": 0.3, "reasoning": 0.2},
        agent={"model": "qwen2.5-3b-instruct", "temperature": 0.7},
        judge_scores={"ruler": 0.75, "explanation": GROUND_TRUTH}, quality={"score": 0.9},
        errors=["step 0: timeout (retried)"], failed_calls=[call("x", "", error=True)],
        custom_extra={"note": "extra fields survive"},
    )


def group_member(tid: str, group: str, index: int, responses: list[str], rewards: list[float],
                 total: float | None = None, tokens: bool = False) -> Trajectory:
    """A trajectory of a GRPO group: step 0 sees the group's shared start state, later steps diverge."""
    steps = []
    for n, (response, reward) in enumerate(zip(responses, rewards, strict=True)):
        cash = 10_000.0 if n == 0 else 10_000.0 - 10 * (index + 1) * n  # states differ after the first action
        steps.append(step(n, [call(state_prompt(n, cash), response, tokens=tokens, call_id=f"{tid}-{n}")], reward,
                          cash=cash))
    return Trajectory(trajectory_id=tid, agent_id=f"agent-{index}", group_id=group, group_index=index, seed=42,
                      steps=steps, total_reward=sum(rewards) if total is None else total,
                      final_pnl=-10.0 * index, episode_length=len(steps))


@pytest.fixture
def rich() -> Trajectory:
    return rich_trajectory()


@pytest.fixture
def sample() -> list[Trajectory]:
    """Several distinct trajectories (the rich one in three copies with distinct ids, plus group members)."""
    return [rich_trajectory(f"traj-rich-{i}") for i in range(3)] + groups()


def groups() -> list[Trajectory]:
    buy, sell = '<think>cheap</think>{"type":"buy_prediction"}', '<think>dear</think>{"type":"sell"}'
    return [
        # g1: step 0 prompts identical; a and c answer the same, b differs -> one pair (deduplicated)
        group_member("g1-a", "g1", 0, [buy, "wait a"], [0.5, 0.25], tokens=True),
        group_member("g1-b", "g1", 1, [sell, "wait b"], [-0.25, 0.75], tokens=True),
        group_member("g1-c", "g1", 2, [buy, "wait c"], [0.5, 0.0]),
        # g2: different replies, equal rewards and totals -> no pair, degenerate group
        group_member("g2-a", "g2", 0, [buy], [0.25]),
        group_member("g2-b", "g2", 1, [sell], [0.25]),
        # a singleton group and an ungrouped trajectory -> skipped by GRPO
        group_member("g3-a", "g3", 0, [buy], [1.0]),
        group_member("solo", "tmp", 0, [buy], [1.0]).model_copy(update={"group_id": None}),
    ]


@pytest.fixture
def grouped() -> list[Trajectory]:
    return groups()


@pytest.fixture
def make_rich():
    """The rich-trajectory factory, for tests that need many distinct ids."""
    return rich_trajectory
