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
it is read; WebSocket frames are bounded by uvicorn (16 MiB). A ``reset(decision=...)`` searches at most
``decision_max_ticks`` ticks (5,000) for at most ``decision_timeout_s`` (20 s), and stops when its client
goes away. There is no authentication: serve on 127.0.0.1 or a private network only.

Why not openenv-core's own ``create_app``: its WebSocket handler accepts only reset/step/state/close
(no snapshot/restore), and its HTTP ``/reset`` and ``/step`` build a fresh environment per request,
so an HTTP client can never step an episode it reset. `RLAIFOpenEnv` is nevertheless a complete
openenv-core `Environment`: ``create_app(RLAIFOpenEnv, RLAIFAction, RLAIFObservation)`` serves it
too (restore then goes through ``reset(snapshot=TOKEN)``).

Needs the `[openenv]` extra (openenv-core, which brings FastAPI, uvicorn and websockets).

The modules, one job each: `errors` (the exceptions and their wire form), `wire` (the action,
observation, state, messages and HTTP bodies), `tokens` (the snapshot token codec), `env`
(`RLAIFOpenEnv`), `sessions` (`SessionPool`), `http_routes` and `ws_routes` (the two transports),
`app` (`create_app`), `server` (`serve`, `background_server`) and `client` (`RLAIFEnvClient`). Every
public name is importable from this package.
"""


from __future__ import annotations

from ...errors import DependencyNotInstalled, install_hint

try:
    # The names not in __all__ (noqa: F401) are importable here too, as before the split.
    from .app import DEFAULT_MAX_BODY_BYTES, create_app, warm_up
    from .client import RLAIFEnvClient
    from .env import (
        DEFAULT_DECISION_MAX_TICKS,
        DEFAULT_DECISION_TIMEOUT_S,
        ENV_NAME,
        MAX_EPISODE_ID_CHARS,  # noqa: F401
        RLAIFOpenEnv,
    )
    from .errors import (
        RemoteCapacityError,
        RemoteEnvError,
        ServerAtCapacityError,
        SnapshotTokenError,
        UnknownSessionError,
        logger,  # noqa: F401
    )
    from .server import background_server, serve
    from .sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TIMEOUT_S, SessionPool
    from .tokens import SNAPSHOT_KEY_ENV, SnapshotCodec
    from .wire import (
        MAX_REPLY_LENGTH,  # noqa: F401
        HTTPResetRequest,  # noqa: F401
        HTTPRestoreRequest,  # noqa: F401
        HTTPSessionRequest,  # noqa: F401
        HTTPStepRequest,  # noqa: F401
        RLAIFAction,
        RLAIFObservation,
        RLAIFState,
        WSRestoreMessage,  # noqa: F401
        WSSnapshotMessage,  # noqa: F401
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    if (exc.name or "").partition(".")[0] == "rlaif_gym":
        raise  # one of this package's own imports failed: a bug, not a missing extra
    raise DependencyNotInstalled(
        f'rlaif_gym.integrations.openenv needs openenv-core (and the FastAPI/uvicorn it brings): '
        f'{install_hint("openenv")} ({exc})'
    ) from exc

__all__ = [
    "DEFAULT_DECISION_MAX_TICKS",
    "DEFAULT_DECISION_TIMEOUT_S",
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
