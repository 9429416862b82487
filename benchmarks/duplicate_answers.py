"""How often an HTTP client hands one request's answer to another, against a server that repeats itself.

    python benchmarks/duplicate_answers.py [--calls 1000] [--in-flight 16] [--every 3] [--max-delay-ms 30]
                                           [--rounds 2]

A raw asyncio server, in a process of its own on 127.0.0.1, answers each chat request with its last
user message echoed ("answer to prompt 17"), after 0-3 ms, and writes every `--every`-th answer twice,
the copy 0 to `--max-delay-ms` after the first (seeded). Each client makes `--calls` calls with a
distinct prompt each, `--in-flight` at once, and counts the calls whose answer is not the echo of their
own prompt ("wrong"), and the calls that failed. The clients:

* `aiohttp`: a plain `aiohttp.ClientSession` (the library's defaults);
* `httpx`: a plain `httpx.AsyncClient`, when httpx is installed;
* `OpenAIChatClient`: rlaif-gym's client (`llm.transport.HTTPTransport` over aiohttp's pool), which
  should give 0 wrong; its refusals (answers it recognised as copies) are counted too. Run against an
  older checkout (``PYTHONPATH=<checkout> python benchmarks/duplicate_answers.py``), this row measures
  that version's client.

The results table of 2026-12-04 is in docs/collecting.md ("One request, one answer").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from machine import cpu_model, load_average

from rlaif_gym.llm import LLMError, OpenAIChatClient, SamplingParams


def serve(every: int, max_delay_s: float) -> None:
    """The repeating server (run in its own process): prints its port, then serves until killed."""
    rng = random.Random(37)
    serial = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal serial
        loop = asyncio.get_running_loop()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n")
                              if x.lower().startswith(b"content-length"))
                body = json.loads(await reader.readexactly(length))
                serial += 1
                content = f"answer to {body['messages'][-1]['content']}"
                answer = json.dumps({"id": f"chatcmpl-{serial}", "object": "chat.completion", "model": "m",
                                     "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                  "finish_reason": "stop"}]}).encode()
                data = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(
                    answer) + answer
                await asyncio.sleep(rng.uniform(0.0, 0.003))
                writer.write(data)
                if serial % every == 0:
                    copy = lambda d=data: writer.is_closing() or writer.write(d)  # noqa: E731
                    loop.call_later(rng.uniform(0.0, max_delay_s), copy)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


Post = Callable[[str], Awaitable[str]]


async def drive(post: Post, calls: int, in_flight: int) -> tuple[int, int]:
    """(calls answered with another prompt's answer, calls that failed)."""
    slots = asyncio.Semaphore(in_flight)
    wrong = failed = 0

    async def one(i: int) -> None:
        nonlocal wrong, failed
        async with slots:
            try:
                text = await post(f"prompt {i}")
            except Exception:
                failed += 1
                return
            wrong += text != f"answer to prompt {i}"

    await asyncio.gather(*(one(i) for i in range(calls)))
    return wrong, failed


def _body(prompt: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]}).encode()


async def with_aiohttp(url: str, calls: int, in_flight: int) -> tuple[int, int, str]:
    import aiohttp

    async with aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as session:
        async def post(prompt: str) -> str:
            async with session.post(f"{url}/chat/completions", data=_body(prompt)) as response:
                return json.loads(await response.read())["choices"][0]["message"]["content"]

        return (*await drive(post, calls, in_flight), "")


async def with_httpx(url: str, calls: int, in_flight: int) -> tuple[int, int, str]:
    import httpx

    async with httpx.AsyncClient(headers={"Content-Type": "application/json"}) as client:
        async def post(prompt: str) -> str:
            response = await client.post(f"{url}/chat/completions", content=_body(prompt))
            return response.json()["choices"][0]["message"]["content"]

        return (*await drive(post, calls, in_flight), "")


async def with_rlaif_gym(url: str, calls: int, in_flight: int) -> tuple[int, int, str]:
    client = OpenAIChatClient("m", url, timeout=10.0, max_retries=3, backoff=0.01)
    refusals: Counter[str] = Counter()

    async def post(prompt: str) -> str:
        try:
            completion = await client.complete([{"role": "user", "content": prompt}], SamplingParams(logprobs=False))
        except LLMError as exc:
            refusals.update(e.type for e in getattr(exc, "attempt_errors", ()))
            raise
        refusals.update(e.type for e in getattr(completion, "attempt_errors", ()))  # (absent before issue 37)
        return completion.text

    try:
        wrong, failed = await drive(post, calls, in_flight)
    finally:
        await client.aclose()
    return wrong, failed, ", ".join(f"{k} {v}" for k, v in sorted(refusals.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--every", type=int, default=3, help="every n-th answer is written twice")
    parser.add_argument("--max-delay-ms", type=float, default=30.0, help="the copy comes 0 to this many ms later")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.every, args.max_delay_ms / 1000)
        return
    clients = [("aiohttp", with_aiohttp), ("OpenAIChatClient", with_rlaif_gym)]
    try:
        import httpx  # noqa: F401

        clients.insert(1, ("httpx", with_httpx))
    except ImportError:
        pass
    print(f"# {cpu_model()}; load {load_average()}; {args.calls} calls, {args.in_flight} in flight, 1 answer in "
          f"{args.every} written twice, 0-{args.max_delay_ms:g} ms later")
    print("| round | client | wrong answers | failed calls | refused (OpenAIChatClient) | seconds |")
    print("|---:|---|---:|---:|---|---:|")
    for round_ in range(1, args.rounds + 1):
        for name, run in clients:
            server = subprocess.Popen([sys.executable, __file__, "--serve", "--every", str(args.every),
                                       "--max-delay-ms", str(args.max_delay_ms)], stdout=subprocess.PIPE, text=True)
            try:
                url = f"http://127.0.0.1:{int(server.stdout.readline())}/v1"
                start = time.perf_counter()
                wrong, failed, refused = asyncio.run(run(url, args.calls, args.in_flight))
                took = time.perf_counter() - start
            finally:
                server.kill()
                server.wait()
            print(f"| {round_} | {name} | {wrong} | {failed} | {refused or '-'} | {took:.1f} |", flush=True)


if __name__ == "__main__":
    main()
