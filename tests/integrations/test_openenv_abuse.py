"""`rlaif-gym serve` against careless and hostile clients (issue 25 rows 4, 5, 7, 8, 12, 15; issue 37 rows S1, S2).

Every test starts a real uvicorn server on 127.0.0.1 (a free port, in a thread) and talks to it over the
network: `RLAIFEnvClient` and raw frames over the WebSocket, httpx and raw sockets over HTTP (a raw
socket sends a header that promises a body it never sends, which no HTTP library does). The server's
log is watched: no request may end in an internal error.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
import socket
import struct
import time
import zlib

import pytest

pytest.importorskip("openenv")

import httpx
from websockets.sync.client import connect as ws_connect

from rlaif_gym.errors import ConfigError
from rlaif_gym.integrations.openenv import (
    DEFAULT_SESSION_TIMEOUT_S,
    RemoteCapacityError,
    RemoteEnvError,
    RLAIFEnvClient,
    RLAIFOpenEnv,
    SessionPool,
    SnapshotCodec,
    UnknownSessionError,
    background_server,
    create_app,
)

CONFIG = {"num_ticks": 4}
KEY = "abuse-key-" + "k" * 32
WAIT = '{"type": "wait"}'
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 50_000 + "1" + "}" * 50_000


@pytest.fixture
def server_log(caplog):
    """The server's own error records (internal errors are logged at ERROR with the traceback)."""
    caplog.set_level(logging.WARNING)
    yield caplog
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


@pytest.fixture
def url(server_log):
    with background_server(max_sessions=4, env_config=CONFIG, snapshot_key=KEY) as base_url:
        yield base_url


def _ws(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


OUT_OF_BOUND = [
    ({"reward_weights": {"pnl": 1e308}}, "reward_weights"),  # row 4: accepted, the reward became NaN or -inf
    ({"market_duration_max": 2**63}, "market_duration_max"),  # row 5: INTERNAL_ERROR "this is a bug"
    ({"market_duration_min": 10**30, "market_duration_max": 10**30}, "market_duration_min"),
    ({"funding_interval": 2**64}, "funding_interval"),
    ({"num_ticks": 10**9}, "num_ticks"),
]


@pytest.mark.parametrize(("config", "field"), OUT_OF_BOUND)
def test_a_reset_config_past_its_bound_is_a_typed_error(url, config, field):
    """Issue 25 rows 4 and 5, over the WebSocket and over HTTP: a VALIDATION_ERROR naming the field."""
    with RLAIFEnvClient(base_url=url).sync() as env:
        with pytest.raises(RemoteEnvError, match=field) as err:
            env.reset(seed=0, config=config)
        assert (err.value.code, err.value.error_type) == ("VALIDATION_ERROR", "ConfigError"), err.value
        assert env.reset(seed=0).observation.tick == 0  # the session goes on
    response = httpx.post(f"{url}/reset", json={"seed": 0, "config": config})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail["error_type"] == "ConfigError" and field in detail["message"], detail
    assert httpx.get(f"{url}/sessions").json()["active_sessions"] == 0  # the refused reset left no session


def test_a_deeply_nested_frame_is_answered_and_the_session_goes_on(url):
    """Issue 25 row 7: a 100k-deep JSON frame closed the WebSocket session with no answer (RecursionError)."""
    with ws_connect(_ws(url), max_size=2**24) as raw:
        raw.send(json.dumps({"type": "reset", "data": {"seed": 3}}))
        first = json.loads(raw.recv(timeout=30))
        assert first["type"] == "observation"
        for frame in (DEEP_ARRAY, DEEP_OBJECT, '{"type": "reset", "data": ' + DEEP_ARRAY + "}"):
            raw.send(frame)
            reply = json.loads(raw.recv(timeout=30))
            assert (reply["type"], reply["data"]["code"]) == ("error", "INVALID_JSON"), reply
            assert "nested too deeply" in reply["data"]["message"]
        nested = {"type": "reset", "data": {"seed": 3, "config": {"num_ticks": json.loads("[" * 500 + "]" * 500)}}}
        raw.send(json.dumps(nested))  # parses, but is no config
        reply = json.loads(raw.recv(timeout=30))
        assert (reply["data"]["code"], reply["data"]["error_type"]) == ("VALIDATION_ERROR", "ConfigError"), reply
        assert len(reply["data"]["message"]) < 2_000  # the bad value is quoted short, not whole
        raw.send(json.dumps({"type": "state"}))
        state = json.loads(raw.recv(timeout=30))
        assert state["type"] == "state" and state["data"]["seed"] == 3  # the same session, untouched


def _raw_request(url: str, head: bytes, body_chunks=(), timeout: float = 10.0) -> bytes:
    """Send a request by hand (a header that promises more than is sent) and read the answer."""
    sock = socket.create_connection(_address(url), timeout=timeout)
    try:
        sock.sendall(head)
        for chunk in body_chunks:
            try:
                sock.sendall(chunk)
            except OSError:  # the server answered and closed: stop sending
                break
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < answer.index(b"\r\n\r\n") + 100:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
        return answer
    finally:
        sock.close()


def test_a_body_over_the_limit_gets_413_before_it_is_read(url):
    """Issue 25 row 8: a 200 MB episode_id took the server from 214 MB to a 977 MB peak before its 422. Now a
    body over the limit is refused unread: the header alone gets the 413 (the body is never sent here)."""
    started = time.monotonic()
    answer = _raw_request(url, b"POST /reset HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 200000000\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert time.monotonic() - started < 10  # answered at once, without waiting for 200 MB
    detail = json.loads(answer.split(b"\r\n\r\n", 1)[1])["detail"]
    assert detail["code"] == "PAYLOAD_TOO_LARGE" and "was not read" in detail["message"], detail
    # Without a Content-Length (chunked), the body is counted as it arrives and refused past the limit.
    chunk = b"x" * 65536
    answer = _raw_request(url, b"POST /reset HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                               b"Transfer-Encoding: chunked\r\n\r\n", [b"10000\r\n" + chunk + b"\r\n"] * 400)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"PAYLOAD_TOO_LARGE" in answer
    assert httpx.get(f"{url}/health").json() == {"status": "healthy"}
    assert httpx.get(f"{url}/sessions").json()["active_sessions"] == 0


def test_the_body_limit_is_configurable_and_bodies_within_it_work(server_log):
    app = create_app(max_sessions=2, env_config=CONFIG, snapshot_key=KEY, max_body_bytes=4096)
    with background_server(app) as url:
        response = httpx.post(f"{url}/reset", json={"seed": 0, "episode_id": "e" * 5000})
        assert response.status_code == 413 and response.json()["detail"]["code"] == "PAYLOAD_TOO_LARGE"
        assert "at most 4096 bytes" in response.json()["detail"]["message"]
        started = httpx.post(f"{url}/reset", json={"seed": 0, "episode_id": "mine"})
        assert started.status_code == 200 and started.json()["observation"]["tick"] == 0
        step = httpx.post(f"{url}/step", json={"session_id": started.json()["session_id"], "action": {"reply": WAIT}})
        assert step.status_code == 200 and step.json()["observation"]["tick"] == 1
    with pytest.raises(ConfigError, match="max_body_bytes"):
        create_app(max_body_bytes=10)


def test_a_deeply_nested_http_body_gets_the_servers_error_format(url):
    """Issue 25 row 15: a deeply nested body got FastAPI's generic 400 outside the server's error format."""
    for path in ("/reset", "/step", "/snapshot", "/restore", "/close"):
        response = httpx.post(f"{url}{path}", content=DEEP_ARRAY, headers={"content-type": "application/json"})
        assert response.status_code == 400, (path, response.text)
        detail = response.json()["detail"]
        assert isinstance(detail, dict) and detail["code"] == "INVALID_JSON", (path, detail)
        assert "nested too deeply" in detail["message"], detail
    rpc = httpx.post(f"{url}/mcp", content=DEEP_OBJECT)
    assert rpc.status_code == 200 and rpc.json()["error"]["code"] == -32700  # JSON-RPC's own parse error
    missing = httpx.get(f"{url}/no-such-route")
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "NOT_FOUND"
    assert httpx.post(f"{url}/reset", json={"seed": 0}).status_code == 200  # the server goes on


def test_an_http_route_cannot_drive_a_websocket_session():
    """Issue 25 row 15: `SessionPool.get` did not check the session's transport."""
    pool = SessionPool(lambda: RLAIFOpenEnv(CONFIG), max_sessions=2, timeout_s=None)
    ws = pool.open("ws", "127.0.0.1")
    http = pool.open("http", "127.0.0.1")
    assert pool.get(http.id) is http
    with pytest.raises(UnknownSessionError, match="is a ws session; it is driven only over its own WebSocket"):
        pool.get(ws.id)  # what /step, /state, /snapshot, /restore and /close look up
    assert pool.get(ws.id, transport="ws") is ws
    with pytest.raises(UnknownSessionError, match="is a http session"):
        pool.get(http.id, transport="ws")
    assert len(pool) == 2  # nothing was closed by the refused lookups


def test_one_client_cannot_take_every_session(server_log):
    """Issue 25 row 12: one client could hold every slot of --max-sessions; a per-client cap keeps room for
    the others (another address: 127.0.0.2, which the loopback interface answers too)."""
    app = create_app(max_sessions=4, max_sessions_per_client=2, env_config=CONFIG, snapshot_key=KEY)
    with background_server(app, host="0.0.0.0") as any_url:
        url = any_url.replace("0.0.0.0", "127.0.0.1")
        mine = [httpx.post(f"{url}/reset", json={"seed": i}).json()["session_id"] for i in range(2)]
        refused = httpx.post(f"{url}/reset", json={"seed": 2})
        assert refused.status_code == 503, refused.text
        detail = refused.json()["detail"]
        assert detail["code"] == "CAPACITY_REACHED" and "max_sessions_per_client" in detail["message"], detail
        assert "--max-sessions-per-client 4" in detail["message"]
        with RLAIFEnvClient(base_url=url).sync() as ws, pytest.raises(RemoteCapacityError, match=r"127\.0\.0\.1"):
            ws.reset(seed=0)  # the cap counts WebSocket sessions of the same address too
        other = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        with other:
            theirs = other.post(f"{url}/reset", json={"seed": 5})
            assert theirs.status_code == 200, theirs.text  # another client still gets a slot
        assert httpx.get(f"{url}/sessions").json()["max_sessions_per_client"] == 2
        httpx.post(f"{url}/close", json={"session_id": mine[0]})
        assert httpx.post(f"{url}/reset", json={"seed": 2}).status_code == 200  # a closed one frees its slot


def test_idle_sessions_expire_after_120_s_by_default():
    """Issue 25 row 12: HTTP sessions nobody closed held their slots for 600 s."""
    assert DEFAULT_SESSION_TIMEOUT_S == 120.0
    now = [0.0]
    app = create_app(max_sessions=1, env_config=CONFIG, clock=lambda: now[0])
    assert app.state.pool.timeout_s == 120.0
    with background_server(app) as url:
        assert httpx.post(f"{url}/reset", json={"seed": 0}).status_code == 200
        now[0] = 121.0
        assert httpx.post(f"{url}/reset", json={"seed": 0}).status_code == 200  # the idle one expired
    from rlaif_gym.cli import main

    assert main(["serve", "--max-sessions-per-client", "0"]) == 2


def test_the_serve_command_says_its_idle_timeout_and_per_client_cap(capsys):
    from rlaif_gym.cli import main

    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-sessions-per-client" in text and "--session-timeout" in text and "120.0" in text, text
    assert "no authentication" in text


def test_http_answers_come_without_the_delayed_ack_wait(url):
    """The listening socket says it is TCP, so asyncio sets TCP_NODELAY on each connection: an HTTP answer
    (headers and body written apart) no longer waited ~40 ms for the client's delayed ACK (found while
    fuzzing: every request took 44 ms)."""
    with httpx.Client(base_url=url) as http:
        http.get("/health")
        times = []
        for _ in range(15):
            started = time.perf_counter()
            assert http.get("/health").status_code == 200
            times.append(time.perf_counter() - started)
    assert sorted(times)[len(times) // 2] < 0.03, times  # the median; it was 0.044 s, now about 0.002 s


def test_an_episode_id_is_a_short_string(url):
    """An id is sent back with every state and snapshot: a 16 MiB frame could make it megabytes, a dict a
    str() of it. 1 to 255 characters (as OpenEnv's HTTP reset body allows), else a typed error."""
    with RLAIFEnvClient(base_url=url).sync() as env:
        for bad in ("e" * 256, "", {"id": 1}, 7):
            with pytest.raises(RemoteEnvError, match="episode_id must be a string of 1 to 255") as err:
                env.reset(seed=0, episode_id=bad)
            assert err.value.error_type == "ConfigError"
        env.reset(seed=0, episode_id="e" * 255)
        assert env.state().episode_id == "e" * 255


# -- issue 37 row D1: the work of one decision reset is bounded ------------------------------------------------------

NEVER = {"min_evidence": 10**6}  # no prompt names a market a million times: no tick ever qualifies
LONG = {"num_ticks": 10**6}  # about 15-50 minutes of a worker to play through, unbounded
PATIENT_S = 60.0  # generous: what each test waits at most for what takes well under a second when it works


def _wait_until(predicate, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < PATIENT_S, f"not within {PATIENT_S:g} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - started


def _settled(played: list[int]) -> bool:
    """True once no tick was played for 0.5 s (a search that stopped)."""
    before = played[0]
    time.sleep(0.5)
    return played[0] == before


def test_a_decision_search_that_never_qualifies_is_a_typed_error_within_its_bounds(server_log, ticks_played,
                                                                                     capsys):
    """Issue 37 row D1: a decision reset's search was bounded only by num_ticks (5.9 s of a worker for 2,000
    ticks; about 50 min for 1,000,000). Now it stops at the server's tick cap or deadline, with a typed
    error, and the session keeps the episode it had."""
    from rlaif_gym.integrations.openenv import DEFAULT_DECISION_MAX_TICKS, DEFAULT_DECISION_TIMEOUT_S

    assert (DEFAULT_DECISION_MAX_TICKS, DEFAULT_DECISION_TIMEOUT_S) == (5_000, 20.0)
    with background_server(env_config=CONFIG, snapshot_key=KEY) as url:  # the default bounds
        response = httpx.post(f"{url}/reset", json={"seed": 0, "config": LONG, "decision": NEVER}, timeout=PATIENT_S)
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert (detail["error_type"], detail["reason"]) == ("SearchLimitError", "ticks"), detail
        assert ticks_played[0] <= 5_000 and "5,000 ticks and 20 s" in detail["message"], detail
    capped = create_app(env_config=CONFIG, snapshot_key=KEY, decision_max_ticks=300)
    with background_server(capped) as url, RLAIFEnvClient(base_url=url).sync() as env:
        env.reset(seed=5)
        env.step(WAIT)
        for ticks in (2_000, 10**6):  # started within the cap and searched to it, or drawn past it
            ticks_played[0] = 0
            with pytest.raises(RemoteEnvError, match="300 ticks") as err:
                env.reset(seed=0, config={"num_ticks": ticks}, decision=NEVER)
            data = err.value.data
            assert (data["code"], data["error_type"], data["reason"]) == ("VALIDATION_ERROR", "SearchLimitError",
                                                                          "ticks"), data
            assert data["ticks_searched"] == ticks_played[0] <= 300, (data, ticks_played)
            assert "--decision-max-ticks" in data["message"] and "\n" not in data["message"]
        assert env.state().tick == 1 and env.state().seed == 5  # the episode it had, unchanged
        response = httpx.post(f"{url}/reset", json={"seed": 0, "config": {"num_ticks": 2_000}, "decision": NEVER},
                              timeout=PATIENT_S)
        assert response.status_code == 422 and response.json()["detail"]["error_type"] == "SearchLimitError"
    timed = create_app(env_config=CONFIG, snapshot_key=KEY, decision_max_ticks=10**6, decision_timeout_s=1.0)
    with background_server(timed) as url, RLAIFEnvClient(base_url=url).sync() as env:
        started = time.monotonic()
        with pytest.raises(RemoteEnvError, match="ran past its deadline") as err:
            env.reset(seed=0, config=LONG, decision=NEVER)
        assert time.monotonic() - started < PATIENT_S
        assert (err.value.data["reason"], err.value.error_type) == ("deadline", "SearchLimitError")
        assert 0 < err.value.data["ticks_searched"] < 10**6
        assert env.reset(seed=1).observation.tick == 0  # the session goes on
    for bad in ({"decision_max_ticks": 0}, {"decision_max_ticks": 1.5}, {"decision_timeout_s": 0},
                {"decision_timeout_s": float("nan")}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            create_app(env_config=CONFIG, warm=False, **bad)
    from rlaif_gym.cli import main

    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--decision-max-ticks" in text and "--decision-timeout" in text and "5000" in text, text


def test_a_client_that_leaves_mid_search_stops_it(server_log, ticks_played):
    """Issue 37 row D1: a search ran on after its client gave up. Now the WebSocket's close or the HTTP
    connection's drop stops it at its next tick: the ticks played stop, the session's slot and lock are free.
    The server's own bounds are set out of reach here, so only the client's leaving can stop it."""
    app = create_app(max_sessions=4, env_config=CONFIG, snapshot_key=KEY, decision_max_ticks=10**6,
                     decision_timeout_s=3600.0)
    reset = {"seed": 0, "config": LONG, "decision": NEVER}
    with background_server(app) as url:
        # WebSocket: the client closes while its reset searches
        with ws_connect(_ws(url)) as raw:
            raw.send(json.dumps({"type": "reset", "data": reset}))
            _wait_until(lambda: ticks_played[0] > 50, "the search starts")
        _wait_until(lambda: _settled(ticks_played), "the search stops after the WebSocket closed")
        _wait_until(lambda: httpx.get(f"{url}/sessions").json()["active_sessions"] == 0, "the slot is free")
        # HTTP, in a session that has an episode: the client drops the connection while its reset searches
        session = httpx.post(f"{url}/reset", json={"seed": 7}).json()["session_id"]
        assert httpx.post(f"{url}/step", json={"session_id": session, "action": {"reply": WAIT}}).status_code == 200
        for body in ({**reset, "session_id": session}, reset):  # an open session's reset, then a new session's
            ticks_played[0] = 0
            data = json.dumps(body).encode()
            sock = socket.create_connection(_address(url), timeout=10)
            sock.sendall(b"POST /reset HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(data)).encode() + b"\r\n\r\n" + data)
            _wait_until(lambda: ticks_played[0] > 50, "the search starts")
            sock.close()
            _wait_until(lambda: _settled(ticks_played), "the search stops after the HTTP client left")
            state = httpx.get(f"{url}/state", params={"session_id": session}, timeout=PATIENT_S)
            assert state.status_code == 200 and (state.json()["seed"], state.json()["tick"]) == (7, 1), state.text
        _wait_until(lambda: httpx.get(f"{url}/sessions").json()["active_sessions"] == 1, "the new session closed")
def _forged(token: str, meta: dict | None = None, world: dict | None = None, config: dict | None = None) -> str:
    """`token` with session fields, world fields or config fields changed, signed with the server's key: what a
    client holding the key (or a server of the same key with a bug) can hand the server."""
    prefix, version, body, _ = token.split(":")
    raw = zlib.decompress(base64.urlsafe_b64decode(body))
    n = int.from_bytes(raw[10:14], "little")
    header, arrays = json.loads(raw[14 : 14 + n]), bytearray(raw[14 + n :])
    header["config"].update(config or {})
    for key, value in (meta or {}).items():
        if value is None:
            del header["meta"][key]
        else:
            header["meta"][key] = value
    at = 0
    for name, dtype, shape in header["arrays"]:
        size = int(dtype[-1]) * math.prod(shape)
        field = name.removeprefix("world.")
        if field in (world or {}):  # the first element of a float64 field
            arrays[at : at + 8] = struct.pack("<d", world[field])
        at += size
    head = json.dumps(header).encode()  # allow_nan: NaN and Infinity go out as JSON's extension
    payload = zlib.compress(raw[:10] + len(head).to_bytes(4, "little") + head + bytes(arrays))
    signed = f"{prefix}:{version}:{base64.urlsafe_b64encode(payload).decode()}"
    return f"{signed}:{SnapshotCodec(KEY)._mac(signed)}"


FORGED = [  # (session fields, world fields): each was restored, then broke /state, /restore or /step
    ({"episode_return": float("nan")}, None),  # S2: /restore 200, then /state a raw 500 (NaN is not JSON)
    ({"episode_return": float("inf")}, None),
    ({"episode_return": 1e308}, None),  # finite, but a step's reward could take the sum to inf
    ({"prompt": "hour 0 \ud800"}, None),  # S2: /restore a raw 500 (UTF-8 cannot encode a lone surrogate)
    ({"episode_id": "\udc00id"}, None),  # S2: /state a raw 500
    ({"prompt": ""}, None),
    ({"extra": [1, 2]}, None),  # a field snapshot() never writes
    ({"truncated": None}, None),  # one it always writes, missing
    (None, {"hold_yes": 1e308}),  # S1: restored, then the first step an INTERNAL_ERROR (pnl not finite)
    (None, {"cash": -5.0}),
]


@pytest.mark.parametrize(("meta", "world"), FORGED)
def test_a_signed_token_with_bad_session_fields_or_world_is_a_typed_error(url, meta, world):
    """Issue 37 rows S1 and S2: a token signed with the server's key whose session fields are not what
    snapshot() writes (a NaN or infinite return, a lone surrogate in the prompt or the episode id, a field
    missing or unknown) or whose world no episode reaches: /restore (HTTP and WebSocket) answers a typed 422
    SnapshotTokenError, never a 500; the session it was sent to keeps its episode, its /state and /step work."""
    with httpx.Client(base_url=url, timeout=60) as http:
        opened = http.post("/reset", json={"seed": 3, "episode_id": "mine"}).json()
        sid = opened["session_id"]
        token = http.post("/snapshot", json={"session_id": sid}).json()["snapshot"]
        forged = _forged(token, meta, world)
        for body in ({"snapshot": forged}, {"snapshot": forged, "session_id": sid}):
            answer = http.post("/restore", json=body)
            assert answer.status_code == 422, answer.text[:300]
            detail = answer.json()["detail"]
            assert (detail["code"], detail["error_type"]) == ("VALIDATION_ERROR", "SnapshotTokenError"), detail
            assert "snapshot() " in detail["message"] or "not a restorable snapshot" in detail["message"], detail
        state = http.get("/state", params={"session_id": sid})
        assert state.status_code == 200 and state.json()["episode_id"] == "mine" and state.json()["tick"] == 0
        stepped = http.post("/step", json={"session_id": sid, "action": {"reply": WAIT}})
        assert stepped.status_code == 200 and math.isfinite(stepped.json()["reward"])
        assert http.get("/sessions").json()["active_sessions"] == 1  # the refused restores left no session open
    with ws_connect(_ws(url)) as ws:
        ws.send(json.dumps({"type": "restore", "data": {"snapshot": forged}}))
        reply = json.loads(ws.recv(timeout=30))
        assert reply["type"] == "error" and reply["data"]["code"] == "VALIDATION_ERROR", reply
        ws.send(json.dumps({"type": "reset", "data": {"snapshot": forged}}))  # restore through reset
        assert json.loads(ws.recv(timeout=30))["data"]["error_type"] == "SnapshotTokenError"
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "state"


@pytest.mark.parametrize(("config", "message"), [
    ({"starting_cash": 1e-300, "funding_interval": 1, "num_ticks": 10**6},
     r"its config is invalid: .*starting_cash: Input should be greater than or equal to 0.000001 \(got 1e-300\)"),
    ({"starting_cash": 1e-3}, r"world fields cash \+ pos_margin \+ npc_cash \+ pm_collateral \+ fees_collected \+ "
                              r"house_cash must sum to 40000 \(what the world started with: starting_cash \+ num_npcs "
                              r"x npc_starting_cash = 0.001 \+ 8 x 5000"),
])
def test_a_signed_token_restored_under_another_config_is_a_typed_error(url, config, message):
    """Issue 57 row S3: a token signed with the server's key whose config was changed and its world not (a
    starting_cash of 1e-300 in a 10,000 USD world) was restored (200), then paid rewards of -4.5e301 a tick, and a
    10^6-tick session answered a 500 at step 13. Now /restore answers a typed 422 naming the config's floor, or the
    law the world breaks under that config; the session it was sent to keeps its episode."""
    with httpx.Client(base_url=url, timeout=60) as http:
        sid = http.post("/reset", json={"seed": 3, "episode_id": "mine"}).json()["session_id"]
        http.post("/step", json={"session_id": sid, "action": {"reply": WAIT}})
        token = http.post("/snapshot", json={"session_id": sid}).json()["snapshot"]
        forged = _forged(token, config=config)
        for body in ({"snapshot": forged}, {"snapshot": forged, "session_id": sid}):
            answer = http.post("/restore", json=body)
            assert answer.status_code == 422, answer.text[:300]
            detail = answer.json()["detail"]
            assert (detail["code"], detail["error_type"]) == ("VALIDATION_ERROR", "SnapshotTokenError"), detail
            assert re.search(message, detail["message"]), detail["message"]
        state = http.get("/state", params={"session_id": sid}).json()
        assert (state["episode_id"], state["tick"]) == ("mine", 1)
        stepped = http.post("/step", json={"session_id": sid, "action": {"reply": WAIT}})
        assert stepped.status_code == 200 and abs(stepped.json()["reward"]) < 1.0


def test_an_honest_token_restores_after_the_forged_ones(url):
    """The checks refuse only what snapshot() never writes: a real token of a played episode restores, over
    HTTP and the WebSocket, and its session fields come back as they were."""
    with httpx.Client(base_url=url, timeout=60) as http:
        sid = http.post("/reset", json={"seed": 5, "episode_id": "honest"}).json()["session_id"]
        for _ in range(2):
            http.post("/step", json={"session_id": sid, "action": {"reply": WAIT}})
        token = http.post("/snapshot", json={"session_id": sid}).json()["snapshot"]
        before = http.get("/state", params={"session_id": sid}).json()
        branch = http.post("/restore", json={"snapshot": token})
        assert branch.status_code == 200, branch.text[:300]
        after = http.get("/state", params={"session_id": branch.json()["session_id"]}).json()
        assert {k: after[k] for k in ("episode_id", "tick", "episode_return")} == \
            {k: before[k] for k in ("episode_id", "tick", "episode_return")}
    with ws_connect(_ws(url)) as ws:
        ws.send(json.dumps({"type": "restore", "data": {"snapshot": token}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"
