"""`rlaif-gym eval` on decision points: one call per point and sample, every reply scored by the env, the baselines
played on the same states, and the scorecard written.

The run folder (`out`):

* `eval.json`: what is being scored (the set with its digest, the model, sampling, samples, seed); a resumed run
  must match it.
* `replies.jsonl`: one line per model reply as it arrives (the point, the sample, the reply text and the call's
  full record, the API key masked by the client), appended and flushed: a killed eval loses at most the calls in
  flight, and `resume=True` plays only what is missing. A failed call is a line too, with its error and an empty
  reply: it is scored as the env scores an empty reply (format-invalid, no action), never dropped.
* `points.jsonl`: per policy and point, each metric's mean over the point's replies (what `compare` pairs).
* `scorecard.json` (no timings: the same replies give the same bytes), `scorecard.md`, `timing.json`.

Drives an `LLMAgent` (agents) on decision points (envs).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..benchmark import cpu_model, load_average
from ..encoding.prompt import system_prompt
from ..envs.core import world_params
from ..envs.decisions import DecisionPoint, score_decision_replies
from ..errors import ConfigError
from ..llm.types import LLMError
from ..storage._files import atomic_write_bytes
from ..storage.lock import holds_run_folder
from .baselines import BASELINES, baseline_reply
from .scorecard import METRICS, build_scorecard, point_values, scorecard_markdown
from .sets import DecisionSet

__all__ = ["EvalResult", "run_decision_eval"]

RUN_FILES = ("eval.json", "replies.jsonl", "points.jsonl", "scorecard.json", "scorecard.md", "timing.json")
"""What an eval writes into its folder (and `overwrite` deletes, with `RUN_DIRS`: nothing else)."""
RUN_DIRS = ("episodes", "judge")
"""The folders an eval writes: the model's episodes (an episode set) and the judge validation (`--judge`)."""


@dataclass(frozen=True)
class EvalResult:
    """A finished eval: the scorecard (as written), its Markdown, the timings and the folder; the set's points and the
    model's replies (the lines of `replies.jsonl`, by point and sample)."""

    scorecard: dict[str, Any]
    markdown: str
    timing: dict[str, Any]
    out: Path
    points: tuple[DecisionPoint, ...] = ()
    replies: tuple[dict[str, Any], ...] = ()

    def first_replies(self) -> list[str]:
        """The model's first sample at each point (a failed call: the empty reply it is scored as)."""
        first = {r["point"]: r["reply"] for r in self.replies if r["sample"] == 0}
        return [first[i] for i in range(len(self.points))]


def _write(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8) atomically: a killed eval leaves the old file or the new one."""
    atomic_write_bytes(path, text.encode("utf-8"))


def call_seed(run_seed: int, point: DecisionPoint, sample: int) -> int:
    """The sampling seed of one call: fixed by the run's seed, the point's reset seed and the sample's index."""
    return int(np.random.SeedSequence([run_seed, point.seed, point.tick, sample]).generate_state(1)[0])


def _read_replies(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """The complete lines of `replies.jsonl` by (point, sample); a torn last line (a killed run) is skipped."""
    done: dict[tuple[int, int], dict[str, Any]] = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[(int(row["point"]), int(row["sample"]))] = row
    return done


def _prepare(out: Path, meta: dict[str, Any], resume: bool, overwrite: bool, started: bool | None = None) -> None:
    """Refuse to mix runs: a folder with another eval needs `resume` (same eval.json) or `overwrite`. `started`:
    whether the folder holds any of the model's work (default: a reply in replies.jsonl)."""
    meta_path = out / "eval.json"
    if started is None:
        started = bool(_read_replies(out / "replies.jsonl"))  # a refused preflight left none
    started = started and meta_path.exists()
    if started and not overwrite:
        if not resume:
            raise ConfigError(f"{out} already holds an eval; pass --resume to finish it or --overwrite to start over")
        try:
            before = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ConfigError(f"--resume: {out}/eval.json is not an eval's settings ({exc}); pass --overwrite to "
                              "start over") from None
        if before != meta:
            changed = sorted(k for k in meta.keys() | before.keys() if meta.get(k) != before.get(k))
            raise ConfigError(f"--resume: {out} holds an eval of other settings ({', '.join(changed)} differ); use "
                              "the same options, or another --out")
        return
    if overwrite or meta_path.exists():  # (without replies: nothing of it is lost)
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)
        for name in RUN_DIRS:
            shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    _write(meta_path, json.dumps(meta, sort_keys=True, indent=1))


async def _play(agent: Any, points: Sequence[DecisionPoint], todo: list[tuple[int, int]], *, seed: int,
                concurrency: int, sink: Callable[[dict[str, Any]], None], preflight: bool) -> None:
    """One call per (point, sample) of `todo`, `concurrency` in flight; each line goes to `sink` as it ends.

    With `preflight` the first call runs alone, and a server that cannot be reached at all stops the eval there
    (`ConfigError`) instead of recording every point as a failed call."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, k: int) -> dict[str, Any]:
        point = points[i]
        system = system_prompt(world_params(point.config), point.config.prompt_style)
        async with gate:
            try:
                reply, record = await agent.act(system, point.prompt, seed=call_seed(seed, point, k),
                                                call_id=f"{point.seed}/{point.tick}/{k}")
                error = error_type = None
            except LLMError as exc:
                reply, record, error, error_type = "", getattr(exc, "record", None), str(exc), exc.type
        return {"point": i, "sample": k, "seed": point.seed, "tick": point.tick, "reply": reply, "error": error,
                "error_type": error_type,
                "call": record.model_dump(mode="json", exclude_none=True) if record is not None else None}

    async def recorded(i: int, k: int) -> None:
        sink(await one(i, k))

    try:
        if preflight and todo:
            first = await one(*todo[0])
            if first["error_type"] == "APIConnectionError":
                where = agent.describe().get("base_url") or "the model server"
                raise ConfigError(f"{where} did not answer ({first['error']}); start the server (vllm serve, "
                                  "llama.cpp's server, ollama serve) or fix --base-url")
            sink(first)
            todo = todo[1:]
        await asyncio.gather(*(recorded(i, k) for i, k in todo))
    finally:
        await agent.aclose()


def _call_stats(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], list[float]]:
    """(counts and tokens of the calls, their latencies in seconds)."""
    calls = [r["call"] or {} for r in rows]
    return {"calls": len(rows), "failed": sum(r["error"] is not None for r in rows),
            "retried_attempts": sum(max(0, int(c.get("attempts", 1)) - 1) for c in calls),
            "prompt_tokens": sum(int(c.get("prompt_tokens") or 0) for c in calls),
            "completion_tokens": sum(int(c.get("completion_tokens") or 0) for c in calls)}, \
        [c["latency_ms"] / 1000.0 for c in calls if c.get("latency_ms") is not None]


@holds_run_folder("out", "an eval")  # one writer per run folder (docs/eval.md): a second eval into `out` is refused
def run_decision_eval(agent: Any, dset: DecisionSet, out: Path | str, *, samples: int = 1, seed: int = 0,
                      concurrency: int = 8, resume: bool = False, overwrite: bool = False,
                      command: Sequence[str] = (), preflight: bool = True,
                      describe: Mapping[str, Any] | None = None, log: Callable[[str], None] | None = None,
                      ) -> EvalResult:
    """Score `agent` (an `LLMAgent`: scripted, OpenAI-compatible, your own) on `dset`, beside the baselines.

    Args:
        agent: the policy; its `describe()` (no secrets) is recorded.
        dset: the set (`rlaif_gym.evals.decision_set`).
        out: the run folder (see the module docstring).
        samples: replies per point (> 1 with a temperature above 0; every interval is over points).
        seed: the run's seed: each call's sampling seed derives from it and the point (`call_seed`).
        concurrency: calls in flight.
        resume: finish an interrupted eval in `out` (same settings), calling only what is missing.
        overwrite: delete a previous eval's files in `out` first (only those: `RUN_FILES`).
        command: the command line, recorded in the scorecard.
        preflight: make the first call alone, and stop with a `ConfigError` if the server cannot be reached.
        describe: the model as the scorecard records it (default `agent.describe()`); e.g. without the port of a
            server started for this eval, so that two runs match.
        log: progress lines.

    Raises:
        ConfigError: a bad option, an `out` that holds another eval, or (with `preflight`) a server that cannot
            be reached; the message names the fix.
    """
    if samples < 1 or concurrency < 1:
        raise ConfigError(f"samples and concurrency must be >= 1, got {samples} and {concurrency}")
    say = log or (lambda line: None)
    out = Path(out)
    started = time.perf_counter()
    points = dset.build()
    described = dset.describe(points)
    say(f"set {dset.name}: {len(points)} decision points ({time.perf_counter() - started:.1f} s), digest "
        f"{described['digest'][:19]}")
    model = dict(describe) if describe is not None else agent.describe()
    meta = {"set": described, "model": model, "sampling": model.get("sampling", {}), "samples": samples,
            "seed": seed}
    _prepare(out, meta, resume, overwrite)
    path = out / "replies.jsonl"
    done = _read_replies(path)
    todo = [(i, k) for i in range(len(points)) for k in range(samples) if (i, k) not in done]
    say(f"{len(todo)} calls to make ({len(done)} already recorded)")
    with path.open("a", encoding="utf-8") as fh:
        def sink(row: dict[str, Any]) -> None:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
            fh.flush()
            done[(row["point"], row["sample"])] = row

        calls_started = time.perf_counter()
        asyncio.run(_play(agent, points, todo, seed=seed, concurrency=concurrency, sink=sink,
                          preflight=preflight))
        calls_s = time.perf_counter() - calls_started
    rows = [done[key] for key in sorted(done)]
    # Every policy's replies in one call, so each point's clean wait is played once for all of them.
    named = [("model", r["point"], r["reply"]) for r in rows]
    named += [(name, i, baseline_reply(name, p)) for name in BASELINES for i, p in enumerate(points)]
    scored = score_decision_replies(points, [(i, reply) for _, i, reply in named])
    values = {name: point_values([r for (policy, _, _), r in zip(named, scored, strict=True) if policy == name])
              for name in ("model", *BASELINES)}
    stats, latencies = _call_stats(rows)
    card, markdown, timing = _finish(out, values, [p.seed for p in points], {**meta, "calls": stats},
                                     command=command, metrics=METRICS, started=started, calls_s=calls_s,
                                     latencies=latencies)
    return EvalResult(card, markdown, timing, out, tuple(points), tuple(rows))


def _finish(out: Path, values: Mapping[str, Mapping[int, Mapping[str, float]]], seeds: Sequence[int],
            meta: Mapping[str, Any], *, command: Sequence[str], metrics: Sequence[str], started: float,
            calls_s: float, latencies: Sequence[float]) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """Write points.jsonl, scorecard.json, timing.json and scorecard.md; return (scorecard, Markdown, timing)."""
    card = build_scorecard(values, meta={**meta, "command": list(command)}, metrics=metrics)
    _write(out / "points.jsonl", "".join(
        json.dumps({"policy": name, "point": p, "seed": seeds[p], **v}, sort_keys=True) + "\n"
        for name, per_point in values.items() for p, v in per_point.items()))
    _write(out / "scorecard.json", json.dumps(card, sort_keys=True, indent=1) + "\n")
    timing = {"wall_s": time.perf_counter() - started, "calls_s": calls_s,
              "latency_median_s": statistics.median(latencies) if latencies else 0.0,
              "latency_p90_s": float(np.quantile(latencies, 0.9)) if latencies else 0.0,
              "cpu_model": cpu_model(), "load_average": load_average()}
    _write(out / "timing.json", json.dumps(timing, indent=1) + "\n")
    markdown = scorecard_markdown(card, timing)
    _write(out / "scorecard.md", markdown + "\n")
    return card, markdown, timing
