"""The rollout collector: drive text envs against LLM policies and record every tick."""

from .collector import (
    CollectionSummary,
    EpisodeSpec,
    ForkGroup,
    RolloutCollector,
    TrajectorySink,
    build_trajectory,
    call_seed,
)
from .quality import QualityReport, summarize_quality, validate_trajectory

__all__ = [
    "CollectionSummary",
    "EpisodeSpec",
    "ForkGroup",
    "QualityReport",
    "RolloutCollector",
    "TrajectorySink",
    "build_trajectory",
    "call_seed",
    "summarize_quality",
    "validate_trajectory",
]
