"""The port of the original Babylon system's formulas, kept for comparison: one compatibility package.

rlaif_gym's own design does not call these; they reproduce the original's numbers, with its
documented defects fixed (docs/babylon.md ("The original's defects")), so that scores and rewards
can be set beside the original's:

- `quality`: the original's quality heuristics (tick quality, response format, the QualityScorer),
  docs/babylon.md ("The original's quality heuristics"). The text env's judge is
  `judge.rules.RuleJudge` instead.
- `rewards`: the original's reward helpers (primitive rewards, the composite, the ranking helpers,
  the normalizer), docs/babylon.md ("The original's reward formulas"). The envs' reward is
  `rewards.composite.RewardFunction`, whose `reward_scheme="original"` reproduces the original's
  per-tick composite over a step's transition.

Where code written for the original imports these today, it still can, and gets the same objects:
`rlaif_gym.judge` and `rlaif_gym.judge.legacy` forward the quality names, `rlaif_gym.rewards` and
`rlaif_gym.rewards.original` the reward helpers (tests/babylon/test_compat_imports.py holds the
list). The original's API faces, `rlaif_gym.rlaif_env` and `rlaif_gym.rollout_generator`, sit at the
top of the package because they drive the envs; the original's archetype machinery stays in
`rewards.archetypes`, which the behaviour component and the LLM judge use.

The standard library and numpy only, below `rewards` and `judge`, which forward its names
(docs/layout.md ("Import layers")).
"""

from .quality import (
    ANALYSIS_TERMS,
    BEARISH_WORDS,
    BULLISH_WORDS,
    CONCLUSION_MARKERS,
    DECISION_TERMS,
    MARKET_TERMS,
    REQUIRED_ACTION_FIELDS,
    RISK_TERMS,
    TICK_QUALITY_WEIGHTS,
    VALID_ACTION_TYPES,
    WAIT_WORDS,
    DifficultyTick,
    FormatReport,
    LengthPenalties,
    QualityScore,
    TrajectoryDifficulty,
    archetype_quality_bonus,
    assess_trajectory_difficulty,
    calculate_detailed_tick_quality,
    calculate_tick_quality_score,
    calculate_trajectory_quality_score,
    check_reasoning_action_alignment,
    check_reasoning_coherence,
    combined_format_score,
    execution_score,
    extract_action_json,
    length_penalties,
    quality_total,
    score_action_json,
    score_length,
    score_reasoning_quality,
    score_response,
    validate_response_format,
    validate_think_tags,
    validate_xml_structure,
)
from .rewards import (
    BANKRUPTCY_REWARD,
    DEFAULT_LEGACY_WEIGHTS,
    PNL_SCALE,
    RISK_EXPOSURE_THRESHOLD,
    RISK_PENALTY,
    RISKY_ACTION_TOKENS,
    RewardNormalizer,
    TrajectoryRewardInputs,
    action_quality_reward,
    calculate_pnl_reward,
    calculate_risk_reward,
    clip,
    composite_reward,
    efficiency_reward,
    is_bankrupt,
    pairwise_preferences_to_scores,
    pnl_reward,
    ranking_to_scores,
    relative_scores,
    risk_adjusted_reward,
)

__all__ = [
    "ANALYSIS_TERMS",
    "BANKRUPTCY_REWARD",
    "BEARISH_WORDS",
    "BULLISH_WORDS",
    "CONCLUSION_MARKERS",
    "DECISION_TERMS",
    "DEFAULT_LEGACY_WEIGHTS",
    "MARKET_TERMS",
    "PNL_SCALE",
    "REQUIRED_ACTION_FIELDS",
    "RISKY_ACTION_TOKENS",
    "RISK_EXPOSURE_THRESHOLD",
    "RISK_PENALTY",
    "RISK_TERMS",
    "TICK_QUALITY_WEIGHTS",
    "VALID_ACTION_TYPES",
    "WAIT_WORDS",
    "DifficultyTick",
    "FormatReport",
    "LengthPenalties",
    "QualityScore",
    "RewardNormalizer",
    "TrajectoryDifficulty",
    "TrajectoryRewardInputs",
    "action_quality_reward",
    "archetype_quality_bonus",
    "assess_trajectory_difficulty",
    "calculate_detailed_tick_quality",
    "calculate_pnl_reward",
    "calculate_risk_reward",
    "calculate_tick_quality_score",
    "calculate_trajectory_quality_score",
    "check_reasoning_action_alignment",
    "check_reasoning_coherence",
    "clip",
    "combined_format_score",
    "composite_reward",
    "efficiency_reward",
    "execution_score",
    "extract_action_json",
    "is_bankrupt",
    "length_penalties",
    "pairwise_preferences_to_scores",
    "pnl_reward",
    "quality_total",
    "ranking_to_scores",
    "relative_scores",
    "risk_adjusted_reward",
    "score_action_json",
    "score_length",
    "score_reasoning_quality",
    "score_response",
    "validate_response_format",
    "validate_think_tags",
    "validate_xml_structure",
]
