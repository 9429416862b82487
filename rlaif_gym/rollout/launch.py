"""Set up and run one collection into a run directory: what `rlaif-gym rollout` does, callable from Python.

    from rlaif_gym.rollout.launch import check_run_options, collect_run, make_policy, open_sink
    check_run_options(episodes=8, group_size=2)
    store, sink = open_sink(Path("runs/demo"), db="sqlite:///runs.db")
    collector = RolloutCollector(make_policy("scripted"), sink=sink, num_envs=8, run_name="demo")
    summary = collect_run(collector, store, 8, seed=0, parquet=True)

Every check runs before anything is written or started, and fails with a `ConfigError` that names the
option to change (the messages name the `rlaif-gym rollout` options, whose keyword arguments here
have the same names: `--fork-tick` is `fork_tick`). The pieces are documented in docs/cli.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..storage import JsonlStore
from .collector import CollectionSummary, RolloutCollector, TrajectorySink

__all__ = ["AGENT_KINDS", "check_policy_options", "check_run_options", "collect_run", "make_backend",
           "make_policy", "open_sink"]

AGENT_KINDS = ("scripted", "openai")
"""The policies `make_policy` builds: the offline scripted model, or a model on an OpenAI-compatible server."""


def check_policy_options(agent: str, *, base_url: str | None = None, model: str | None = None,
                         constrain: str | None = None) -> None:
    """Refuse now a policy that would fail every episode later.

    `agent` is one of `AGENT_KINDS`. For "openai" the server URL and model name come from the arguments
    or from $OPENAI_BASE_URL and $RLAIF_MODEL (or $OPENAI_MODEL); without a URL the requests would go to
    the public OpenAI API, so that is refused. The `[openai]` extra must be installed. `constrain`
    (constrained decoding) applies to a server only.

    Raises:
        ConfigError: an unknown agent, constrained decoding for the scripted agent, or a missing URL or model.
        DependencyNotInstalled: the `[openai]` extra is missing (the message says how to install it).
    """
    if agent not in AGENT_KINDS:
        raise ConfigError(f"unknown agent {agent!r}: use one of {', '.join(AGENT_KINDS)}")
    if constrain is not None and agent == "scripted":
        raise ConfigError("--constrain applies to a model server (--agent openai), not the scripted agent")
    if agent == "openai":
        from ..llm.openai_compat import require_http_client

        if not (base_url or os.environ.get("OPENAI_BASE_URL")):
            raise ConfigError("--agent openai needs --base-url (or $OPENAI_BASE_URL), e.g. "
                              "http://127.0.0.1:8000/v1; without one, requests would go to the public OpenAI API")
        if not (model or os.environ.get("RLAIF_MODEL") or os.environ.get("OPENAI_MODEL")):
            raise ConfigError("--agent openai needs --model (or $RLAIF_MODEL), the model name on the server")
        require_http_client("--agent openai")


def check_run_options(*, episodes: int, group_size: int = 1, fork_tick: int | None = None, resume: bool = False,
                      overwrite: bool = False, ray_workers: int | None = None, ray_address: str | None = None) -> None:
    """Refuse contradictory collection options before anything is deleted, written or started.

    `fork_tick` (a tick number) collects whole groups, so `episodes` must be a multiple of `group_size`;
    `overwrite` (delete the previous run) and `resume` (continue it) exclude each other; `ray_address`
    (a Ray cluster) only means something with `ray_workers` (a number of actors).

    Raises:
        ConfigError: naming the options to change.
    """
    if overwrite and resume:
        raise ConfigError("--overwrite and --resume contradict each other; pick one")
    if fork_tick is not None and episodes % group_size:
        raise ConfigError(f"--fork-tick collects whole groups: --episodes ({episodes}) must be a multiple of "
                          f"--group-size ({group_size})")
    if ray_address is not None and ray_workers is None:
        raise ConfigError("--ray-address needs --ray-workers (the number of Ray actors)")


def make_policy(agent: str = "scripted", *, model: str | None = None, base_url: str | None = None,
                temperature: float = 0.7, max_tokens: int = 512, timeout: float = 60.0, max_retries: int = 3,
                constrain: str | None = None, max_response_bytes: int | None = None) -> Any:
    """The policy of a collection: `ScriptedLLMAgent` ("scripted") or `OpenAIChatAgent` ("openai").

    `timeout` is seconds per call attempt, `max_tokens` the completion tokens per call, `max_response_bytes`
    the largest answer read (None: the transport's default, 8 MiB); the API key
    is read from $OPENAI_API_KEY by the client and never recorded. Call `check_policy_options` first
    for errors that name the fix.
    """
    from ..agents import OpenAIChatAgent, ScriptedLLMAgent

    if agent == "scripted":
        return ScriptedLLMAgent(temperature=temperature)
    bound = {} if max_response_bytes is None else {"max_response_bytes": max_response_bytes}
    return OpenAIChatAgent(model, base_url, temperature=temperature, max_tokens=max_tokens, timeout=timeout,
                           max_retries=max_retries, constrain=constrain, **bound)


def open_sink(out: Path, db: str | None = None) -> tuple[JsonlStore, TrajectorySink]:
    """The JSONL store of the run directory `out` and the sink the collector writes to.

    The JSONL run stays the primary record (its manifest is what resume reads); with `db` (an SQLAlchemy
    URL such as sqlite:///runs.db, `[sql]` extra) each trajectory also goes to that database's original
    `trajectories` table, through a fan-out sink. Returns (store, sink); the sink is the store without `db`.
    """
    store = JsonlStore(out)
    if not db:
        return store, store
    from ..storage import FanoutSink, SqlTrajectorySink

    return store, FanoutSink(store, SqlTrajectorySink(db))


def make_backend(ray_workers: int | None, address: str | None = None) -> Any:
    """A `RayBackend` of `ray_workers` actors (`[ray]` extra) at `address` (None: a local instance), or None
    (collect in this process) when `ray_workers` is None."""
    if ray_workers is None:
        return None
    from .ray_backend import RayBackend

    return RayBackend(ray_workers, address=address)


def collect_run(collector: RolloutCollector, store: JsonlStore, episodes: int, seed: int = 0, *,
                fork_tick: int | None = None, group_size: int = 1, include_trunk: bool = False,
                resume: bool = False, retry_failed: bool = False, overwrite: bool = False, parquet: bool = False,
                loggers: Sequence[Callable[[Any], Any]] = ()) -> CollectionSummary:
    """Collect `episodes` trajectories into `store`'s run directory and return the summary.

    With `fork_tick` (a tick number) it plays `episodes // group_size` groups, each forked at that tick
    into `group_size` branches (`include_trunk`: each branch also holds the shared trunk). `overwrite`
    first deletes what a previous run wrote there (only that, after checking its run.json); call it only
    once every option is known good. `loggers` (e.g. `integrations.tracking.metric_loggers`) see each
    finished trajectory after the collector's own `on_trajectory` hook, and are closed at the end, as is the
    collector's Ray backend, whatever happens.
    `parquet` also writes trajectories.parquet from the stored run. The run folder is held as its one writer
    throughout (`JsonlStore.hold`): `RunFolderBusyError` if another process writes to it.
    """
    previous = collector.on_trajectory  # the caller's own hook runs too, and is back in place afterwards

    def log_all(traj: Any) -> None:
        if previous is not None:
            previous(traj)
        for log in loggers:
            log(traj)

    if loggers:
        collector.on_trajectory = log_all
    try:
        with store.hold("a rollout"):  # the run folder's one writer, from --overwrite's delete to the Parquet file
            if overwrite:
                from ..storage.run_dir import clear_run

                clear_run(store.directory)
            if fork_tick is not None:
                summary = collector.collect_forks(episodes // group_size, seed, fork_tick=fork_tick, resume=resume,
                                                  include_trunk=include_trunk, retry_failed=retry_failed)
            else:
                summary = collector.collect(episodes, seed, resume=resume, retry_failed=retry_failed)
            if parquet:
                from ..storage import write_parquet

                write_parquet(store.directory / "trajectories.parquet", list(store.read()))
    finally:
        collector.on_trajectory = previous
        if collector.backend is not None:
            collector.backend.shutdown()
        for log in loggers:
            close = getattr(log, "close", None)
            if close is not None:
                close()
    return summary
