"""Helpers of the report tests: a scripted chat client and collection into a run directory."""

from __future__ import annotations

import re
from pathlib import Path

from rlaif_gym.agents import LLMAgent
from rlaif_gym.llm import LLMError
from rlaif_gym.llm.types import Completion, SamplingParams
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore

SMALL_WORLD = {"market_duration_min": 4, "market_duration_max": 8}
"""Short-lived markets, so that a few ticks see resolutions."""

HOSTILE = '</script><script>alert(1)</script><img src=x onerror="alert(2)"> & "quotes"'
"""Untrusted text that must show as text in the report, never run."""


class TapeClient:
    """A chat client that answers each tick from a script: tick -> reply text, or an exception to raise."""

    model = "tape-model"

    def __init__(self, script: dict[int, str | Exception], default: str) -> None:
        self.script, self.default = script, default

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        prompt = messages[-1]["content"]
        tick = int(re.search(r"hour (\d+) of", prompt).group(1))
        answer = self.script.get(tick, self.default)
        if isinstance(answer, Exception):
            raise answer
        return Completion(text=answer, model=self.model, finish_reason="stop", prompt_tokens=len(prompt) // 4,
                          completion_tokens=len(answer) // 4, total_tokens=(len(prompt) + len(answer)) // 4)

    def describe(self) -> dict:
        return {"kind": "tape", "model": self.model}


def collect(out: Path, agent, episodes: int, max_ticks: int, run_name: str, seed: int = 0) -> Path:
    """Collect a run with the real collector into a JsonlStore directory."""
    collector = RolloutCollector(agent, sink=JsonlStore(out), env_config=SMALL_WORLD, num_envs=episodes,
                                 max_ticks=max_ticks, run_name=run_name)
    summary = collector.collect(episodes, seed)
    assert summary.planned == episodes
    return out


def hostile_agent() -> LLMAgent:
    """Replies with errors of every kind: hostile reasoning, no action, a refused trade, a failed call."""
    script: dict[int, str | Exception] = {
        0: f"<think>{HOSTILE} market-0 looks cheap at this price.</think>\n"
           '{"type": "buy_prediction", "market": "market-0", "outcome": "YES", "amount": 100}',
        1: "I will not answer in the format. " + HOSTILE,
        2: '<think>Try a market that does not exist.</think>\n'
           '{"type": "buy_prediction", "market": "market-999", "outcome": "NO", "amount": 50}',
        5: LLMError("the tape server timed out", type_="timeout", retryable=True, attempts=3),
    }
    return LLMAgent(TapeClient(script, '<think>Nothing to do.</think>\n{"type": "wait"}'), name="tape")
