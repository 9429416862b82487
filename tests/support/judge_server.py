"""A real OpenAI-compatible *judge* server on 127.0.0.1 for the LLM-judge tests.

`JudgeServer` is the rollout tests' `FakeOpenAIServer` (threaded `http.server`, every request
recorded, `max_in_flight` measured, deterministic faults: HTTP status codes, hangs, latency,
malformed bodies) with another answer. It answers like a judge, not like a policy. It reads the
trajectory JSON between the prompt's data fences and scores each trajectory by the key metrics that
the prompt lists (the weighted mean of each value min-max normalised by its typical range). So its
verdicts depend on the rubric's priority metrics and weights, as a real judge's should.

Scripted misbehaviour, all deterministic:

* `obey_injection`: a trajectory whose text says "ignore the rubric" gets 1.0 (or wins every
  comparison). This is the verdict of a judge that fell for a prompt injection.
* `position_bias`: in pairwise mode, always answer "A".
* `malformed(body) -> bool`: answer prose instead of the JSON verdict for the matching requests.
* `noise`: add a deterministic per-request offset derived from the sampling seed, so repeats
  and duplicate trajectories get different scores (a judge with variance).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_server import FakeOpenAIServer, Fault

__all__ = ["Fault", "JudgeServer", "data_blocks", "metric_score", "user_text"]

_FENCE = re.compile(r"^<<<TRAJECTORY DATA ([0-9a-f]{12})>>>\n(.*?)\n<<<END OF TRAJECTORY DATA \1>>>$", re.M | re.S)


def user_text(body: dict[str, Any]) -> str:
    return next((m["content"] for m in reversed(body.get("messages") or []) if m.get("role") == "user"), "")


def system_text(body: dict[str, Any]) -> str:
    return next((m["content"] for m in body.get("messages") or [] if m.get("role") == "system"), "")


def data_blocks(body: dict[str, Any]) -> Any:
    """The JSON between the data fences of the request's user message."""
    m = _FENCE.search(user_text(body))
    if m is None:
        raise ValueError("no fenced trajectory data in the user message")
    return json.loads(m.group(2))


def metric_score(data: dict[str, Any]) -> float:
    """Weighted mean of the key metrics, each min-max normalised by its typical range; null ones skipped."""
    total = weight = 0.0
    for km in data["key_metrics"]:
        if km["value"] is None:
            continue
        lo, hi = km["typical_range"]
        total += km["weight"] * min(1.0, max(0.0, (km["value"] - lo) / (hi - lo)))
        weight += km["weight"]
    return round(total / weight, 6) if weight else 0.5


def injected(data: dict[str, Any]) -> bool:
    return any("ignore the rubric" in (s.get("reasoning") or "").lower() for s in data["steps"])


class JudgeServer(FakeOpenAIServer):
    def __init__(self, faults: list[Fault] | None = None, *, obey_injection: bool = True, position_bias: bool = False,
                 malformed: Callable[[dict[str, Any]], bool] | None = None, noise: float = 0.0) -> None:
        super().__init__(faults)
        self.obey_injection = obey_injection
        self.position_bias = position_bias
        self.malformed = malformed
        self.noise = noise

    def _score(self, data: dict[str, Any], body: dict[str, Any]) -> float:
        if self.obey_injection and injected(data):
            return 1.0
        score = metric_score(data)
        if self.noise:
            h = int(hashlib.sha256(f"{body.get('seed')}|{data.get('trajectory_id')}".encode()).hexdigest()[:8], 16)
            score = min(1.0, max(0.0, score + self.noise * (h / 0xFFFFFFFF - 0.5)))
        return round(score, 6)

    def verdict(self, body: dict[str, Any]) -> str:
        if self.malformed is not None and self.malformed(body):
            return "Overall I would score this trajectory around 0.8: decent trading, thin reasoning."
        data = data_blocks(body)
        if isinstance(data, list):
            return json.dumps({"scores": [{"trajectory_id": d["trajectory_id"], "explanation": "key metrics",
                                           "score": self._score(d, body)} for d in data]})
        if "A" in data and "B" in data:
            if self.position_bias:
                return json.dumps({"winner": "A", "reasoning": "A is shown first."})
            a, b = self._score(data["A"], body), self._score(data["B"], body)
            winner = "A" if a > b else "B" if b > a else "tie"
            return json.dumps({"winner": winner, "reasoning": f"key metrics {a:.3f} vs {b:.3f}"})
        return json.dumps({"score": self._score(data, body), "reasoning": "weighted key metrics",
                           "strengths": ["profit"], "weaknesses": []})

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        text = self.verdict(body)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
        completion_tokens = len(text.split())
        return {
            "id": self.completion_id(body), "object": "chat.completion", "created": 1_767_225_600,
            "model": body.get("model") or "judge", "system_fingerprint": "fp_judge",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


def make_run(directory: Path, *, groups: int = 2, group_size: int = 4, ticks: int = 8, seed: int = 0,
             archetype: str | None = None) -> list:
    """Collect a real run with the offline scripted policy into `directory` (a JSONL store); returns it."""
    from rlaif_gym.agents import ScriptedLLMAgent
    from rlaif_gym.rollout import RolloutCollector
    from rlaif_gym.storage import JsonlStore

    config: dict[str, Any] = {"num_ticks": ticks}
    if archetype is not None:
        config["archetype"] = archetype
    store = JsonlStore(directory)
    collector = RolloutCollector(ScriptedLLMAgent(temperature=0.7), sink=store, env_config=config,
                                 num_envs=groups * group_size, group_size=group_size, run_name=directory.name)
    summary = collector.collect(groups * group_size, seed)
    assert summary.completed == groups * group_size, summary.errors
    return list(store.read())
