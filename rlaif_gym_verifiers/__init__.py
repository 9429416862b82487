"""The verifiers plugin `rlaif-gym-verifiers`: `rlaif_gym.integrations.verifiers` under the top-level name
that verifiers' loader imports (`vf-eval rlaif-gym-verifiers ...`). It exports exactly one Taskset, Env,
Harness and Judge, which is how verifiers finds each."""

from rlaif_gym.integrations.verifiers import (
    RLAIFChatHarness,
    RLAIFChatHarnessConfig,
    RLAIFEnvironment,
    RLAIFEnvironmentConfig,
    RLAIFJudge,
    RLAIFJudgeConfig,
    RLAIFTask,
    RLAIFTaskData,
    RLAIFTaskset,
    RLAIFTasksetConfig,
)

__all__ = [
    "RLAIFChatHarness",
    "RLAIFChatHarnessConfig",
    "RLAIFEnvironment",
    "RLAIFEnvironmentConfig",
    "RLAIFJudge",
    "RLAIFJudgeConfig",
    "RLAIFTask",
    "RLAIFTaskData",
    "RLAIFTaskset",
    "RLAIFTasksetConfig",
]
