"""`RLAIFTRLEnv`: the text env behind TRL's `environment_factory` contract (TRL's tool loop calls `act(reply)`
once per tick; `get_reward()` is the env's episode return).

Part of `rlaif_gym.integrations.trl`, which re-exports every public name.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from ...envs.decisions import WAIT_REPLY, mirror_reply
from ...envs.text_env import RLAIFTextEnv
from ...errors import ConfigError, InvalidActionError, ResetNeeded, RLAIFError
from .rows import RowEpisode

EPISODE_ENDED = "The episode has ended; call no more tools."
_log = logging.getLogger(__name__)


class EpisodeFaultError(RLAIFError, RuntimeError):
    """The env raised inside a step of an `RLAIFTRLEnv` episode: the rollout is failed, not scored."""


# -- the environment_factory contract -----------------------------------------------------------------------------


class RLAIFTRLEnv:
    """`RLAIF-Text-v0` for `GRPOTrainer(environment_factory=RLAIFTRLEnv)`: one instance per rollout.

    TRL calls `reset(**row)` with a row of `build_dataset(..., contract="environment_factory")` and appends
    the returned prompt to the row's user message, exposes `act` to the model as its only tool, and calls
    `get_reward()` once the rollout is over. Instances are pooled and reset between batches.

    TRL turns an exception raised by a tool into the tool's result (``{"error": "..."}``) and goes on.
    So `act` refuses a reply that is not a string (``None``, ``123``, an object) with an
    `InvalidActionError` that the model reads, without playing a tick; and an exception inside the env's
    step is a *fault*: it is kept in `fault`, every later `act` says so, and `get_reward()` returns None,
    which TRL records as an unscorable rollout (left out of its group's baseline, advantage 0, with a
    warning), never as a return.
    """

    def __init__(self) -> None:
        self._env: RLAIFTextEnv | None = None
        self._spec: RowEpisode | None = None
        self._left = 0  # ticks of the horizon still to play
        self._return = 0.0
        self._rewards: list[float] = []
        self._replies: list[str] = []
        self._fault: str | None = None

    def reset(self, seed: int | None = None, config: str | Mapping[str, Any] | None = None,
              snapshot: bytes | None = None, ticks: int | None = None, prompt: Any = None,
              decisions: int | None = None, mirrored: bool | None = None, **row: Any) -> str:
        """Start the row's episode (fresh from `seed`, or from the fork point `snapshot`); returns its first prompt.

        With `decisions` (a row of single decisions has 1), `act` answers that many ticks; then the
        continuation (a clean wait) plays out the horizon and the episode is over. A `mirrored` row shows the
        point's YES/NO mirror and plays the reply with its sides swapped back (`RowEpisode.mirrored`).

        Raises:
            ConfigError: the row already holds the prompt (it was built for `make_rollout_func`).
        """
        spec = RowEpisode.from_row(seed, config, snapshot, ticks, decisions, mirrored)
        self._env, first = spec.start(self._env)
        self._spec = spec
        last = prompt[-1] if isinstance(prompt, list) and prompt else None
        if isinstance(last, Mapping) and last.get("content") == first:
            raise ConfigError("this row already holds the first prompt (contract='rollout_func'); build the dataset "
                              "with build_dataset(..., contract='environment_factory') for environment_factory")
        self._left = spec.ticks if spec.ticks is not None else self._env.config.num_ticks
        self._return, self._rewards, self._replies, self._fault = 0.0, [], [], None
        return first

    def act(self, reply: str) -> str:
        """Play one tick: submit your reply and receive the next tick's prompt.

        Args:
            reply: Your reasoning in <think>...</think>, then one JSON action, for example
                {"type": "buy_prediction", "market": "market-1", "outcome": "YES", "amount": 100}.

        Returns:
            The next tick's prompt, whose "Last action" section says what your action did; or a closing
            message once the episode is over.
        """
        if self._env is None:
            raise ResetNeeded("call reset() before act()")
        if self._fault is not None:
            raise EpisodeFaultError(f"the environment failed earlier in this episode ({self._fault}); this rollout "
                                    "gets no reward: call no more tools")
        if self._left <= 0:
            raise ResetNeeded(EPISODE_ENDED)
        if not isinstance(reply, str):
            shown = repr(reply)
            shown = shown[:80] + "..." if len(shown) > 80 else shown
            raise InvalidActionError(
                f"act takes reply as a string: your reasoning in <think>...</think>, then one JSON action such as "
                f'{{"type": "wait"}}; got {type(reply).__name__} {shown}. Call act again with reply set to that text '
                "(no tick was played)")
        prompt, _ = self._step(mirror_reply(reply) if self._spec.mirrored else reply)  # a mirrored row: its sides back
        self._continue()
        if self._left <= 0:
            return f"{EPISODE_ENDED} Episode return {self._return:+.4f}."
        return prompt

    def _decided(self) -> bool:
        """The model has written all its replies: the continuation plays the rest of the horizon."""
        limit = self._spec.decisions if self._spec is not None else None
        return limit is not None and len(self._replies) >= limit

    def _continue(self) -> None:
        while self._left > 0 and self._fault is None and self._decided():
            self._step(WAIT_REPLY)

    def get_reward(self) -> float | None:
        """The episode return: the sum of the text env's rewards over the whole horizon.

        Ticks the model left unanswered are played first as empty replies (no-ops scored as such).
        None when the env failed during the episode (`fault` says how): TRL counts such a rollout as
        unscorable instead of training on a partial return.
        """
        if self._env is None:
            raise ResetNeeded("call reset() before get_reward()")
        with contextlib.suppress(EpisodeFaultError):
            while self._left > 0 and self._fault is None:
                self._step(WAIT_REPLY if self._decided() else "")
        if self._fault is not None:
            _log.warning("RLAIFTRLEnv: the episode of %s failed after %d ticks (%s); its reward is None (unscorable)",
                         self._where(), len(self._rewards), self._fault)
            return None
        return self._return

    @property
    def fault(self) -> str | None:
        """What went wrong inside the env's step this episode (``"RuntimeError: ..."``), or None."""
        return self._fault

    def _where(self) -> str:
        spec = self._spec
        if spec is None:
            return "no row"
        return f"seed {spec.seed}" + (" (a fork point)" if spec.snapshot is not None else "")

    @property
    def spec(self) -> RowEpisode:
        """The episode of the last `reset` (its start point and horizon)."""
        if self._spec is None:
            raise ResetNeeded("call reset() first")
        return self._spec

    @property
    def replies(self) -> list[str]:
        """The replies the env received this episode, in order (empty strings for unanswered ticks)."""
        return list(self._replies)

    @property
    def rewards(self) -> list[float]:
        """The text env's reward of each tick played so far."""
        return list(self._rewards)

    def _step(self, reply: str) -> tuple[str, bool]:
        try:
            prompt, reward, terminated, truncated, _ = self._env.step(reply)
        except Exception as exc:  # a fault of the env, not of the reply: never scored as a return
            self._fault = f"{type(exc).__name__}: {exc}"[:500]
            self._left = 0
            raise EpisodeFaultError(f"the environment failed on this tick ({self._fault}); this rollout gets no "
                                    "reward: call no more tools") from exc
        self._rewards.append(reward)
        self._replies.append(reply)
        self._return += reward
        self._left = 0 if terminated or truncated else self._left - 1
        return prompt, self._left <= 0


