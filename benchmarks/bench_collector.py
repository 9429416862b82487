"""Throughput of `RolloutCollector` against an LLM that costs 50 ms ± 10 ms per call, next to the ideal.

    python benchmarks/bench_collector.py [--seconds 5] [--ks 8 64 256] [--no-http] [--smoke]
                                         [--budget 300] [--profile] [--backend numpy]
                                         [--server process|thread] [--processes 2] [--fast-ms 5]

For each K (episodes in flight = LLM calls in flight = K) one collection, `RolloutCollector(...,
num_envs=K, max_concurrent_calls=K).collect(episodes=K, seed=0)` with no sink, runs `K` episodes
whose length (`num_ticks`) is chosen from a short pilot run so that it takes about `--seconds`.
The LLM answers every call after a latency uniform in [40, 60] ms (mean 50 ms), so with no other
cost the collector would make K / 0.05 calls per second; the table shows the achieved rate
(LLM calls in the summary / the summary's wall time) and its ratio to that ideal. Each path is
warmed up once (imports, first connection) outside the timed runs.

Three paths:
* `in-process`: `ScriptedLLMAgent(latency_s=0.04, jitter_s=0.02)` (an `asyncio.sleep` per call; the
  scripted model's own reading of the prompt is CPU of this process);
* `stand-in`: the same latency, and a zero-cost stand-in model that answers each call with one of a
  fixed set of scripted replies (picked by the call's seed): the collector's own CPU per tick;
* `http`: a real OpenAI-compatible server on 127.0.0.1 that sleeps the same latency (drawn from a
  generator seeded with the request's seed, so each call waits exactly as long as on the in-process
  path) and answers with `ScriptedLLM().decide(...)`, driven through `OpenAIChatAgent`. With
  `--server process` (the default) the server is a process of its own, as a model server is; with
  `--server thread` it is a `ThreadingHTTPServer` thread of this process.

`cpu ms/tick` is the process CPU time of the run divided by the ticks it recorded (with
`--server thread` it includes the server threads, which share the interpreter). The event loop is one thread: once
K * (cpu ms/tick) exceeds the mean latency (1000 * 0.05 / K ms of CPU per tick is the most the ideal
allows), the CPU, not the model, bounds throughput; the second table shows both numbers.

Two more rows speak for a GPU model server. `--fast-ms 5` (the default) repeats the http path at the largest
K against a server that answers in 4-6 ms, where the collector, not the model, sets the pace.
`--processes N` (default 2, 0 to skip) runs the http path with the episodes spread over N worker processes
(`RayBackend` on a local Ray instance: each worker has its own event loop and HTTP client; the driver
receives the trajectories): its `cpu ms/tick` is the driver's alone, and the workers' resident memory is
reported. The header gives the CPU model and the load average before and after the run.

The whole run keeps to `--budget` seconds: a measurement that would not fit is reported as skipped.
`--smoke` (for CI) runs K=4 with 3 ticks on both paths in a few seconds; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import pstats
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
from machine import cpu_model, load_average

import rlaif_gym
from rlaif_gym.agents.llm import LLMAgent, OpenAIChatAgent, ScriptedLLMAgent
from rlaif_gym.encoding.reply import canonical_reply
from rlaif_gym.llm import Completion, SamplingParams, ScriptedLLM
from rlaif_gym.rollout import CollectionSummary, RolloutCollector

LATENCY_S = 0.04  # the fixed part of every call
JITTER_S = 0.02  # plus uniform [0, JITTER_S]
MEAN_LATENCY_S = LATENCY_S + JITTER_S / 2
BACKEND = "numba"  # the text env's world-step backend (the env's default); --backend numpy sets the reference

# -- the OpenAI-compatible server ---------------------------------------------------------------


class LatencyServer:
    """`POST /v1/chat/completions` on 127.0.0.1: sleep the simulated latency, answer like `ScriptedLLM`.

    Runs a `ThreadingHTTPServer` (one thread per connection, HTTP/1.1 keep-alive) in a daemon thread;
    use as a context manager, which stops it (and wakes any handler still sleeping) on exit.
    """

    def __init__(self, latency_s: float = LATENCY_S, jitter_s: float = JITTER_S, seed: int = 0) -> None:
        self.latency_s, self.jitter_s = latency_s, jitter_s
        self.requests = 0
        self.errors: list[str] = []
        self._model = ScriptedLLM()
        self._rng = random.Random(seed)  # for a request without a seed
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LatencyServer:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="bench-openai-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def latency(self, body: dict[str, Any]) -> float:
        """The call's latency: the same draw `ScriptedLLM` makes from the call's seed."""
        seed = body.get("seed")
        if isinstance(seed, int):
            u = float(np.random.default_rng(seed).random())
        else:
            with self._lock:
                u = self._rng.random()
        return self.latency_s + self.jitter_s * u

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        user = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
        think, action = self._model.decide(user)
        text = canonical_reply(action, think)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        completion_tokens = len(text.split())
        return {
            "id": f"chatcmpl-bench-{body.get('seed')}", "object": "chat.completion", "created": 1_767_225_600,
            "model": body.get("model") or "bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # K connections open at once; the default backlog of 5 would drop SYNs

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client that hung up
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server_owner: LatencyServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/stats"):  # what a server in another process answered, for the tables
            owner = self.server_owner
            with owner._lock:
                self._send(200, {"requests": owner.requests, "errors": owner.errors[:3]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        owner = self.server_owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw)
            delay = owner.latency(body)
            if owner._stopping.wait(delay):
                self.close_connection = True
                return
            payload = owner.answer(body)
        except Exception as exc:  # a benchmark bug: answer 500 (the client retries) and report it
            owner.errors.append(f"{type(exc).__name__}: {exc}")
            self._send(500, {"error": {"message": str(exc), "type": "server_error"}})
            return
        with owner._lock:
            owner.requests += 1
        self._send(200, payload)


class ProcessLatencyServer:
    """`LatencyServer` in a process of its own (`python bench_collector.py --serve`), as a model server is:
    its CPU is not this process's. The same `base_url`, `requests` and `errors` (read over HTTP)."""

    def __init__(self, latency_s: float = LATENCY_S, jitter_s: float = JITTER_S) -> None:
        self.latency_s, self.jitter_s = latency_s, jitter_s

    def __enter__(self) -> ProcessLatencyServer:
        self._proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", "--serve-latency",
                                       str(self.latency_s), str(self.jitter_s)], stdout=subprocess.PIPE, text=True)
        line = self._proc.stdout.readline().strip() if self._proc.stdout else ""
        if not line.startswith("http://127.0.0.1:"):
            self._proc.kill()
            raise RuntimeError(f"the server process did not start (it said {line!r})")
        self.base_url = line
        self.pid = self._proc.pid
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()

    def _stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.base_url + "/stats", timeout=10) as response:  # loopback only
            return json.loads(response.read())

    @property
    def requests(self) -> int:
        return int(self._stats()["requests"])

    @property
    def errors(self) -> list[str]:
        return list(self._stats()["errors"])


def serve(latency_s: float = LATENCY_S, jitter_s: float = JITTER_S) -> int:
    """The `--serve` mode: run a `LatencyServer`, print its URL, and serve until terminated (or orphaned)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    parent = os.getppid()
    with LatencyServer(latency_s, jitter_s, seed=0) as server:
        print(server.base_url, flush=True)
        while os.getppid() == parent:  # the benchmark went away without stopping this process: stop too
            time.sleep(1.0)
    return 0


class StandInLLM:
    """A zero-cost stand-in model: the benchmark latency, then one of a fixed set of real replies.

    The replies are the scripted model's answers to the prompts of one short episode; each call gets
    `replies[seed % len(replies)]`, so the collector, the parser and the rule judge see realistic text
    while the model itself costs no CPU of this process.
    """

    model = "stand-in"

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    def describe(self) -> dict[str, Any]:
        return {"kind": "stand-in", "model": self.model}

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        seed = params.seed or 0
        await asyncio.sleep(LATENCY_S + JITTER_S * float(np.random.default_rng(seed).random()))
        return Completion(text=self.replies[seed % len(self.replies)], model=self.model, finish_reason="stop")


def stand_in_replies(n: int = 64) -> list[str]:
    """The scripted model's replies over the first `n` ticks of one episode (seed 0)."""
    import gymnasium as gym

    env = gym.make("RLAIF-Text-v0", config={"num_ticks": n, "backend": BACKEND}, disable_env_checker=True)
    prompt, _ = env.reset(seed=0)
    model, replies = ScriptedLLM(), []
    for _ in range(n):
        think, action = model.decide(prompt)
        replies.append(canonical_reply(action, think))
        prompt, _, terminated, truncated, _ = env.step(replies[-1])
        if terminated or truncated:
            break
    env.close()
    return replies


# -- measuring ----------------------------------------------------------------------------------


@dataclass
class Result:
    path: str
    k: int
    ticks: int = 0  # num_ticks per episode
    steps: int = 0
    calls: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    loop_cpu_s: float = 0.0  # CPU of the thread running the event loop
    requests: int | None = None  # HTTP requests the server answered
    skipped: str = ""
    latency_s: float = MEAN_LATENCY_S  # the model's mean latency on this path
    workers: int = 1  # processes running the episodes
    worker_rss_mb: float = 0.0  # their resident memory together (worker processes only)
    machine_busy_s: float = 0.0  # CPU time of the whole machine during the run (/proc/stat), all processes
    server_cpu_s: float = 0.0  # CPU time of the model server's process during the run
    base_path: str = ""  # the single-process path this row is compared with

    @property
    def machine_cpu_ms_per_tick(self) -> float:
        """CPU per tick of everything on the machine but the model server (the collector, Ray's processes)."""
        return 1000.0 * (self.machine_busy_s - self.server_cpu_s) / self.steps if self.steps else 0.0

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def ideal(self) -> float:
        return self.k / self.latency_s

    @property
    def cpu_ms_per_tick(self) -> float:
        return 1000.0 * self.cpu_s / self.steps if self.steps else 0.0

    @property
    def loop_cpu_ms_per_tick(self) -> float:
        return 1000.0 * self.loop_cpu_s / self.steps if self.steps else 0.0


async def _collect(collector: RolloutCollector, agent: LLMAgent, episodes: int) -> CollectionSummary:
    return await collector.collect_async(episodes, seed=0)  # closes the agent's connection pool when it ends


def run_collection(agent: LLMAgent, k: int, ticks: int, *, episodes: int | None = None,
                   profile: cProfile.Profile | None = None, backend: Any = None) -> Result:
    """One in-memory collection of `episodes` (default K) episodes with K in flight.

    This is `RolloutCollector(...).collect(episodes, seed=0)` (which is `asyncio.run(collect_async(...))`),
    with the agent's HTTP client closed inside the same event loop. With a `RayBackend` of N workers each
    worker runs K / N of the episodes in flight.
    """
    episodes = episodes or k
    workers = backend.num_workers if backend is not None else 1
    per_worker = -(-k // workers)
    collector = RolloutCollector(agent, env_config={"num_ticks": ticks, "backend": BACKEND}, num_envs=per_worker,
                                 max_concurrent_calls=per_worker, progress=False, run_name=f"bench-k{k}",
                                 backend=backend)
    cpu0, loop0 = time.process_time(), time.thread_time()
    if profile is not None:
        profile.enable()
    try:
        summary = asyncio.run(_collect(collector, agent, episodes))
    finally:
        if profile is not None:
            profile.disable()
    cpu, loop = time.process_time() - cpu0, time.thread_time() - loop0
    if summary.failed or summary.failed_calls or summary.steps != episodes * ticks:
        raise RuntimeError(f"the collection did not run clean: {summary.failed} failed episode(s), "
                           f"{summary.failed_calls} failed call(s), {summary.steps} of {episodes * ticks} ticks; "
                           f"first errors: {summary.errors[:3]}")
    return Result(path="", k=k, ticks=ticks, steps=summary.steps, calls=summary.llm_calls, wall_s=summary.wall_s,
                  cpu_s=cpu, loop_cpu_s=loop, workers=workers)


def choose_ticks(make_agent: Callable[[], LLMAgent], k: int, seconds: float,
                 latency_s: float = MEAN_LATENCY_S) -> tuple[int, float]:
    """Episode length for a run of about `seconds`, from a short pilot (also the warm-up); (ticks, pilot s).

    The pilot measures the CPU per tick c; one round of ticks then takes about
    max(mean latency + c, K * c): the latency when the loop keeps up, the loop's CPU when it does not.
    """
    start = time.perf_counter()
    pilot = run_collection(make_agent(), min(k, 16), 4)
    c = pilot.cpu_s / pilot.steps
    per_round = max(latency_s + c, k * c)
    return max(2, round(seconds / per_round)), time.perf_counter() - start


def measure(path: str, make_agent: Callable[[], LLMAgent], k: int, args: argparse.Namespace, deadline: float,
            server: Any = None, latency_s: float = MEAN_LATENCY_S, backend: Any = None) -> Result:
    if args.smoke:
        ticks = 3
    else:
        # Rough cost of the pilot (a few ms of CPU per tick) plus the run, to keep within the budget.
        if time.perf_counter() + 0.5 + 0.01 * 4 * min(k, 16) + 1.25 * args.seconds > deadline:
            return Result(path=path, k=k, skipped="skipped: over --budget", latency_s=latency_s)
        ticks, _ = choose_ticks(make_agent, k, args.seconds, latency_s)
        if backend is not None:  # the pilot ran in this process: the workers share the load, and a longer run
            ticks = max(2, round(2 * ticks * backend.num_workers))  # spreads the workers' start over more ticks
    before = server.requests if server is not None else 0
    busy0, server0 = machine_busy_s(), process_cpu_s(getattr(server, "pid", None))
    result = run_collection(make_agent(), k, ticks, backend=backend)
    result.machine_busy_s = machine_busy_s() - busy0
    result.server_cpu_s = process_cpu_s(getattr(server, "pid", None)) - server0
    result.path, result.latency_s, result.base_path = path, latency_s, path.rsplit(", ", 1)[0] if backend else path
    if backend is not None:
        result.worker_rss_mb = worker_rss_mb()
    if server is not None:
        result.requests = server.requests - before
    return result


def worker_rss_mb() -> float:
    """Resident memory of the local Ray instance's worker processes together, MB (Linux /proc; 0 elsewhere)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if not f.read().startswith(b"ray::"):
                    continue
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            continue
    return total / 2**20


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (all CPUs, /proc/stat; 0 where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process `pid` (Linux /proc; 0 for None or elsewhere)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def warm_up(make_agent: Callable[[], LLMAgent]) -> None:
    """Imports, first connection, first env: paid once per path, outside every timed run."""
    run_collection(make_agent(), 2, 2)


def profile_top(make_agent: Callable[[], LLMAgent], k: int, ticks: int, top: int = 10) -> str:
    """cProfile one (untimed) collection: the `top` functions by cumulative, then by own, time.

    The asyncio plumbing (`asyncio.run`, `_run_once`, `Context.run`, ...) holds the whole run and says
    nothing, so it is left out. cProfile counts every resumption of a coroutine as one call.
    """
    profile = cProfile.Profile()
    run_collection(make_agent(), k, ticks, profile=profile)
    stats = pstats.Stats(profile)
    rows = []
    for (file, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "asyncio" in file or name in ("<method 'run' of '_contextvars.Context' objects>",) or (
                file.endswith("bench_collector.py")):
            continue
        where = f"{os.path.relpath(file) if file.startswith(os.getcwd()) else file}:{line}({name})"
        rows.append((cumtime, tottime, ncalls, where))
    total = sum(r[1] for r in rows)
    out = []
    for title, key in (("by cumulative time", lambda r: r[0]), ("by own time", lambda r: r[1])):
        out += [f"top {top} {title}:", "", "| cumulative s | own s | calls | function |", "|---:|---:|---:|---|"]
        out += [f"| {cum:.3f} | {own:.3f} | {n} | `{where}` |"
                for cum, own, n, where in sorted(rows, key=key, reverse=True)[:top]]
        out.append("")
    return "\n".join(out) + f"(profiled run: {k} episodes x {ticks} ticks, {total:.2f} s of own time in all)"


# -- reporting ----------------------------------------------------------------------------------

HEADER = ("| path | K | model latency ms | calls/s | the model's pace, K / latency | ratio | cpu ms/tick "
          "| CPU-bound ceiling, calls/s per core |")


def main_table(results: list[Result]) -> str:
    lines = [HEADER, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ms = f"{1000 * r.latency_s:g}"
        if r.skipped:
            lines.append(f"| {r.path} | {r.k} | {ms} | {r.skipped} | {r.ideal:.0f} | - | - | - |")
        else:
            ceiling = 1000.0 / r.cpu_ms_per_tick if r.cpu_ms_per_tick and r.workers == 1 else None
            cpu = f"{r.cpu_ms_per_tick:.2f}{'' if r.workers == 1 else ' (driver)'}"
            lines.append(f"| {r.path} | {r.k} | {ms} | {r.calls_per_s:.1f} | {r.ideal:.0f} "
                         f"| {r.calls_per_s / r.ideal:.3f} | {cpu} | {'-' if ceiling is None else f'{ceiling:.0f}'} |")
    return "\n".join(lines)


def detail_table(results: list[Result]) -> str:
    lines = ["| path | K | ticks/episode | ticks | wall s | loop-thread cpu ms/tick | cpu ms/tick "
             "| CPU the ideal allows, ms/tick (1000 * latency / K) | CPU-bound max calls/s (1000 / cpu ms/tick) "
             "| http requests | machine cpu ms/tick, all but the server | machine busy | server cpu ms/call |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.skipped:
            continue
        allowed = 1000.0 * r.latency_s / r.k
        cpu_max = 1000.0 / r.cpu_ms_per_tick if r.cpu_ms_per_tick and r.workers == 1 else 0.0
        lines.append(f"| {r.path} | {r.k} | {r.ticks} | {r.steps} | {r.wall_s:.2f} | {r.loop_cpu_ms_per_tick:.2f} "
                     f"| {r.cpu_ms_per_tick:.2f} | {allowed:.2f} | {f'{cpu_max:.0f}' if cpu_max else '-'} "
                     f"| {'-' if r.requests is None else r.requests} | {r.machine_cpu_ms_per_tick:.2f} "
                     f"| {r.machine_busy_s / (r.wall_s * (os.cpu_count() or 1)):.0%} "
                     f"| {1000 * r.server_cpu_s / r.requests if r.requests else 0:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="target wall time of one measurement")
    parser.add_argument("--ks", type=int, nargs="+", default=[8, 64, 256], help="concurrent episodes (and calls)")
    parser.add_argument("--no-http", action="store_true", help="skip the OpenAI-compatible HTTP path")
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI: K=4, 3 ticks (numbers mean nothing)")
    parser.add_argument("--budget", type=float, default=300.0, help="wall-clock budget of the whole script, seconds")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile an untimed in-process run at the largest K (same length as its "
                             "measurement) and print the top 10 functions by cumulative time")
    parser.add_argument("--backend", choices=["numpy", "numba"], default="numba",
                        help="world-step backend of the text envs: numba (the env's default: compiled world step "
                             "and observation) or numpy (the readable reference, 2x the CPU per tick)")
    parser.add_argument("--server", choices=["process", "thread"], default="process",
                        help="the http path's server: a process of its own (as a model server is) or a thread of "
                             "this one (its CPU then counts in cpu ms/tick)")
    parser.add_argument("--processes", type=int, default=2,
                        help="also run the http path at the largest K on this many worker processes (a local Ray "
                             "instance, the [ray] extra); 0 skips it")
    parser.add_argument("--fast-ms", type=float, default=5.0,
                        help="also run the http path at the largest K against a server this fast (mean ms, +-20%%); "
                             "0 skips it")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server process itself
    parser.add_argument("--serve-latency", type=float, nargs=2, default=[LATENCY_S, JITTER_S], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(*args.serve_latency)
    global BACKEND
    BACKEND = args.backend
    ks = [4] if args.smoke else sorted(set(args.ks))
    if any(k < 1 for k in ks):
        parser.error("--ks must be positive")
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    deadline = time.perf_counter() + args.budget

    # The server is on 127.0.0.1: never send its traffic through a proxy from the environment.
    for var in ("NO_PROXY", "no_proxy"):
        os.environ[var] = ",".join(filter(None, [os.environ.get(var, ""), "127.0.0.1"]))

    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, load average {load_average()} before; "
          f"python {platform.python_version()}, rlaif_gym {rlaif_gym.__version__}, backend {BACKEND}, "
          f"http server: {'own process' if args.server == 'process' else 'a thread of this process'}")
    print(f"LLM latency: uniform [{1000 * LATENCY_S:.0f}, {1000 * (LATENCY_S + JITTER_S):.0f}] ms "
          f"(mean {1000 * MEAN_LATENCY_S:.0f} ms); ideal calls/s = K / {MEAN_LATENCY_S}; "
          f"target {args.seconds:g} s per measurement{' (smoke)' if args.smoke else ''}", flush=True)

    results: list[Result] = []

    def scripted() -> LLMAgent:
        return ScriptedLLMAgent(latency_s=LATENCY_S, jitter_s=JITTER_S)

    def report(r: Result) -> None:
        results.append(r)
        print(f"  {r.path} K={r.k}: {r.skipped or f'{r.calls_per_s:.1f} calls/s ({r.ticks} ticks, {r.wall_s:.1f} s)'}",
              flush=True)

    if not args.smoke:
        warm_up(scripted)
    for k in ks:
        report(measure("in-process", scripted, k, args, deadline))

    replies = stand_in_replies()

    def stand_in() -> LLMAgent:
        return LLMAgent(StandInLLM(replies), SamplingParams(temperature=0.7, max_tokens=512, logprobs=False),
                        name="stand-in")

    if not args.smoke:
        warm_up(stand_in)
    for k in ks:
        report(measure("stand-in", stand_in, k, args, deadline))

    if not args.no_http:
        servers = [("http", LATENCY_S, JITTER_S, ks)]
        if args.fast_ms > 0:
            fast = args.fast_ms / 1000.0
            servers.append((f"http, {args.fast_ms:g} ms server", 0.8 * fast, 0.4 * fast, ks[-1:]))
        for path, latency, jitter, server_ks in servers:
            errors = run_http_paths(path, latency, jitter, server_ks, args, deadline, report)
            if errors:
                print(f"the server raised: {errors[:3]}", file=sys.stderr)
                return 1

    print(f"\nload average after: {load_average()}")
    print()
    print(main_table(results))
    print()
    print(detail_table(results))
    for r in results:
        if r.workers > 1 and not r.skipped:
            single = next((q for q in results if q.path == r.base_path and q.k == r.k and not q.skipped), None)
            if single is not None:
                print(f"\n{r.path} K={r.k}: {r.calls_per_s / single.calls_per_s:.2f}x the single process "
                      f"({r.calls_per_s:.1f} against {single.calls_per_s:.1f} calls/s); the {r.workers} workers' "
                      f"resident memory {r.worker_rss_mb:.0f} MB together (the wall time includes starting them)")
    if args.profile:
        biggest = next((r for r in results if r.path == "in-process" and r.k == ks[-1] and not r.skipped), None)
        if biggest is None:
            print("\n(no profile: the in-process run at the largest K was skipped)")
        else:
            print(f"\ncProfile of an untimed in-process run at K={biggest.k} (asyncio plumbing left out)\n")
            print(profile_top(scripted, biggest.k, biggest.ticks))
    return 0


def run_http_paths(path: str, latency: float, jitter: float, ks: list[int], args: argparse.Namespace,
                   deadline: float, report: Callable[[Result], None]) -> list[str]:
    """The http path at each K against one server (`latency` + uniform [0, `jitter`] s per call), then, with
    `--processes`, the same at the largest K over worker processes. Returns the errors the server raised."""
    mean = latency + jitter / 2
    with (ProcessLatencyServer(latency, jitter) if args.server == "process"
          else LatencyServer(latency, jitter, seed=0)) as server:
        base_url = server.base_url

        def http() -> LLMAgent:
            # No retries: a failed call fails the benchmark instead of hiding in the numbers.
            return OpenAIChatAgent(model="bench", base_url=base_url, api_key="bench", logprobs=False,
                                   timeout=30.0, max_retries=0)

        if not args.smoke:
            warm_up(http)
        for k in ks:
            report(measure(path, http, k, args, deadline, server=server, latency_s=mean))
        if args.processes > 1 and not args.smoke:
            try:
                import ray  # noqa: F401 (the [ray] extra)

                from rlaif_gym.rollout.ray_backend import RayBackend
            except ImportError:
                print(f"  ({path} on {args.processes} processes skipped: pip install 'rlaif-gym[ray]')", flush=True)
            else:
                backend = RayBackend(args.processes, agent_factory=http, init_kwargs={
                    "num_cpus": os.cpu_count(), "include_dashboard": False, "log_to_driver": False})
                try:
                    run_collection(http(), 2 * args.processes, 2, backend=backend)  # starts Ray: untimed
                    report(measure(f"{path}, {args.processes} processes", http, ks[-1], args, deadline,
                                   server=server, latency_s=mean, backend=backend))
                finally:
                    backend.shutdown()
        return server.errors


if __name__ == "__main__":
    sys.exit(main())
