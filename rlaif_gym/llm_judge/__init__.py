"""AI feedback at trajectory level: an LLM judge with rubrics, group-relative scores and replayable judge tapes.

It reads rubrics and weights from `rlaif_gym.rewards`, calls the model through
`rlaif_gym.llm` (the same recording OpenAI-compatible client as the policy), and reads stored runs
through `rlaif_gym.storage`. It never steps an environment.

    from rlaif_gym.llm import OpenAIChatClient
    from rlaif_gym.llm_judge import JudgeConfig, JudgeTape, LLMJudge, judge_health

    judge = LLMJudge(OpenAIChatClient("Qwen/Qwen2.5-7B-Instruct", "http://127.0.0.1:8000/v1"),
                     config=JudgeConfig(mode="listwise"), tape=JudgeTape("judge.sqlite"))
    batch = judge.score(trajectories)          # scores, relative scores, every verdict
    print(format_health(judge_health(batch, trajectories)))
"""

from ..rewards.bradley_terry import BradleyTerryFit, fit_bradley_terry, outcomes_to_wins
from .health import INJECTION_PATTERNS, format_health, judge_health, spearman
from .judge import GroupJudgement, JudgeBatch, JudgeConfig, LLMJudge, TrajectoryJudgement, VerdictRecord
from .prompts import MODES, TEMPLATE_VERSION, load_template, render_messages, trajectory_data, trajectory_metrics
from .runner import JudgeRunResult, apply_judge_scores, judge_run, read_judge_scores, with_mode
from .tape import JudgeTape, TapeEntry, TapeFormatError, TapeIntegrityError, TapeMode, tape_key
from .verdicts import (
    AbsoluteVerdict,
    ListwiseVerdict,
    PairwiseVerdict,
    parse_absolute,
    parse_listwise,
    parse_pairwise,
    parse_verdict,
    verdict_constraint,
    verdict_gbnf,
)

__all__ = [
    "INJECTION_PATTERNS",
    "MODES",
    "TEMPLATE_VERSION",
    "AbsoluteVerdict",
    "BradleyTerryFit",
    "GroupJudgement",
    "JudgeBatch",
    "JudgeConfig",
    "JudgeRunResult",
    "JudgeTape",
    "LLMJudge",
    "ListwiseVerdict",
    "PairwiseVerdict",
    "TapeEntry",
    "TapeFormatError",
    "TapeIntegrityError",
    "TapeMode",
    "TrajectoryJudgement",
    "VerdictRecord",
    "apply_judge_scores",
    "fit_bradley_terry",
    "format_health",
    "judge_health",
    "judge_run",
    "load_template",
    "outcomes_to_wins",
    "parse_absolute",
    "parse_listwise",
    "parse_pairwise",
    "parse_verdict",
    "read_judge_scores",
    "render_messages",
    "spearman",
    "tape_key",
    "trajectory_data",
    "trajectory_metrics",
    "verdict_constraint",
    "verdict_gbnf",
    "with_mode",
]
