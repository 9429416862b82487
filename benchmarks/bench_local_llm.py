"""What one call to the local model costs, split into its parts, for the configuration `serve-local` ships.

    python benchmarks/bench_local_llm.py [--ticks 8] [--seed 0] [--compare] [--only TEXT] [--repeat 1] [--smoke]

Each row starts a `LocalLLMServer` and plays one episode of the text env for `--ticks` ticks: every
tick's prompt goes to the server with that tick's grammar (`OpenAIChatAgent.constraint`, built from
the ids the prompt shows), streamed, and the reply is stepped in the env. Per call it measures:

* prompt tok/s: the prompt tokens the server evaluated (its log's "remaining N prompt tokens to eval";
  the system prompt's tokens are reused from the previous call) over the time to the first streamed
  token. The first call of a row evaluates the whole prompt and is left out of this column only;
* generation tok/s: streamed tokens after the first, over the time from the first to the last;
* tokens per reply: the streamed tokens;
* seconds per call: request to last token (the call as `serve-local` makes it, streamed);
* server CPU s per call: the CPU time the server process used for the call (Linux: /proc), which
  other work on a shared machine changes far less than the wall time. Generation runs on one thread,
  so on a quiet machine a call takes about this long, less up to half the prompt's share (two
  threads process the prompt);
* format-valid: the reply parsed into one action; executed: the world carried that action out (an
  unknown id, too little cash or a refused trade count against it).

Columns are medians over the row's calls (rates: shares of its ticks). `shipped` is what
`rlaif-gym serve-local` runs (`configs` below mirrors `serve_local`); `--compare` adds the
configuration before issue 18 and rows that each undo one setting of the shipped one, played on the
same seeds (`--only TEXT` keeps the row named TEXT, or the rows whose name contains it); `--repeat N` plays every row N
times, interleaved, and prints every pass (the machine is shared: compare rows of the same pass, and
say the load average, which the header prints).
`--smoke` (2 ticks, a small world, the shipped row) only checks that it runs; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from machine import load_average

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.encoding.grammar import GrammarLimits, canonical_reply_from_json, reply_max_chars
from rlaif_gym.envs.text_env import RLAIFTextEnv
from rlaif_gym.integrations.local_llm import (
    DEMO_LIMITS,
    FAST_QUANT,
    LocalLLMServer,
    fast_model_path,
    missing_local_llm,
    model_path,
)

_EVALUATED = re.compile(r"remaining (\d+) prompt tokens to eval")
BEFORE_LIMITS = GrammarLimits(think_chars=240, id_chars=24, text_chars=120)


def configs(compare: bool) -> list[tuple[str, dict]]:
    """(row name, settings): model ("Q8_0", "Q4_0" or "IQ4_NL": the shipped file converted; "Q4_1": as shipped),
    logits_all, n_threads_batch, omp_passive, flash_attn, verify_first (`LocalLLMServer`'s), limits and
    per_tick (the grammar built from the tick's ids; default True)."""
    shipped = {"model": FAST_QUANT, "logits_all": False, "n_threads_batch": 2, "omp_passive": True,
               "flash_attn": True, "verify_first": True, "limits": DEMO_LIMITS}
    rows = [("shipped", shipped)]
    if compare:
        rows += [
            ("before #18 (Q4_1, logits_all, 1 batch thread, think 240, id-agnostic grammar)",
             {"model": "Q4_1", "logits_all": True, "n_threads_batch": 1, "omp_passive": False, "flash_attn": False,
              "verify_first": False, "limits": BEFORE_LIMITS, "per_tick": False}),
            ("before the sampler change (Q8_0, no flash attention, grammar over the whole vocabulary first)",
             {**shipped, "model": "Q8_0", "flash_attn": False, "verify_first": False}),
            ("shipped but Q4_1", {**shipped, "model": "Q4_1"}),
            ("shipped but Q4_0", {**shipped, "model": "Q4_0"}),
            ("shipped but Q8_0", {**shipped, "model": "Q8_0"}),
            ("shipped but IQ4_NL", {**shipped, "model": "IQ4_NL"}),
            ("shipped but no flash attention", {**shipped, "flash_attn": False}),
            ("shipped but grammar over the whole vocabulary first", {**shipped, "verify_first": False}),
            ("shipped but logits_all", {**shipped, "logits_all": True}),
            ("shipped but 1 batch thread", {**shipped, "n_threads_batch": 1}),
            ("shipped but no OMP_WAIT_POLICY", {**shipped, "omp_passive": False}),
            ("shipped but think 240", {**shipped, "limits": BEFORE_LIMITS}),
        ]
    return [(name, settings) for name, settings in rows if name == "shipped" or settings != shipped]


def play(settings: dict, ticks: int, seed: int, env_config: dict | None) -> dict:
    """One episode against a fresh server with `settings`; per-call measurements and the two rates."""
    model = model_path() if settings["model"] == "Q4_1" else fast_model_path(quant=settings["model"])
    server = LocalLLMServer(model, n_threads=1, n_threads_batch=settings["n_threads_batch"],
                            logits_all=settings["logits_all"], flash_attn=settings["flash_attn"],
                            verify_first=settings["verify_first"])
    if not settings["omp_passive"]:
        server.env.pop("OMP_WAIT_POLICY", None)
        if "OMP_WAIT_POLICY" in os.environ:
            server.env["OMP_WAIT_POLICY"] = os.environ["OMP_WAIT_POLICY"]
    limits = settings["limits"]
    calls, valid, executed = [], 0, 0
    with server:
        agent = OpenAIChatAgent(server.alias, server.base_url, constrain="gbnf", grammar_limits=limits,
                                per_tick=settings.get("per_tick", True))
        env = RLAIFTextEnv(env_config)
        prompt, info = env.reset(seed=seed)
        system = info["system_prompt"]
        for t in range(ticks):
            log_start = len(server.log_tail(10**9))
            cpu_start = _cpu_seconds(server.pid)
            start = time.perf_counter()
            first, pieces = None, []
            body = {"model": server.alias, "stream": True, "temperature": 0.7, "seed": seed * 1000 + t,
                    "max_tokens": reply_max_chars(limits), **agent.constraint(system, prompt),
                    "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}]}
            for delta in _stream(f"{server.base_url}/chat/completions", body):
                first = first if first is not None else time.perf_counter()
                pieces.append(delta)
            end = time.perf_counter()
            cpu_end = _cpu_seconds(server.pid)
            evaluated = _EVALUATED.findall(server.log_tail(10**9)[log_start:])
            n = len(pieces)
            calls.append({
                "seconds": end - start, "tokens": n,
                "cpu": cpu_end - cpu_start if cpu_start is not None and cpu_end is not None else None,
                "prompt_tps": int(evaluated[-1]) / (first - start) if evaluated and first else None,
                "gen_tps": (n - 1) / (end - first) if n > 1 and end > first else None,
            })
            prompt, _, terminated, truncated, info = env.step(canonical_reply_from_json("".join(pieces)))
            valid += info["parsed_action"] is not None
            executed += bool(info["feedback"]["success"]) and info["parsed_action"] is not None
            if terminated or truncated:
                break
    return {"calls": calls, "valid": valid, "executed": executed}


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of process `pid` so far (None where /proc is not there)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stream(url: str, body: dict):
    """The content pieces of a streamed chat completion (server-sent events), one per generated token."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        for raw in response:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[len("data: "):]).get("choices") or [{}]
            delta = (choices[0].get("delta") or {}).get("content")
            if delta:
                yield delta


def row(name: str, result: dict) -> list[str]:
    def med(key: str, fmt: str) -> str:
        values = [c[key] for c in result["calls"] if c[key] is not None]
        return format(statistics.median(values), fmt) if values else "-"

    n = len(result["calls"])
    return [name, str(n), med("prompt_tps", ".0f"), med("gen_tps", ".0f"), med("tokens", ".0f"),
            med("seconds", ".2f"), med("cpu", ".2f"), f"{100 * result['valid'] / n:.0f}%",
            f"{100 * result['executed'] / n:.0f}%"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ticks", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compare", action="store_true", help="add the pre-#18 configuration and one-setting ablations")
    p.add_argument("--repeat", type=int, default=1, help="play every row this many times, interleaved")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="play only the row named TEXT, or the rows whose name contains TEXT (repeatable)")
    p.add_argument("--smoke", action="store_true", help="2 ticks of a small world, the shipped row (CI)")
    args = p.parse_args()
    env_config = None
    if args.smoke:
        args.ticks, args.compare, args.repeat = 2, False, 1
        env_config = {"num_markets": 2, "num_perps": 1, "num_groups": 1}
    missing = missing_local_llm()
    if missing:
        print(f"the local-llm extra is not installed (missing {', '.join(missing)}); run make test or "
              "rlaif-gym serve-local once to install it", file=sys.stderr)
        return 2
    load = load_average()
    print(f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}, load average {load} at the start; {args.ticks} ticks, seed {args.seed}")
    header = ["configuration", "calls", "prompt tok/s", "generation tok/s", "tokens per reply", "s per call",
              "server CPU s per call", "format-valid", "executed"]
    rows = configs(args.compare or bool(args.only))
    names = {name for name, _ in rows}
    # A TEXT that is a row's whole name selects that row only ("shipped"), any other TEXT every row containing it.
    selected = [(name, settings) for name, settings in rows if not args.only or name in args.only
                or any(text in name for text in args.only if text not in names)]
    for k in range(args.repeat):
        if args.repeat > 1:
            print(f"\npass {k + 1} of {args.repeat}")
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        for name, settings in selected:
            print("| " + " | ".join(row(name, play(settings, args.ticks, args.seed, env_config))) + " |", flush=True)
    print(f"# load average {load_average()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
