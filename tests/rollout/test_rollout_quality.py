"""The rollout quality check reads the judge's format score, not the reward's format component.

The check: docs/babylon.md ("The original's rollout validation").

The default reward reports `format` as a penalty (0 for a clean reply) while the original scheme
reports the judge's [-1, 1]; the quality score of the same replies must not depend on the scheme.
"""

from __future__ import annotations

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.rollout import RolloutCollector, validate_trajectory


def _run(scheme: str):
    collector = RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 12, "reward_scheme": scheme},
                                 num_envs=2)
    collector.collect(episodes=2, seed=5)
    return sorted(collector.trajectories, key=lambda t: t.seed)


def test_quality_score_is_the_same_under_both_reward_schemes():
    skill, original = _run("skill"), _run("original")
    for a, b in zip(skill, original, strict=True):
        assert [s.reward_components["format"] for s in a.steps] == [0.0] * len(a.steps)  # clean: no penalty
        assert [s.reward_components["format"] for s in b.steps] == [1.0] * len(b.steps)  # the original's +1
        assert a.quality == b.quality and a.quality["valid"], (a.quality, b.quality)
        assert validate_trajectory(a).quality_score == validate_trajectory(b).quality_score > 0.7
