"""`rlaif-gym serve`: the text env as an OpenEnv server, driven by openenv-core's own clients.

Every test starts a real uvicorn server on 127.0.0.1 (a free port, in a thread; one test runs the
`rlaif-gym serve` command in a subprocess) and talks to it over the network: openenv-core's
`GenericEnvClient` and our `RLAIFEnvClient` (its `EnvClient` subclass) over the WebSocket, httpx over
HTTP, raw frames over `websockets`. Nothing here reads a clock: waits poll with a bound.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

pytest.importorskip("openenv")

import httpx
from openenv.core import GenericEnvClient
from openenv.core.env_server import create_app as openenv_create_app
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from rlaif_gym.envs import RLAIFTextEnv
from rlaif_gym.envs.decisions import DECISION_WORLD, decision_points
from rlaif_gym.errors import ConfigError
from rlaif_gym.integrations.openenv import (
    RemoteCapacityError,
    RemoteEnvError,
    RLAIFAction,
    RLAIFEnvClient,
    RLAIFObservation,
    RLAIFOpenEnv,
    SnapshotCodec,
    SnapshotTokenError,
    background_server,
    create_app,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"num_ticks": 4}
TEST_KEY, KEY_A, KEY_B = "test-key-" + "t" * 32, "key-a-" + "a" * 32, "key-b-" + "b" * 32
BUY = ('<think>market-0 looks cheap</think>'
       '{"type": "buy_prediction", "market": "market-0", "outcome": "YES", "amount": 100}')
WAIT = '{"type": "wait"}'
REPLIES = [BUY, "no action in this reply", WAIT, BUY]


def _transition(result) -> tuple:
    """Everything a step returns, for exact comparison."""
    obs = result.observation
    return (obs.prompt, obs.tick, obs.terminated, obs.truncated, obs.reward_components, obs.info, result.reward,
            result.done)


def _wait_for_free_slot(url: str) -> None:
    """A closed WebSocket frees its slot when the server sees the disconnect: poll for it (bounded)."""
    for _ in range(500):
        if httpx.get(f"{url}/sessions").json()["available"] > 0:
            return
        time.sleep(0.01)
    raise AssertionError(f"no session slot came free: {httpx.get(f'{url}/sessions').json()}")


@pytest.fixture
def url():
    with background_server(max_sessions=4, env_config=CONFIG, snapshot_key=TEST_KEY) as base_url:
        yield base_url


def test_reset_step_state_over_the_websocket_match_the_local_env(url):
    local = RLAIFTextEnv(CONFIG)
    prompt, info = local.reset(seed=0)
    with RLAIFEnvClient(base_url=url).sync() as env:
        first = env.reset(seed=0)
        assert first.observation.prompt == prompt and first.observation.system_prompt == info["system_prompt"]
        assert first.reward is None and first.done is False and first.observation.tick == 0
        total = 0.0
        for tick, reply in enumerate(REPLIES[: CONFIG["num_ticks"]], start=1):
            want_prompt, want_reward, terminated, truncated, want_info = local.step(reply)
            total += want_reward
            got = env.step(RLAIFAction(reply=reply) if tick % 2 else reply)  # an action or the bare string
            obs = got.observation
            assert (obs.prompt, got.reward, obs.terminated, obs.truncated) == (want_prompt, want_reward, terminated,
                                                                               truncated), f"tick {tick}"
            assert obs.reward_components == want_info["reward_components"], f"tick {tick}"
            assert set(obs.reward_components) == {"pnl", "risk", "format", "reasoning"}
            assert obs.info["feedback"] == want_info["feedback"] and obs.info["judge"] == want_info["judge"]
            assert got.done == (terminated or truncated) and obs.tick == tick
        assert got.done and got.observation.truncated  # num_ticks reached
        state = env.state()
        assert (state.seed, state.tick, state.step_count, state.num_ticks, state.truncated) == (0, 4, 4, 4, True)
        assert state.config["num_ticks"] == 4 and state.episode_id
        assert state.episode_return == pytest.approx(total)
        with pytest.raises(RemoteEnvError, match="episode has ended") as err:
            env.step(WAIT)
        assert (err.value.code, err.value.error_type) == ("EXECUTION_ERROR", "ResetNeeded")
        again = env.reset(seed=0, config={"num_ticks": 2}, episode_id="ep-7")  # config override for one episode
        assert again.observation.prompt != prompt  # "hour 0 of 2"
        assert env.state().num_ticks == 2 and env.state().episode_id == "ep-7"
        assert env.reset(seed=0).observation.prompt == prompt  # without `config`: the server's config again


def test_openenvs_generic_client_speaks_the_same_protocol(url):
    with GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(seed=5)
        assert set(first.observation) >= {"prompt", "system_prompt", "tick", "reward_components", "info"}
        step = env.step({"reply": BUY})
        assert isinstance(step.reward, float) and step.done is False
        assert step.observation["info"]["parsed_action"]["type"] == "buy_prediction"
        assert env.state()["tick"] == 1 and env.state()["seed"] == 5
    assert first.observation["prompt"] == RLAIFTextEnv(CONFIG).reset(seed=5)[0]


def test_snapshot_step_restore_step_is_bit_identical(url):
    with RLAIFEnvClient(base_url=url).sync() as env, RLAIFEnvClient(base_url=url).sync() as other:
        env.reset(seed=3)
        env.step(BUY)
        token = env.snapshot()
        assert isinstance(token, str) and token.startswith("rlaif-snapshot-v2:")
        tick_at_snapshot = env.state().tick
        first = [_transition(env.step(reply)) for reply in REPLIES[:3]]
        restored = env.restore(token)
        assert restored.observation.tick == tick_at_snapshot == env.state().tick and not restored.done
        assert [_transition(env.step(reply)) for reply in REPLIES[:3]] == first  # same session
        other.restore(token)
        assert [_transition(other.step(reply)) for reply in REPLIES[:3]] == first  # another session
        other.reset(snapshot=token)  # restore through reset: what a plain OpenEnv client (or a dataset row) can do
        assert [_transition(other.step(reply)) for reply in REPLIES[:3]] == first
        env.restore(token)
        assert _transition(env.step(WAIT)) != first[0]  # another reply, another branch
    with GenericEnvClient(base_url=url).sync() as plain:
        plain.reset(snapshot=token)
        step = plain.step({"reply": REPLIES[0]})
        assert (step.observation["prompt"], step.reward) == (first[0][0], first[0][6])


def test_many_sessions_run_concurrently_and_stay_isolated(url):
    seeds = [11, 12, 13, 14]  # as many as max_sessions

    async def play(seed: int) -> list[tuple]:
        async with RLAIFEnvClient(base_url=url) as env:
            await env.reset(seed=seed)
            return [_transition(await env.step(reply)) for reply in REPLIES[:3]]

    async def everyone():
        return await asyncio.gather(*(play(seed) for seed in seeds))

    results = asyncio.run(everyone())
    for seed, got in zip(seeds, results, strict=True):
        local = RLAIFTextEnv(CONFIG)
        local.reset(seed=seed)
        want = [local.step(reply) for reply in REPLIES[:3]]
        assert [(g[0], g[6]) for g in got] == [(w[0], w[1]) for w in want], f"seed {seed}"


def test_past_capacity_a_new_session_gets_a_clear_error(url):
    clients = [RLAIFEnvClient(base_url=url).sync() for _ in range(4)]
    for i, client in enumerate(clients):
        client.connect()
        client.reset(seed=i)
    try:
        with RLAIFEnvClient(base_url=url).sync() as extra, pytest.raises(RemoteCapacityError) as err:
            extra.reset(seed=9)
        assert err.value.code == "CAPACITY_REACHED"
        assert "4 of 4 sessions" in str(err.value) and "rlaif-gym serve --max-sessions 8" in str(err.value)
        assert (err.value.data["active_sessions"], err.value.data["max_sessions"]) == (4, 4)
        with GenericEnvClient(base_url=url).sync() as plain, pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
            plain.reset()  # openenv-core's own client shows the message too
        response = httpx.post(f"{url}/reset", json={"seed": 0})
        assert response.status_code == 503
        detail = response.json()["detail"]
        assert detail["code"] == "CAPACITY_REACHED" and "--max-sessions" in detail["message"]
        assert clients[0].step(WAIT).observation.tick == 1  # the open sessions are unaffected
    finally:
        clients[0].close()
    _wait_for_free_slot(url)
    with RLAIFEnvClient(base_url=url).sync() as late:  # a closed session freed its slot
        assert late.reset(seed=0).observation.tick == 0
    for client in clients[1:]:
        client.close()


def test_bad_input_gets_a_typed_error_and_the_session_goes_on(url):
    with RLAIFEnvClient(base_url=url).sync() as env:
        with pytest.raises(RemoteEnvError, match="reset it first") as err:
            env.step(WAIT)
        assert err.value.error_type == "ResetNeeded"
        env.reset(seed=1)
        cases = [
            (lambda: env.step({"text": "hi"}), "InvalidActionError", r'must be \{"reply"'),
            (lambda: env.step({"reply": 42}), "InvalidActionError", "reply"),
            (lambda: env.reset(config={"num_tiks": 3}), "ConfigError", "Did you mean 'num_ticks'"),
            (lambda: env.reset(config={"num_ticks": 0}), "ConfigError", "num_ticks"),
            (lambda: env.reset(config=[1, 2]), "ConfigError", "config overrides"),
            (lambda: env.reset(seed=-1), "ConfigError", "seed must be"),
            (lambda: env.reset(sed=1), "ConfigError", "unknown argument"),
            (lambda: env.reset(snapshot="not a token"), "SnapshotTokenError", "not a snapshot token"),
            (lambda: env.restore(env.snapshot()[:-4] + "0000"), "SnapshotTokenError", "not signed by this server"),
            (lambda: env.reset(seed=2, snapshot=env.snapshot()), "ConfigError", "no seed"),
        ]
        for call, error_type, message in cases:
            with pytest.raises(RemoteEnvError, match=message) as err:
                call()
            assert (err.value.code, err.value.error_type) == ("VALIDATION_ERROR", error_type), err.value
        assert env.step(WAIT).observation.tick == 1  # the episode went on untouched
    ws_url = url.replace("http://", "ws://") + "/ws"
    with ws_connect(ws_url) as raw:  # frames no OpenEnv client would send
        for frame, code in [("not json", "INVALID_JSON"), ('{"type": "fly"}', "UNKNOWN_TYPE"),
                            ('{"type": "step"}', "VALIDATION_ERROR"), ('{"type": "restore", "data": {}}',
                                                                        "VALIDATION_ERROR")]:
            raw.send(frame)
            reply = json.loads(raw.recv(timeout=30))
            assert (reply["type"], reply["data"]["code"]) == ("error", code), reply
            assert reply["data"]["message"]
        raw.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(raw.recv(timeout=30))["type"] == "observation"


def test_http_routes_drive_a_session_and_unknown_sessions_are_refused(url):
    started = httpx.post(f"{url}/reset", json={"seed": 4, "config": {"num_ticks": 3}}).json()
    sid = started["session_id"]
    assert started["observation"]["tick"] == 0 and started["done"] is False
    token = httpx.post(f"{url}/snapshot", json={"session_id": sid}).json()["snapshot"]
    step = httpx.post(f"{url}/step", json={"session_id": sid, "action": {"reply": BUY}}).json()
    assert step["observation"]["tick"] == 1 and isinstance(step["reward"], float)
    assert httpx.get(f"{url}/state", params={"session_id": sid}).json()["num_ticks"] == 3
    branch = httpx.post(f"{url}/restore", json={"snapshot": token}).json()  # into a new session
    again = httpx.post(f"{url}/step", json={"session_id": branch["session_id"], "action": {"reply": BUY}}).json()
    assert again == step
    for bad, status, error_type in [
        ({"session_id": "nope", "action": {"reply": WAIT}}, 404, "UnknownSessionError"),
        ({"session_id": sid, "action": {"message": WAIT}}, 422, "InvalidActionError"),
        ({"session_id": sid}, 422, "ValidationError"),
    ]:
        response = httpx.post(f"{url}/step", json=bad)
        assert response.status_code == status and response.json()["detail"]["error_type"] == error_type, response.text
    response = httpx.post(f"{url}/reset", json={"config": {"num_markets": 99}})
    assert response.status_code == 422 and response.json()["detail"]["error_type"] == "ConfigError"
    assert httpx.get(f"{url}/sessions").json()["active_sessions"] == 2  # the failed reset left no session behind
    assert httpx.post(f"{url}/close", json={"session_id": sid}).status_code == 200
    closed = httpx.post(f"{url}/step", json={"session_id": sid, "action": {"reply": WAIT}})
    assert closed.status_code == 404 and "no open session" in closed.json()["detail"]["message"]
    assert httpx.get(f"{url}/health").json() == {"status": "healthy"}


def test_idle_http_sessions_expire():
    now = [0.0]
    app = create_app(max_sessions=1, session_timeout_s=30.0, env_config=CONFIG, clock=lambda: now[0])
    with background_server(app) as url:
        sid = httpx.post(f"{url}/reset", json={"seed": 0}).json()["session_id"]
        now[0] = 29.0
        assert httpx.post(f"{url}/step", json={"session_id": sid, "action": {"reply": WAIT}}).status_code == 200
        now[0] = 29.0 + 31.0  # 31 s after the last request
        response = httpx.post(f"{url}/step", json={"session_id": sid, "action": {"reply": WAIT}})
        assert response.status_code == 404 and "expired after 30 s" in response.json()["detail"]["message"]
        assert httpx.get(f"{url}/sessions").json()["active_sessions"] == 0
        assert httpx.post(f"{url}/reset", json={"seed": 0}).status_code == 200  # its slot is free again


def test_an_idle_websocket_session_is_closed_with_a_message():
    with background_server(max_sessions=1, session_timeout_s=0.5, env_config=CONFIG) as url:
        with ws_connect(url.replace("http://", "ws://") + "/ws") as raw:
            raw.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(raw.recv(timeout=30))["type"] == "observation"
            reply = json.loads(raw.recv(timeout=30))  # sent by the server once the session has been idle 0.5 s
            assert reply["data"]["code"] == "SESSION_ERROR" and "closed after 0.5 s" in reply["data"]["message"]
            with pytest.raises(ConnectionClosed):
                raw.recv(timeout=30)
        _wait_for_free_slot(url)


def test_openenv_validate_accepts_the_server(url):
    from openenv.cli.__main__ import app as openenv_cli
    from typer.testing import CliRunner

    result = CliRunner().invoke(openenv_cli, ["validate", "--url", url, "--json"])
    report = json.loads(result.stdout)
    failed = [c for c in report["criteria"] if not c["passed"]]
    assert report["passed"] and report["mode"] == "simulation", failed


def test_the_environment_also_runs_in_openenvs_own_server(url):
    with RLAIFEnvClient(base_url=url).sync() as ours:  # a token signed with TEST_KEY
        ours.reset(seed=2)
        token = ours.snapshot()
        want = ours.step(BUY)
    stock = openenv_create_app(lambda: RLAIFOpenEnv(CONFIG, codec=SnapshotCodec(TEST_KEY)), RLAIFAction,
                               RLAIFObservation, max_concurrent_envs=2)
    with background_server(stock) as stock_url, GenericEnvClient(base_url=stock_url).sync() as env:
        assert env.reset(seed=2).observation["prompt"] == RLAIFTextEnv(CONFIG).reset(seed=2)[0]
        env.reset(snapshot=token)
        got = env.step({"reply": BUY})
        assert (got.observation["prompt"], got.reward) == (want.observation.prompt, want.reward)


def test_snapshot_codec_checks_key_version_and_shape():
    env = RLAIFOpenEnv(CONFIG, codec=SnapshotCodec(KEY_A))
    env.reset(seed=0)
    token = env.snapshot()
    with pytest.raises(SnapshotTokenError, match="not signed by this server"):
        SnapshotCodec(KEY_B).decode(token)
    prefix, version, body, mac = token.split(":")
    with pytest.raises(SnapshotTokenError, match="not signed"):
        SnapshotCodec(KEY_A).decode(":".join([prefix, version, body[:-2] + "AA", mac]))
    with pytest.raises(SnapshotTokenError, match=r"made by rlaif-gym 0\.0\.0"):
        codec = SnapshotCodec(KEY_A)
        signed = f"{prefix}:0.0.0:{body}"
        codec.decode(f"{signed}:{codec._mac(signed)}")
    with pytest.raises(SnapshotTokenError, match="string"):
        SnapshotCodec(KEY_A).decode(12)
    for short in ("", " ", "k" * 31):  # issue 25 row 9: any non-empty key was accepted
        with pytest.raises(ConfigError, match="needs at least 32"):
            SnapshotCodec(short)


class _Marker:
    """Unpickling this creates a directory: the proof that the server ran code from a token."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.makedirs, (self.path,))


def test_a_signed_token_holding_a_pickle_runs_nothing(tmp_path):
    """Issue 25 row 9: a token signed with the key ran its pickle before the type check refused it."""
    marker = tmp_path / "pwned"
    codec = SnapshotCodec(KEY_A)
    env = RLAIFOpenEnv(CONFIG, codec=codec)
    env.reset(seed=0)
    prefix, version, _, _ = env.snapshot().split(":")
    for payload in (pickle.dumps({"env": _Marker(str(marker))}), zlib.compress(pickle.dumps(_Marker(str(marker))))):
        signed = f"{prefix}:{version}:{base64.urlsafe_b64encode(payload).decode()}"
        with pytest.raises(SnapshotTokenError, match="signed but unreadable"):
            env.restore(f"{signed}:{codec._mac(signed)}")
    assert not marker.exists(), "a signed token ran code"


def test_a_non_ascii_token_is_a_typed_422_not_an_internal_error(url):
    """Issue 25 row 6: a token with a non-ASCII character gave HTTP 500 and a server traceback per request."""
    for token in ("rlaif-snapshot-v2:0.1:é:abc", "é" * 40, "rlaif-snapshot-v2:\u2028:x:y"):
        response = httpx.post(f"{url}/restore", json={"snapshot": token})
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert detail["error_type"] == "SnapshotTokenError" and "non-ASCII" in detail["message"], detail
    with RLAIFEnvClient(base_url=url).sync() as env:
        with pytest.raises(RemoteEnvError, match="non-ASCII") as err:
            env.reset(snapshot="rlaif-snapshot-v2:ü:x:y")
        assert err.value.error_type == "SnapshotTokenError"
        assert env.reset(seed=0).observation.tick == 0  # the session goes on


@pytest.mark.parametrize("kernel_cache", ["warm", "empty"])
def test_the_serve_command_runs_a_server(tmp_path, kernel_cache):
    """With an empty kernel cache (a fresh install) the server compiles before it listens, so a client with
    openenv-core's default timeouts (60 s a message) is served at once; before, its first step timed out."""
    env_vars = {**os.environ, "PYTHONPATH": str(ROOT)}
    if kernel_cache == "empty":
        env_vars.pop("NUMBA_CACHE_DIR", None)
        env_vars["RLAIF_GYM_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.Popen([sys.executable, "-m", "rlaif_gym", "serve", "--port", "0", "--max-sessions", "1",
                             "--set", "num_ticks=3"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_vars,
                            # A runner started in the background inherits SIGINT ignored; the child must see a
                            # Ctrl-C as a terminal delivers it.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = [proc.stdout.readline() for _ in range(3)]  # warming up, warm in, then "serving ... on URL ..."
        assert lines[0].startswith("warming up") and lines[1].startswith("warm in"), lines
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", lines[2])
        assert match, (lines, proc.stderr.read() if proc.poll() is not None else "")
        assert "at most 1 sessions" in lines[2]
        if kernel_cache == "empty":
            assert any((tmp_path / "cache").rglob("*.nbi")), "the kernels were not compiled into the empty cache"
        with RLAIFEnvClient(base_url=match.group(1)).sync() as env:
            assert env.reset(seed=0).observation.prompt == RLAIFTextEnv({"num_ticks": 3}).reset(seed=0)[0]
            assert env.step(WAIT).observation.tick == 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    log = proc.stderr.read()
    assert rc == 130 and "Application shutdown complete" in log, log  # Ctrl-C: a clean stop, the CLI's exit code 130


@pytest.mark.parametrize(("args", "message"), [
    (["--max-sessions", "0"], "--max-sessions"),
    (["--session-timeout", "0"], "--session-timeout"),
    (["--set", "num_tiks=3"], "Did you mean 'num_ticks'"),
    (["--port", "70000"], "--port"),
])
def test_the_serve_command_refuses_bad_options(args, message, capsys):
    from rlaif_gym.cli import main

    assert main(["serve", *args]) == 2
    assert message in capsys.readouterr().err


def test_the_serve_command_reports_a_busy_port(capsys):
    from rlaif_gym.cli import main

    with background_server(max_sessions=1) as url:
        port = url.rsplit(":", 1)[1]
        assert main(["serve", "--port", port]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


DECISION_24 = {**DECISION_WORLD, "num_ticks": 24}


def test_reset_can_start_at_a_decision_point(url):
    """Issue 28 item 3: reset(decision=...) starts where a market resolves soon and the prompt names it."""

    (point,) = decision_points([100], DECISION_24, resolves_within=4)
    with RLAIFEnvClient(base_url=url).sync() as env:
        first = env.reset(seed=100, config=DECISION_24, decision={"resolves_within": 4})
        assert first.observation.prompt == point.prompt and first.observation.tick == point.tick
        assert first.observation.info["decision"]["markets"][0]["market"] == point.market
        local = point.env()
        got = env.step(BUY)
        assert got.reward == local.step(BUY)[1] and "truth_mark" in got.observation.reward_components
        with pytest.raises(RemoteEnvError, match="decision must be true or an object") as err:
            env.reset(seed=100, decision={"resolves": 4})
        assert err.value.error_type == "ConfigError"
    started = httpx.post(f"{url}/reset", json={"seed": 100, "config": DECISION_24,
                                               "decision": {"resolves_within": 4}}).json()
    assert started["observation"]["prompt"] == point.prompt
    missing = httpx.post(f"{url}/reset", json={"decision": True})
    assert missing.status_code == 422 and "needs a seed" in missing.json()["detail"]["message"]
