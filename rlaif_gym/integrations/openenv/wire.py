"""The OpenEnv server's wire models: the action, observation and state, and the messages and HTTP bodies.

OpenEnv's own types (openenv-core 0.3) with this environment's fields, plus the two messages OpenEnv
does not have (``snapshot`` and ``restore``) and the HTTP bodies with a ``session_id`` (docs/openenv.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from openenv.core.env_server.serialization import deserialize_action, serialize_observation
from openenv.core.env_server.types import Action, BaseMessage, Observation, ResetRequest, State, StepRequest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...errors import InvalidActionError
from .errors import _readable

MAX_REPLY_LENGTH = 1_048_576
"""Longest reply a step accepts, characters (the reply parser reads the first 65,536 of it)."""


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
