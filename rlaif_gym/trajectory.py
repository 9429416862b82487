"""The trajectory schema: what one recorded episode holds, as versioned pydantic v2 models.

It keeps the original Babylon data model (docs/babylon.md ("The original's data model"): trajectory,
step, LLM call, action, environment state) with its exact camelCase aliases for export (`agentPnL`,
`finalPnL`, `llmCalls`, `stepsJson` layout; the original's `to_camel("final_pnl")` gave `finalPnl`,
which silently loaded as 0), and extends it (docs/collecting.md) with the observation in both faces,
the feedback and `pnl_delta`, the reward components and weights, full LLM-call records (model,
sampling, latency, usage, token ids and logprobs when the server returns them, and any error), and
the provenance: `schema_version`, env id, config, seed and package version.

Field names are snake_case in Python and accept either spelling on input; `to_json` writes the
camelCase aliases. Readers reject an unknown `schema_version` with `SchemaVersionError`. Records
carry no secrets: an API key never enters any field (the LLM layer strips it).

It imports pydantic and the standard library only.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from .errors import RLAIFError

__all__ = [
    "SCHEMA_VERSION",
    "Action",
    "EnvironmentState",
    "Feedback",
    "LLMCall",
    "LLMCallError",
    "NonFiniteNumberError",
    "Observation",
    "ProviderAccess",
    "SchemaVersionError",
    "StorageRepairWarning",
    "Trajectory",
    "TrajectoryStep",
    "non_finite_numbers",
    "sim_timestamp_ms",
    "step_record",
    "storable_text",
    "storable_value",
]

SCHEMA_VERSION = 1
"""Bumped on any change that an old reader could misread."""

EPOCH_MS = 1_767_225_600_000
"""Simulated time origin (2026-01-01T00:00:00Z). Timestamps derive from ticks, never the wall clock."""


def sim_timestamp_ms(tick: int, tick_seconds: int = 3600) -> int:
    """The simulated timestamp of a tick, ms since the Unix epoch (one tick = one simulated hour)."""
    return EPOCH_MS + int(tick) * tick_seconds * 1000


class SchemaVersionError(RLAIFError, ValueError):
    """A record was written by a schema version this reader does not know."""


class NonFiniteNumberError(RLAIFError, ValueError):
    """A record holds a NaN or an infinity, which JSON cannot hold: `to_json` writes no such record.

    Numbers from a server are checked where they enter (`rlaif_gym.llm.recording`), so one here was put
    there by the code that built the record.

    Attributes:
        field: where, as the file would name it (camelCase, e.g. ``steps[2].reward``).
    """

    def __init__(self, record: str, field: str, value: float) -> None:
        self.field = field
        super().__init__(f"{record}: field {field} is {value!r}, which JSON cannot hold, so the record is not "
                         "written; fix the code or input that put it there")


def non_finite_numbers(value: Any, where: str = "", skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, float]]:
    """(place, value) of every NaN or infinite float in JSON-like `value`, in order; the keys in `skip` are not
    entered. Places are written as a file names them (``steps[2].reward``)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in skip:
                yield from non_finite_numbers(item, f"{where}.{key}" if where else str(key), skip)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from non_finite_numbers(item, f"{where}[{i}]", skip)


class StorageRepairWarning(UserWarning):
    """A record held text that no UTF-8 file can store (a lone surrogate that got past the LLM boundary);
    it was written with each such code point replaced by U+FFFD and a ``storageRepairs`` count."""


_NEGATIVE_EXPONENT = re.compile(r"e-(?<=[0-9]e-)")  # a literal first: the regex engine skips ahead to it


def _may_differ(text: str) -> bool:
    """Whether pydantic's JSON may hold a float that Python's `repr` writes otherwise: only magnitudes below
    1e-4 differ (``0.00001`` or ``1e-7`` for ``1e-05`` and ``1e-07``), and each such float has one of these
    two marks. Text that merely looks like one only costs the plain path."""
    return "0.0000" in text or _NEGATIVE_EXPONENT.search(text) is not None


class _Record(BaseModel):
    """Base: snake_case in Python, camelCase on the wire, either spelling accepted on input."""

    # ser_json_inf_nan: pydantic's pass writes NaN and the infinities as `json.dumps` does, where `to_json` finds
    # them and refuses the record (`NonFiniteNumberError`): the JSONL is strict JSON.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow",
                              ser_json_inf_nan="constants")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict with the camelCase aliases (the export layout)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        """One line of JSON with the camelCase aliases (no trailing newline).

        The text is exactly ``json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))``;
        pydantic's serialiser writes it in one pass (about a third of the time), and the few records
        where its float format could differ from Python's (a float below 1e-4) go the plain way.

        The text is always valid UTF-8, so no store loses a record to a text field: the LLM boundary
        repairs server text where it enters, and as a last resort any lone surrogate still in a field
        (text a caller put there) is replaced by U+FFFD here, the count written as a top-level
        ``storageRepairs`` field, with a `StorageRepairWarning`.

        The text is strict JSON (RFC 8259, which any reader parses): a NaN or an infinity raises
        `NonFiniteNumberError` naming the field, and nothing is returned to write.
        """
        try:
            text = self.model_dump_json(by_alias=True)
        except ValueError:  # text pydantic will not encode (a lone surrogate): the plain path decides
            text = ""
        if text and not _may_differ(text) and "NaN" not in text and "Infinity" not in text:
            return text
        data = self.to_dict()
        text = self._strict_json(data)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            data, repaired = storable_value(data)
            data["storageRepairs"] = int(data.get("storageRepairs") or 0) + repaired
            warnings.warn(f"{type(self).__name__} {getattr(self, 'trajectory_id', '')!s}: {repaired} code point(s) "
                          "that UTF-8 cannot store were written as U+FFFD (storageRepairs)", StorageRepairWarning,
                          stacklevel=2)
            text = self._strict_json(data)
        return text

    def _strict_json(self, data: dict[str, Any]) -> str:
        try:
            return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except ValueError:
            tid = getattr(self, "trajectory_id", None)
            for where, value in non_finite_numbers(data):
                raise NonFiniteNumberError(f"trajectory {tid!r}" if tid is not None else type(self).__name__,
                                           where, value) from None
            raise


class LLMCallError(_Record):
    """Why an LLM call failed. `retryable` is True for transient failures (timeouts, 5xx, 429)."""

    type: str
    message: str
    status_code: int | None = None
    retryable: bool = False


class LLMCall(_Record):
    """One LLM call, policy or judge, successful or not (the original's LLMCall, extended).

    `temperature` and `max_tokens` are optional: the original required them even when unknown.
    """

    call_id: str = ""
    model: str
    model_version: str | None = None
    system_prompt: str = ""
    user_prompt: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    response: str = ""
    reasoning: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    seed: int | None = None
    purpose: Literal["action", "reasoning", "evaluation", "response", "other"] = "action"
    action_type: str | None = None
    latency_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    attempts: int = 1
    error: LLMCallError | None = None


class ProviderAccess(_Record):
    """A data-provider access during a tick (kept from the original; rlaif_gym does not use it)."""

    provider_name: str
    data: dict[str, Any] = Field(default_factory=dict)
    purpose: str = ""


class Action(_Record):
    """The action taken at a step and its result (the original's Action)."""

    action_type: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    success: bool = False
    result: dict[str, Any] | None = None
    error: str | None = None
    reasoning: str | None = None


class EnvironmentState(_Record):
    """The agent's account before the step's action (the original's EnvironmentState).

    Extra keys (equity, cash, tick, ...) are allowed, as in the original's TS mirror.
    """

    agent_balance: float
    agent_pnl: float = Field(0.0, alias="agentPnL", validation_alias=AliasChoices("agentPnL", "agent_pnl", "agentPnl"))
    open_positions: int = 0
    active_markets: int = 0

    @field_validator("open_positions", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        # The original sometimes stored the list of positions here (docs/babylon.md ("The original's defects", 6)).
        return len(value) if isinstance(value, list) else value


class Observation(_Record):
    """The observation of a step in both faces."""

    text: str = ""
    numeric: list[float] = Field(default_factory=list)


class Feedback(_Record):
    """What the environment said about the action, and the equity change of the whole transition."""

    success: bool
    error: str | None = None
    pnl_delta: float = 0.0
    # What the transition paid and moved (None in records written before these were kept):
    shares: float | None = None  # shares bought or sold by the action
    usd: float | None = None  # USD paid (buy), received net of fee (sell), margin posted (open), paid out (close)
    fee: float | None = None  # USD fee charged for the action
    payout: float | None = None  # USD paid to the agent by markets that resolved during the tick
    markets_resolved: int | None = None  # markets that resolved during the tick
    positions_liquidated: int | None = None  # agent perp positions liquidated during the tick


class TrajectoryStep(_Record):
    """One tick: observation, every LLM call, the action, the feedback and the reward components."""

    step_number: int
    timestamp: int  # simulated ms, see `sim_timestamp_ms`
    environment_state: EnvironmentState
    provider_accesses: list[ProviderAccess] = Field(default_factory=list)
    llm_calls: list[LLMCall] = Field(default_factory=list)
    action: Action | None = None
    reward: float = 0.0
    observation: Observation | None = None
    feedback: Feedback | None = None
    reward_components: dict[str, float] = Field(default_factory=dict)
    format_errors: list[str] = Field(default_factory=list)
    judge: dict[str, float] = Field(default_factory=dict)


class Trajectory(_Record):
    """One episode (the original's TrainingTrajectory, alias BabylonTrajectory, extended)."""

    schema_version: int = SCHEMA_VERSION
    trajectory_id: str
    agent_id: str
    id: str = ""
    window_id: str = "default"
    scenario_id: str | None = None
    episode_id: str | None = None
    group_id: str | None = None
    group_index: int | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    duration_ms: int = 0
    steps: list[TrajectoryStep] = Field(default_factory=list)
    total_reward: float = 0.0
    final_pnl: float = Field(0.0, alias="finalPnL", validation_alias=AliasChoices("finalPnL", "final_pnl", "finalPnl"))
    final_balance: float | None = None
    trades_executed: int = 0
    successful_trades: int = 0
    failed_trades: int = 0
    posts_created: int = 0
    provider_accesses: int = 0
    episode_length: int = 0
    final_status: str = "completed"
    archetype: str | None = None
    # --- provenance (rlaif_gym)
    env_id: str | None = None
    seed: int | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    package_version: str | None = None
    reward_weights: dict[str, float] = Field(default_factory=dict)
    agent: dict[str, Any] = Field(default_factory=dict)
    judge_scores: dict[str, Any] = Field(default_factory=dict)
    quality: dict[str, Any] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)
    failed_calls: list[LLMCall] = Field(default_factory=list)
    """LLM calls that failed for good (after retries) and ended the episode; they have no step."""

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version != SCHEMA_VERSION:
            raise SchemaVersionError(
                f"trajectory schema_version {version} is not supported by this reader (expects {SCHEMA_VERSION}); "
                "upgrade rlaif-gym to read it, or re-export the file with the version that wrote it"
            )
        return version

    @classmethod
    def from_json(cls, line: str | bytes) -> Trajectory:
        """Parse one JSON line, in our layout or the original's camelCase layout.

        Raises:
            SchemaVersionError: the line has an unknown `schemaVersion`.
            pydantic.ValidationError: the line is not a trajectory.
        """
        data = json.loads(line)
        version = data.get("schemaVersion", data.get("schema_version", SCHEMA_VERSION))
        if version != SCHEMA_VERSION:
            raise SchemaVersionError(
                f"trajectory schema_version {version!r} is not supported by this reader (expects {SCHEMA_VERSION}); "
                "upgrade rlaif-gym to read it, or re-export the file with the version that wrote it"
            )
        if isinstance(data.get("stepsJson"), str) and "steps" not in data:
            data["steps"] = json.loads(data.pop("stepsJson"))  # the original database row layout
        return cls.model_validate(data)


def step_record(t: int, before: EnvironmentState, call: LLMCall, prompt: str, numeric: list[float], reward: float,
                info: Mapping[str, Any]) -> TrajectoryStep:
    """The record of text-env tick `t`: the account before it, the policy call, and what the step returned.

    `info` is the text env's step info (parsed action, feedback, fill, reward components, judge scores,
    the tick after the step). One pydantic validation of plain data, the nested records built inside
    it; `call` gets the parsed action's type.
    """
    parsed = info["parsed_action"]
    feedback = info["feedback"]
    call.action_type = parsed["type"] if parsed else None
    return TrajectoryStep.model_validate({
        "step_number": t, "timestamp": sim_timestamp_ms(info["tick"]), "environment_state": before,
        "llm_calls": [call],
        "action": {"action_type": parsed["type"] if parsed else "invalid",
                   "parameters": {k: v for k, v in (parsed or {}).items() if k != "type"},
                   "success": feedback["success"], "error": feedback["error"],
                   "reasoning": info["reasoning"] or None, "result": {"pnl_delta": info["pnl_delta"]}},
        "reward": reward, "observation": {"text": prompt, "numeric": numeric},
        "feedback": {"success": feedback["success"], "error": feedback["error"], "pnl_delta": info["pnl_delta"],
                     **info["fill"]},
        "reward_components": info["reward_components"], "format_errors": info["format_errors"],
        "judge": info["judge"],
    })


def utc_now() -> datetime:
    """Wall-clock time for run bookkeeping (start/end of collection), never for simulated ids."""
    return datetime.now(timezone.utc)


def storable_text(text: str) -> tuple[str, int]:
    """`text` as UTF-8 can store it, and how many code points had to be replaced.

    Text from a server (a reply, its reasoning, an error, a verdict) can hold lone surrogates
    (``\\ud800``, which JSON allows as an escape) that no UTF-8 file, database or Parquet column can
    hold. Each is replaced by U+FFFD; a valid surrogate pair is joined into its character. Callers
    record the count next to the text (e.g. `LLMCall`'s ``textRepairs``).
    """
    try:
        text.encode("utf-8")
        return text, 0
    except UnicodeEncodeError:
        pass
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, fixed.count("\ufffd") - text.count("\ufffd")


def storable_value(value: Any) -> tuple[Any, int]:
    """`storable_text` applied to every string (keys included) of decoded JSON; returns (value, count)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        out, total = {}, 0
        for k, v in value.items():
            k2, n = storable_value(k)
            v2, m = storable_value(v)
            out[k2] = v2
            total += n + m
        return (out, total) if total else (value, 0)
    if isinstance(value, list):
        pairs = [storable_value(v) for v in value]
        total = sum(n for _, n in pairs)
        return ([v for v, _ in pairs], total) if total else (value, 0)
    return value, 0
