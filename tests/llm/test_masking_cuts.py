"""Secrets are masked before every cut the package makes on server text (issue 57, row L1).

A server text that the package cuts (an error message, a malformed body shown in one, a reply, a header, a
log line, a judge's verdict error, an episode's error line, an eval's first-call error) must be masked
first: cut first, a secret across the cut leaves its first characters, which masking no longer recognises.

A real loopback server puts each secret (the API key, plain and base64; the URL password, plain and base64,
alone and as the Basic-auth pair) behind ``n`` filler characters in the part of the answer that each case
reaches, and the calls go through the public API (`RecordingClient` over `OpenAIChatClient`, `LLMJudge`,
`RolloutCollector`, an eval's `first_call`). For each case the test first finds the cuts: an answer of filler
alone, and each place (the stored record, the error, a log line) that keeps fewer filler characters than were
sent is a cut at that length. Then it places every secret across every cut, at every offset, and checks that
no 4 characters in a row of the secret reach any of those places.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

import pytest

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.errors import ConfigError, JudgeBudgetExceeded
from rlaif_gym.evals.runner import first_call
from rlaif_gym.llm import LLMError, OpenAIChatClient, RecordingClient, SamplingParams
from rlaif_gym.llm.recording import REPLY_CHARS
from rlaif_gym.llm_judge import JudgeConfig, LLMJudge
from rlaif_gym.rollout import RolloutCollector, call_seed
from rlaif_gym.trajectory import Trajectory

pytest.importorskip("h11")

KEY = "sk-proj-Wq7Zp2Kx9~Vb4Nm6Rt3Yc>?"  # its two base64 alphabets differ
USER, PASSWORD = "trainer", "pw-Hd8\"Lf5\\Jg1'Qs"  # a quote and a backslash: escaped where a body is shown
FILL = "."
"""The filler before a secret: a character no secret form holds (base64 has none)."""


def _b64(text: str, encode: Callable[[bytes], bytes] = base64.b64encode) -> str:
    return encode(text.encode()).decode()


SECRETS = {
    "key": KEY,
    "key in base64": _b64(KEY),
    "key in url-safe base64": _b64(KEY, base64.urlsafe_b64encode),
    "url password": PASSWORD,
    "url password in base64": _b64(PASSWORD),
    "basic-auth pair in base64": _b64(f"{USER}:{PASSWORD}"),
}
"""Each form a server may echo; `OpenAIChatClient.redact` knows every one. A request names the form, never
holds it (the prompt is stored)."""

CLIENT_CASES = ("no_choices", "status_400", "status_503", "logprobs_400", "reply", "reasoning", "model",
                "finish_reason", "content_encoding")
"""Where the server puts the text for one call: a 200 without choices (its body is shown in the error), an error
body's message (a 400; a 503, retried, whose retry is logged), a 400 refusing logprobs (logged), the reply, its
reasoning, the model name, the finish reason, the Content-Encoding header of a 200 (refused)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall on a kept-alive connection
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ask = self.server.asks.get(body.get("seed"), self.server.default)
        text = FILL * ask["pad"] + SECRETS.get(ask["form"], "")
        case, status, headers = ask["case"], 200, {}
        message = {"role": "assistant", "content": "ok"}
        answer: dict[str, Any] = {"id": f"c-{ask['pad']}", "object": "chat.completion", "model": "m",
                                  "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        if case == "no_choices":
            answer = {"pad": text}
        elif case.startswith("status_"):
            status, answer = int(case[-3:]), {"error": {"message": text, "type": "server_error"}}
        elif case == "logprobs_400":
            status, answer = 400, {"error": {"message": f"logprobs are not supported {text}"}}
        elif case in ("reply", "judge"):
            message["content"] = text
        elif case == "reasoning":
            message["reasoning_content"] = text
        elif case == "model":
            answer["model"] = text
        elif case == "finish_reason":
            answer["choices"][0]["finish_reason"] = text
        elif case == "content_encoding":
            headers["Content-Encoding"] = text
        payload = json.dumps(answer).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(payload)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    """Answers each request by the ask of its sampling seed (`asks`), else by `default`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.asks: dict[int, dict[str, Any]] = {}
        self.default: dict[str, Any] = {}

    @property
    def url(self) -> str:
        """The base URL, with the user:password that the client strips and whose password it masks."""
        return f"http://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture(scope="module")
def server():
    httpd = _Server()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def _logged() -> Iterator[_Lines]:
    """Every log line of every logger, DEBUG and up."""
    lines, root = _Lines(), logging.getLogger()
    level = root.level
    root.addHandler(lines)
    root.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(lines)
        root.setLevel(level)


def _client(server: _Server) -> OpenAIChatClient:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "credentials in the base URL were removed": said, and tested, elsewhere
        return OpenAIChatClient("m", server.url, api_key=KEY, timeout=10.0, max_retries=1, backoff=0.0)


def _calls(server: _Server, asks: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One call per ask (a new client each: a logprobs refusal is remembered): what it left in the record (as
    stored), in the error (as the collector keeps it) and in the log."""

    async def one(seed: int, lines: _Lines) -> dict[str, str]:
        llm, error = _client(server), ""
        del lines.lines[:]
        try:
            _, record = await RecordingClient(llm).chat([{"role": "user", "content": "go"}], SamplingParams(seed=seed))
        except LLMError as exc:
            record, error = exc.record, str(exc)  # type: ignore[attr-defined]
        finally:
            await llm.aclose()
        return {"record": record.to_json(), "error": error, "log": "\n".join(lines.lines)}

    async def main(lines: _Lines) -> list[dict[str, str]]:
        return [await one(seed, lines) for seed in range(len(asks))]

    server.asks = dict(enumerate(asks))
    with _logged() as lines:
        return asyncio.run(main(lines))


def _judged(server: _Server, asks: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One absolute verdict per ask, whose reply is the text (a malformed verdict, no re-ask, no failure allowed):
    what the judge's error and the log say."""

    async def one(ask: dict[str, Any], lines: _Lines) -> dict[str, str]:
        server.default = ask
        llm = _client(server)
        del lines.lines[:]
        judge = LLMJudge(llm, config=JudgeConfig(verdict_retries=0, failure_budget=0.0))
        try:
            with pytest.raises(JudgeBudgetExceeded) as info:
                await judge.score_async([Trajectory(trajectory_id="t-1", agent_id="a")])
        finally:
            await llm.aclose()
        return {"error": str(info.value), "log": "\n".join(lines.lines)}

    async def main(lines: _Lines) -> list[dict[str, str]]:
        return [await one(ask, lines) for ask in asks]

    with _logged() as lines:
        return asyncio.run(main(lines))


def _collected(server: _Server, asks: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One episode per ask, whose first policy call fails (a 400 whose message is the text): what its stored
    trajectory, the run's summary and the log hold."""
    server.asks = {call_seed(seed, 0, 0): ask for seed, ask in enumerate(asks)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = OpenAIChatAgent(model="m", base_url=server.url, api_key=KEY, timeout=10.0, max_retries=0)
    collector = RolloutCollector(agent, env_config={"num_ticks": 2}, num_envs=4)
    with _logged() as lines:
        summary = collector.collect(len(asks), 0)
    assert summary.failed == len(asks), summary.to_dict()
    by_id = {t.trajectory_id: t.to_json() for t in collector.trajectories}
    out = []
    for seed in range(len(asks)):
        tid = f"run-s{seed}-m0"
        out.append({"trajectory": by_id[tid], "summary": "\n".join(e for e in summary.errors if e.startswith(tid)),
                    "log": "\n".join(line for line in lines.lines if tid in line)})
    return out


def _first_eval_calls(server: _Server, asks: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One eval's first call per ask (a 400 whose message is the text): what the eval's one-line error says."""

    async def one(seed: int, lines: _Lines) -> dict[str, str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = OpenAIChatAgent(model="m", base_url=server.url, api_key=KEY, timeout=10.0, max_retries=0)
        del lines.lines[:]
        with pytest.raises(ConfigError) as info:
            await first_call(agent, agent.act("system", "go", seed=seed))
        await agent.aclose()
        return {"error": str(info.value), "log": "\n".join(lines.lines)}

    async def main(lines: _Lines) -> list[dict[str, str]]:
        return [await one(seed, lines) for seed in range(len(asks))]

    server.asks = dict(enumerate(asks))
    with _logged() as lines:
        return asyncio.run(main(lines))


def _cuts(outputs: dict[str, str], sent: int) -> set[int]:
    """The lengths at which the places cut a text of `sent` filler characters."""
    return {len(run) for text in outputs.values() for run in re.findall(rf"{re.escape(FILL)}+", text)
            if 4 <= len(run) < sent}


def _leaks(asks: list[dict[str, Any]], outputs: list[dict[str, str]]) -> list[str]:
    leaks = []
    for ask, out in zip(asks, outputs, strict=True):
        secret = SECRETS[ask["form"]]
        grams = {secret[i:i + 4] for i in range(len(secret) - 3)}
        held = {where: sorted(g for g in grams if g in text) for where, text in out.items()}
        held = {where: found for where, found in held.items() if found}
        if held:
            leaks.append(f"the {ask['form']} across the cut at {ask['cut']}, {ask['cut'] - ask['pad']} characters "
                         f"before it: {held}")
    return leaks


def _across(case: str, cuts: set[int]) -> list[dict[str, Any]]:
    """Every secret across every cut: its first `offset` characters before the cut, the rest after it."""
    return [{"case": case, "pad": cut - offset, "form": form, "cut": cut}
            for cut in sorted(cuts) for form, secret in SECRETS.items() for offset in range(1, len(secret))
            if cut >= offset]


def _check(run: Callable[[list[dict[str, Any]]], list[dict[str, str]]], case: str, sent: int) -> None:
    __tracebackhide__ = True
    (calibration,) = run([{"case": case, "pad": sent, "form": None}])
    cuts = _cuts(calibration, sent)
    assert cuts, f"{case}: no cut found (the case no longer reaches a cut, or the filler is not shown)"
    asks = _across(case, cuts)
    leaks = _leaks(asks, run(asks))
    assert not leaks, f"{case}: {len(leaks)} of {len(asks)} answers left part of a secret: {leaks[:4]}"


def test_the_secret_forms_are_distinct_and_share_nothing_with_the_filler():
    assert len(set(SECRETS.values())) == len(SECRETS)
    assert all(FILL not in s and len(s) >= 8 for s in SECRETS.values())


@pytest.mark.parametrize("case", CLIENT_CASES)
def test_no_part_of_a_secret_survives_any_cut_of_a_call(server, case):
    _check(lambda asks: _calls(server, asks), case, REPLY_CHARS + 1_000 if case in ("reply", "reasoning") else 2_000)


def test_no_part_of_a_secret_survives_the_cuts_of_a_judge_verdict_error(server):
    _check(lambda asks: _judged(server, asks), "judge", 2_000)


def test_no_part_of_a_secret_survives_the_cut_of_an_evals_first_call_error(server):
    _check(lambda asks: _first_eval_calls(server, asks), "status_400", 2_000)


def test_no_part_of_a_secret_survives_the_cuts_of_a_failed_episode(server):
    _check(lambda asks: _collected(server, asks), "status_400", 2_000)
