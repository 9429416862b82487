"""`rlaif-gym eval` on decision points: one call per point and sample, every reply scored by the env, the baselines
played on the same states, and the scorecard written.

The run folder (`out`):

* `eval.json`: what is being scored (the set with its digest, the model, sampling, samples, seed); a resumed run
  must match it.
* `replies.jsonl`: one line per model reply as it arrives (the point, the sample, the reply text and the call's
  full record, the API key masked by the client), appended and flushed: a killed eval loses at most the calls in
  flight, and `resume=True` plays only what is missing. Read back, every line is checked as input (`EvalFileError`
  for a line no eval writes: a point outside the set, a row moved to another point, a second row of a call).
* A failed call (after the client's retries) is a line too, with its error and an empty reply, but it is an outage,
  not the model's answer: it is counted apart (`calls.failed`) and never scored. An eval with failed calls writes
  no scorecard and raises `FailedCallsError`, unless `allow_failed_calls=True`, which scores the model on the calls
  it answered (its rows then hold fewer points). `resume=True, retry_failed=True` moves the failed lines to
  `retried-failures.jsonl` and makes those calls again.
* `points.jsonl`: per policy and point, each metric's mean over the point's answered replies (what `compare` pairs).
* `scorecard.json` (no timings: the same replies give the same bytes), `scorecard.md`, `timing.json`.

The first call is made alone (`preflight`): a server that cannot be reached, that answers it with an error, or that
accepts the connection and says nothing for longer than its timeout plus `FIRST_CALL_GRACE_S`, stops the eval there
with a `ConfigError` naming the server, before anything is recorded.

Drives an `LLMAgent` (agents) on decision points (envs).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..benchmark import cpu_model, load_average
from ..envs.decisions import DecisionPoint, score_decision_replies
from ..envs.text_env import text_system_prompt
from ..errors import ConfigError, RLAIFError
from ..llm.types import LLMError
from ..storage._files import atomic_write_bytes
from ..storage.jsonl import SET_ASIDE_NAME
from ..storage.lock import holds_run_folder
from .baselines import BASELINES, baseline_reply
from .scorecard import METRICS, EvalFileError, _kind, build_scorecard, point_values, scorecard_markdown, strict_json
from .sets import DecisionSet

__all__ = ["FIRST_CALL_GRACE_S", "MAX_CALLS", "MAX_SAMPLES", "EvalResult", "FailedCallsError", "run_decision_eval"]

RUN_FILES = ("eval.json", "replies.jsonl", SET_ASIDE_NAME, "points.jsonl", "scorecard.json", "scorecard.md",
             "timing.json")
"""What an eval writes into its folder (and `overwrite` deletes, with `RUN_DIRS`: nothing else)."""
RUN_DIRS = ("episodes", "judge")
"""The folders an eval writes: the model's episodes (an episode set) and the judge validation (`--judge`)."""
MAX_SAMPLES = 64
"""`samples` (--samples) at most: replies per point; a point's mean over 64 replies is already far tighter than the
interval over points, and every (point, sample) is one call and one line of `replies.jsonl`."""
MAX_CALLS = 20_000
"""Points times samples at most: the calls of one eval, each a line of `replies.jsonl` (a few KB with its record)
held in memory while the eval scores them (e.g. 200 points x 64 samples, or 2,000 points x 10)."""
FIRST_CALL_GRACE_S = 10.0
"""The first call must be answered within the client's timeout per attempt (`timeout_s`) plus this (the backoffs
of retried fast failures, e.g. a 503 while the server loads its model); a server that accepts the connection and
says nothing longer stops the eval there, instead of running every call out at its full retries."""


class FailedCallsError(RLAIFError, RuntimeError):
    """Calls of an eval failed after their retries (an outage, not the model's replies), so no scorecard was
    written; the replies are kept, and a resumed eval with `retry_failed` makes the failed calls again.

    Attributes:
        out: the run folder.
        failed: failed calls.
        calls: calls recorded.
    """

    def __init__(self, out: Path, failed: int, calls: int, first_error: str, *, where: str, unit: str = "calls",
                 retried: str = "it makes only the failed calls again") -> None:
        self.out, self.failed, self.calls = out, failed, calls
        super().__init__(
            f"{failed} of {calls} {unit} failed (first: {first_error[:200]}); a failed call is an outage, not the "
            f"model's reply, so no scorecard was written. The replies are kept in {where}: once the server answers, "
            f"run the same command with --resume --retry-failed ({retried}), or add --allow-failed-calls to score the "
            "model on what it answered")


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

    def first_replies(self) -> list[str | None]:
        """The model's first answered reply at each point (its lowest answered sample); None at a point none of whose
        calls was answered (an eval with `allow_failed_calls`)."""
        first: dict[int, str] = {}
        for r in sorted(self.replies, key=lambda r: (r["point"], r["sample"])):
            if r["error"] is None:
                first.setdefault(r["point"], r["reply"])
        return [first.get(i) for i in range(len(self.points))]


def _write(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8) atomically: a killed eval leaves the old file or the new one."""
    atomic_write_bytes(path, text.encode("utf-8"))


def call_seed(run_seed: int, point: DecisionPoint, sample: int) -> int:
    """The sampling seed of one call: fixed by the run's seed, the point's reset seed and the sample's index."""
    return int(np.random.SeedSequence([run_seed, point.seed, point.tick, sample]).generate_state(1)[0])


def _has_replies(path: Path) -> bool:
    """Whether `replies.jsonl` holds a complete line (the model's work: a refused preflight leaves none)."""
    try:
        with path.open("rb") as fh:
            return any(line.endswith(b"\n") and line.strip() for line in fh)
    except FileNotFoundError:
        return False


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _row_problem(row: Any, points: Sequence[DecisionPoint], samples: int, run_seed: int) -> str | None:
    """What is wrong with one line of `replies.jsonl` for this eval (None: it is a line this eval writes)."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {_kind(row)}"
    i, k = row.get("point"), row.get("sample")
    if not _int(i) or not 0 <= i < len(points):
        return (f"expected \"point\", an integer in [0, {len(points) - 1}] (the set's {len(points)} points), got "
                f"{_kind(i)}")
    if not _int(k) or not 0 <= k < samples:
        return f"expected \"sample\", an integer in [0, {samples - 1}] (--samples {samples}), got {_kind(k)}"
    point = points[i]
    if row.get("seed") != point.seed or row.get("tick") != point.tick or not _int(row.get("seed")) \
            or not _int(row.get("tick")):
        return (f"point {i} is the state of seed {point.seed} at tick {point.tick}, the line says seed "
                f"{_kind(row.get('seed'))}, tick {_kind(row.get('tick'))}")
    reply, error, error_type = row.get("reply"), row.get("error"), row.get("error_type")
    if not isinstance(reply, str):
        return f"expected \"reply\", a string, got {_kind(reply)}"
    if error is not None and (not isinstance(error, str) or reply != ""):
        return f"expected \"error\", null or (a failed call, whose reply is empty) a string, got {_kind(error)}"
    if error_type is not None and not isinstance(error_type, str):
        return f"expected \"error_type\", null or a string, got {_kind(error_type)}"
    call = row.get("call")
    if call is None:
        return None
    if not isinstance(call, dict):
        return f"expected \"call\", null or the call's record (an object), got {_kind(call)}"
    attempts = call.get("attempts", 1)
    if not _int(attempts) or not 1 <= attempts <= 1_000_000:
        return f"expected \"call\".\"attempts\", an integer >= 1, got {_kind(attempts)}"
    for name in ("prompt_tokens", "completion_tokens"):
        value = call.get(name)
        if value is not None and (not _int(value) or not 0 <= value < 2**63):
            return f"expected \"call\".\"{name}\", null or an integer >= 0, got {_kind(value)}"
    latency = call.get("latency_ms")
    if latency is not None and (isinstance(latency, bool) or not isinstance(latency, (int, float))
                                or not math.isfinite(latency) or latency < 0):
        return f"expected \"call\".\"latency_ms\", null or a finite number >= 0, got {_kind(latency)}"
    if "seed" in call and call["seed"] != call_seed(run_seed, point, k):
        return (f"the call of point {i}, sample {k} was made with the seed {call_seed(run_seed, point, k)}, the line "
                f"says {_kind(call['seed'])}")
    return None


def _read_replies(path: Path, points: Sequence[DecisionPoint], samples: int, run_seed: int,
                  ) -> tuple[dict[tuple[int, int], dict[str, Any]], int | None]:
    """The lines of `replies.jsonl` by (point, sample), each checked as input (`EvalFileError`: a line that is not
    JSON, not this eval's, or a second line of one call), and where a killed eval tore the last line: its length
    without it (None: nothing torn). A last line without its newline that parses is kept."""
    done: dict[tuple[int, int], dict[str, Any]] = {}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return done, None
    fix = ("the file is not as the eval wrote it (edited, or from another eval): pass --overwrite to start the eval "
           "over, or restore the file")
    lines = data.split(b"\n")
    tail, torn = lines.pop(), None  # the tail is b"" when the file ends with a newline
    if tail:
        try:
            strict_json(tail.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):  # a prefix of a JSON line never parses: a torn last write
            torn = len(data) - len(tail)
        else:
            lines.append(tail)
    for number, raw in enumerate(lines, 1):
        try:
            row = strict_json(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise EvalFileError(path, number, f"not a JSON line ({exc})", fix) from None
        problem = _row_problem(row, points, samples, run_seed)
        if problem is not None:
            raise EvalFileError(path, number, problem, fix)
        key = (row["point"], row["sample"])
        if key in done:
            raise EvalFileError(path, number, f"a second line of point {key[0]}, sample {key[1]} (one call, one line)",
                                fix)
        done[key] = row
    return done, torn


def _prepare(out: Path, meta: dict[str, Any], resume: bool, overwrite: bool, started: bool | None = None) -> None:
    """Refuse to mix runs: a folder with another eval needs `resume` (same eval.json) or `overwrite`. `started`:
    whether the folder holds any of the model's work (default: a reply in replies.jsonl)."""
    meta_path = out / "eval.json"
    if started is None:
        started = _has_replies(out / "replies.jsonl")  # a refused preflight left none
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


def _server(agent: Any) -> str:
    """The agent's server as a message names it (its URL, credentials stripped)."""
    return str(agent.describe().get("base_url") or "the model server")


def first_call_limit(agent: Any) -> float | None:
    """Seconds the first call may take: the client's timeout per attempt plus `FIRST_CALL_GRACE_S` (None: a client
    without a timeout, e.g. the scripted model)."""
    timeout = agent.describe().get("timeout_s")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
        return None
    return float(timeout) + FIRST_CALL_GRACE_S


async def first_call(agent: Any, call: Awaitable[Any]) -> Any:
    """Await the eval's first call (`call`, made alone) and return its result; stop the eval with a one-line
    `ConfigError` naming the server and the fix when the server cannot be reached, answers it with an error after
    the client's retries, or accepts it and says nothing within `first_call_limit` (nothing has been recorded yet,
    so the fixed command needs no --overwrite)."""
    where, limit = _server(agent), first_call_limit(agent)
    timeout = agent.describe().get("timeout_s")
    per_attempt = f"--timeout {timeout:g} s" if limit is not None else "the client's timeout"
    silent = (f"; nothing was recorded. Check that the server is serving (its log; curl {where}/models) and that "
              "--base-url names it, or raise --timeout for a model slow to answer")
    try:
        return await asyncio.wait_for(call, limit)
    except asyncio.TimeoutError:
        raise ConfigError(f"{where} accepted the first call but sent no answer in {limit:g} s ({per_attempt} plus "
                          f"{FIRST_CALL_GRACE_S:g} s for retries){silent}") from None
    except LLMError as exc:
        if exc.type == "APIConnectionError":
            raise ConfigError(f"{where} did not answer ({exc}); start the server (vllm serve, llama.cpp's server, "
                              "ollama serve) or fix --base-url") from None
        if exc.type == "APITimeoutError":
            raise ConfigError(f"{where} accepted the first call but sent no answer in {exc.attempts} attempt(s) of "
                              f"{per_attempt}{silent}") from None
        raise ConfigError(f"{where} answered the first call with an error after {exc.attempts} attempt(s) "
                          f"({exc.type}: {str(exc)[:200]}); nothing was recorded. Fix the server or the options "
                          "(--model, --constrain, --max-tokens) and run again") from None


async def _play(agent: Any, points: Sequence[DecisionPoint], todo: list[tuple[int, int]], *, seed: int,
                concurrency: int, sink: Callable[[dict[str, Any]], None], preflight: bool) -> None:
    """One call per (point, sample) of `todo`, `concurrency` in flight; each line goes to `sink` as it ends.

    With `preflight` the first call runs alone (`first_call`): a server that cannot be reached, fails it or never
    answers it stops the eval there (`ConfigError`) instead of recording every point as a failed call."""
    gate = asyncio.Semaphore(concurrency)

    def call(i: int, k: int) -> Awaitable[tuple[str, Any]]:
        point = points[i]
        system = text_system_prompt(point.config)
        return agent.act(system, point.prompt, seed=call_seed(seed, point, k), call_id=f"{point.seed}/{point.tick}/{k}")

    def line(i: int, k: int, reply: str, record: Any, exc: LLMError | None = None) -> dict[str, Any]:
        point = points[i]
        return {"point": i, "sample": k, "seed": point.seed, "tick": point.tick, "reply": reply,
                "error": None if exc is None else str(exc), "error_type": None if exc is None else exc.type,
                "call": record.model_dump(mode="json", exclude_none=True) if record is not None else None}

    async def recorded(i: int, k: int) -> None:
        async with gate:
            try:
                reply, record = await call(i, k)
                row = line(i, k, reply, record)
            except LLMError as exc:
                row = line(i, k, "", getattr(exc, "record", None), exc)
        sink(row)

    try:
        if preflight and todo:
            sink(line(*todo[0], *await first_call(agent, call(*todo[0]))))
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


def _set_aside(out: Path, path: Path, done: dict[tuple[int, int], dict[str, Any]],
               keys: Sequence[tuple[int, int]]) -> None:
    """Take the lines of `keys` (failed calls) out of `replies.jsonl`, so that a resumed eval makes those calls
    again: first appended (and fsynced) to `retried-failures.jsonl`, then `replies.jsonl` rewritten without them
    (atomically). A process killed in between leaves a line in both; the next retry sets it aside again."""
    if not keys:
        return
    with (out / SET_ASIDE_NAME).open("a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(done[key], sort_keys=True) + "\n" for key in keys))
        fh.flush()
        os.fsync(fh.fileno())
    for key in keys:
        del done[key]
    atomic_write_bytes(path, "".join(json.dumps(done[key], sort_keys=True) + "\n" for key in sorted(done)).encode())


def _mend_tail(path: Path, torn: int | None) -> None:
    """Before appending: cut a torn last line (a killed eval's), or end an unterminated complete one."""
    if not path.exists() or path.stat().st_size == 0:
        return
    if torn is not None:
        with path.open("r+b") as fh:
            fh.truncate(torn)
        return
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        ended = fh.read(1) == b"\n"
    if not ended:
        with path.open("ab") as fh:
            fh.write(b"\n")


@holds_run_folder("out", "an eval")  # one writer per run folder (docs/eval.md): a second eval into `out` is refused
def run_decision_eval(agent: Any, dset: DecisionSet, out: Path | str, *, samples: int = 1, seed: int = 0,
                      concurrency: int = 8, resume: bool = False, overwrite: bool = False,
                      command: Sequence[str] = (), preflight: bool = True,
                      describe: Mapping[str, Any] | None = None, log: Callable[[str], None] | None = None,
                      retry_failed: bool = False, allow_failed_calls: bool = False) -> EvalResult:
    """Score `agent` (an `LLMAgent`: scripted, OpenAI-compatible, your own) on `dset`, beside the baselines.

    Args:
        agent: the policy; its `describe()` (no secrets) is recorded.
        dset: the set (`rlaif_gym.evals.decision_set`).
        out: the run folder (see the module docstring).
        samples: replies per point, 1 to `MAX_SAMPLES` (> 1 with a temperature above 0; every interval is over
            points), and at most `MAX_CALLS` calls in all.
        seed: the run's seed: each call's sampling seed derives from it and the point (`call_seed`).
        concurrency: calls in flight.
        resume: finish an interrupted eval in `out` (same settings), calling only what is missing.
        overwrite: delete a previous eval's files in `out` first (only those: `RUN_FILES`).
        command: the command line, recorded in the scorecard.
        preflight: make the first call alone, and stop with a `ConfigError` if the server cannot be reached, fails
            it, or does not answer it in time (`first_call`).
        describe: the model as the scorecard records it (default `agent.describe()`); e.g. without the port of a
            server started for this eval, so that two runs match.
        log: progress lines.
        retry_failed: with `resume`, make the failed calls of the resumed eval again (their lines move to
            `retried-failures.jsonl`).
        allow_failed_calls: write the scorecard although calls failed: the model is scored on the calls it
            answered (a point none of whose calls was answered leaves its rows), `calls.failed` says how many
            were left out.

    Raises:
        ConfigError: a bad option, an `out` that holds another eval, or (with `preflight`) a server that does not
            answer the first call; the message names the fix.
        EvalFileError: a line of `replies.jsonl` that this eval did not write (a `ConfigError`).
        FailedCallsError: calls failed and `allow_failed_calls` is off; the replies are kept, no scorecard written.
    """
    if not 1 <= samples <= MAX_SAMPLES or concurrency < 1:
        raise ConfigError(f"--samples must be in [1, {MAX_SAMPLES}] and concurrency >= 1, got --samples {samples} and "
                          f"{concurrency}; score more states with --points instead of more samples")
    if dset.points * samples > MAX_CALLS:
        raise ConfigError(f"--points {dset.points:,} x --samples {samples} is {dset.points * samples:,} calls, at most "
                          f"{MAX_CALLS:,} are made by one eval; take fewer samples, or score the points as several "
                          "sets (--seeds START --points N each)")
    if retry_failed and not resume:
        raise ConfigError("--retry-failed makes the failed calls of an eval being resumed again; pass --resume as "
                          "well (--resume --retry-failed)")
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
    done, torn = _read_replies(path, points, samples, seed)
    _mend_tail(path, torn)
    if retry_failed:
        failed = sorted(key for key, row in done.items() if row["error"] is not None)
        _set_aside(out, path, done, failed)
        say(f"{len(failed)} failed calls set aside in {SET_ASIDE_NAME}, to be made again")
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
    stats, latencies = _call_stats(rows)
    failed_rows = [r for r in rows if r["error"] is not None]
    if failed_rows and not allow_failed_calls:
        raise FailedCallsError(out, len(failed_rows), len(rows), f"point {failed_rows[0]['point']}: "
                               f"{failed_rows[0]['error']}", where=str(path))
    answered = [r for r in rows if r["error"] is None]
    stats["unanswered_points"] = len(points) - len({r["point"] for r in answered})
    # Every policy's replies in one call, so each point's clean wait is played once for all of them. A failed
    # call is an outage, not the model's reply: it is counted in `calls`, never scored.
    named = [("model", r["point"], r["reply"]) for r in answered]
    named += [(name, i, baseline_reply(name, p)) for name in BASELINES for i, p in enumerate(points)]
    scored = score_decision_replies(points, [(i, reply) for _, i, reply in named])
    values = {name: point_values([r for (policy, _, _), r in zip(named, scored, strict=True) if policy == name])
              for name in ("model", *BASELINES)}
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
