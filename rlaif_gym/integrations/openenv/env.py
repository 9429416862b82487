"""`RLAIFOpenEnv`: `RLAIFTextEnv` behind openenv-core's `Environment` interface, one session's episode."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from ..._version import __version__
from ...config import RLAIFEnvConfig
from ...envs.decisions import decision_points
from ...envs.inputs import check_config, check_int, check_seed
from ...envs.snapshot import SnapshotFormatError, check_number, check_text
from ...envs.text_env import RLAIFTextEnv
from ...errors import ConfigError, InvalidActionError, ResetNeeded, SearchCancelled, SearchLimitError
from ...trajectory import storable_text
from .errors import SnapshotTokenError
from .tokens import SnapshotCodec, _default_codec
from .wire import RLAIFAction, RLAIFObservation, RLAIFState

ENV_NAME = "RLAIF-Text-v0"
DEFAULT_DECISION_MAX_TICKS = 5_000
"""Ticks one `reset(decision=...)` may play looking for its decision point (seconds of a worker), unless
`rlaif-gym serve --decision-max-ticks` says otherwise: options that never qualify would otherwise play the whole
episode, up to `num_ticks` (1,000,000) ticks, for one request."""
DEFAULT_DECISION_TIMEOUT_S = 20.0
"""Seconds one `reset(decision=...)` may search (`rlaif-gym serve --decision-timeout`): the bound on a slow or
busy machine, well inside openenv-core's 60 s wait for an answer."""


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


_SESSION_FIELDS = ("episode_id", "prompt", "terminated", "truncated", "episode_return")
"""The session's bookkeeping a token carries beside the snapshot (what `RLAIFOpenEnv.snapshot` writes)."""


def _session_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """A token's session fields, checked as the boundary text and numbers they are: the server sends each back
    (the prompt at once, the rest in every state), so each must be a value JSON and UTF-8 can carry.

    Raises:
        SnapshotTokenError: a field missing, unknown or of another type; a NaN or infinite return; a prompt or
            episode id that is empty, too long or holds a lone surrogate.
    """
    if set(payload) != set(_SESSION_FIELDS):
        raise SnapshotTokenError(f"the snapshot token's session fields must be exactly {list(_SESSION_FIELDS)} (what "
                                 f"snapshot() writes), got {sorted(payload)[:8]}; pass the token unchanged")
    if not (isinstance(payload["terminated"], bool) and isinstance(payload["truncated"], bool)):
        raise SnapshotTokenError("the snapshot token's terminated and truncated fields must be true or false; pass "
                                 "the token snapshot() returned, unchanged")
    try:
        episode_id = payload["episode_id"]
        return {"episode_id": None if episode_id is None else check_text(episode_id, "the token's episode_id",
                                                                             MAX_EPISODE_ID_CHARS),
                "prompt": check_text(payload["prompt"], "the token's prompt"),
                "terminated": payload["terminated"], "truncated": payload["truncated"],
                "episode_return": check_number(payload["episode_return"], "the token's episode_return")}
    except SnapshotFormatError as exc:
        raise SnapshotTokenError(f"the snapshot token's session fields are not what snapshot() writes: {exc}; pass "
                                 "the token snapshot() returned, unchanged") from None


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
        decision_max_ticks: ticks a `reset(decision=...)` may play looking for its point (`DEFAULT_DECISION_MAX_TICKS`).
        decision_timeout_s: seconds it may search (`DEFAULT_DECISION_TIMEOUT_S`); past either, `SearchLimitError`.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each instance owns its world; instances share nothing mutable

    def __init__(self, config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *,
                 codec: SnapshotCodec | None = None, decision_max_ticks: int = DEFAULT_DECISION_MAX_TICKS,
                 decision_timeout_s: float = DEFAULT_DECISION_TIMEOUT_S) -> None:
        super().__init__()
        self.base_config = RLAIFEnvConfig.from_any(config)
        self.codec = codec if codec is not None else _default_codec()
        self.decision_max_ticks = check_int(decision_max_ticks, "decision_max_ticks", low=1, high=2**63 - 1)
        if isinstance(decision_timeout_s, bool) or not isinstance(decision_timeout_s, (int, float)) or not (
                0 < decision_timeout_s < float("inf")):
            raise ConfigError(f"decision_timeout_s must be a number of seconds > 0, got {decision_timeout_s!r}")
        self.decision_timeout_s = float(decision_timeout_s)
        self.cancel = threading.Event()
        """Set (from any thread) to stop the request in progress at its next decision-search tick; the server
        clears it before each request and sets it when the request's client goes away."""
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
        the tick and the markets. The search plays at most `decision_max_ticks` ticks for at most
        `decision_timeout_s` seconds, and stops when `cancel` is set; past those it raises `SearchLimitError`
        (`SearchCancelled`) and the session keeps the episode it had.
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
        cfg = check_config(config, "config", base=self.base_config)
        if decision is not None and decision is not False:
            return self._reset_at_decision(cfg, seed, episode_id, decision)
        env = self._env_for(cfg)
        prompt, info = env.reset(seed=seed)
        self._episode_id = episode_id if episode_id is not None else uuid.uuid4().hex
        self._prompt, self._tick, self._terminated, self._truncated, self._return = prompt, 0, False, False, 0.0
        system = info.pop("system_prompt", None)
        return RLAIFObservation(prompt=prompt, system_prompt=system, tick=0, info=_jsonable(info), reward=None,
                                done=False)

    def _reset_at_decision(self, config: RLAIFEnvConfig, seed: int | None, episode_id: str | None,
                           decision: object) -> RLAIFObservation:
        """`reset` at a decision point; a search that fails leaves the session's episode as it was."""
        options = {} if decision is True else decision
        known = {"resolves_within", "min_evidence", "min_tick"}
        if not isinstance(options, Mapping) or set(options) - known:
            raise ConfigError(f"decision must be true or an object of {sorted(known)} (integers), got "
                              f"{str(decision)[:80]}")
        if seed is None:
            raise ConfigError("reset(decision=...) needs a seed: the decision point is found in that seed's episode")
        try:  # decision_points checks each option as it checks them for every caller
            points = decision_points([seed], config, **options, max_ticks_searched=self.decision_max_ticks,
                                     deadline=time.monotonic() + self.decision_timeout_s, cancel=self.cancel)
        except ConfigError as exc:
            raise ConfigError(f"decision: {exc}") from None
        except SearchCancelled:
            raise
        except SearchLimitError as exc:
            raise SearchLimitError(
                f"{exc}. This server gives one decision search at most {self.decision_max_ticks:,} ticks and "
                f"{self.decision_timeout_s:g} s (rlaif-gym serve --decision-max-ticks, --decision-timeout)",
                exc.reason, exc.ticks_searched) from None
        if not points:
            raise ConfigError(f"the episode of seed {seed} has no decision point with {options or 'the defaults'} "
                              "after the drawn start tick; try another seed, or a larger resolves_within")
        point = points[0]
        env = self._env_for(config)
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
        payload = _session_fields(payload)
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
