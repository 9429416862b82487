"""Whether an HTTP client hands one request's answer to another, and what its calls cost, against hostile servers.

    python benchmarks/duplicate_answers.py [--calls 640] [--in-flight 16] [--modes t1 t2 t3 t4 t5 fast]
                                           [--rounds 1] [--baseline PATH]

A raw asyncio server, in a process of its own on 127.0.0.1, answers each chat request with its last user
message echoed ("answer to prompt 17") after 0-3 ms, keeps connections alive as real servers do, and closes
one when its request asks (``Connection: close``). Its modes are the rows of docs/collecting.md's fault matrix:

* `t1`: every 5th answer is written twice, 0-3 ms apart, whatever it is: a 400 naming its prompt (one call in
  7), a 503 or a 200 without `choices` (each one call in 7, first attempt), or the real answer;
* `t2`: on each new connection, the last answer the server sent (to another request) is written before the
  request is read;
* `t3`: answers carry no `id`; a greedy group (4 calls with one prompt) first, then every 5th answer twice;
* `t4`: every 5th answer is sent again 0-3 ms later with another `created` stamp (a re-sending proxy);
* `t5`: one of 20 fixed replies without ids, drawn at random: `refused` counts replies that were refused and
  drawn again (every draw is legitimate);
* `fast`: every answer at once, nothing hostile: `cpu us/call` is the client's CPU per call.

Each client makes `--calls` calls with a distinct prompt each, `--in-flight` at once, in a process of its own
(`PYTHONPATH` set to its tree), and counts the calls that got another request's answer or error (`wrong`),
the calls that failed, the refusals in their attempt errors, and its process CPU time per call. The rows:
`OpenAIChatClient` of this checkout, and with `--baseline PATH` the same client of another checkout (e.g. a
`git worktree` of an older commit), run in the same rounds, modes interleaved. The header gives the CPU model
and the load average. The results: docs/collecting.md ("One request, one answer") and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from machine import cpu_model, load_average

MODES = ("t1", "t2", "t3", "t4", "t5", "fast")
HERE = Path(__file__).resolve().parent


def _answer(content: str, *, ident: str | None, created: int = 0) -> bytes:
    body: dict = {"object": "chat.completion", "created": created, "model": "m",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                               "finish_reason": "stop"}]}
    if ident is not None:
        body["id"] = ident
    return _http(json.dumps(body).encode())


def _http(body: bytes, status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, len(body)) + body


def serve(mode: str) -> None:
    """The hostile server (run in its own process): prints its port, then serves until killed."""
    rng = random.Random(37)
    serial = 0
    tried: Counter[str] = Counter()
    last = [_answer("answer to nobody", ident="chatcmpl-0")]
    replies = [f"reply {k}" for k in range(20)]

    def answer_for(prompt: str) -> bytes:
        nonlocal serial
        serial += 1
        ident = None if mode in ("t3", "t5") else f"chatcmpl-{serial}"
        if mode == "t5":
            return _answer(rng.choice(replies), ident=None)
        i = int(prompt.split()[-1])
        tried[prompt] += 1
        if mode == "t1" and i % 7 == 0:
            return _http(json.dumps({"error": {"message": f"bad request for <{prompt}>"}}).encode(), b"400 Bad Request")
        if mode == "t1" and i % 7 == 1 and tried[prompt] == 1:
            return _http(json.dumps({"error": {"message": f"overloaded at <{prompt}>"}}).encode(),
                         b"503 Service Unavailable")
        if mode == "t1" and i % 7 == 2 and tried[prompt] == 1:
            return _http(json.dumps({"id": ident, "object": "chat.completion"}).encode())
        return _answer(f"answer to {prompt}", ident=ident, created=1)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if mode == "t2":
                writer.write(last[0])
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n")
                              if x.lower().startswith(b"content-length"))
                body = json.loads(await reader.readexactly(length))
                closing = b"connection: close" in head.lower()
                data = answer_for(body["messages"][-1]["content"])
                last[0] = data
                if mode != "fast":
                    await asyncio.sleep(rng.uniform(0.0, 0.003))
                writer.write(data)
                if mode in ("t1", "t3", "t4") and serial % 5 == 0:
                    copy = data.replace(b'"created": 1', b'"created": 2') if mode == "t4" else data
                    if closing:
                        await asyncio.sleep(rng.uniform(0.0, 0.003))
                        writer.write(copy)
                    else:
                        asyncio.get_running_loop().call_later(
                            rng.uniform(0.0, 0.003), lambda c=copy: writer.is_closing() or writer.write(c))
                if closing:
                    await writer.drain()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def client_run(url: str, mode: str, calls: int, in_flight: int) -> None:
    """One client's calls (run in a process whose PYTHONPATH is its tree): prints its counts as JSON."""
    from rlaif_gym.llm import LLMError, OpenAIChatClient, SamplingParams

    client = OpenAIChatClient("m", url, timeout=10.0, max_retries=3, backoff=0.01)
    params = SamplingParams(logprobs=False)
    refused: Counter[str] = Counter()
    counts = Counter()

    async def call(prompt: str) -> object:
        try:
            completion = await client.complete([{"role": "user", "content": prompt}], params)
        except LLMError as exc:
            refused.update(e.type for e in getattr(exc, "attempt_errors", ()))
            return exc
        refused.update(e.type for e in getattr(completion, "attempt_errors", ()))
        return completion

    async def main() -> None:
        if mode == "t3":  # a greedy group: four calls with one prompt, the same bytes each
            for _ in range(4):
                await call("prompt 0")
        slots = asyncio.Semaphore(in_flight)

        async def one(i: int) -> None:
            async with slots:
                out = await call(f"prompt {i}")
            if isinstance(out, LLMError):
                counts["failed"] += 1
                named = str(out)
                counts["wrong"] += "<prompt " in named and f"<prompt {i}>" not in named
            elif mode != "t5":
                counts["wrong"] += out.text != f"answer to prompt {i}"

        await asyncio.gather(*(one(i) for i in range(calls)))
        await client.aclose()

    cpu, start = time.process_time(), time.perf_counter()
    asyncio.run(main())
    print(json.dumps({"wrong": counts["wrong"], "failed": counts["failed"], "refused": dict(refused),
                      "cpu_us": 1e6 * (time.process_time() - cpu) / calls, "seconds": time.perf_counter() - start}))


def measure(tree: Path, mode: str, calls: int, in_flight: int) -> dict:
    server = subprocess.Popen([sys.executable, __file__, "--serve", mode], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/v1"
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE}"}
        out = subprocess.run([sys.executable, __file__, "--client", url, mode, str(calls), str(in_flight)],
                             capture_output=True, text=True, env=env, check=True, timeout=900)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=640)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="another checkout whose OpenAIChatClient is measured too")
    parser.add_argument("--serve", metavar="MODE", help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.client:
        url, mode, calls, in_flight = args.client
        client_run(url, mode, int(calls), int(in_flight))
        return
    trees = [("this checkout", HERE.parent)]
    if args.baseline is not None:
        commit = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        trees.append((f"baseline {commit or args.baseline}", args.baseline.resolve()))
    print(f"# {cpu_model()}; load {load_average()}; {args.calls} calls, {args.in_flight} in flight")
    print("| round | mode | client | wrong | failed | refused | cpu us/call | seconds |")
    print("|---:|---|---|---:|---:|---|---:|---:|")
    for round_ in range(1, args.rounds + 1):
        for mode in args.modes:
            for name, tree in trees if round_ % 2 else trees[::-1]:
                r = measure(tree, mode, args.calls, args.in_flight)
                refused = ", ".join(f"{k} {v}" for k, v in sorted(r["refused"].items())) or "-"
                print(f"| {round_} | {mode} | {name} | {r['wrong']} | {r['failed']} | {refused} | "
                      f"{r['cpu_us']:.0f} | {r['seconds']:.1f} |", flush=True)
    print(f"# load after: {load_average()}")


if __name__ == "__main__":
    main()
