"""Running the server: `serve` (what `rlaif-gym serve` runs, until Ctrl-C) and `background_server` (a thread)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI

from ...errors import ConfigError
from .app import create_app
from .env import ENV_NAME
from .sessions import SessionPool


def _bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it every
    # HTTP answer (headers and body written apart) waited for the client's delayed ACK.
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
