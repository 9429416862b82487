"""The collector tunes Python's cyclic GC while episodes run and gives the caller's settings back."""

from __future__ import annotations

import gc

from rlaif_gym.agents.llm import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.rollout.collector import GC_THRESHOLD


def test_the_gc_is_tuned_during_a_collection_and_restored_after():
    before = gc.get_threshold()
    seen = []
    collector = RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 3}, num_envs=2,
                                 on_trajectory=lambda t: seen.append((gc.get_threshold(), gc.get_freeze_count())))
    summary = collector.collect(2, seed=0)
    assert summary.completed == 2 and len(seen) == 2
    assert all(threshold[0] == max(before[0], GC_THRESHOLD) and frozen > 0 for threshold, frozen in seen)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_caller_that_disabled_the_gc_keeps_it_disabled():
    gc.disable()
    try:
        RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 2}, num_envs=1).collect(1, seed=0)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_objects_the_caller_froze_stay_frozen():
    """A collector that found the GC frozen never unfreezes it (that would empty the permanent generation). The
    count may still fall by a few: a frozen object whose last reference goes away is freed all the same (a full
    suite freezes over a million objects here, and 4 of them were freed during the collection once)."""
    sentinel = [object()]  # a container the GC tracks: frozen, it is in no generation get_objects() lists
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # the suite's modules and objects, at the least
        assert not any(o is sentinel for o in gc.get_objects())
        RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 2}, num_envs=1).collect(1, seed=0)
        assert gc.get_freeze_count() >= frozen - 1000
        assert not any(o is sentinel for o in gc.get_objects())  # still frozen: an unfreeze would list it
    finally:
        gc.unfreeze()


def test_each_worker_makes_one_env_and_resets_it_for_its_next_episodes(monkeypatch):
    """Envs are reused between a worker's episodes (making one costs ~1 ms) with the same records as fresh ones."""
    import gymnasium as gym

    import rlaif_gym.rollout.collector as collector_module

    made = []
    real_make = gym.make
    monkeypatch.setattr(collector_module.gym, "make", lambda *a, **k: made.append(1) or real_make(*a, **k))
    reused = RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 4}, num_envs=2)
    reused.collect(6, seed=3)
    assert len(made) == 2
    fresh = []
    for seed in range(3, 9):  # the same episodes (ids run-s<seed>-m0), each alone on a new env
        one = RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 4}, num_envs=1)
        one.collect(1, seed=seed)
        fresh += one.trajectories
    by_id = {t.trajectory_id: t for t in reused.trajectories}
    for t in fresh:
        assert [s.observation.text for s in t.steps] == [s.observation.text for s in by_id[t.trajectory_id].steps]
        assert [s.reward for s in t.steps] == [s.reward for s in by_id[t.trajectory_id].steps]
