"""GRPO groups from one mid-episode state: `RolloutCollector.collect_forks` (offline scripted agent)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from rollout_checks import read_store_strict

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import RolloutCollector, call_seed
from rlaif_gym.storage import JsonlStore

TICKS, FORK, GROUP = 14, 6, 3


def _content(step, drop_ids: bool = False) -> dict:
    """A step without its wall-clock fields (call latency) and, optionally, the call ids."""
    data = step.model_dump(mode="json")
    for call in data["llm_calls"]:
        call.pop("latency_ms", None)
        if drop_ids:
            call.pop("call_id")
    return data


def _collector(**kw) -> RolloutCollector:
    return RolloutCollector(ScriptedLLMAgent(temperature=0.9), env_config={"num_ticks": TICKS}, num_envs=4,
                            group_size=GROUP, **kw)


def test_branches_start_from_one_state_and_branch_zero_continues_the_plain_episode(tmp_path):
    store = JsonlStore(tmp_path / "forks")
    collector = _collector(sink=store)
    summary = collector.collect_forks(2, seed=30, fork_tick=FORK)
    assert summary.planned == summary.completed == 2 * GROUP, summary.to_dict()
    trajs = read_store_strict(store.directory)
    groups = defaultdict(list)
    for t in trajs:
        groups[t.group_id].append(t)
    assert sorted(groups) == ["run-s30-t6", "run-s31-t6"]

    plain = _collector()
    plain.collect(2 * GROUP, seed=30)
    member0 = {t.seed: t for t in plain.trajectories if t.group_index == 0}

    for gid, members in groups.items():
        members.sort(key=lambda t: t.group_index)
        assert [t.group_index for t in members] == list(range(GROUP)), gid
        for t in members:
            assert [s.step_number for s in t.steps] == list(range(FORK, TICKS)), t.trajectory_id
            assert t.trajectory_id == f"{gid}-m{t.group_index}"
            for s in t.steps:
                assert s.llm_calls[0].seed == call_seed(t.seed, t.group_index, s.step_number)
        # Identical start: the same first prompt, numeric observation and account for every member.
        firsts = [_content(t.steps[0]) for t in members]
        for f in firsts[1:]:
            assert f["observation"] == firsts[0]["observation"], f"{gid}: members start from different states"
            assert f["environment_state"] == firsts[0]["environment_state"]
        # Branch 0 uses the trunk's call seeds: it is exactly the plain episode from the fork tick on.
        plain0 = member0[members[0].seed]
        assert [_content(s, True) for s in members[0].steps] == [_content(s, True) for s in plain0.steps[FORK:]], \
            f"{gid}: branch 0 is not the continuation of the plain member-0 episode"
        # Different call seeds make the branches diverge.
        replies = {tuple(s.llm_calls[0].response for s in t.steps) for t in members}
        assert len(replies) > 1, f"{gid}: every branch replied identically"


def test_include_trunk_gives_whole_episodes_sharing_a_prefix():
    collector = _collector()
    collector.collect_forks(1, seed=7, fork_tick=FORK, include_trunk=True)
    members = sorted(collector.trajectories, key=lambda t: t.group_index)
    assert len(members) == GROUP
    for t in members:
        assert [s.step_number for s in t.steps] == list(range(TICKS)), t.trajectory_id
    prefix = [_content(s) for s in members[0].steps[:FORK]]
    for t in members[1:]:
        assert [_content(s) for s in t.steps[:FORK]] == prefix, "trunks differ between members"


def test_fork_tick_is_validated_and_resume_skips_done_branches(tmp_path):
    with pytest.raises(ConfigError, match="fork_tick"):
        _collector().collect_forks(1, seed=0, fork_tick=TICKS)
    store = JsonlStore(tmp_path / "resume")
    first = _collector(sink=store).collect_forks(1, seed=2, fork_tick=3)
    assert first.completed == GROUP
    again = _collector(sink=JsonlStore(tmp_path / "resume")).collect_forks(1, seed=2, fork_tick=3, resume=True)
    assert again.skipped_existing == GROUP and again.completed == 0
    with pytest.raises(ConfigError, match="fork_tick"):
        _collector(sink=JsonlStore(tmp_path / "resume")).collect_forks(1, seed=2, fork_tick=4, resume=True)


def test_decision_point_groups_start_where_a_bet_matters(tmp_path):
    """Issue 28 item 3: the collector plans GRPO groups at decision points (a market resolves soon and the prompt
    names it): every branch starts from the point's state, plays the horizon, and the run resumes cleanly."""
    from rlaif_gym.agents import ScriptedLLMAgent
    from rlaif_gym.envs.decisions import decision_points
    from rlaif_gym.rollout import RolloutCollector
    from rlaif_gym.storage import JsonlStore

    world = {"num_markets": 2, "num_perps": 1, "num_npcs": 4, "num_groups": 1, "market_duration_min": 2,
             "market_duration_max": 4, "news_rate": 1.0, "num_ticks": 24}
    points = decision_points([7, 8], world, resolves_within=4, horizon=3)
    store = JsonlStore(tmp_path / "run")
    collector = RolloutCollector(ScriptedLLMAgent(temperature=0.9), sink=store, env_config=world, num_envs=4,
                                 group_size=3, run_name="dp")
    summary = collector.collect_decisions(points, horizon=3)
    assert summary.completed == 6 and summary.failed == 0, summary.errors
    trajs = sorted(store.read(), key=lambda t: t.trajectory_id)
    for p in points:
        group = [t for t in trajs if t.group_id == f"dp-s{p.seed}-t{p.tick}"]
        assert len(group) == 3
        for t in group:
            assert [s.step_number for s in t.steps] == [p.tick, p.tick + 1, p.tick + 2]
            assert t.steps[0].observation.text == p.prompt  # every branch starts at the point's prompt
    again = RolloutCollector(ScriptedLLMAgent(temperature=0.9), sink=JsonlStore(tmp_path / "run"), env_config=world,
                             num_envs=4, group_size=3, run_name="dp").collect_decisions(points, horizon=3, resume=True)
    assert again.skipped_existing == 6 and again.completed == 0
