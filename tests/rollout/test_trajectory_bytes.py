"""The collector's records stay byte-identical when the tick's code is made leaner (issue 29).

A run of the collector (plain episodes on both world backends, an archetype's episode, and a GRPO fork group)
with a policy whose replies cover the parser's and the judge's paths: the scripted model's canonical
replies, the same reasoning in legacy layouts, an unclosed `<think>`, a reply that pastes the prompt,
one with false prices and unknown ids, garbage, and an empty reply. Every stored step is reduced to
digests of its parts (prompt, numeric observation, action, feedback, reward components, judge scores,
call record, everything else) and compared with `data/trajectory_digests.json`, written by the code before
the lean tick. Wall-clock fields (`durationMs`, `latencyMs`) and the package version are the only ones set aside.

The world's own numbers come from libm (exp, log, tanh), whose last bit may differ on another CPU or C
library. The fixture therefore also holds a digest of each episode's world (the numeric observations and
rewards): where the world differs from the fixture's machine the stored text digests cannot apply, and
the test says so and skips rather than blame the text layer. On the machine that wrote the fixture (and
CI's) the comparison runs.

Regenerate (only when a change is meant to change the records): `RLAIF_REGEN_DIGESTS=1 pytest
tests/rollout/test_trajectory_bytes.py`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlaif_gym.agents.llm import LLMAgent
from rlaif_gym.llm import SamplingParams, ScriptedLLM
from rlaif_gym.llm.types import Completion
from rlaif_gym.rollout import RolloutCollector

FIXTURE = Path(__file__).parent / "data" / "trajectory_digests.json"
REGEN = os.environ.get("RLAIF_REGEN_DIGESTS") == "1"
TICKS = 36


class VariedReplies:
    """The scripted model's reply, reshaped by the call's seed into one of nine kinds (deterministic)."""

    model = "varied-replies"

    def __init__(self) -> None:
        self.inner = ScriptedLLM()

    def describe(self) -> dict[str, Any]:
        return {"kind": "test", "model": self.model}

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        prompt = messages[-1]["content"]
        seed = params.seed or 0
        think, action = self.inner.decide(prompt, np.random.default_rng(seed))
        body = json.dumps(action)
        kind = seed % 9
        if kind == 0:
            text = f"<thinking>{think}</thinking>\n```json\n{body}\n```"
        elif kind == 1:
            text = f"<think>{think}\n{body}"  # unclosed think
        elif kind == 2:  # pastes the prompt's lines as its reasoning
            text = "<think>" + " ".join(prompt.splitlines()[2:9]) + f" so I act.</think>\n{body}"
        elif kind == 3:  # false prices, an unknown market and source, a contradiction
            text = (f"<think>market-999 is at 3.0¢ and market-1 trades at 97.5 cents. Bloomberg said so. {think} "
                    f"It is overpriced, bearish, unlikely to win.</think>\n{body}")
        elif kind == 4:
            text = "{\"type\": \"buy_prediction\", \"market\": " + body[:17]  # broken JSON
        elif kind == 5:
            text = ""
        elif kind == 6:
            text = f"<think>The evidence is mixed and unclear, so I wait.</think>\n{json.dumps({'type': 'wait'})}"
        else:
            text = f"<think>{think}</think>\n{body}"
        return Completion(text=text, model=self.model, finish_reason="stop")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _step_digests(step: dict) -> dict[str, str]:
    calls = [{k: v for k, v in c.items() if k != "latencyMs"} for c in step["llmCalls"]]
    parts = {
        "prompt": step["observation"]["text"], "numeric": step["observation"]["numeric"], "action": step["action"],
        "feedback": step["feedback"], "reward": [step["reward"], step["rewardComponents"]],
        "judge": step["judge"], "calls": calls,
    }
    rest = {k: v for k, v in step.items()
            if k not in ("observation", "action", "feedback", "reward", "rewardComponents", "judge", "llmCalls")}
    return {**{k: _digest(v) for k, v in parts.items()}, "rest": _digest(rest)}


def _record(traj: Any) -> dict:
    data = json.loads(traj.model_dump_json(by_alias=True))
    steps = data.pop("steps")
    data.pop("durationMs")
    data.pop("packageVersion")  # a release changes it, not the records
    return {
        "world": _digest([[s["observation"]["numeric"], s["reward"]] for s in steps]),
        "steps": [_step_digests(s) for s in steps],
        "trajectory": _digest(data),
    }


def _collector(**config: Any) -> RolloutCollector:
    agent = LLMAgent(VariedReplies(), SamplingParams(temperature=0.7, max_tokens=512), name="varied")
    return RolloutCollector(agent, env_config={"num_ticks": TICKS, **config}, num_envs=3, group_size=1,
                            run_name="bytes")


def _run() -> dict[str, dict]:
    records: dict[str, dict] = {}
    runs = [("numba", _collector(backend="numba"), 3), ("numpy", _collector(backend="numpy"), 1),
            ("trader", _collector(archetype="trader"), 1)]
    for name, collector, episodes in runs:
        collector.collect(episodes, seed=11)
        for traj in collector.trajectories:
            records[f"{name}/{traj.trajectory_id}"] = _record(traj)
    forks = _collector()
    forks.group_size = 3
    forks.collect_forks(1, seed=5, fork_tick=9, include_trunk=True)
    for traj in forks.trajectories:
        records[f"forks/{traj.trajectory_id}"] = _record(traj)
    return records


def test_records_are_byte_identical_to_the_fixture():
    records = _run()
    if REGEN:
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {FIXTURE}")
    expected = json.loads(FIXTURE.read_text())
    assert sorted(records) == sorted(expected)
    worlds = [name for name in records if records[name]["world"] != expected[name]["world"]]
    if worlds:
        pytest.skip(f"this machine's floating point gives other worlds than the fixture's ({worlds[:2]}); the text "
                    "layer's bytes can only be compared where the world is the same")
    for name, got in records.items():
        want = expected[name]
        assert len(got["steps"]) == len(want["steps"]), name
        for t, (g, w) in enumerate(zip(got["steps"], want["steps"], strict=True)):
            changed = [part for part in w if g[part] != w[part]]
            assert not changed, f"{name}, step {t}: {changed} differ from the fixture"
        assert got["trajectory"] == want["trajectory"], f"{name}: the trajectory's own fields differ"


def test_the_replies_reach_every_path():
    """The fixture would be weak if the varied replies did not reach the paths the lean tick touches."""
    expected = json.loads(FIXTURE.read_text())
    assert sum(len(r["steps"]) for r in expected.values()) >= 200
    collector = _collector()
    collector.collect(2, seed=11)
    steps = [s for t in collector.trajectories for s in t.steps]
    formats = {round(s.judge["format"], 2) for s in steps}
    assert -1.0 in formats and 1.0 in formats and len(formats) >= 4
    assert any(s.judge.get("copying", 1.0) < 1.0 for s in steps)
    assert any(s.judge.get("facts_wrong", 0.0) > 0 for s in steps)
    assert any(s.judge.get("contradiction", 0.0) > 0 for s in steps)
    kinds = {s.action.action_type for s in steps}
    assert {"invalid", "wait", "buy_prediction"} <= kinds and len(kinds) >= 5
