"""A fuzz of the OpenEnv protocol (issue 25): random frames, random JSON, random tokens, on 127.0.0.1.

One real server (uvicorn in a thread, on a free port of 127.0.0.1) takes 6,000 messages from a seeded
generator, over four WebSocket connections and HTTP:

* frames that are not JSON (random bytes, random text, truncated messages), JSON that is not a message
  (random values, arrays and objects nested up to 100,000 deep), messages of unknown or wrong types;
* the protocol's own messages with random fields: seeds of every JSON type and size, episode ids,
  configs with random keys and values inside and outside their bounds, replies (valid actions, noise,
  lone surrogates, a megabyte), snapshot tokens: real ones, mutated ones (a character flipped, cut,
  non-ASCII inserted), and ones *signed with the server's key* around a mutated payload (a header
  field replaced, array bytes flipped), which reach the data-only snapshot reader itself;
* the HTTP routes with random bodies, and the close message, sometimes.

Every message but a close must get exactly one answer, an observation, state, snapshot or a typed
error, never ``INTERNAL_ERROR`` (HTTP: never a 500, always the server's error format); the server
must log no error; and no session may end unless its client closed it: at the end every WebSocket
still answers, and the server counts exactly the sessions that were opened and not closed.
The run is seeded (the same messages every time; `RLAIF_FUZZ_SEED=n` picks others) and takes about 20 s
on this project's 2 shared cores.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import time
import zlib

import pytest

pytest.importorskip("openenv")

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from rlaif_gym import RLAIFEnvConfig
from rlaif_gym.integrations.openenv import SnapshotCodec, background_server

SEED = int(os.environ.get("RLAIF_FUZZ_SEED", "25"))  # another seed explores other messages
MESSAGES = 6_000
CONNECTIONS = 4
TIME_LIMIT_S = 120.0  # a hang or a slow path fails here; the run itself takes about 20 s on 2 cores
KEY = "fuzz-key-" + "f" * 32
BASE = {"num_ticks": 6, "backend": "numpy", "num_npcs": 4}
ERROR_CODES = {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR", "CAPACITY_REACHED",
               "SESSION_ERROR"}
HTTP_CODES = ERROR_CODES | {"NOT_FOUND", "METHOD_NOT_ALLOWED", "PAYLOAD_TOO_LARGE"}
FIELDS = [name for name in RLAIFEnvConfig.model_fields if name != "backend"]  # numba would compile for minutes
ACTIONS = ["buy_prediction", "sell_prediction", "open_perp", "close_perp", "wait", "post", "send_dm", "join_group",
           "fly"]


class Fuzz:
    """The seeded generator of values, frames and tokens."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tokens: list[str] = []  # real tokens the server handed out
        self.codec = SnapshotCodec(KEY)

    # -- values

    def text(self, n: int | None = None) -> str:
        rng = self.rng
        n = rng.choice([0, 1, 5, 40, 300]) if n is None else n
        pools = ["abc xyz", "{}[]\":,\\", "\u00e9\u4e2d\U0001f600\u2028", "\ud800\udfff\udbff", "\x00\x07\x1b\n\t"]
        return "".join(rng.choice(rng.choice(pools)) for _ in range(n))

    def number(self):
        rng = self.rng
        return rng.choice([0, 1, -1, 7, 2**31, 2**63 - 1, 2**63, 2**64, -(2**70), 10**30, 1.5, -0.0, 2.0, 1e308,
                           -1e308, 5e-324, float("nan"), float("inf"), rng.randint(-10**6, 10**6), rng.random()])

    def value(self, depth: int = 0):
        rng = self.rng
        kind = rng.randrange(8 if depth < 3 else 5)
        if kind == 0:
            return None
        if kind == 1:
            return rng.random() < 0.5
        if kind in (2, 3):
            return self.number()
        if kind == 4:
            return self.text()
        if kind in (5, 6):
            return [self.value(depth + 1) for _ in range(rng.randrange(4))]
        return {self.text(rng.randrange(6)): self.value(depth + 1) for _ in range(rng.randrange(4))}

    def seed(self):
        return self.rng.choice([None, 0, 1, 42, self.rng.randrange(2**63)]) if self.rng.random() < 0.6 \
            else self.value()

    def config(self):
        rng = self.rng
        if rng.random() < 0.15:
            return self.value()
        out = {}
        for _ in range(rng.randrange(4)):
            name = rng.choice(FIELDS) if rng.random() < 0.9 else self.text(8)
            default = RLAIFEnvConfig.model_fields[name].default if name in RLAIFEnvConfig.model_fields else None
            if isinstance(default, (int, float)) and not isinstance(default, bool) and rng.random() < 0.5:
                out[name] = type(default)(default * rng.choice([0, 0.5, 1, 2, 3]))  # often in range
            elif name == "reward_weights" and rng.random() < 0.6:
                out[name] = {rng.choice(["pnl", "risk", "format", "reasoning", "x"]): self.number()}
            else:
                out[name] = self.value(1)
        if rng.random() < 0.7:
            out.setdefault("num_ticks", rng.choice([1, 3, 6]))  # keep most episodes short
        return out

    def reply(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.5:
            action = {"type": rng.choice(ACTIONS)}
            for key in rng.sample(["market", "outcome", "amount", "ticker", "side", "leverage", "content", "to",
                                   "group", "shares"], rng.randrange(4)):
                action[key] = rng.choice([f"market-{rng.randrange(-1, 5)}", "YES", "NO", "long", "BTCAI",
                                          self.number(), self.text(10)])
            return f"<think>{self.text()}</think>{json.dumps(action)}"
        if roll < 0.97:
            return self.text()
        return "x" * rng.choice([65_536, 1_048_576, 1_048_577])  # the largest reply, and one past it

    # -- tokens

    def token(self) -> str:
        rng = self.rng
        if not self.tokens or rng.random() < 0.1:
            return rng.choice(["", "rlaif-snapshot-v2", "rlaif-snapshot-v2:0:abc:def", self.text(30),
                               "rlaif-snapshot-v2:" + "A" * 5000 + ":x"])
        token = rng.choice(self.tokens)
        roll = rng.random()
        if roll < 0.3:
            return token  # a real one: restores
        if roll < 0.55:
            i = rng.randrange(len(token))
            return token[:i] + rng.choice(["A", "é", ":", "\ud800", "", "=="]) + token[i + 1:]
        if roll < 0.65:
            return token[: rng.randrange(len(token))]
        return self.signed(token)

    def signed(self, token: str) -> str:
        """A token signed with the server's key around a mutated payload: it reaches the snapshot reader."""
        rng = self.rng
        prefix, version, body, _ = token.split(":")
        raw = bytearray(zlib.decompress(base64.urlsafe_b64decode(body)))
        magic = len(b"RLAIFSNAP\n")
        length = int.from_bytes(raw[magic:magic + 4], "little")
        header, arrays = json.loads(raw[magic + 4:magic + 4 + length]), raw[magic + 4 + length:]
        roll = rng.random()
        if roll < 0.6:  # replace one value somewhere in the header
            node, path = header, []
            while isinstance(node, (dict, list)) and node and (not path or rng.random() < 0.7):
                key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
                path.append(key)
                parent, node = node, node[key]
            if path:
                parent[path[-1]] = rng.choice([self.value(1), self.number(), "<f8", "|O", "<U4", [1, 2], [], None])
        elif roll < 0.85 and arrays:  # flip bytes of the arrays
            for _ in range(rng.randrange(1, 8)):
                arrays[rng.randrange(len(arrays))] = rng.randrange(256)
        else:  # random payload bytes
            raw = bytearray(rng.randbytes(rng.randrange(200)))
        if roll < 0.85:
            head = json.dumps(header, separators=(",", ":")).encode()
            raw = bytearray(raw[:magic]) + len(head).to_bytes(4, "little") + head + arrays
        payload = base64.urlsafe_b64encode(zlib.compress(bytes(raw)) if rng.random() < 0.9 else bytes(raw)).decode()
        signed = f"{prefix}:{version}:{payload}"
        return f"{signed}:{self.codec._mac(signed)}"

    # -- frames

    def message(self) -> dict:
        rng = self.rng
        kind = rng.choices(["reset", "step", "state", "snapshot", "restore", "other"], [20, 40, 8, 10, 14, 8])[0]
        if kind == "reset":
            data = {}
            if rng.random() < 0.8:
                data["seed"] = self.seed()
            if rng.random() < 0.2:
                data["episode_id"] = rng.choice([self.text(), self.value(), "e" * rng.choice([256, 257])])
            if rng.random() < 0.4:
                data["config"] = self.config()
            if rng.random() < 0.1:
                data["snapshot"] = self.token()
            if rng.random() < 0.05:
                data[self.text(5)] = self.value()
            return {"type": "reset", "data": data}
        if kind == "step":
            data = {"reply": self.reply()} if rng.random() < 0.9 else self.value()
            return {"type": "step", "data": data}
        if kind == "restore":
            data = {"snapshot": self.token()}
            if rng.random() < 0.1:
                data["episode_id"] = self.value()
            if rng.random() < 0.05:
                data = self.value()
            return {"type": "restore", "data": data}
        if kind == "other":
            return {"type": rng.choice([self.text(6), None, 3, [], "RESET", "close "]), "data": self.value()}
        return {"type": kind} if rng.random() < 0.9 else {"type": kind, "data": self.value()}

    def frame(self) -> str | bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.04:
            return rng.randbytes(rng.randrange(1, 300))  # a binary frame
        if roll < 0.08:
            return _sendable(self.text(rng.randrange(1, 200)))
        if roll < 0.11:
            return json.dumps(self.value())
        if roll < 0.13:
            depth = rng.choice([50, 900, 3_000, 100_000])
            open_, close = rng.choice([("[", "]"), ('{"a":', "}")])
            inner = "1" if open_ != "[" else ""
            return '{"type": "reset", "data": ' * rng.randrange(2) + open_ * depth + inner + close * depth
        text = json.dumps(self.message(), ensure_ascii=rng.random() < 0.9)
        if rng.random() < 0.03:
            text = text[: rng.randrange(len(text))]  # a message cut short
        return _sendable(text)

    def http(self) -> tuple[str, str, object]:
        rng = self.rng
        route = rng.choice(["/reset", "/step", "/state", "/snapshot", "/restore", "/close", "/mcp", "/sessions",
                            "/health", "/nope"])
        if route in ("/state", "/sessions", "/health"):
            sid = self.text(8).encode("utf-8", "replace").decode("utf-8")  # a URL cannot carry a lone surrogate
            return "GET", route, {"session_id": rng.choice(["nope", sid])}
        body = rng.choice([self.message().get("data"), self.value(), {"seed": self.seed()},
                           {"session_id": self.text(8), "action": {"reply": self.reply()[:2000]}},
                           {"snapshot": self.token()}])
        return "POST", route, body


def _sendable(text: str) -> str | bytes:
    """A text frame, or, for text with a lone surrogate (no UTF-8 text frame can carry one), its bytes as
    a binary frame (invalid UTF-8, which the server must take too)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


@pytest.fixture
def errors_logged(caplog):
    caplog.set_level(logging.WARNING)
    yield caplog
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage()[:300] for r in errors[:5]]


def _answer(raw: str) -> dict:
    reply = json.loads(raw)
    assert reply["type"] in ("observation", "state", "snapshot", "error"), reply
    if reply["type"] == "error":
        assert reply["data"]["code"] in ERROR_CODES, reply  # never INTERNAL_ERROR
        assert reply["data"]["message"], reply
    return reply


def test_the_protocol_survives_6000_random_messages(errors_logged):
    fuzz = Fuzz(SEED)
    stats = {"ws": 0, "http": 0, "errors": 0, "closes": 0, "tokens_signed": 0}
    started = time.monotonic()
    with background_server(max_sessions=16, env_config=BASE, snapshot_key=KEY) as url:
        ws_url = url.replace("http://", "ws://") + "/ws"
        stack = contextlib.ExitStack()
        conns = [stack.enter_context(ws_connect(ws_url, max_size=2**24)) for _ in range(CONNECTIONS)]
        http = stack.enter_context(httpx.Client(base_url=url, timeout=60))
        http_sessions: set[str] = set()
        with stack:
            for n in range(MESSAGES):
                if fuzz.rng.random() < 0.15:  # an HTTP request
                    method, route, body = fuzz.http()
                    if method == "GET":
                        response = http.get(route, params=body)
                    elif fuzz.rng.random() < 0.05:
                        response = http.post(route, content=fuzz.frame(), headers={"content-type": "application/json"})
                    else:
                        response = http.post(route, content=json.dumps(body), headers={"content-type":
                                                                                       "application/json"})
                    stats["http"] += 1
                    assert response.status_code != 500, (route, body, response.text[:500])
                    data = response.json()
                    if route == "/mcp":
                        assert data.get("jsonrpc") == "2.0", data
                    elif response.status_code >= 400:
                        assert data["detail"]["code"] in HTTP_CODES, (route, data)
                        stats["errors"] += 1
                    if route in ("/reset", "/restore") and response.status_code == 200:
                        http_sessions.add(data["session_id"])
                    if route == "/close" and response.status_code == 200:
                        http_sessions.discard(data["closed"])
                    continue
                i = n % CONNECTIONS
                if fuzz.rng.random() < 0.004:  # the client asks to close; its session ends, by request
                    conns[i].send(json.dumps({"type": "close"}))
                    with pytest.raises(ConnectionClosed):
                        conns[i].recv(timeout=30)
                    conns[i] = stack.enter_context(ws_connect(ws_url, max_size=2**24))
                    stats["closes"] += 1
                    continue
                frame = fuzz.frame()
                conns[i].send(frame)
                reply = _answer(conns[i].recv(timeout=60))  # ConnectionClosed here: a session ended unasked
                stats["ws"] += 1
                stats["errors"] += reply["type"] == "error"
                if reply["type"] == "snapshot":
                    fuzz.tokens.append(reply["data"]["snapshot"])
                    fuzz.tokens = fuzz.tokens[-20:]
                assert time.monotonic() - started < TIME_LIMIT_S, f"{n} messages in {TIME_LIMIT_S} s: too slow"
            # No session ended unasked: every connection still answers, the server counts exactly ours.
            for conn in conns:
                conn.send(json.dumps({"type": "state"}))
                assert _answer(conn.recv(timeout=30))["type"] == "state"
            for sid in http_sessions:
                assert http.get("/state", params={"session_id": sid}).status_code == 200, sid
            active = http.get("/sessions").json()["active_sessions"]
            assert active == CONNECTIONS + len(http_sessions), (active, len(http_sessions))
    elapsed = time.monotonic() - started
    total = stats["ws"] + stats["http"] + stats["closes"]
    print(f"fuzz: {total} messages ({stats['ws']} WebSocket, {stats['http']} HTTP, {stats['closes']} closes), "
          f"{stats['errors']} typed errors, 0 internal errors, {len(fuzz.tokens)} live tokens, {elapsed:.1f} s")
    assert total >= 5_000 and stats["errors"] > 1_000 and stats["ws"] - stats["errors"] > 1_000, stats
