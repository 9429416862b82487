"""`RLAIF-Text-v0` as an OpenEnv server (`rlaif-gym serve`), and its client.

OpenEnv's contract (openenv-core 0.3) is a WebSocket at ``/ws``: one connection is one session with
its own environment, driven by JSON messages ``{"type": "reset" | "step" | "state" | "close",
"data": {...}}`` and answered with ``{"type": "observation" | "state" | "error", "data": {...}}``.
This server speaks it unchanged, so openenv-core's `EnvClient` family (`GenericEnvClient`, and
`RLAIFEnvClient` here) and the trainers built on them (TRL's OpenEnv examples) work against it. It
adds two message types that OpenEnv does not have:

* ``snapshot``: the session's episode now, as an opaque signed string (a *token*). The server keeps
  nothing: the token is self-contained, so it can be stored (e.g. in a dataset row) and restored any
  number of times, into any session of any server that shares the signing key.
* ``restore`` (also ``reset`` with ``snapshot=TOKEN``): continue from a token. Under the same
  replies, a restored session returns bit-identical prompts, rewards and infos.

The same operations exist as HTTP routes for clients without WebSockets (``POST /reset`` opens a
session and returns its ``session_id``; ``/step``, ``/state``, ``/snapshot``, ``/restore`` and
``/close`` take it). ``/health``, ``/metadata``, ``/schema``, ``/mcp`` and ``/openapi.json`` are
OpenEnv's, so ``openenv validate --url`` passes.

Sessions are capped (``max_sessions``, and optionally ``max_sessions_per_client`` per client address);
past a cap a new session gets a ``CAPACITY_REACHED`` error (HTTP 503) that says the cap and how to raise
it. A session ends when its client closes it, when its WebSocket drops, or after ``session_timeout_s``
(120 s by default) without a request. An HTTP body over ``max_body_bytes`` is refused with 413 before
it is read; WebSocket frames are bounded by uvicorn (16 MiB). There is no authentication: serve on
127.0.0.1 or a private network only.

Why not openenv-core's own ``create_app``: its WebSocket handler accepts only reset/step/state/close
(no snapshot/restore), and its HTTP ``/reset`` and ``/step`` build a fresh environment per request,
so an HTTP client can never step an episode it reset. `RLAIFOpenEnv` is nevertheless a complete
openenv-core `Environment`: ``create_app(RLAIFOpenEnv, RLAIFAction, RLAIFObservation)`` serves it
too (restore then goes through ``reset(snapshot=TOKEN)``).

Needs the `[openenv]` extra (openenv-core, which brings FastAPI, uvicorn and websockets).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._version import __version__
from ..config import RLAIFEnvConfig
from ..envs.decisions import decision_points
from ..envs.inputs import check_config, check_seed
from ..envs.rlaif_env import EnvSnapshot
from ..envs.snapshot import MAX_SNAPSHOT_BYTES, decode_snapshot, encode_snapshot
from ..envs.text_env import RLAIFTextEnv
from ..errors import ConfigError, DependencyNotInstalled, InvalidActionError, ResetNeeded, RLAIFError, install_hint
from ..trajectory import storable_text

try:
    import uvicorn
    from fastapi import FastAPI, Query, Request, WebSocket
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.mcp_types import JsonRpcErrorCode, JsonRpcRequest, JsonRpcResponse
    from openenv.core.env_server.serialization import deserialize_action, serialize_observation
    from openenv.core.env_server.types import (
        Action,
        BaseMessage,
        EnvironmentMetadata,
        HealthResponse,
        Observation,
        ResetRequest,
        SchemaResponse,
        State,
        StepRequest,
        WSCloseMessage,
        WSErrorCode,
        WSErrorResponse,
        WSObservationResponse,
        WSResetMessage,
        WSStateMessage,
        WSStateResponse,
        WSStepMessage,
    )
    from pydantic import BaseModel, ConfigDict, Field, ValidationError
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.websockets import WebSocketDisconnect
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise DependencyNotInstalled(
        f'rlaif_gym.integrations.openenv needs openenv-core (and the FastAPI/uvicorn it brings): '
        f'{install_hint("openenv")} ({exc})'
    ) from exc

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_SESSION_TIMEOUT_S",
    "ENV_NAME",
    "SNAPSHOT_KEY_ENV",
    "RLAIFAction",
    "RLAIFEnvClient",
    "RLAIFObservation",
    "RLAIFOpenEnv",
    "RLAIFState",
    "RemoteCapacityError",
    "RemoteEnvError",
    "ServerAtCapacityError",
    "SessionPool",
    "SnapshotCodec",
    "SnapshotTokenError",
    "UnknownSessionError",
    "background_server",
    "create_app",
    "serve",
    "warm_up",
]

logger = logging.getLogger(__name__)

ENV_NAME = "RLAIF-Text-v0"
DEFAULT_MAX_SESSIONS = 64
"""Sessions open at once, unless `rlaif-gym serve --max-sessions` says otherwise."""
DEFAULT_SESSION_TIMEOUT_S = 120.0
"""Seconds without a request after which a session is closed (`rlaif-gym serve --session-timeout`)."""
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest HTTP request body read, bytes: the longest reply (`MAX_REPLY_LENGTH` characters) fits even as
escaped JSON (6 bytes a character); a larger body gets 413 before it is read."""
SNAPSHOT_KEY_ENV = "RLAIF_SNAPSHOT_KEY"
"""Environment variable with the key that signs snapshot tokens (random per process when unset)."""
MAX_REPLY_LENGTH = 1_048_576
"""Longest reply a step accepts, characters (the reply parser reads the first 65,536 of it)."""
_REFUSED_WAIT_S = 10.0
"""How long a WebSocket refused for capacity waits for its first message, to answer it with the error."""


# -- errors ---------------------------------------------------------------------------------------


class SnapshotTokenError(RLAIFError, ValueError):
    """A snapshot token that this server cannot restore: malformed, altered, or signed with another key."""


class ServerAtCapacityError(RLAIFError, RuntimeError):
    """Every session slot of the server is taken; the message says the cap and how to raise it.

    Attributes:
        active_sessions: sessions open when the request came.
        max_sessions: the server's cap.
    """

    def __init__(self, message: str, active_sessions: int, max_sessions: int) -> None:
        self.active_sessions, self.max_sessions = active_sessions, max_sessions
        super().__init__(message)


class UnknownSessionError(RLAIFError, LookupError):
    """A request named a session that is not open (closed, expired or never opened)."""


class RemoteEnvError(RLAIFError, RuntimeError):
    """The server answered a client request with an error; the session stays usable unless it was closed.

    Attributes:
        code: OpenEnv's error code (``VALIDATION_ERROR``, ``EXECUTION_ERROR``, ``CAPACITY_REACHED``,
            ``SESSION_ERROR``, ``UNKNOWN_TYPE``, ``INVALID_JSON``).
        error_type: the server-side exception class (``InvalidActionError``, ``ConfigError``,
            ``ResetNeeded``, ``SnapshotTokenError``, ``ValidationError``, ...).
        data: the whole error payload.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = dict(data)
        self.code = str(self.data.get("code", "UNKNOWN"))
        self.error_type = str(self.data.get("error_type", ""))
        self.message = str(self.data.get("message", "unknown error"))
        kind = f", {self.error_type}" if self.error_type else ""
        super().__init__(f"{self.message} (server error {self.code}{kind})")


class RemoteCapacityError(RemoteEnvError):
    """The server refused a new session: it is at its `max_sessions` (``CAPACITY_REACHED``)."""


# -- wire types -----------------------------------------------------------------------------------


class RLAIFAction(Action):
    """One step's action: the LLM's reply to the current prompt (reasoning, then one JSON action)."""

    reply: str = Field(..., max_length=MAX_REPLY_LENGTH,
                       description='The reply text, e.g. \'<think>...</think>{"type": "wait"}\'. Any string is '
                       "accepted; one without an executable action is a no-op scored format = -1.")


class RLAIFObservation(Observation):
    """What a reset, step or restore returns (besides OpenEnv's ``reward`` and ``done``)."""

    prompt: str = Field(..., description="The prompt for the next reply (the user message).")
    system_prompt: str | None = Field(None, description="The reply format and one example; at reset and restore.")
    tick: int = Field(0, ge=0, description="Ticks played in this episode.")
    terminated: bool = Field(False, description="The episode ended in bankruptcy.")
    truncated: bool = Field(False, description="The episode reached num_ticks.")
    reward_components: dict[str, float] = Field(default_factory=dict,
                                                description="Raw reward terms (pnl, risk, format, reasoning).")
    info: dict[str, Any] = Field(default_factory=dict,
                                 description="The env's info: feedback, parsed_action, format_errors, judge, fill, ...")


class RLAIFState(State):
    """The session's episode bookkeeping (no hidden world state)."""

    seed: int | None = Field(None, description="Seed of the episode's reset (None: not reset, or unseeded).")
    tick: int = Field(0, ge=0, description="Ticks played in this episode.")
    num_ticks: int = Field(..., description="Episode length of the session's config.")
    terminated: bool = False
    truncated: bool = False
    episode_return: float = Field(0.0, description="Sum of the rewards since reset (carried by snapshots).")
    config: dict[str, Any] = Field(default_factory=dict, description="The session's env config.")


class WSSnapshotMessage(BaseMessage):
    """WebSocket message (our extension): return the session's episode as a token."""

    type: Literal["snapshot"] = "snapshot"


class WSRestoreMessage(BaseMessage):
    """WebSocket message (our extension): continue from a token (``data = {"snapshot": TOKEN}``)."""

    type: Literal["restore"] = "restore"
    data: dict[str, Any] = Field(..., description='{"snapshot": TOKEN, "episode_id": optional}')


# -- snapshot tokens ------------------------------------------------------------------------------


class SnapshotCodec:
    """Turns episode snapshots into signed, self-contained strings and back.

    A token is ``rlaif-snapshot-v2:<version>:<payload>:<mac>``: the payload is the snapshot as data
    (`EnvSnapshot.to_bytes()`: arrays and JSON, never pickle, fully checked when read; urlsafe base64)
    with the session's bookkeeping, and the mac its HMAC-SHA256 under the codec's key. Reading a token
    runs nothing it carries, signed or not. The key protects the episode's integrity: without it a
    client cannot hand the server a world it altered (moved a price, changed its cash or the hidden
    truth). Tokens hold the world's hidden truth: never show them to the policy.

    Args:
        key: the signing key, at least `MIN_KEY_BYTES` bytes. None: `$RLAIF_SNAPSHOT_KEY` if set, else
            random (tokens then restore only into the process that made them). Servers that should
            accept each other's tokens share one.
    """

    PREFIX = "rlaif-snapshot-v2"
    MIN_KEY_BYTES = 32
    MAX_TOKEN_CHARS = 4 * MAX_SNAPSHOT_BYTES // 3 + 256
    """The longest token read (the base64 of the largest snapshot, plus the prefix and mac)."""

    def __init__(self, key: bytes | str | None = None) -> None:
        if key is None:
            key = os.environ.get(SNAPSHOT_KEY_ENV) or secrets.token_bytes(32)
        self._key = key.encode() if isinstance(key, str) else bytes(key)
        if len(self._key) < self.MIN_KEY_BYTES:
            raise ConfigError(
                f"the snapshot signing key (${SNAPSHOT_KEY_ENV}) has {len(self._key)} bytes; it needs at least "
                f"{self.MIN_KEY_BYTES} (a short key can be guessed, and whoever has it can hand the server any "
                "episode state). Make one with: python -c \"import secrets; print(secrets.token_hex(32))\", or "
                "unset the variable for a random key per process")

    def _mac(self, signed: str) -> str:
        return hmac.new(self._key, signed.encode("ascii"), hashlib.sha256).hexdigest()

    def encode(self, snapshot: EnvSnapshot, meta: Mapping[str, Any]) -> str:
        """A token for `snapshot` and the session's bookkeeping `meta` (plain JSON values)."""
        body = base64.urlsafe_b64encode(encode_snapshot(snapshot, dict(meta))).decode("ascii")
        signed = f"{self.PREFIX}:{__version__}:{body}"
        return f"{signed}:{self._mac(signed)}"

    def decode(self, token: object) -> tuple[EnvSnapshot, dict[str, Any]]:
        """The text-env snapshot and bookkeeping of a token this codec made.

        Raises:
            SnapshotTokenError: not a token, altered, signed with another key, made by another version,
                or holding something other than a text-env snapshot.
        """
        if not isinstance(token, str):
            raise SnapshotTokenError(f"a snapshot token is the string snapshot() returned, got {type(token).__name__}")
        if len(token) > self.MAX_TOKEN_CHARS or not token.isascii():
            what = f"{len(token)} characters" if len(token) > self.MAX_TOKEN_CHARS else "non-ASCII characters"
            raise SnapshotTokenError(f"not a snapshot token (it has {what}; a token is the ASCII string "
                                     "snapshot() returned); pass it unchanged")
        signed, _, mac = token.rpartition(":")
        prefix, _, rest = signed.partition(":")
        version, _, body = rest.partition(":")
        if prefix != self.PREFIX or not body or not mac:
            raise SnapshotTokenError(f"not a snapshot token (it should start with {self.PREFIX + ':'!r}, got "
                                     f"{token[:40]!r}); pass the string snapshot() returned, unchanged")
        if not hmac.compare_digest(mac, self._mac(signed)):
            raise SnapshotTokenError(
                "this snapshot token was not signed by this server: it was altered, or made by another server or "
                f"before a restart (each process signs with a random key unless ${SNAPSHOT_KEY_ENV} sets a shared "
                "one). Take a new snapshot here, or start every server with the same key"
            )
        if version != __version__:
            raise SnapshotTokenError(f"this snapshot was made by rlaif-gym {version}; this server runs {__version__}, "
                                     "and a snapshot restores only into the version that made it")
        try:
            return decode_snapshot(base64.urlsafe_b64decode(body), env_class=RLAIFTextEnv)
        except (binascii.Error, ValueError) as exc:  # SnapshotFormatError is a ValueError
            raise SnapshotTokenError(f"the snapshot token is signed but unreadable ({exc})") from None


_DEFAULT_CODEC: SnapshotCodec | None = None
_DEFAULT_CODEC_LOCK = threading.Lock()


def _default_codec() -> SnapshotCodec:
    """One codec per process, so tokens move between sessions of the same process."""
    global _DEFAULT_CODEC
    with _DEFAULT_CODEC_LOCK:
        if _DEFAULT_CODEC is None:
            _DEFAULT_CODEC = SnapshotCodec()
        return _DEFAULT_CODEC


# -- the environment ------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """`value` with numpy scalars and arrays as Python numbers and lists (the env's info is plain data)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


MAX_EPISODE_ID_CHARS = 255
"""Longest episode id a reset or restore accepts (OpenEnv's own HTTP reset body allows as many; the id is sent back
with every state and snapshot)."""


def _check_episode_id(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_EPISODE_ID_CHARS:
        shown = f"a string of {len(value)} characters" if isinstance(value, str) else type(value).__name__
        raise ConfigError(f"episode_id must be a string of 1 to {MAX_EPISODE_ID_CHARS} characters or null, got "
                          f"{shown}; pass your own id, or none for a random one")
    return storable_text(value)[0]  # a lone surrogate (a JSON escape such as \ud800) could not be sent back


class RLAIFOpenEnv(Environment[RLAIFAction, RLAIFObservation, RLAIFState]):
    """`RLAIFTextEnv` behind openenv-core's `Environment` interface: one session's episode.

    * ``reset(seed=None, episode_id=None, config=None, snapshot=None, decision=None)``: a new episode
      (``decision``: at a decision point of the seed's episode, see `reset`); ``config``
      overrides the server's config for this episode (``{"num_ticks": 8}``); ``snapshot`` continues
      from a token instead (then neither seed nor config may be given).
    * ``step(RLAIFAction(reply=...))``: one tick; the observation carries the next prompt, the reward,
      its components, ``terminated``/``truncated`` and the env's info.
    * ``state``: an `RLAIFState`; ``snapshot()`` / ``restore(token)``: see `SnapshotCodec`.

    Args:
        config: the env config of every episode, before per-reset overrides.
        codec: signs and reads snapshot tokens (default: one per process, keyed by `$RLAIF_SNAPSHOT_KEY`).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each instance owns its world; instances share nothing mutable

    def __init__(self, config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *,
                 codec: SnapshotCodec | None = None) -> None:
        super().__init__()
        self.base_config = RLAIFEnvConfig.from_any(config)
        self.codec = codec if codec is not None else _default_codec()
        self._env: RLAIFTextEnv | None = None
        self._episode_id: str | None = None
        self._prompt = ""
        self._tick = 0
        self._terminated = self._truncated = False
        self._return = 0.0

    # -- OpenEnv API -------------------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None, config: Mapping[str, Any] | None = None,
              snapshot: str | None = None, decision: Mapping[str, Any] | bool | None = None,
              **kwargs: Any) -> RLAIFObservation:
        """Start an episode (or continue a snapshot's); returns its first prompt and the system prompt.

        With `decision` (``true``, or ``{"resolves_within": 12, "min_evidence": 1, "min_tick": 2}``) the episode
        starts at a decision point of the seed's episode (`rlaif_gym.envs.decisions`): the offline scripted model
        plays from reset to the first qualifying tick after a start drawn from the seed; `info["decision"]` names
        the tick and the markets.
        """
        if kwargs:
            raise ConfigError(f"reset got unknown argument(s) {sorted(kwargs)}; it takes seed, episode_id, config "
                              "(overrides of the server's env config, e.g. {\"num_ticks\": 8}), snapshot (a token "
                              "from snapshot()) and decision (true, or {\"resolves_within\": 12})")
        if snapshot is not None:
            if seed is not None or config is not None:
                raise ConfigError("reset(snapshot=...) continues the snapshot's episode with the snapshot's config: "
                                  "give it no seed and no config")
            return self.restore(snapshot, episode_id=episode_id)
        seed = check_seed(seed, "seed")  # the checks the TRL and verifiers adapters make (rlaif_gym.envs.inputs)
        episode_id = _check_episode_id(episode_id)
        env = self._env_for(check_config(config, "config", base=self.base_config))
        if decision is not None and decision is not False:
            return self._reset_at_decision(env, seed, episode_id, decision)
        prompt, info = env.reset(seed=seed)
        self._episode_id = episode_id if episode_id is not None else uuid.uuid4().hex
        self._prompt, self._tick, self._terminated, self._truncated, self._return = prompt, 0, False, False, 0.0
        system = info.pop("system_prompt", None)
        return RLAIFObservation(prompt=prompt, system_prompt=system, tick=0, info=_jsonable(info), reward=None,
                                done=False)

    def _reset_at_decision(self, env: RLAIFTextEnv, seed: int | None, episode_id: str | None,
                           decision: object) -> RLAIFObservation:
        options = {} if decision is True else decision
        known = {"resolves_within", "min_evidence", "min_tick"}
        if not isinstance(options, Mapping) or set(options) - known or not all(
                type(v) is int and v >= 0 for v in options.values()):
            raise ConfigError(f"decision must be true or an object of {sorted(known)} (integers >= 0), got "
                              f"{str(decision)[:80]}")
        if seed is None:
            raise ConfigError("reset(decision=...) needs a seed: the decision point is found in that seed's episode")
        try:
            points = decision_points([seed], env.config, **options)
        except ConfigError as exc:
            raise ConfigError(f"decision: {exc}") from None
        if not points:
            raise ConfigError(f"the episode of seed {seed} has no decision point with {options or 'the defaults'} "
                              "after the drawn start tick; try another seed, or a larger resolves_within")
        point = points[0]
        env.set_state(point.snapshot)
        self._episode_id = episode_id if episode_id is not None else uuid.uuid4().hex
        self._prompt, self._tick, self._terminated, self._truncated, self._return = point.prompt, point.tick, False, \
            False, 0.0
        info = {"tick": point.tick, "decision": {"tick": point.tick, "markets": [
            {"market": m, "resolves_in": r, "evidence": e} for m, r, e in point.markets]}}
        return RLAIFObservation(prompt=point.prompt, system_prompt=env.system_prompt, tick=point.tick, info=info,
                                reward=None, done=False)

    def step(self, action: RLAIFAction | str, timeout_s: float | None = None, **kwargs: Any) -> RLAIFObservation:
        """Score the reply against the current prompt, run its action and advance the world one tick."""
        unknown = set(kwargs) - {"request_id"}
        if unknown:
            raise InvalidActionError(f"step got unknown argument(s) {sorted(unknown)}; it takes the action only")
        if isinstance(action, RLAIFAction):
            reply = action.reply
        elif isinstance(action, str):
            reply = action
        else:
            raise InvalidActionError(f'the action is {{"reply": "<the LLM\'s reply text>"}}, got '
                                     f"{type(action).__name__}")
        if self._env is None:
            raise ResetNeeded("this session has no episode yet: reset it first (reset(seed=...) or restore a snapshot)")
        prompt, reward, terminated, truncated, info = self._env.step(reply)
        self._prompt, self._tick = prompt, int(info["tick"])
        self._terminated, self._truncated = terminated, truncated
        self._return += reward
        components = _jsonable(info.pop("reward_components"))
        return RLAIFObservation(prompt=prompt, tick=self._tick, terminated=terminated, truncated=truncated,
                                reward_components=components, info=_jsonable(info), reward=reward,
                                done=terminated or truncated)

    @property
    def state(self) -> RLAIFState:
        """Episode id, seed, tick, flags, return and config (never the hidden world state)."""
        config = self._env.config if self._env is not None else self.base_config
        return RLAIFState(episode_id=self._episode_id, step_count=self._tick, tick=self._tick,
                          seed=self._env.np_random_seed if self._env is not None else None,
                          num_ticks=config.num_ticks, terminated=self._terminated, truncated=self._truncated,
                          episode_return=self._return, config=config.model_dump(mode="json"))

    def get_metadata(self) -> EnvironmentMetadata:
        """Name, description and version, for OpenEnv's ``/metadata``."""
        return EnvironmentMetadata(
            name=ENV_NAME, version=__version__, author="rlaif-gym",
            description="A Babylon-style world of prediction markets, perps, NPC traders, news and a social feed; "
                        "the action is an LLM's reply (reasoning, then one JSON action), the observation the next "
                        "prompt. Extends OpenEnv with snapshot/restore of an episode.",
        )

    def close(self) -> None:
        """Release the episode."""
        if self._env is not None:
            self._env.close()
            self._env = None

    # -- snapshot / restore ------------------------------------------------------------------------

    def snapshot(self) -> str:
        """The episode now as a signed token (see `SnapshotCodec`); restoring it never changes it."""
        if self._env is None:
            raise ResetNeeded("this session has no episode to snapshot: reset it first")
        return self.codec.encode(self._env.get_state(), {
            "episode_id": self._episode_id, "prompt": self._prompt, "terminated": self._terminated,
            "truncated": self._truncated, "episode_return": self._return,
        })

    def restore(self, snapshot: str, episode_id: str | None = None) -> RLAIFObservation:
        """Continue from a token; returns the prompt the snapshotted episode was waiting on."""
        episode_id = _check_episode_id(episode_id)
        snap, payload = self.codec.decode(snapshot)
        if not (isinstance(payload.get("prompt"), str) and isinstance(payload.get("terminated"), bool)
                and isinstance(payload.get("truncated"), bool) and isinstance(payload.get("episode_return"), float)
                and (payload.get("episode_id") is None or isinstance(payload.get("episode_id"), str))):
            raise SnapshotTokenError("the snapshot token's session fields are not the ones snapshot() writes")
        env = self._env_for(snap.config)
        env.set_state(snap)
        self._episode_id = episode_id if episode_id is not None else payload["episode_id"]
        self._prompt, self._tick = payload["prompt"], snap.tick
        self._terminated, self._truncated = payload["terminated"], payload["truncated"]
        self._return = payload["episode_return"]
        return RLAIFObservation(prompt=self._prompt, system_prompt=env.system_prompt, tick=self._tick,
                                terminated=self._terminated, truncated=self._truncated, reward=None,
                                done=self._terminated or self._truncated)

    # -- helpers -----------------------------------------------------------------------------------

    def _env_for(self, config: RLAIFEnvConfig) -> RLAIFTextEnv:
        if self._env is None or self._env.config != config:
            if self._env is not None:
                self._env.close()
            self._env = None  # a failed build leaves no half-made env behind
            self._env = RLAIFTextEnv(config)
        return self._env


# -- sessions -------------------------------------------------------------------------------------


@dataclass
class _Session:
    id: str
    env: RLAIFOpenEnv
    transport: str  # "ws" (ends with its connection) or "http" (ends on close or expiry)
    last_used: float
    client: str | None = None  # the client's address (host), for the per-client cap
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionPool:
    """The open sessions of one server, at most `max_sessions`, each with its own `RLAIFOpenEnv`.

    HTTP sessions idle for more than `timeout_s` are closed at the next request that opens or looks
    up a session; a WebSocket session ends with its connection (the server closes a connection idle
    that long itself). A session belongs to one transport: an HTTP route never drives a WebSocket's
    session.

    Args:
        factory: builds the environment of a new session.
        max_sessions: the cap.
        timeout_s: idle seconds before a session is closed (None: never).
        clock: the time source of expiry (monotonic seconds; tests pass a fake one).
        max_per_client: sessions one client address may hold at once (None: up to `max_sessions`),
            so that one client cannot take every slot.
    """

    def __init__(self, factory: Callable[[], RLAIFOpenEnv], max_sessions: int, timeout_s: float | None,
                 clock: Callable[[], float] = time.monotonic, max_per_client: int | None = None) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ConfigError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigError(f"session timeout must be > 0 seconds (or None: never), got {timeout_s}")
        if max_per_client is not None and (isinstance(max_per_client, bool) or not isinstance(max_per_client, int)
                                           or max_per_client < 1):
            raise ConfigError(f"max_sessions_per_client must be an integer >= 1 or None, got {max_per_client!r}")
        self.factory, self.max_sessions, self.timeout_s, self.clock = factory, max_sessions, timeout_s, clock
        self.max_per_client = max_per_client
        self._sessions: dict[str, _Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, transport: str, client: str | None = None) -> _Session:
        """A new session of `client` (its address), or `ServerAtCapacityError` when `max_sessions` are open
        or `client` holds `max_per_client` of them."""
        self.reap()
        expiry = f"wait for an idle one to expire ({self.timeout_s:g} s), " if self.timeout_s else ""
        if len(self._sessions) >= self.max_sessions:
            n = len(self._sessions)
            raise ServerAtCapacityError(
                f"the server is at capacity: {n} of {self.max_sessions} sessions are open (max_sessions = "
                f"{self.max_sessions}). Close sessions you no longer use (the client's close(), or POST /close), "
                f"{expiry}or restart the server with more: rlaif-gym serve --max-sessions {2 * self.max_sessions}",
                n, self.max_sessions)
        if self.max_per_client is not None and client is not None:
            mine = sum(1 for s in self._sessions.values() if s.client == client)
            if mine >= self.max_per_client:
                raise ServerAtCapacityError(
                    f"this client ({client}) holds {mine} of the {self.max_per_client} sessions one client may have "
                    f"open (max_sessions_per_client; {len(self._sessions)} of {self.max_sessions} are open in all). "
                    f"Close sessions you no longer use (the client's close(), or POST /close), {expiry}or restart "
                    f"the server with more: rlaif-gym serve --max-sessions-per-client {2 * self.max_per_client}",
                    len(self._sessions), self.max_sessions)
        session = _Session(uuid.uuid4().hex, self.factory(), transport, self.clock(), client)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: object, transport: str = "http") -> _Session:
        """The open `transport` session `session_id` (its idle clock restarts), or `UnknownSessionError`."""
        self.reap()
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is not None and session.transport != transport:
            raise UnknownSessionError(f"session {session_id!r} is a {session.transport} session; it is driven only "
                                      f"over its own {'WebSocket' if session.transport == 'ws' else 'HTTP'} "
                                      "connection. Open an HTTP session with POST /reset (without a session_id)")
        if session is None:
            expiry = f", expired after {self.timeout_s:g} s without a request" if self.timeout_s else ""
            raise UnknownSessionError(f"no open session {session_id!r}: it was closed{expiry}, or never opened. "
                                      "Open one with POST /reset (without a session_id)")
        session.last_used = self.clock()
        return session

    def close(self, session_id: str) -> bool:
        """Close a session; False when it was not open."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        session.env.close()
        return True

    def close_all(self) -> None:
        """Close every session (server shutdown)."""
        for session_id in list(self._sessions):
            self.close(session_id)

    def reap(self) -> list[str]:
        """Close the HTTP sessions idle for more than `timeout_s`; returns their ids."""
        if self.timeout_s is None:
            return []
        now = self.clock()
        stale = [s.id for s in self._sessions.values()
                 if s.transport == "http" and now - s.last_used > self.timeout_s]
        for session_id in stale:
            self.close(session_id)
        return stale

    def status(self) -> dict[str, Any]:
        """Capacity in numbers: active, max and free sessions, the per-client cap and the idle timeout."""
        n = len(self._sessions)
        return {"active_sessions": n, "max_sessions": self.max_sessions, "available": self.max_sessions - n,
                "max_sessions_per_client": self.max_per_client, "session_timeout_s": self.timeout_s}


# -- errors on the wire ---------------------------------------------------------------------------

_HTTP_STATUS = {"VALIDATION_ERROR": 422, "EXECUTION_ERROR": 409, "CAPACITY_REACHED": 503, "SESSION_ERROR": 404,
                "UNKNOWN_TYPE": 400, "INVALID_JSON": 400, "PAYLOAD_TOO_LARGE": 413, "INTERNAL_ERROR": 500}
_TOO_DEEP = ("the request is nested too deeply to read (JSON arrays or objects inside each other more than "
             "Python's parser handles); no message of this protocol nests more than a few levels")


def _readable(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "message"
        parts.append(f"{where}: {err.get('msg')}")
    return "; ".join(parts)


def _error_payload(exc: BaseException) -> dict[str, Any]:
    """OpenEnv's error data for an exception: code, message, and our `error_type`."""
    if isinstance(exc, ServerAtCapacityError):
        return {"code": WSErrorCode.CAPACITY_REACHED.value, "error_type": type(exc).__name__, "message": str(exc),
                "active_sessions": exc.active_sessions, "max_sessions": exc.max_sessions}
    if isinstance(exc, ValidationError):  # the errors without the input, which may be megabytes
        return {"code": WSErrorCode.VALIDATION_ERROR.value, "error_type": "ValidationError",
                "message": f"invalid message: {_readable(exc)}",
                "errors": jsonable_encoder(exc.errors(include_url=False, include_input=False))}
    if isinstance(exc, RecursionError):  # a deeply nested value that reached a recursive reader: the input's fault
        return {"code": WSErrorCode.VALIDATION_ERROR.value, "error_type": "RecursionError", "message": _TOO_DEEP}
    if isinstance(exc, (ConfigError, InvalidActionError, SnapshotTokenError)):
        code = WSErrorCode.VALIDATION_ERROR
    elif isinstance(exc, ResetNeeded):
        code = WSErrorCode.EXECUTION_ERROR
    elif isinstance(exc, UnknownSessionError):
        code = WSErrorCode.SESSION_ERROR
    else:
        logger.error("internal error while serving a request", exc_info=exc)
        return {"code": "INTERNAL_ERROR", "error_type": type(exc).__name__,
                "message": f"internal error: {type(exc).__name__}: {exc}. This is a bug in rlaif-gym, not in your "
                           "request: please report it with the request and the server log"}
    return {"code": code.value, "error_type": type(exc).__name__, "message": str(exc)}


def _http_error(exc: BaseException) -> JSONResponse:
    payload = _error_payload(exc)
    return JSONResponse({"detail": payload}, status_code=_HTTP_STATUS.get(payload["code"], 500))


# -- HTTP bodies (OpenEnv's, plus the session id) -------------------------------------------------


class HTTPResetRequest(ResetRequest):
    """``POST /reset``: OpenEnv's reset body plus ``session_id`` (absent: open a new session)."""

    session_id: str | None = Field(None, description="The session to reset; absent: open a new one.")
    config: dict[str, Any] | None = Field(None, description="Config overrides for this episode.")
    snapshot: str | None = Field(None, description="Continue from this token instead of a new episode.")
    decision: bool | dict[str, int] | None = Field(
        None, description='Start at a decision point of the seed\'s episode: true, or {"resolves_within": 12}.')


class HTTPStepRequest(StepRequest):
    """``POST /step``: OpenEnv's step body (``{"action": {"reply": ...}}``) plus ``session_id``."""

    session_id: str = Field(..., description="The session to step.")


class HTTPSessionRequest(BaseModel):
    """``POST /snapshot`` and ``POST /close``."""

    model_config = ConfigDict(extra="forbid")
    session_id: str


class HTTPRestoreRequest(BaseModel):
    """``POST /restore``: a token, into ``session_id`` (absent: a new session)."""

    model_config = ConfigDict(extra="forbid")
    snapshot: str
    session_id: str | None = None
    episode_id: str | None = None


def _result(observation: RLAIFObservation) -> dict[str, Any]:
    return serialize_observation(observation)


def _action(data: Mapping[str, Any]) -> RLAIFAction:
    """The step's action from its JSON, or `InvalidActionError` that shows the expected shape."""
    try:
        return deserialize_action(dict(data), RLAIFAction)
    except ValidationError as exc:
        raise InvalidActionError(f'the action must be {{"reply": "<the LLM\'s reply text>"}}; this one is malformed: '
                                 f"{_readable(exc)}") from None


async def _close_quietly(websocket: WebSocket, code: int = 1000, reason: str = "") -> None:
    """Close a WebSocket that the client may already have closed."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await websocket.close(code=code, reason=reason)


class _BodyLimit:
    """ASGI middleware: an HTTP request body over `limit` bytes is answered 413 before the app reads it.

    A declared ``Content-Length`` over the limit is refused before a byte of the body is read; a body
    without one (chunked) is counted as it streams in and refused once past the limit. A body within
    the limit is read here, whole, and handed to the app unchanged.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[Any], Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers", ()) if k.lower() == b"content-length"), None)
        if declared is not None and declared.strip().isdigit() and int(declared) > self.limit:
            await self._refuse(send, f"{int(declared)} bytes")
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before its body arrived
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send, f"more than {self.limit} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, delivered = b"".join(chunks), False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _refuse(self, send: Callable[[Any], Any], size: str) -> None:
        payload = {"detail": {
            "code": "PAYLOAD_TOO_LARGE", "error_type": "PayloadTooLarge",
            "message": f"the request body has {size}; this server reads at most {self.limit} bytes per HTTP request "
                       f"(max_body_bytes), so it was not read. A reply of up to {MAX_REPLY_LENGTH:,} characters fits; "
                       "send less, or raise the limit: create_app(max_body_bytes=...)"}}
        data = json.dumps(payload).encode("utf-8")
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": data})


_HTTP_CODES = {400: "INVALID_JSON", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "PAYLOAD_TOO_LARGE"}


# -- the app --------------------------------------------------------------------------------------


def warm_up(env_config: RLAIFEnvConfig | Mapping[str, Any] | None = None) -> float:
    """Reset an `RLAIF-Text-v0` of `env_config` and step it once (a wait): what a session's first tick needs
    is then in this process (the compiled kernels loaded from their cache, or compiled on a machine's first
    run, which takes minutes on 2 cores). Returns the seconds it took."""
    started = time.perf_counter()
    env = RLAIFTextEnv(RLAIFEnvConfig.from_any(env_config))
    env.reset(seed=0)
    env.step('{"type": "wait"}')
    env.close()
    return time.perf_counter() - started


def create_app(*, max_sessions: int = DEFAULT_MAX_SESSIONS,
               session_timeout_s: float | None = DEFAULT_SESSION_TIMEOUT_S,
               env_config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
               snapshot_key: bytes | str | None = None,
               clock: Callable[[], float] = time.monotonic,
               max_sessions_per_client: int | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               warm: bool = True) -> FastAPI:
    """The OpenEnv server of `RLAIF-Text-v0` as a FastAPI app (run it with uvicorn, or `rlaif-gym serve`).

    It has no authentication: serve it on 127.0.0.1 (the default of `serve`) or a private network only.

    Args:
        max_sessions: sessions open at once; one more gets ``CAPACITY_REACHED`` (HTTP 503).
        session_timeout_s: idle seconds before a session is closed (None: never).
        env_config: the env config of every session (a reset may override fields for its episode).
        snapshot_key: signs snapshot tokens (see `SnapshotCodec`; default `$RLAIF_SNAPSHOT_KEY` or random).
        clock: time source of HTTP-session expiry (tests pass a fake one).
        max_sessions_per_client: sessions one client address may hold at once (None: any number up to
            `max_sessions`); past it, ``CAPACITY_REACHED`` for that client only.
        max_body_bytes: largest HTTP request body; a larger one gets 413 before it is read.
        warm: play one tick of an env of `env_config` before returning (`warm_up`), so the world kernels
            are loaded, or compiled on a machine's first run (minutes), before any client waits on them: a
            first `step` would otherwise outlast openenv-core's 60 s message timeout on a fresh install.

    Raises:
        ConfigError: a bad `env_config`, `max_sessions`, `session_timeout_s`, `max_sessions_per_client`
            or `max_body_bytes` (before anything is served).
    """
    base = RLAIFEnvConfig.from_any(env_config)
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1024:
        raise ConfigError(f"max_body_bytes must be an integer >= 1024, got {max_body_bytes!r}")
    codec = SnapshotCodec(snapshot_key) if snapshot_key is not None else _default_codec()
    pool = SessionPool(lambda: RLAIFOpenEnv(base, codec=codec), max_sessions, session_timeout_s, clock,
                       max_per_client=max_sessions_per_client)
    probe = RLAIFOpenEnv(base, codec=codec)
    if warm:
        warm_up(base)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        pool.close_all()

    app = FastAPI(title=f"rlaif-gym OpenEnv server ({ENV_NAME})", version=__version__, lifespan=lifespan,
                  description="OpenEnv's /ws protocol and HTTP routes over the RLAIF text env, plus snapshot and "
                              "restore. See docs/openenv.md.")
    app.state.pool = pool
    app.add_middleware(_BodyLimit, limit=max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # Without each error's input: it echoes the body, which may be megabytes.
        errors = jsonable_encoder([{k: v for k, v in e.items() if k not in ("input", "url")} for e in exc.errors()])
        where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors)
        return JSONResponse({"detail": {"code": WSErrorCode.VALIDATION_ERROR.value, "error_type": "ValidationError",
                                        "message": f"invalid request: {where}", "errors": errors}}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_exception(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """FastAPI's own refusals (a body it cannot parse, an unknown route) in this server's error format."""
        message = str(exc.detail)
        if exc.status_code == 400:  # FastAPI's "There was an error parsing the body": e.g. JSON nested too deeply
            message = (f"the body could not be parsed as JSON: {_TOO_DEEP}, or not JSON this server can read; send a "
                       'JSON object such as {"session_id": "...", "action": {"reply": "..."}}')
        detail = {"code": _HTTP_CODES.get(exc.status_code, "HTTP_ERROR"), "error_type": "HTTPException",
                  "message": message}
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    async def call(session: _Session, fn: Callable[[], Any]) -> Any:
        async with session.lock:  # one request at a time per session; the env runs off the event loop
            return await run_in_threadpool(fn)

    # -- HTTP: OpenEnv's routes, with a session id ------------------------------------------------

    @app.post("/reset", tags=["Environment Control"])
    async def reset(body: HTTPResetRequest, request: Request) -> JSONResponse:
        """Reset a session (or open one: no ``session_id``); returns the observation and the ``session_id``."""
        kwargs = body.model_dump(exclude_unset=True, exclude={"session_id"})
        return await _start(body.session_id, lambda env: env.reset(**kwargs), request)

    async def _start(session_id: str | None, fn: Callable[[RLAIFOpenEnv], RLAIFObservation],
                     request: Request) -> JSONResponse:
        """Reset or restore `session_id`, or a new session when None (closed again if that first call fails)."""
        session = None
        try:
            client = request.client.host if request.client is not None else None
            session = pool.open("http", client) if session_id is None else pool.get(session_id)
            obs = await call(session, lambda: fn(session.env))
        except Exception as exc:
            if session_id is None and session is not None:  # the client never learnt its id: free the slot
                pool.close(session.id)
            return _http_error(exc)
        return JSONResponse({**_result(obs), "session_id": session.id})

    @app.post("/step", tags=["Environment Control"])
    async def step(body: HTTPStepRequest) -> JSONResponse:
        """One step of a session: ``{"session_id": ..., "action": {"reply": "..."}}``."""
        try:
            session = pool.get(body.session_id)
            action = _action(body.action)
            obs = await call(session, lambda: session.env.step(action))
        except Exception as exc:
            return _http_error(exc)
        return JSONResponse(_result(obs))

    @app.get("/state", tags=["State Management"])
    async def state(session_id: str = Query(..., description="The session")) -> JSONResponse:
        """The session's `RLAIFState`."""
        try:
            session = pool.get(session_id)
            value = await call(session, lambda: session.env.state)
        except Exception as exc:
            return _http_error(exc)
        return JSONResponse(value.model_dump(mode="json"))

    @app.post("/snapshot", tags=["State Management"])
    async def snapshot(body: HTTPSessionRequest) -> JSONResponse:
        """The session's episode as a token: ``{"snapshot": TOKEN, "tick": n, "episode_id": ...}``."""
        try:
            session = pool.get(body.session_id)
            token, st = await call(session, lambda: (session.env.snapshot(), session.env.state))
        except Exception as exc:
            return _http_error(exc)
        return JSONResponse({"snapshot": token, "tick": st.tick, "episode_id": st.episode_id})

    @app.post("/restore", tags=["State Management"])
    async def restore(body: HTTPRestoreRequest, request: Request) -> JSONResponse:
        """Continue from a token, in ``session_id`` or a new session; returns the observation and ``session_id``."""
        return await _start(body.session_id, lambda env: env.restore(body.snapshot, episode_id=body.episode_id),
                            request)

    @app.post("/close", tags=["Environment Control"])
    async def close(body: HTTPSessionRequest) -> JSONResponse:
        """Close a session and free its slot."""
        try:
            pool.get(body.session_id)  # an HTTP session: a WebSocket's ends with its connection
        except UnknownSessionError as exc:
            return _http_error(exc)
        pool.close(body.session_id)
        return JSONResponse({"closed": body.session_id, **pool.status()})

    @app.get("/sessions", tags=["Environment Info"])
    async def sessions() -> dict[str, Any]:
        """Capacity: active, max and available sessions, and the idle timeout."""
        pool.reap()
        return pool.status()

    # -- OpenEnv's info routes --------------------------------------------------------------------

    @app.get("/health", tags=["Health"])
    async def health() -> HealthResponse:
        """``{"status": "healthy"}`` while the server runs."""
        return HealthResponse()

    @app.get("/metadata", tags=["Environment Info"])
    async def metadata() -> EnvironmentMetadata:
        """Name, description and version of the environment."""
        return probe.get_metadata()

    @app.get("/schema", tags=["Schema"])
    async def schema() -> SchemaResponse:
        """JSON schemas of the action, the observation and the state."""
        return SchemaResponse(action=RLAIFAction.model_json_schema(),
                              observation=RLAIFObservation.model_json_schema(),
                              state=RLAIFState.model_json_schema())

    @app.post("/mcp", tags=["MCP"])
    async def mcp(request: Request) -> dict[str, Any]:
        """OpenEnv's JSON-RPC endpoint: this environment exposes no MCP tools (``tools/list`` is empty)."""
        try:
            rpc = JsonRpcRequest(**json.loads(await request.body()))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return JsonRpcResponse.error_response(JsonRpcErrorCode.PARSE_ERROR).model_dump()
        except (ValidationError, TypeError) as exc:
            return JsonRpcResponse.error_response(JsonRpcErrorCode.INVALID_REQUEST,
                                                  f"Invalid request: {exc}").model_dump()
        if rpc.method == "tools/list":
            return JsonRpcResponse.success(result={"tools": []}, request_id=rpc.id).model_dump()
        return JsonRpcResponse.error_response(
            JsonRpcErrorCode.METHOD_NOT_FOUND,
            f"{rpc.method!r}: this environment has no MCP tools; drive it over /ws (reset, step, state, snapshot, "
            "restore)", request_id=rpc.id).model_dump()

    # -- WebSocket: OpenEnv's session protocol, plus snapshot/restore -----------------------------

    @app.websocket("/ws")
    async def websocket_endpoint(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            session = pool.open("ws", websocket.client.host if websocket.client is not None else None)
        except ServerAtCapacityError as exc:
            await _refuse(websocket, exc)
            return
        try:
            await _serve_session(websocket, session)
        except WebSocketDisconnect:
            pass
        finally:
            pool.close(session.id)
            await _close_quietly(websocket)

    async def _refuse(websocket: WebSocket, exc: ServerAtCapacityError) -> None:
        """Answer the refused client's first message with the capacity error, then close (1013: try again later).

        Waiting for a message first makes the error the reply to the client's first request, so every
        OpenEnv client shows it; an error sent before that can be lost when the close frame wins the race.
        """
        with contextlib.suppress(asyncio.TimeoutError, WebSocketDisconnect, RuntimeError, OSError):
            message = await asyncio.wait_for(websocket.receive(), timeout=_REFUSED_WAIT_S)
            if message["type"] != "websocket.disconnect":
                await websocket.send_text(WSErrorResponse(data=_error_payload(exc)).model_dump_json())
        await _close_quietly(websocket, code=1013, reason="server at capacity")

    async def _serve_session(websocket: WebSocket, session: _Session) -> None:
        while True:
            try:
                message = await asyncio.wait_for(websocket.receive(), timeout=pool.timeout_s)
            except asyncio.TimeoutError:
                err = {"code": WSErrorCode.SESSION_ERROR.value, "error_type": "SessionExpired",
                       "message": f"session closed after {pool.timeout_s:g} s without a message; reconnect, then "
                                  "reset (or restore a snapshot)"}
                await websocket.send_text(WSErrorResponse(data=err).model_dump_json())
                return
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            if raw is None and message.get("bytes") is not None:
                raw = message["bytes"].decode("utf-8", errors="replace")
            session.last_used = pool.clock()
            reply, done = await _handle(session, raw or "")
            if reply is not None:
                await websocket.send_text(reply)
            if done:
                return

    async def _handle(session: _Session, raw: str) -> tuple[str | None, bool]:
        """One WebSocket message: (the reply, whether the session ends). Every message gets an answer."""
        try:
            msg = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, or nested past the parser's depth
            reason = _TOO_DEEP if isinstance(exc, RecursionError) else f"invalid JSON: {exc}"
            err = {"code": WSErrorCode.INVALID_JSON.value, "error_type": type(exc).__name__,
                   "message": f'{reason}; send e.g. {{"type": "step", "data": {{"reply": "..."}}}}'}
            return WSErrorResponse(data=err).model_dump_json(), False
        kind = msg.get("type") if isinstance(msg, dict) else None
        env = session.env
        try:
            if kind == "reset":
                data = WSResetMessage(**msg).data
                obs = await call(session, lambda: env.reset(**data))
                return WSObservationResponse(data=_result(obs)).model_dump_json(), False
            if kind == "step":
                action = _action(WSStepMessage(**msg).data)
                obs = await call(session, lambda: env.step(action))
                return WSObservationResponse(data=_result(obs)).model_dump_json(), False
            if kind == "state":
                WSStateMessage(**msg)
                value = await call(session, lambda: env.state)
                return WSStateResponse(data=value.model_dump(mode="json")).model_dump_json(), False
            if kind == "snapshot":
                WSSnapshotMessage(**msg)
                token, st = await call(session, lambda: (env.snapshot(), env.state))
                data = {"snapshot": token, "tick": st.tick, "episode_id": st.episode_id}
                return json.dumps({"type": "snapshot", "data": data}), False
            if kind == "restore":
                data = WSRestoreMessage(**msg).data
                unknown = set(data) - {"snapshot", "episode_id"}
                if unknown or "snapshot" not in data:
                    raise ConfigError(f'restore takes data {{"snapshot": TOKEN, "episode_id": optional}}, got keys '
                                      f"{sorted(data)}")
                obs = await call(session, lambda: env.restore(data["snapshot"], episode_id=data.get("episode_id")))
                return WSObservationResponse(data=_result(obs)).model_dump_json(), False
            if kind == "close":
                WSCloseMessage(**msg)
                return None, True
        except Exception as exc:  # a bad request is answered; the session goes on
            return WSErrorResponse(data=_error_payload(exc)).model_dump_json(), False
        shown = repr(kind)[:80] if isinstance(kind, str) else f"of JSON type {type(kind).__name__}"
        err = {"code": WSErrorCode.UNKNOWN_TYPE.value, "error_type": "UnknownMessageType",
               "message": f"unknown message type {shown}; this server takes reset, step, state, snapshot, restore "
                          'and close, as {"type": "reset", "data": {...}}'}
        return WSErrorResponse(data=err).model_dump_json(), False

    return app


# -- running it -----------------------------------------------------------------------------------


def _bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it every
    # HTTP answer (headers and body written apart) waited about 40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    return sock


def serve(app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          log: Callable[[str], None] | None = None) -> None:
    """Serve `app` with uvicorn until Ctrl-C (what `rlaif-gym serve` runs).

    Args:
        app: from `create_app`.
        host, port: where to listen (port 0: a free port, printed through `log`).
        log_level: uvicorn's log level.
        log: called once with the server's address when it listens.

    Raises:
        ConfigError: the address cannot be bound (in use, or not this machine's).
    """
    try:
        sock = _bound_socket(host, port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port or --host "
                          "(or stop what listens there)") from None
    bound_port = sock.getsockname()[1]
    pool: SessionPool = app.state.pool
    timeout = f"after {pool.timeout_s:g} s idle" if pool.timeout_s else "never"
    per_client = f" ({pool.max_per_client} per client)" if pool.max_per_client else ""
    if log is not None:
        log(f"serving {ENV_NAME} over OpenEnv on http://{host}:{bound_port} (WebSocket ws://{host}:{bound_port}/ws): "
            f"at most {pool.max_sessions} sessions{per_client}, closed {timeout}; no authentication. Ctrl-C stops")
    try:
        uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="on")).run(sockets=[sock])
    finally:
        sock.close()


@contextlib.contextmanager
def background_server(app: FastAPI | None = None, *, host: str = "127.0.0.1", port: int = 0,
                      startup_timeout_s: float = 60.0, **app_options: Any) -> Iterator[str]:
    """Run a server in a background thread for the duration of a ``with`` block; yields its base URL.

    Args:
        app: the app to serve (default: ``create_app(**app_options)``).
        host, port: where to listen (port 0: a free port).
        startup_timeout_s: how long to wait for the server to accept connections.

    Example:
        >>> with background_server(max_sessions=4) as url:  # doctest: +SKIP
        ...     env = RLAIFEnvClient(base_url=url).sync()
    """
    if app is None:
        app = create_app(**app_options)
    elif app_options:
        raise TypeError(f"give either an app or create_app options, not both (got {sorted(app_options)})")
    sock = _bound_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="rlaif-openenv-server",
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError("the OpenEnv server did not start (see the log above)")
        time.sleep(0.01)
    bound_host, bound_port = sock.getsockname()[:2]
    url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
    try:
        yield f"http://{url_host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


# -- the client -----------------------------------------------------------------------------------


class RLAIFEnvClient(EnvClient[RLAIFAction, RLAIFObservation, RLAIFState]):
    """openenv-core's WebSocket `EnvClient` for `rlaif-gym serve`, with `snapshot` and `restore`.

    Async by default; ``.sync()`` gives the blocking wrapper (its ``snapshot()`` and ``restore()`` block
    too). ``step`` takes an `RLAIFAction` or the reply string. A server error raises `RemoteEnvError`
    (`RemoteCapacityError` when the server is full) with the server's message, code and error type.

    Example:
        >>> with RLAIFEnvClient(base_url="http://127.0.0.1:8000").sync() as env:  # doctest: +SKIP
        ...     result = env.reset(seed=0)
        ...     result = env.step('{"type": "wait"}')
        ...     token = env.snapshot()
    """

    def _step_payload(self, action: RLAIFAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            return {"reply": action}
        if isinstance(action, RLAIFAction):
            return action.model_dump()
        if isinstance(action, Mapping):
            return dict(action)
        raise InvalidActionError(f"step takes an RLAIFAction or the reply string, got {type(action).__name__}")

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RLAIFObservation]:
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        obs = RLAIFObservation(**payload.get("observation", {}), reward=reward, done=done)
        return StepResult(observation=obs, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> RLAIFState:
        return RLAIFState(**payload)

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        await self._send(message)
        response = await self._receive()
        if response.get("type") == "error":
            data = response.get("data", {})
            raise (RemoteCapacityError if data.get("code") == "CAPACITY_REACHED" else RemoteEnvError)(data)
        return response

    async def snapshot(self) -> str:
        """The session's episode now, as a token for `restore` (or ``reset(snapshot=...)``)."""
        response = await self._send_and_receive({"type": "snapshot"})
        return response["data"]["snapshot"]

    async def restore(self, snapshot: str, episode_id: str | None = None) -> StepResult[RLAIFObservation]:
        """Continue from a token; returns the prompt the snapshotted episode was waiting on."""
        data: dict[str, Any] = {"snapshot": snapshot}
        if episode_id is not None:
            data["episode_id"] = episode_id
        response = await self._send_and_receive({"type": "restore", "data": data})
        return self._parse_result(response.get("data", {}))
