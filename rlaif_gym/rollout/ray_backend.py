"""`RayBackend`: run a `RolloutCollector`'s episodes on Ray actors (the `[ray]` extra).

    from rlaif_gym.rollout import RolloutCollector
    from rlaif_gym.rollout.ray_backend import RayBackend

    collector = RolloutCollector(agent, sink=JsonlStore("runs/x"), num_envs=8,
                                 backend=RayBackend(num_workers=4))              # local Ray
    #                            backend=RayBackend(num_workers=64, address="auto"))  # a running cluster
    collector.collect(episodes=1024, seed=0)

Each actor builds its own collector (same env, config, run name, concurrency) and agent, runs its
share of the planned episodes (or fork groups) with the same per-episode code as the local
backend, and streams each trajectory back as soon as it finishes (a Ray streaming generator). The
driver writes them to the collector's sink, so resume, manifests and summaries work unchanged.
An episode's content is a function of its spec (env seed, member, call seeds), so the same seeds
give the same trajectories on either backend (wall-clock fields such as latencies aside).

On a real cluster every node needs `rlaif_gym` importable: install it in the nodes' image, or pass
`init_kwargs={"runtime_env": {"pip": ["rlaif-gym"]}}` (or a `working_dir`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from ..errors import ConfigError, DependencyNotInstalled, install_hint
from ..trajectory import Trajectory

__all__ = ["RayBackend"]


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise DependencyNotInstalled("RayBackend needs Ray: " + install_hint("ray")) from exc
    return ray


class _Worker:
    """One actor: a local collector over its share of the units (wrapped with `ray.remote` lazily)."""

    def __init__(self, settings: dict[str, Any], agent: Any, agent_factory: Callable[[], Any] | None) -> None:
        from .collector import RolloutCollector

        self.collector = RolloutCollector(agent_factory() if agent_factory is not None else agent, **settings)

    async def run(self, units: list, include_trunk: bool):
        try:
            async for traj in self.collector.run_units(units, include_trunk):
                yield traj
        finally:
            await self.collector.agent.aclose()


class RayBackend:
    """Distribute a collection over `num_workers` Ray actors and stream trajectories back.

    Args:
        num_workers: actors; each runs its share of the episodes with the collector's `num_envs`
            and `max_concurrent_calls` (so up to num_workers x num_envs envs in flight).
        address: where Ray runs. None: the instance this process is already connected to, or a new
            local one; "auto", "ray://head:10001", ...: an existing cluster (`ray.init(address=...)`).
        agent_factory: builds each actor's agent (for agents that do not pickle, e.g. ones holding
            open connections); by default the collector's agent is pickled into every actor.
        init_kwargs: extra `ray.init` arguments (`num_cpus` for a local instance, `runtime_env`, ...).
        actor_options: `ray.remote` options per actor, e.g. {"num_cpus": 1} (the default) or
            {"num_cpus": 0.5}.
    """

    def __init__(self, num_workers: int = 2, *, address: str | None = None,
                 agent_factory: Callable[[], Any] | None = None, init_kwargs: Mapping[str, Any] | None = None,
                 actor_options: Mapping[str, Any] | None = None) -> None:
        if num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.address = address
        self.agent_factory = agent_factory
        self.init_kwargs = dict(init_kwargs or {})
        self.actor_options = {"num_cpus": 1, **dict(actor_options or {})}
        self._started_ray = False

    def describe(self) -> dict[str, Any]:
        """The backend as recorded in logs (no secrets)."""
        return {"kind": "ray", "num_workers": self.num_workers, "address": self.address}

    def _connect(self):
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=self.address, **self.init_kwargs)
            self._started_ray = True
        return ray

    def shutdown(self) -> None:
        """Shut down the Ray instance this backend started (if it started one)."""
        if self._started_ray:
            _ray().shutdown()
            self._started_ray = False

    async def stream(self, collector: Any, units: list, include_trunk: bool = False) -> AsyncIterator[Trajectory]:
        """Run `units` (episode specs or fork groups) on the actors; yield trajectories as they finish."""
        if not units:
            return
        ray = self._connect()
        settings = {"env_id": collector.env_id, "env_config": collector.config, "num_envs": collector.num_envs,
                    "max_concurrent_calls": collector.max_concurrent_calls, "group_size": collector.group_size,
                    "run_name": collector.run_name, "max_ticks": collector.max_ticks}
        agent = None if self.agent_factory is not None else collector.agent
        remote_cls = ray.remote(**self.actor_options)(_Worker)
        shares = [units[w::self.num_workers] for w in range(self.num_workers)]
        shares = [s for s in shares if s]
        actors = [remote_cls.remote(settings, agent, self.agent_factory) for _ in shares]
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(actor, share) -> None:
            try:
                async for ref in actor.run.options(num_returns="streaming").remote(share, include_trunk):
                    await queue.put(await ref)
            except Exception as exc:  # surfaced to the caller below, after the other actors stop
                await queue.put(exc)
            finally:
                await queue.put(None)

        tasks = [asyncio.ensure_future(pump(a, s)) for a, s in zip(actors, shares, strict=True)]
        finished = 0
        try:
            while finished < len(tasks):
                item = await queue.get()
                if item is None:
                    finished += 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for actor in actors:
                ray.kill(actor)
