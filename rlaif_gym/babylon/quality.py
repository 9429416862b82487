r"""The original Babylon quality heuristics, reproduced as pure functions for comparability.

Design note. This module (`judge.legacy` forwards to it, for old imports) ports three files of
the original training pipeline (`quality_utils.py`, `format_validator.py`, `quality_scorer.py`;
docs/babylon.md ("The original's quality heuristics")) so that scores produced in rlaif_gym can be
set beside the original's, number for number. It is *not* the judge that rlaif_gym trains with: the
hardened rule judge is `judge.rules.RuleJudge`, which is free to change the rules; this module is not.

Only three defects of the original (docs/babylon.md ("The original's defects", 5 and 8)) are fixed
here, and each fix is documented on the function it touches:

1. every keyword list is matched on word boundaries (regex ``\b``) instead of as substrings, so
   "long" no longer matches "belong", "buy" not "buyer", "sell" not "seller"; a multi-word phrase
   ("need more data") matches as a phrase, with any run of whitespace between its words;
2. directional alignment takes the action's side into account (a SHORT perp or a NO prediction is
   bearish);
3. the unreachable -0.5 tier of `validate_xml_structure` is made reachable.

Everything else, the odd parts included (a lone hyphen counts as "structure", a sentence is a
". "-separated chunk, ``fmt`` lives in [-1, 0.5] while the other scores live in [0, 1]), is kept.

Every function is pure and deterministic, and never raises on any string input (empty, a megabyte,
any unicode, broken JSON): it returns the documented worst score instead. Two regexes of the original
that go quadratic on adversarial input (the think-tag extraction and the list-marker search) are
replaced by linear equivalents that give the same answers.

The port is one module per original file, and this module gathers their names: `keywords` (the
keyword lists and the word-boundary matching they share), `tick_quality` (`quality_utils.py`),
`format_validator` (`format_validator.py`) and `quality_scorer` (`quality_scorer.py`).

Standard library only (layer L2, below `judge`, which forwards these names).
"""

from __future__ import annotations

from .format_validator import (
    REQUIRED_ACTION_FIELDS,
    VALID_ACTION_TYPES,
    FormatReport,
    extract_action_json,
    score_action_json,
    score_length,
    score_reasoning_quality,
    validate_response_format,
    validate_think_tags,
)
from .keywords import (
    ANALYSIS_TERMS,
    BEARISH_WORDS,
    BULLISH_WORDS,
    CONCLUSION_MARKERS,
    DECISION_TERMS,
    MARKET_TERMS,
    RISK_TERMS,
    WAIT_WORDS,
)
from .quality_scorer import (
    LengthPenalties,
    QualityScore,
    archetype_quality_bonus,
    combined_format_score,
    execution_score,
    length_penalties,
    quality_total,
    score_response,
)
from .tick_quality import (  # noqa: F401 (Direction and CurriculumLevel: the type aliases old imports name)
    TICK_QUALITY_WEIGHTS,
    CurriculumLevel,
    DifficultyTick,
    Direction,
    TrajectoryDifficulty,
    assess_trajectory_difficulty,
    calculate_detailed_tick_quality,
    calculate_tick_quality_score,
    calculate_trajectory_quality_score,
    check_reasoning_action_alignment,
    check_reasoning_coherence,
    validate_xml_structure,
)

__all__ = [
    "ANALYSIS_TERMS",
    "BEARISH_WORDS",
    "BULLISH_WORDS",
    "CONCLUSION_MARKERS",
    "DECISION_TERMS",
    "MARKET_TERMS",
    "REQUIRED_ACTION_FIELDS",
    "RISK_TERMS",
    "TICK_QUALITY_WEIGHTS",
    "VALID_ACTION_TYPES",
    "WAIT_WORDS",
    "DifficultyTick",
    "FormatReport",
    "LengthPenalties",
    "QualityScore",
    "TrajectoryDifficulty",
    "archetype_quality_bonus",
    "assess_trajectory_difficulty",
    "calculate_detailed_tick_quality",
    "calculate_tick_quality_score",
    "calculate_trajectory_quality_score",
    "check_reasoning_action_alignment",
    "check_reasoning_coherence",
    "combined_format_score",
    "execution_score",
    "extract_action_json",
    "length_penalties",
    "quality_total",
    "score_action_json",
    "score_length",
    "score_reasoning_quality",
    "score_response",
    "validate_response_format",
    "validate_think_tags",
    "validate_xml_structure",
]
