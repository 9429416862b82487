"""No API key ever reaches a file, a summary, a description, stdout/stderr or the logs, while it is really used.

Two secrets: one in `OPENAI_API_KEY` (used by the `rlaif-gym rollout --agent openai` command, which
has no key option) and one passed as `api_key=` (which wins over the variable in the API). The
server must have received each in the Authorization header of the run that used it.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fake_server import FakeOpenAIServer, Fault, episode_seeds
from rollout_checks import check_run, read_store_strict

from rlaif_gym.agents import OpenAIChatAgent
from rlaif_gym.cli import main
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import JsonlStore, SecretLeakError, assert_no_secrets, write_parquet

ENV_SECRET = "sk-envsecret-Zq7XkP2mW9vL4tR8yB3n"
ARG_SECRET = "sk-argsecret-Hd5JcV1sQ6gF0uE7aN2k"
URL_SECRET = "urlpass-Tw4Mx8Yr2Kp6"
SECRETS = [ENV_SECRET, ARG_SECRET, URL_SECRET]
TICKS = 6
FORMATS = ["sft", "dpo", "grpo", "db", "parquet"]


def assert_clean(text: str | bytes, where: str) -> None:
    __tracebackhide__ = True  # a failure must not print the text (and the secret in it) into the test log
    try:
        assert_no_secrets(text, SECRETS)
    except SecretLeakError as exc:
        raise AssertionError(f"{where}: {exc}") from None
    raw = text.encode() if isinstance(text, str) else text
    for secret in SECRETS:
        assert secret.encode() not in raw, f"{where}: holds a secret of {len(secret)} characters"
        assert secret[8:].encode() not in raw, f"{where}: holds the tail of a secret"


def assert_tree_clean(root: Path) -> int:
    """Every file under `root`, as bytes; Parquet and report.html's data (compressed) also decoded. Returns the
    number of files."""
    __tracebackhide__ = True
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        assert_clean(path.read_bytes(), str(path))
        if path.suffix == ".html":  # rlaif-gym report embeds the trajectories as base64 of gzip
            for blob in re.findall(rb'id="rg-data">([A-Za-z0-9+/=]+)</script>', path.read_bytes()):
                assert_clean(gzip.decompress(base64.b64decode(blob)), f"{path} (embedded data)")
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            assert_clean(json.dumps(table.to_pylist(), default=str), f"{path} (decoded)")
            assert_clean(json.dumps({k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}),
                         f"{path} (metadata)")
    return len(files)


def authorizations(server: FakeOpenAIServer) -> set[str]:
    return {r.headers.get("authorization") or r.headers.get("Authorization") or "" for r in server.chat_requests()}


def test_no_secret_anywhere(fake_server: FakeOpenAIServer, tmp_path, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, the HTTP client's included, even where
    for name in ("rlaif_gym",):  # an earlier command in this process set a package's level
        caplog.set_level(logging.DEBUG, logger=name)
    monkeypatch.setenv("OPENAI_API_KEY", ENV_SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    seed = 50
    fake_server.faults = [
        Fault("status", match=lambda b: b.get("seed") in episode_seeds(seed + 1, 0, range(2, TICKS)), status=503),
        Fault("status", match=lambda b: b.get("seed") in episode_seeds(seed + 2, 0, range(TICKS)), status=401),
        Fault("invalid_json", match=lambda b: b.get("seed") in episode_seeds(seed + 3, 0, [1, 4]), times=1),
        Fault("status", match=lambda b: b.get("seed") in episode_seeds(seed, 0, [3]), times=1, status=500),
    ]

    # 1. The API, with an explicit key (it must win over the variable), and some failures.
    agent = OpenAIChatAgent(model="fake", base_url=fake_server.base_url, api_key=ARG_SECRET, timeout=5.0,
                            max_retries=1, backoff=0.01)
    run = tmp_path / "api-run"
    collector = RolloutCollector(agent, sink=JsonlStore(run), env_config={"num_ticks": TICKS}, num_envs=2)
    summary = collector.collect(4, seed)
    trajs = read_store_strict(run)
    check_run(trajs, [f"run-s{seed + e}-m0" for e in range(4)], TICKS, summary,
              expect_failed=[f"run-s{seed + 1}-m0", f"run-s{seed + 2}-m0"])
    assert summary.failed == 2, f"the injected failures did not happen: {summary.errors}"
    auth = authorizations(fake_server)
    assert auth == {f"Bearer {ARG_SECRET}"}, \
        f"the server did not receive the api_key= secret (and only it) as a Bearer token: {len(auth)} distinct"

    assert_clean(json.dumps(summary.to_dict(), default=str), "summary.to_dict()")
    assert_clean(repr(summary), "repr(summary)")
    for obj in (agent, agent.client, agent.client.inner):
        assert_clean(repr(obj), f"repr({type(obj).__name__})")
        assert_clean(str(obj), f"str({type(obj).__name__})")
    assert_clean(json.dumps(agent.describe(), default=str), "agent.describe()")
    assert_clean(json.dumps(collector.manifest(4, seed), default=str), "collector.manifest()")
    for t in trajs:
        assert_clean(t.to_json(), f"trajectory {t.trajectory_id}")

    # 2. The command, whose key comes from OPENAI_API_KEY.
    before = len(fake_server.chat_requests())
    fake_server.faults = []
    cli_run = tmp_path / "cli-run"
    code = main(["rollout", "--agent", "openai", "--base-url", fake_server.base_url, "--model", "fake",
                 "--episodes", "2", "--num-envs", "2", "--seed", "7", "--out", str(cli_run), "--no-progress",
                 "--timeout", "2", "--max-retries", "1", "--set", f"num_ticks={TICKS}", "--parquet"])
    assert code == 0, f"rlaif-gym rollout --agent openai returned {code}"
    cli_auth = {next((v for k, v in r.headers.items() if k.lower() == "authorization"), None)  # names: any case
                for r in fake_server.chat_requests()[before:]}
    assert cli_auth == {f"Bearer {ENV_SECRET}"}, "the command did not send OPENAI_API_KEY as the Bearer token"
    check_run(read_store_strict(cli_run), ["cli-run-s7-m0", "cli-run-s8-m0"], TICKS)

    # 3. Every export format, through the command and the API.
    exports = tmp_path / "exports"
    for directory in (run, cli_run):
        for fmt in FORMATS:
            out = exports / f"{directory.name}.{fmt}.{'parquet' if fmt == 'parquet' else 'jsonl'}"
            code = main(["export", str(directory), "--format", fmt, "--output", str(out)])
            if fmt in ("dpo", "grpo") and code == 2:  # groups of 1: nothing to write (issue 15, item 10)
                continue
            assert code == 0, f"rlaif-gym export {directory.name} --format {fmt} returned {code}"
            assert out.exists(), f"export {fmt} of {directory.name} wrote nothing"
        write_parquet(exports / f"{directory.name}.api.parquet", list(JsonlStore(directory).read()))
    assert main(["report", str(run)]) == 0

    n = assert_tree_clean(tmp_path)
    assert n >= 2 * len(FORMATS) + 5, f"only {n} files checked"

    captured = capsys.readouterr()
    assert_clean(captured.out, "stdout")
    assert_clean(captured.err, "stderr")
    assert any(r.name.startswith("rlaif_gym.llm") and r.levelno == logging.DEBUG
               for r in caplog.records), "no HTTP client log was captured"
    assert_clean(caplog.text, "log records (formatted)")
    for record in caplog.records:
        assert_clean(repr(record.args) + str(record.msg), f"log record {record.name}")


def test_credentials_in_the_base_url_are_never_recorded(fake_server: FakeOpenAIServer, tmp_path, capsys):
    url = fake_server.base_url.replace("http://", f"http://trainer:{URL_SECRET}@")
    with pytest.warns(UserWarning, match="credentials in the base URL were removed"):
        agent = OpenAIChatAgent(model="fake", base_url=url, api_key=ARG_SECRET, timeout=2.0, max_retries=0)
    run = tmp_path / "url-run"
    summary = RolloutCollector(agent, sink=JsonlStore(run), env_config={"num_ticks": 2}, num_envs=1).collect(1, 3)
    assert summary.completed == 1, f"collection through a URL with credentials failed: {summary.errors}"
    assert fake_server.chat_requests(), "the server received nothing"
    assert agent.describe()["base_url"] == fake_server.base_url, f"describe() base_url {agent.describe()['base_url']}"
    assert_clean(json.dumps(agent.describe()), "agent.describe()")
    assert_clean(repr(agent.client.inner), "repr(client)")
    assert_tree_clean(tmp_path)
    captured = capsys.readouterr()
    assert_clean(captured.out + captured.err, "stdout/stderr")


def test_a_key_echoed_by_the_server_is_not_recorded(fake_server: FakeOpenAIServer, tmp_path):
    """Some gateways echo the presented key in their 401/5xx bodies; the error text is recorded, the key must not be."""
    fake_server.faults = [
        Fault("status", match=lambda b: b.get("seed") in episode_seeds(60, 0, range(2)), status=401,
              message="Incorrect API key provided: {authorization}"),
        Fault("status", match=lambda b: b.get("seed") in episode_seeds(61, 0, [1]), times=1, status=503,
              message="upstream rejected {authorization}"),
    ]
    agent = OpenAIChatAgent(model="fake", base_url=fake_server.base_url, api_key=ARG_SECRET, timeout=2.0,
                            max_retries=1, backoff=0.01)
    run = tmp_path / "echo-run"
    summary = RolloutCollector(agent, sink=JsonlStore(run), env_config={"num_ticks": 2}, num_envs=2).collect(2, 60)
    assert summary.failed == 1, f"the 401 did not fail its episode: {summary.to_dict()}"
    assert any("401" in e for e in summary.errors), f"the 401 is not reported: {summary.errors}"
    assert_clean(json.dumps(summary.to_dict(), default=str), "summary.to_dict()")
    assert_tree_clean(tmp_path)
