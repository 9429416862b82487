"""A long collection runs in bounded memory (issue 15, item 13): nothing is kept per trajectory written.

The collector once kept every trajectory's return, PnL and quality dict for the end-of-run summary,
about 0.6 KB per trajectory: 60 MB over a 100,000-trajectory run. The Python heap is sampled with
tracemalloc (exact, not timing- or allocator-dependent) while trajectories stream to a sink that
drops them; its growth per trajectory must be near zero. `benchmarks/bench_soak.py` measures the RSS
of the same thing against a real HTTP server.
"""

from __future__ import annotations

import gc
import tracemalloc

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector


class DroppingSink:
    """Accepts every trajectory and keeps none (what a JSONL file is, as far as RAM goes)."""

    def __init__(self) -> None:
        self.count = 0

    def append(self, trajectory) -> None:
        self.count += 1


def test_heap_does_not_grow_with_trajectories_written():
    # One episode in flight, so each sample sees the same live state (the episode just finished) and
    # the difference is what the run kept; it measured +320 B per trajectory before the fix, about 0 after.
    first, last = 100, 700
    samples: dict[int, int] = {}
    sink = DroppingSink()

    def sample(_traj) -> None:
        if sink.count in (first, last):
            gc.collect()
            samples[sink.count] = tracemalloc.get_traced_memory()[0]

    collector = RolloutCollector(ScriptedLLMAgent(), sink=sink, env_config={"num_ticks": 2}, num_envs=1,
                                 on_trajectory=sample)
    tracemalloc.start()
    try:
        summary = collector.collect(last, seed=0)
    finally:
        tracemalloc.stop()
    assert summary.completed == last and sink.count == last
    per_trajectory = (samples[last] - samples[first]) / (last - first)
    assert per_trajectory < 150, f"the heap grew {per_trajectory:.0f} bytes per trajectory written"
    assert summary.quality["trajectories"] == last  # the summary still counts every trajectory


def test_summary_keeps_a_bounded_number_of_error_lines():
    from rlaif_gym.rollout import CollectionSummary

    summary = CollectionSummary()
    summary.add_errors(f"e{i}" for i in range(CollectionSummary.MAX_ERRORS + 25))
    assert summary.errors[0] == "e0" and len(summary.errors) == CollectionSummary.MAX_ERRORS
    assert summary.errors_omitted == 25
