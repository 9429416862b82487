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
