"""The verifiers v1 adapter, driven through verifiers itself against real HTTP servers on 127.0.0.1.

* `vf-eval rlaif-gym-verifiers ...` (verifiers' own command and loader, in a subprocess) plays the text
  env against the scripted policy server and our LLM judge against the judge server; the traces it
  writes are read back with verifiers' reader and checked against a replay of the same replies.
* verifiers' eval function (`run_eval`) in-process: a malformed verdict leaves the judge reward None.
* Trajectory -> trace -> trajectory is the identity; trace -> trajectory -> trace keeps the exchange.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlaif_gym import RLAIFTextEnv
from rlaif_gym.envs.decisions import DECISION_WORLD, WAIT_REPLY, decision_points
from rlaif_gym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

from fake_server import FakeOpenAIServer  # noqa: E402
from judge_server import JudgeServer, data_blocks, metric_score  # noqa: E402

vf = pytest.importorskip("verifiers.v1")
from verifiers.v1.cli.eval.runner import run_eval  # noqa: E402
from verifiers.v1.configs.cli.eval import EvalConfig  # noqa: E402
from verifiers.v1.dialects.chat import message_to_wire  # noqa: E402
from verifiers.v1.utils.trace_store import write_episode  # noqa: E402

from rlaif_gym.integrations.verifiers import (  # noqa: E402
    TASKSET_ID,
    RLAIFChatHarness,
    RLAIFEnvironment,
    RLAIFJudge,
    RLAIFTaskset,
    fork_point,
    load_environment,
    read_traces,
    trace_to_trajectory,
    trajectory_to_trace,
)

TICKS = 3


def _judges(server: JudgeServer) -> list[dict]:
    return [{"id": TASKSET_ID, "name": "llm_judge", "model": "judge-model", "base_url": server.base_url,
             "api_key_var": "RLAIF_TEST_JUDGE_KEY"}]


def _vf_eval(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("vf-eval")
    cmd = [str(script)] if script.exists() else [sys.executable, "-c",
                                                 "from verifiers.v1.cli.eval.main import main; main()"]
    env = {**os.environ, "HOME": str(cwd), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "RLAIF_TEST_POLICY_KEY": "sk-policy", "RLAIF_TEST_JUDGE_KEY": "sk-judge"}
    return subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_verifiers_loader_finds_each_plugin_of_the_id():
    assert vf.environment_class(TASKSET_ID) is RLAIFEnvironment
    assert vf.task_type(TASKSET_ID).__name__ == "RLAIFTask"
    assert type(vf.load_taskset(vf.taskset_config_type(TASKSET_ID)(id=TASKSET_ID))) is RLAIFTaskset
    assert vf.default_harness_id(TASKSET_ID) == TASKSET_ID
    assert type(vf.load_harness(vf.harness_config_type(TASKSET_ID)(id=TASKSET_ID))) is RLAIFChatHarness
    assert type(vf.load_judge(vf.judge_config_type(TASKSET_ID)(id=TASKSET_ID))) is RLAIFJudge

    env = load_environment(seeds=[4, 9], fork_at=2, config={"num_ticks": 5})
    tasks = list(env.taskset)
    assert [t.data.name for t in tasks] == ["seed-4@tick-2", "seed-9@tick-2"]
    assert len({t.key for t in tasks}) == 2 and [t.key for t in env.taskset] == [t.key for t in tasks]
    # The task's prompt is the env's prompt two scripted ticks after reset(seed).
    assert tasks[0].data.prompt == tasks[0].make_env()._prompt
    assert tasks[0].data.prompt.startswith("# Babylon market update: hour 2 of 5")
    assert tasks[0].data.system_prompt == RLAIFTextEnv({"num_ticks": 5}).system_prompt


def test_a_tasks_rollouts_start_from_one_snapshot():
    env = load_environment(seeds=[3], fork_at=1, config={"num_ticks": 4})
    (task,) = list(env.taskset)
    first = env.start_env(task)  # builds the start state and keeps its snapshot
    second = env.start_env(task)  # restored from the snapshot, not replayed
    assert task.key in env._starts and second._prompt == first._prompt == task.data.prompt
    reply = '<think>hold</think>\n{"type": "wait"}'
    a, b = first.step(reply), second.step(reply)
    assert a[0] == b[0] and a[1] == b[1] and a[4]["reward_components"] == b[4]["reward_components"]


@pytest.mark.parametrize(("options", "where"), [
    ({"config": {"market_duration_max": 2**63}}, "taskset.config: invalid RLAIFEnvConfig: market_duration_max"),
    ({"config": {"funding_interval": 2**64}}, "taskset.config: invalid RLAIFEnvConfig: funding_interval"),
    ({"config": {"reward_weights": {"pnl": 1e308}}}, "taskset.config: invalid RLAIFEnvConfig: reward_weights"),
    ({"config": {"num_tiks": 3}}, "unknown config key 'num_tiks'. Did you mean 'num_ticks'?"),
    ({"seed": 1.5}, "taskset.seed: seed must be an integer"),       # issue 25 row 11: refused, not truncated
    ({"seed": True}, "taskset.seed: seed must be an integer"),      # was played as seed 1
    ({"seed": -1}, "taskset.seed: seed must be an integer"),        # was gymnasium's error at load
    ({"seed": "abc"}, "taskset.seed: seed must be an integer"),
    ({"seeds": [3, 2.5]}, "taskset.seeds.1: seed must be an integer"),
    ({"forks": [{"seed": False, "replies": []}]}, "taskset.forks.0.seed: seed must be an integer"),
])
def test_bad_taskset_options_raise_one_config_error(options, where):
    """Issue 25 row 5: market_duration_max=2**63 gave a raw OverflowError when the tasks loaded; now every bad
    option is one ConfigError at load, naming the option, with the config's own explanation."""
    with pytest.raises(ConfigError) as err:
        load_environment(num_tasks=1, **{"config": {"num_ticks": 3}, **options})
    assert str(err.value).startswith("invalid rlaif-gym-verifiers options: ") and where in str(err.value), err.value
    assert "errors.pydantic.dev" not in str(err.value)


def test_a_seed_as_the_command_line_writes_it_still_loads():
    env = load_environment(seed="7", num_tasks=1, config={"num_ticks": 3})  # vf-eval --env.taskset.seed 7
    assert [t.data.seed for t in env.taskset] == [7]


def test_vf_eval_plays_the_env_and_our_judge_against_loopback_servers(tmp_path):
    with FakeOpenAIServer() as policy, JudgeServer() as judge:
        proc = _vf_eval([TASKSET_ID, "-n", "2", "-r", "2", "--model", "scripted-policy",
                         "--client.base-url", policy.base_url, "--client.api-key-var", "RLAIF_TEST_POLICY_KEY",
                         "--env.taskset.config.num-ticks", str(TICKS), "--env.taskset.seed", "5",
                         "--env.taskset.task.judges", json.dumps(_judges(judge)),
                         "--no-push", "--no-rich", "-o", "out", "--run.name", "rlaif"], tmp_path)
        assert proc.returncode == 0, proc.stderr[-4000:]
        traces = read_traces(tmp_path / "out" / "rlaif")
        policy_bodies = [r.body for r in policy.requests]
        judge_bodies = [r.body for r in judge.requests]

    assert len(traces) == 4  # 2 tasks x 2 rollouts
    assert all(t.ok for t in traces), [e.message for t in traces for e in t.errors]
    by_task: dict[str, list] = {}
    for t in traces:
        by_task.setdefault(t.task.key, []).append(t)
    assert sorted(len(v) for v in by_task.values()) == [2, 2]

    trajectories = [trace_to_trajectory(t) for t in traces]
    assert len(policy_bodies) == sum(len(tr.steps) for tr in trajectories) == 4 * TICKS
    assert len(judge_bodies) == 4
    for trace, traj in zip(traces, trajectories, strict=True):
        assert traj.seed in (5, 6) and traj.group_id == trace.task.key and len(traj.steps) == TICKS
        # Each tick was one request of [system, this tick's prompt] (history="tick"), and its reply the action.
        for step in traj.steps:
            call = step.llm_calls[0]
            assert [m["role"] for m in call.messages] == ["system", "user"]
            assert call.user_prompt == step.observation.text and call.model == "scripted-policy"
            assert {"model": "scripted-policy", "messages": call.messages} in [
                {"model": b["model"], "messages": b["messages"]} for b in policy_bodies]
        # Replaying the trace's replies in a fresh env gives the same rewards: the env, not a copy, scored them.
        env = RLAIFTextEnv({"num_ticks": TICKS})
        prompt, _ = env.reset(seed=traj.seed)
        returns = []
        for step in traj.steps:
            assert step.observation.text == prompt
            prompt, reward, *_, info = env.step(step.llm_calls[0].response)
            returns.append(reward)
            assert step.reward_components == info["reward_components"]
        assert [s.reward for s in traj.steps] == returns
        coefficients = env.reward_function.coefficients
        env_rewards = {name: r for name, r in trace.rewards.items() if name != "llm_judge"}
        assert set(env_rewards) == {"pnl", "risk", "format", "reasoning"}
        assert all(r.weight == coefficients[name] for name, r in env_rewards.items())
        assert math.isclose(sum(r.value for r in env_rewards.values()), math.fsum(returns), abs_tol=1e-12)
        # Our judge: one call per trace, scored from the fenced episode data the judge server received.
        ours = [message_to_wire(m) for m in RLAIFJudge().build_messages(trajectory=traj)]
        judged = [b for b in judge_bodies if b["messages"] == ours]
        assert judged, "the judge server never received our judge's prompt for this episode"
        assert trace.rewards["llm_judge"].score == metric_score(data_blocks(judged[0]))
        assert traj.judge_scores == {"llm_judge": trace.rewards["llm_judge"].score}
        assert trace.info["judge_calls"][0]["request"]["model"] == "judge-model"


def test_a_malformed_verdict_leaves_the_judge_reward_missing_not_zero(tmp_path):
    with FakeOpenAIServer() as policy, JudgeServer(malformed=lambda body: True) as judge:
        config = EvalConfig.model_validate({
            "env": {"taskset": {"id": TASKSET_ID, "num_tasks": 1, "config": {"num_ticks": 2},
                                "task": {"judges": _judges(judge)}}},
            "model": "scripted-policy", "client": {"base_url": policy.base_url, "api_key_var": "RLAIF_TEST_POLICY_KEY"},
            "push": False, "rich": None, "output_dir": str(tmp_path)})
        (episode,) = asyncio.run(run_eval(config))
    (trace,) = episode.traces
    assert trace.rewards["llm_judge"] is None
    assert not trace.ok and "VerdictParseError" in trace.errors[-1].message
    assert {"pnl", "risk", "format", "reasoning"} <= {k for k, v in trace.rewards.items() if v is not None}


def _collected(tmp_path: Path):
    from rlaif_gym.agents import ScriptedLLMAgent
    from rlaif_gym.rollout import RolloutCollector
    from rlaif_gym.storage import JsonlStore

    store = JsonlStore(tmp_path / "run")
    collector = RolloutCollector(ScriptedLLMAgent(temperature=0.7), sink=store, env_config={"num_ticks": 4},
                                 num_envs=2, group_size=2, run_name="vf")
    assert collector.collect(2, 0).completed == 2
    return list(store.read())


def test_a_trajectory_survives_the_round_trip_through_a_written_trace(tmp_path):
    for original in _collected(tmp_path):
        trace = trajectory_to_trace(original)
        assert trace.reward == pytest.approx(original.total_reward, abs=1e-12)
        assert [m.content for m in trace.assistant_messages] == [s.llm_calls[0].response for s in original.steps]
        out = tmp_path / f"vf-{original.trajectory_id}"
        out.mkdir()
        write_episode(out, vf.Episode(task=trace.task, traces=[trace], ok=True))  # verifiers' writer and reader
        (read,) = read_traces(out)
        assert trace_to_trajectory(read).model_dump(mode="json") == original.model_dump(mode="json")


def test_a_trace_keeps_its_exchange_through_a_trajectory(tmp_path):
    trace = trajectory_to_trace(_collected(tmp_path)[0])
    again = trajectory_to_trace(trace_to_trajectory(trace))
    assert again.messages == trace.messages and again.task.key == trace.task.key
    assert [(n.parent, n.message, n.sampled) for n in again.nodes] == [(n.parent, n.message, n.sampled)
                                                                      for n in trace.nodes]
    assert [c.model_dump() for c in again.calls] == [c.model_dump() for c in trace.calls]
    assert again.rewards == trace.rewards and again.info == trace.info


def test_fork_point_of_a_stored_episode_is_a_task_at_that_tick(tmp_path):
    stored = _collected(tmp_path)[0]
    point = fork_point(stored, 2)
    env = load_environment(num_tasks=1, seed=stored.seed, config={"num_ticks": 4}, forks=[point.model_dump()])
    fork_task = list(env.taskset)[1]
    assert fork_task.data.name == f"seed-{stored.seed}@tick-2"
    assert fork_task.data.prompt == stored.steps[2].observation.text
    with pytest.raises(ValueError, match="must be in"):
        fork_point(stored, 5)


DECISION_24 = {**DECISION_WORLD, "num_ticks": 24}


def test_decision_point_tasks_play_one_reply_then_wait_out_the_horizon(tmp_path):
    """Issue 28 items 3-4: a taskset of decision points (a market resolves soon and the prompt names it), each
    rollout one model reply and a clean wait for the rest of the horizon."""

    env = load_environment(seeds=[100, 101, 102], decision_points=True, resolves_within=4, horizon=2, decisions=1,
                           config=DECISION_24)
    tasks = list(env.taskset)
    points = decision_points([100, 101, 102], DECISION_24, resolves_within=4, horizon=2)
    assert [t.data.prompt for t in tasks] == [p.prompt for p in points]
    assert all(t.data.horizon == 2 and t.data.decisions == 1 for t in tasks)
    with FakeOpenAIServer() as policy:
        config = EvalConfig.model_validate({
            "env": {"taskset": {"id": TASKSET_ID, "seeds": [100], "decision_points": True, "resolves_within": 4,
                                "horizon": 2, "decisions": 1, "config": DECISION_24}},
            "model": "scripted-policy", "client": {"base_url": policy.base_url, "api_key_var": "RLAIF_TEST_POLICY_KEY"},
            "push": False, "rich": None, "output_dir": str(tmp_path)})
        os.environ.setdefault("RLAIF_TEST_POLICY_KEY", "sk-policy")
        (episode,) = asyncio.run(run_eval(config))
        requests = policy.chat_requests()
    (trace,) = episode.traces
    record = trace.info["rlaif_gym"]
    assert len(requests) == 1 and record["continued"] == 1 and record["status"] == "horizon"
    assert len(record["steps"]) == 2 and record["steps"][1]["action"]["action_type"] == "wait"
    reply = requests[0].response["choices"][0]["message"]["content"]
    replay = points[0].env()
    rewards = [replay.step(r)[1] for r in (reply, WAIT_REPLY)]
    assert [s["reward"] for s in record["steps"]] == rewards
    assert math.isclose(trace.metrics["episode_return"], sum(rewards), abs_tol=1e-12)
