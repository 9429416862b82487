"""Per-call sampling seeds reach the server, and GRPO group members share the env seed but not call seeds."""

from __future__ import annotations

from collections import defaultdict

from fake_server import FakeOpenAIServer
from rollout_checks import check_run, read_store_strict

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.rollout import RolloutCollector, call_seed
from rlaif_gym.storage import JsonlStore

TICKS = 8


def test_grpo_groups_share_env_seed_and_differ_in_call_seeds(fake_server: FakeOpenAIServer, tmp_path):
    agent = OpenAIChatAgent(model="fake", base_url=fake_server.base_url, api_key="sk-fake", timeout=2.0,
                            max_retries=1, backoff=0.01, temperature=0.9)
    store = JsonlStore(tmp_path / "grpo")
    collector = RolloutCollector(agent, sink=store, env_config={"num_ticks": TICKS}, num_envs=3, group_size=2)
    plan = collector.plan(6, 40)
    summary = collector.collect(6, 40)
    trajs = read_store_strict(store.directory)
    by_id = check_run(trajs, [s.trajectory_id for s in plan], TICKS, summary)
    assert summary.planned == summary.completed + summary.failed == 6, summary.to_dict()

    requests = fake_server.chat_requests()
    assert len(requests) == 6 * TICKS, f"{len(requests)} requests for {6 * TICKS} calls (no faults, no retries)"
    sent_seeds = [r.body.get("seed") for r in requests]
    assert all(isinstance(s, int) for s in sent_seeds), f"requests without an integer seed: {sent_seeds[:10]}"
    assert len(set(sent_seeds)) == len(sent_seeds), "two calls of the run were sent the same seed"
    assert {r.body.get("temperature") for r in requests} == {0.9}, "the sampling temperature was not sent"
    by_seed = {r.body["seed"]: r for r in requests}

    groups = defaultdict(list)
    for t in by_id.values():
        groups[t.group_id].append(t)
    assert len(groups) == 3, f"expected 3 groups of 2, got {dict((g, len(m)) for g, m in groups.items())}"
    for group_id, members in sorted(groups.items()):
        members.sort(key=lambda t: t.group_index)
        a, b = members
        assert [a.group_index, b.group_index] == [0, 1], f"group {group_id}: indexes {a.group_index}, {b.group_index}"
        assert a.seed == b.seed, f"group {group_id}: env seeds {a.seed} != {b.seed}"
        first_a = a.steps[0].llm_calls[0].user_prompt
        first_b = b.steps[0].llm_calls[0].user_prompt
        assert first_a == first_b, f"group {group_id}: members {a.trajectory_id} and {b.trajectory_id} start apart"
        for t in members:
            for step in t.steps:
                call = step.llm_calls[0]
                where = f"trajectory {t.trajectory_id} step {step.step_number}"
                expected = call_seed(t.seed, t.group_index, step.step_number)
                assert call.seed == expected, f"{where}: recorded seed {call.seed} != {expected}"
                request = by_seed.get(call.seed)
                assert request is not None, f"{where}: no request was sent with seed {call.seed}"
                assert request.body["messages"][-1]["content"] == call.user_prompt, \
                    f"{where}: the request with seed {call.seed} carried another prompt"
        for sa, sb in zip(a.steps, b.steps, strict=True):
            assert sa.llm_calls[0].seed != sb.llm_calls[0].seed, \
                f"group {group_id} step {sa.step_number}: both members sampled with seed {sa.llm_calls[0].seed}"
    # Different groups start from different states.
    firsts = {g: m[0].steps[0].llm_calls[0].user_prompt for g, m in groups.items()}
    assert len(set(firsts.values())) == len(firsts), "two groups started from the same prompt"
