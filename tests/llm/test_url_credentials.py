"""Credentials in a base URL are stripped before the HTTP client sees it, and a secret a server echoes, in
an error or in a successful reply, plain or base64, is never stored or printed (issue 15, items 7 and 8).

Real loopback servers that echo what they received (the Authorization header, the key, its base64) in
their replies and in their errors, like some gateways; real files on disk; the public API and the CLI.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fake_server import FakeOpenAIServer, Fault, call_key, episode_seeds
from judge_server import JudgeServer, make_run
from rollout_checks import read_store_strict

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.cli import main
from rlaif_gym.llm import OpenAIChatClient
from rlaif_gym.llm_judge import JudgeConfig, judge_run
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore

USER = "trainer"
URL_SECRET = "urlpass-Qz8Lm3Vw6Rt1"
KEY = "sk-echo-Fh3Kd9Pq2Wz7Xm4Nb6"
TICKS = 3


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret_forms() -> dict[str, str]:
    """Every form of the secrets that must never be stored (plain, base64, the Basic-auth pair)."""
    return {"url password": URL_SECRET, "base64 user:password": b64(f"{USER}:{URL_SECRET}")[:-2],
            "base64 password": b64(URL_SECRET)[:-2], "key": KEY, "key tail": KEY[8:], "base64 key": b64(KEY)[:-2],
            "urlsafe base64 key": base64.urlsafe_b64encode(KEY.encode()).decode()[:-2]}


def assert_clean(data: str | bytes, where: str) -> None:
    __tracebackhide__ = True
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    for name, form in secret_forms().items():
        assert form.encode() not in raw, f"{where} holds the {name}"


def assert_tree_clean(root: Path) -> int:
    __tracebackhide__ = True
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        assert_clean(path.read_bytes(), str(path))
        if path.suffix == ".html":
            for blob in re.findall(rb'id="rg-data">([A-Za-z0-9+/=]+)</script>', path.read_bytes()):
                assert_clean(gzip.decompress(base64.b64decode(blob)), f"{path} (embedded data)")
        if path.suffix == ".parquet":
            assert_clean(json.dumps(pq.read_table(path).to_pylist(), default=str), f"{path} (decoded)")
    return len(files)


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{URL_SECRET}@")


def _authorization(server: FakeOpenAIServer, body: dict[str, Any]) -> str:
    key = call_key(body)
    with server._lock:
        rec = next(r for r in reversed(server.requests) if r.key == key)
    return {k.lower(): v for k, v in rec.headers.items()}.get("authorization", "")


class EchoServer(FakeOpenAIServer):
    """The policy server; every successful reply echoes the Authorization header it got, the key and its
    base64 (in the content and in the reasoning)."""

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().completion(body)
        message = answer["choices"][0]["message"]
        echo = f"[gateway: auth={_authorization(self, body)} key={KEY} b64={b64(KEY)}]"
        think, _, action = message["content"].partition("</think>")
        message["content"] = f"{think} {echo}</think>{action}"
        message["reasoning_content"] = f"reasoning {echo}"
        answer["choices"][0]["logprobs"] = None
        return answer


class EchoJudge(JudgeServer):
    """The judge server; each verdict's reasoning echoes the Authorization header and the key."""

    def verdict(self, body: dict[str, Any]) -> str:
        verdict = json.loads(super().verdict(body))
        verdict["reasoning"] = f"auth={_authorization(self, body)} key={KEY} b64={b64(KEY)}"
        return json.dumps(verdict)


def _received(server: FakeOpenAIServer) -> set[str]:
    return {_authorization(server, r.body) for r in server.chat_requests()}


def test_url_credentials_are_stripped_before_the_client_and_echoes_are_masked(tmp_path, caplog):
    seed = 20
    echo_fault = [Fault("status", match=lambda b: b.get("seed") in episode_seeds(seed + 1, 0, [1]), status=401,
                        message="Invalid credentials: {authorization}")]
    with EchoServer(faults=echo_fault) as server:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            agent = OpenAIChatAgent(model="fake", base_url=with_credentials(server.base_url), api_key=KEY,
                                    timeout=5.0, max_retries=0)
        said = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
        assert any("credentials" in s and server.base_url in s for s in said), f"the stripping was not said: {said}"
        for s in said:
            assert_clean(s, "the warning")
        run = tmp_path / "run"
        summary = RolloutCollector(agent, sink=JsonlStore(run), env_config={"num_ticks": TICKS},
                                   num_envs=2).collect(2, seed)
        received = _received(server)
    assert received == {f"Bearer {KEY}"}, f"the server got {len(received)} kinds of Authorization, not the key alone"
    assert summary.failed == 1 and summary.completed == 1, summary.to_dict()
    trajs = read_store_strict(run)
    calls = [c for t in trajs for s in t.steps for c in s.llm_calls]
    assert calls and all("key=***" in c.response and "b64=***" in c.response for c in calls), calls[0].response
    assert all("key=***" in (c.reasoning or "") for c in calls)
    assert_clean(json.dumps(summary.to_dict()), "the summary")
    assert_tree_clean(tmp_path)


def test_openai_base_url_and_judge_base_url_credentials_never_reach_files_or_stdout(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with EchoServer() as policy, EchoJudge() as judge:
        monkeypatch.setenv("OPENAI_BASE_URL", with_credentials(policy.base_url))
        run = tmp_path / "cli-run"
        with pytest.warns(UserWarning, match="credentials in the base URL were removed"):
            code = main(["rollout", "--agent", "openai", "--model", "fake", "--episodes", "2", "--num-envs", "2",
                         "--seed", "5", "--out", str(run), "--no-progress", "--timeout", "5", "--max-retries", "0",
                         "--set", f"num_ticks={TICKS}", "--judge", "llm",
                         "--judge-base-url", with_credentials(judge.base_url), "--judge-model", "judge",
                         "--db", f"sqlite:///{tmp_path / 'runs.db'}"])
        assert code == 0, capsys.readouterr()
        assert _received(policy) == {f"Bearer {KEY}"} and _received(judge) == {f"Bearer {KEY}"}
    for fmt, name in (("db", "x.db.jsonl"), ("parquet", "x.parquet"), ("sft", "x.sft.jsonl")):
        assert main(["export", str(run), "--format", fmt, "--output", str(tmp_path / name)]) == 0
    assert main(["report", str(run)]) == 0
    with sqlite3.connect(tmp_path / "runs.db") as db:
        rows = db.execute('SELECT "stepsJson" FROM trajectories').fetchall()
    assert len(rows) == 2 and all("key=***" in r[0] for r in rows)
    assert assert_tree_clean(tmp_path) >= 7
    out = capsys.readouterr()
    assert_clean(out.out + out.err, "stdout/stderr")


def test_a_judge_that_echoes_the_key_in_verdicts_and_errors_leaves_a_clean_tape(tmp_path):
    run = tmp_path / "run"
    make_run(run, groups=1, group_size=2, ticks=TICKS)
    first: list[str] = []  # the first call the judge makes fails for good, echoing the header

    def first_call(body: dict[str, Any]) -> bool:
        first.append(first[0] if first else call_key(body))
        return call_key(body) == first[0]

    fault = Fault("status", match=first_call, status=503, message="upstream said {authorization}")
    with EchoJudge(faults=[fault]) as judge:
        with pytest.warns(UserWarning, match="credentials in the base URL were removed"):
            client = OpenAIChatClient("judge", with_credentials(judge.base_url), api_key=KEY, timeout=5.0,
                                      max_retries=0)
        result = judge_run(run, client=client, config=JudgeConfig(failure_budget=1.0), out_dir=tmp_path / "judged")
        assert _received(judge) == {f"Bearer {KEY}"}
    assert result.health["scored"] == 1, result.health
    ok = [v for v in result.batch.verdicts if v.outcome == "ok"]
    assert ok and "key=***" in ok[0].verdict["reasoning"], ok
    failed = [v for v in result.batch.verdicts if v.outcome == "error"]
    assert len(failed) == 1 and "upstream said Bearer ***" in failed[0].error, failed
    assert (tmp_path / "judged" / "judge.sqlite").exists()
    assert_tree_clean(tmp_path)


@pytest.mark.parametrize("url", [f"http://{USER}:{URL_SECRET}@127.0.0.1:9/v1", f"http://{USER}@127.0.0.1:9/v1"])
def test_describe_and_repr_show_the_stripped_url(url):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = OpenAIChatClient("m", url, api_key=KEY)
    assert client.base_url == "http://127.0.0.1:9/v1"
    assert_clean(repr(client) + json.dumps(client.describe()), "repr/describe")
