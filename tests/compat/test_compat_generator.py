"""The original's `rollout_generator` / `rlaif_env` usage runs on rlaif_gym, with the original's defects fixed."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import rlaif_gym
from rlaif_gym.errors import ConfigError
from rlaif_gym.llm import SamplingParams, ScriptedLLM
from rlaif_gym.rollout_generator import (
    Action,
    AgentRunner,
    AgentTickData,
    EnvironmentState,
    FastRolloutGenerator,
    LLMCall,
    RolloutConfig,
    RolloutQualityValidator,
    RolloutResult,
)

REPO = Path(__file__).resolve().parents[2]
TICKS = 6  # >= 5, the validator's minimum


class OriginalStyleRunner:
    """An AgentRunner as the original's users wrote one: call the model, build LLMCall and Action."""

    def __init__(self, seed: int = 0, delay_s: float = 0.0) -> None:
        self.model, self.seed, self.delay_s = ScriptedLLM(), seed, delay_s
        self.in_flight = 0
        self.max_in_flight = 0

    async def run_tick(self, agent_id: str, observation: dict, env_state: EnvironmentState) -> AgentTickData:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            messages = [{"role": "system", "content": observation["system_prompt"]},
                        {"role": "user", "content": observation["prompt"]}]
            params = SamplingParams(0.7, 512, seed=self.seed + observation["tick"])
            completion = await self.model.complete(messages, params)
            think, _, body = completion.text.partition("</think>")
            decision = json.loads(body)
            kind = decision.pop("type")
            call = LLMCall(model=completion.model, system_prompt=messages[0]["content"],
                           user_prompt=messages[1]["content"], response=completion.text, temperature=0.7,
                           max_tokens=512, purpose="action")
            return AgentTickData(tick_number=0, timestamp=0, observation=observation, environment_state=env_state,
                                 llm_calls=[call], action=Action(action_type=kind, parameters=decision,
                                                                 reasoning=think.replace("<think>", "")))
        finally:
            self.in_flight -= 1


def run(coro):
    return asyncio.run(coro)


def test_original_usage_pattern_end_to_end(capsys):
    """AgentRunner -> FastRolloutGenerator.generate_parallel_rollouts -> RolloutQualityValidator, unchanged."""
    runners = [(OriginalStyleRunner(seed=1000 * i), f"agent-{i}") for i in range(3)]
    assert all(isinstance(r, AgentRunner) for r, _ in runners)
    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=TICKS, parallel_agents=2))
    results = run(generator.generate_parallel_rollouts(runners, lambda: gym.make("RLAIF-Text-v0")))

    assert [r.agent_id for r in results] == ["agent-0", "agent-1", "agent-2"]
    assert all(isinstance(r, RolloutResult) for r in results)
    for result in results:
        valid, issues = RolloutQualityValidator.validate_rollout(result)
        assert valid, issues
        traj = result.trajectory
        assert result.ticks_completed == TICKS == len(traj.steps) == len(result.ticks) == traj.episode_length
        assert result.total_llm_calls == TICKS
        assert result.quality_score == traj.quality["quality_score"] >= 0.5
        assert math.isclose(result.total_reward, sum(t.reward for t in result.ticks))
        assert result.final_pnl == traj.final_pnl
        assert result.tick_warnings == []
        # Every tick field the original left empty is filled.
        for number, tick in enumerate(result.ticks):
            assert tick.tick_number == number
            assert tick.timestamp == traj.steps[number].timestamp > 0
            assert "pnl_delta" in tick.feedback and tick.feedback["pnl_delta"] == traj.steps[number].feedback.pnl_delta
            assert tick.reasoning_chain.strip()
            assert tick.action is not None and tick.action.result == {"pnl_delta": tick.feedback["pnl_delta"]}
        trades = [s.action for s in traj.steps if s.action.action_type in
                  {"buy_prediction", "sell_prediction", "open_perp", "close_perp"}]
        assert trades, "the scripted agent trades within a few ticks"
        assert traj.successful_trades == sum(a.success for a in trades)
        assert traj.failed_trades == sum(not a.success for a in trades)
        assert traj.successful_trades + traj.failed_trades == len(trades)
    # One batch is one scenario and one window: the original Atropos env groups on exactly these.
    assert len({(r.trajectory.window_id, r.trajectory.scenario_id) for r in results}) == 1
    assert len({r.trajectory_id for r in results}) == 3

    summary = RolloutQualityValidator.print_quality_report(results)
    out = capsys.readouterr().out
    assert "ROLLOUT QUALITY REPORT" in out and "Valid rollouts: 3/3 (100.0%)" in out
    assert f"Total ticks: {3 * TICKS}" in out
    assert summary["valid"] == 3 and summary["total_ticks"] == 3 * TICKS


def test_reward_is_the_envs_own_over_the_full_transition():
    """Replaying the executed replies on a fresh env gives the same rewards; pnl_delta spans the tick advance."""
    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=TICKS, seed=11))
    result = run(generator.generate_rollout(OriginalStyleRunner(), "solo", gym.make("RLAIF-Text-v0")))
    env = gym.make("RLAIF-Text-v0")
    env.reset(seed=11)
    for step in result.trajectory.steps:
        _, reward, _, _, info = env.step(step.llm_calls[-1].response)
        assert reward == step.reward
        assert info["reward_components"] == step.reward_components
        assert info["pnl_delta"] == step.feedback.pnl_delta
    steps = result.trajectory.steps
    for before, after in itertools.pairwise(steps):  # equity change between pre-action states = the step's pnl_delta
        assert math.isclose(after.environment_state.agent_balance - before.environment_state.agent_balance,
                            before.feedback.pnl_delta, rel_tol=1e-9, abs_tol=1e-9)
    assert any(s.feedback.pnl_delta != 0 for s in steps)
    assert steps[0].environment_state.agent_balance == 10_000.0
    assert math.isclose(result.final_pnl, steps[-1].environment_state.agent_balance + steps[-1].feedback.pnl_delta
                        - 10_000.0)


def test_parallel_agents_is_honoured():
    runner = OriginalStyleRunner(delay_s=0.002)
    made = []

    def factory():
        made.append(1)
        return gym.make("RLAIF-Text-v0")

    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=2, parallel_agents=2))
    results = run(generator.generate_parallel_rollouts([(runner, f"a{i}") for i in range(5)], factory))
    assert len(results) == 5 and len(made) == 5
    assert runner.max_in_flight == 2  # the original started all five at once


def test_duplicate_agent_ids_get_distinct_trajectory_ids():
    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=1))
    runner = OriginalStyleRunner()
    results = run(generator.generate_parallel_rollouts([(runner, "same"), (runner, "same")],
                                                       lambda: gym.make("RLAIF-Text-v0")))
    assert [r.trajectory_id for r in results] == ["rollout-same-s0-0", "rollout-same-s0-1"]


class Crashing(OriginalStyleRunner):
    async def run_tick(self, agent_id, observation, env_state):
        if observation["tick"] == 2:
            raise RuntimeError("agent bug at tick 2")
        return await super().run_tick(agent_id, observation, env_state)


def test_a_failed_rollout_is_returned_as_data():
    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=TICKS))
    good, bad = run(generator.generate_parallel_rollouts([(OriginalStyleRunner(), "good"), (Crashing(), "bad")],
                                                         lambda: gym.make("RLAIF-Text-v0")))
    assert good.trajectory.final_status == "completed" and RolloutQualityValidator.validate_rollout(good)[0]
    assert bad.trajectory.final_status == "failed" and bad.ticks_completed == 2
    assert any("agent bug at tick 2" in e for e in bad.trajectory.errors)
    valid, issues = RolloutQualityValidator.validate_rollout(bad)
    assert not valid and any(i.startswith("failed:") for i in issues)


class RuleBased:
    """No LLM: returns an Action only (the generator renders it as the reply)."""

    async def run_tick(self, agent_id, observation, env_state):
        market = observation["markets"][0]["market_id"]
        return AgentTickData(0, 0, observation, env_state, action=Action(
            action_type="buy_yes", parameters={"marketId": market, "amount": 50},
            reasoning=f"{market} looks cheap, so I buy YES."))


def test_an_action_without_llm_calls_is_executed_and_reported():
    result = run(FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=TICKS)).generate_rollout(RuleBased(), "rb"))
    first = result.ticks[0]
    assert first.action.action_type == "buy_prediction" and first.action.success
    assert first.action.parameters["outcome"] == "YES" and first.action.parameters["amount"] == 50
    assert any(w.startswith("too few LLM calls") for w in result.tick_warnings)
    valid, issues = RolloutQualityValidator.validate_rollout(result)
    assert not valid and any(i.startswith("no LLM call") for i in issues)


class Mismatched(OriginalStyleRunner):
    async def run_tick(self, agent_id, observation, env_state):
        tick = await super().run_tick(agent_id, observation, env_state)
        tick.action = Action(action_type="wait")
        return tick


def test_the_reply_is_executed_and_a_different_returned_action_is_flagged():
    result = run(FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=3)).generate_rollout(Mismatched(), "m"))
    executed = [t for t in result.ticks if t.action.action_type != "wait"]
    assert executed, "the scripted reply acts within three ticks"
    for tick in executed:
        assert tick.feedback["agent_action"]["actionType"] == "wait"
    assert any(w.startswith("action mismatch") for w in result.tick_warnings)


def test_simulation_forms():
    gen = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=1))
    runner = OriginalStyleRunner()
    numeric = gym.make("RLAIF-v0", num_markets=2)
    result = run(gen.generate_rollout(runner, "n", numeric))
    assert len(result.ticks[0].observation["markets"]) == 2  # the numeric env's config, text face
    assert run(gen.generate_rollout(runner, "c", {"num_markets": 3})).trajectory.config["num_markets"] == 3
    assert run(gen.generate_rollout(runner, "i", "RLAIF-Text-v0")).ticks_completed == 1

    class CamelCaseEngine:  # the original's duck-typed TS SimulationEngine
        def isComplete(self):
            return False

    with pytest.raises(ConfigError, match="camelCase"):
        run(gen.generate_rollout(runner, "x", CamelCaseEngine()))


def test_full_context_has_the_original_sections():
    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=1))
    result = run(generator.generate_rollout(OriginalStyleRunner(), "c"))
    text = result.ticks[0].get_full_context()
    for section in ("=== OBSERVATION (Tick 0) ===", "=== LLM CALL 1 (action) ===", "=== ACTION ===", "=== FEEDBACK ===",
                    '"pnl_delta"', "Reward: "):
        assert section in text


def test_quality_report_survives_an_empty_batch(capsys):
    summary = RolloutQualityValidator.print_quality_report([])
    assert "Valid rollouts: 0/0" in capsys.readouterr().out and summary["valid"] == 0


def test_rlaif_env_reexports_the_envs():
    from rlaif_gym import rlaif_env

    assert rlaif_env.RLAIFEnv is rlaif_gym.RLAIFEnv is rlaif_env.BabylonRLAIFEnv
    assert rlaif_env.RLAIFEnvConfig is rlaif_gym.RLAIFEnvConfig is rlaif_env.BabylonEnvConfig
    assert rlaif_gym.BabylonRLAIFEnv is rlaif_env.BabylonRLAIFEnv
    assert sorted(rlaif_env.__all__) == ["BabylonEnvConfig", "BabylonRLAIFEnv", "RLAIFEnv", "RLAIFEnvConfig"]


def test_database_url_writes_each_rollout(tmp_path):
    db = tmp_path / "rollouts.db"
    config = RolloutConfig(max_ticks_per_agent=2, database_url=f"sqlite:///{db}", run_name="dbrun")
    results = run(FastRolloutGenerator(config).generate_parallel_rollouts(
        [(OriginalStyleRunner(), "a"), (OriginalStyleRunner(seed=5), "b")], lambda: gym.make("RLAIF-Text-v0")))
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute('SELECT "trajectoryId", "stepsJson" FROM trajectories').fetchall())
    assert set(rows) == {r.trajectory_id for r in results} == {"dbrun-a-s0", "dbrun-b-s0"}
    for r in results:
        assert json.loads(rows[r.trajectory_id]) == r.trajectory.to_dict()["steps"]


def test_the_example_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "original_style.py"), "--agents", "2",
                           "--ticks", "5", "--db", f"sqlite:///{tmp_path / 'ex.db'}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Valid rollouts: 2/2 (100.0%)" in proc.stdout
    with sqlite3.connect(tmp_path / "ex.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM trajectories").fetchone()[0] == 2


def test_without_the_sql_extra_the_error_names_it(monkeypatch, tmp_path, capsys):
    from rlaif_gym.cli import main as cli_main
    from rlaif_gym.errors import DependencyNotInstalled, install_hint
    from rlaif_gym.storage import SqlTrajectorySink

    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # `import sqlalchemy` now raises ImportError
    with pytest.raises(DependencyNotInstalled, match=re.escape(install_hint("sql"))):
        SqlTrajectorySink(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(DependencyNotInstalled, match=re.escape(install_hint("sql"))):
        FastRolloutGenerator(RolloutConfig(database_url=f"sqlite:///{tmp_path / 'x.db'}"))
    code = cli_main(["rollout", "--episodes", "1", "--max-ticks", "1", "--out", str(tmp_path / "r"), "--no-progress",
                     "--db", f"sqlite:///{tmp_path / 'x.db'}"])
    assert code == 2 and 'pip install -e ".[sql]"' in capsys.readouterr().err


def test_llm_agent_runner_and_a_failed_policy_call():
    from rlaif_gym.agents import LLMAgent, ScriptedLLMAgent
    from rlaif_gym.llm import LLMError
    from rlaif_gym.rollout_generator import LLMAgentRunner

    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=TICKS))
    ok = run(generator.generate_rollout(LLMAgentRunner(ScriptedLLMAgent()), "llm"))
    assert RolloutQualityValidator.validate_rollout(ok) == (True, [])
    assert ok.trajectory.agent["kind"] == "scripted" and ok.ticks[0].llm_calls[0].seed is not None

    class DownServer:
        model = "down"

        async def complete(self, messages, params):
            raise LLMError("server unreachable", type_="APIConnectionError", retryable=True, attempts=3)

        def describe(self):
            return {"kind": "test", "model": self.model}

    failed = run(generator.generate_rollout(LLMAgentRunner(LLMAgent(DownServer())), "down"))
    traj = failed.trajectory
    assert traj.final_status == "failed" and failed.ticks_completed == 0 and failed.total_llm_calls == 1
    assert traj.failed_calls[0].error.type == "APIConnectionError"
    assert "policy call failed after 3 attempt(s)" in traj.errors[0]
    assert not RolloutQualityValidator.validate_rollout(failed)[0]


class HugeListsRunner(OriginalStyleRunner):
    """Each tick's call carries 400,000 completion token ids and logprobs, as a runner that copies a server's
    answer into its `LLMCall` might (issue 57, row N2)."""

    async def run_tick(self, agent_id: str, observation: dict, env_state: EnvironmentState) -> AgentTickData:
        tick = await super().run_tick(agent_id, observation, env_state)
        tick.llm_calls[0].completion_token_ids = [7] * 400_000
        tick.llm_calls[0].completion_logprobs = [-0.5] * 400_000
        return tick


def test_a_trajectory_keeps_at_most_trajectory_tokens_of_per_token_lists():
    from rlaif_gym.llm.recording import TOKEN_LISTS, TRAJECTORY_TOKENS

    generator = FastRolloutGenerator(RolloutConfig(max_ticks_per_agent=TICKS, seed=11))
    result = run(generator.generate_rollout(HugeListsRunner(), "solo", gym.make("RLAIF-Text-v0")))
    calls = [c for s in result.trajectory.steps for c in s.llm_calls]
    assert len(calls) == TICKS
    kept = [sum(len(getattr(c, f) or []) for f in TOKEN_LISTS) for c in calls]
    assert sum(kept) == TRAJECTORY_TOKENS and kept[:2] == [800_000, TRAJECTORY_TOKENS - 800_000], kept
    assert "tokenCuts" not in calls[0].model_extra
    assert len(calls[1].completion_token_ids) == TRAJECTORY_TOKENS - 800_000 and calls[1].completion_logprobs == []
    assert all(c.model_extra["tokenCuts"] == dict.fromkeys(TOKEN_LISTS[1:], 400_000) for c in calls[1:])
    assert all(c.completion_token_ids == [] for c in calls[2:])
