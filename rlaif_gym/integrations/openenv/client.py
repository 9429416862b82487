"""`RLAIFEnvClient`: openenv-core's WebSocket client for `rlaif-gym serve`, with `snapshot` and `restore`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from ...errors import InvalidActionError
from .errors import RemoteCapacityError, RemoteEnvError
from .wire import RLAIFAction, RLAIFObservation, RLAIFState


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
