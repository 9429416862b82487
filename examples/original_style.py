"""Rollouts written the way users of the original Babylon training package wrote them.

An `AgentRunner` that calls a model and returns `AgentTickData`, then `FastRolloutGenerator`,
then the quality report. Only the import lines differ from the original; the model here is the
offline scripted one (no server, no key), so the example runs anywhere:

    python examples/original_style.py                       # 4 agents, 20 ticks each
    python examples/original_style.py --agents 2 --ticks 8 --db sqlite:///runs.db

With `--db` every trajectory also lands in the original `trajectories` table.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import gymnasium as gym

import rlaif_gym  # noqa: F401  (registers RLAIF-Text-v0)
from rlaif_gym.llm import SamplingParams, ScriptedLLM
from rlaif_gym.rollout_generator import (
    Action,
    AgentTickData,
    EnvironmentState,
    FastRolloutGenerator,
    LLMCall,
    RolloutConfig,
    RolloutQualityValidator,
)


class ScriptedTradingAgent:
    """An AgentRunner: one model call per tick, its reply parsed into the tick's action."""

    def __init__(self, temperature: float = 0.7, seed: int = 0) -> None:
        self.model = ScriptedLLM()
        self.temperature = temperature
        self.seed = seed

    async def run_tick(self, agent_id: str, observation: dict, env_state: EnvironmentState) -> AgentTickData:
        system, prompt = observation["system_prompt"], observation["prompt"]
        params = SamplingParams(temperature=self.temperature, max_tokens=512, seed=self.seed + observation["tick"])
        completion = await self.model.complete([{"role": "system", "content": system},
                                                {"role": "user", "content": prompt}], params)
        reasoning, _, body = completion.text.partition("</think>")
        reasoning = reasoning.replace("<think>", "").strip()
        decision = json.loads(body)
        action_type = decision.pop("type")
        call = LLMCall(model=completion.model, system_prompt=system, user_prompt=prompt, response=completion.text,
                       reasoning=reasoning, temperature=self.temperature, max_tokens=512, purpose="action",
                       action_type=action_type)
        return AgentTickData(
            tick_number=observation["tick"], timestamp=observation["time"], observation=observation,
            environment_state=env_state, llm_calls=[call], reasoning_chain=reasoning,
            action=Action(action_type=action_type, parameters=decision, success=False, reasoning=reasoning),
        )


async def main(agents: int, ticks: int, parallel: int, database_url: str) -> int:
    config = RolloutConfig(max_ticks_per_agent=ticks, parallel_agents=parallel, database_url=database_url)
    generator = FastRolloutGenerator(config)
    runners = [(ScriptedTradingAgent(seed=1000 * i), f"agent-{i}") for i in range(agents)]
    results = await generator.generate_parallel_rollouts(runners, lambda: gym.make("RLAIF-Text-v0"))
    for result in results:
        valid, issues = RolloutQualityValidator.validate_rollout(result)
        print(f"{result.trajectory_id}: {result.ticks_completed} ticks, reward {result.total_reward:+.3f}, "
              f"PnL {result.final_pnl:+,.2f} USD, quality {result.quality_score:.2f}, "
              f"{'valid' if valid else 'invalid: ' + '; '.join(issues[:3])}")
    summary = RolloutQualityValidator.print_quality_report(results)
    return 0 if summary["valid"] == len(results) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=4, help="number of agents (one rollout each)")
    parser.add_argument("--ticks", type=int, default=20, help="ticks per rollout")
    parser.add_argument("--parallel", type=int, default=4, help="rollouts in flight at once")
    parser.add_argument("--db", default="", help="also write to this database, e.g. sqlite:///runs.db")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.agents, args.ticks, args.parallel, args.db)))
