"""Typed errors for rlaif_gym: every message says what was expected, what arrived and how to fix it.

The standard library and `gymnasium.error` only (the floor of the layers), so every layer may raise them.
"""

from __future__ import annotations

import gymnasium.error

__all__ = [
    "ConfigError",
    "DependencyNotInstalled",
    "InvalidActionError",
    "JudgeBudgetExceeded",
    "MissingTapeError",
    "NothingToWriteError",
    "RLAIFError",
    "RecordError",
    "ResetNeeded",
    "SearchCancelled",
    "SearchLimitError",
    "VerdictParseError",
    "install_hint",
]

TORCH_EXTRAS = frozenset({"sb3", "rllib", "trl"})
"""Extras that pull torch: installed with the constraints file, which pins the CPU build (a bare install
pulls a multi-GB CUDA build)."""


def install_hint(extra: str) -> str:
    """The command that installs an extra, as it works today: from a clone of the repository (the package is
    not on a registry), with the constraints file for the extras that pull torch. Every `DependencyNotInstalled`
    message ends with it."""
    constraints = " -c constraints.txt" if extra in TORCH_EXTRAS else ""
    return f'pip install -e ".[{extra}]"{constraints} (in the rlaif_gym clone)'


class RLAIFError(Exception):
    """Base class of every error raised by rlaif_gym."""


class ConfigError(RLAIFError, ValueError):
    """A configuration value or key is invalid (raised when the config is built, never mid-episode)."""


class InvalidActionError(RLAIFError, ValueError):
    """An action is outside the declared action space (a *malformed* action, not a failed trade).

    A well-formed trade that the world refuses (insufficient cash, unknown market, ...) is not an
    exception: it is reported in ``info["feedback"]`` and leaves the state unchanged.
    """


class ResetNeeded(RLAIFError, gymnasium.error.ResetNeeded, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended.

    A `gymnasium.error.ResetNeeded` (what Gymnasium's `OrderEnforcing` raises), so code that catches
    Gymnasium's error catches ours too; a `RuntimeError` as before."""


class DependencyNotInstalled(RLAIFError, ImportError):
    """An optional dependency is missing; the message names the pip extra that provides it."""


class VerdictParseError(RLAIFError, ValueError):
    """An LLM judge's reply is not a valid verdict for the question asked (strict parsing).

    The judge records the reply and marks the score missing; a malformed verdict never becomes 0.

    Attributes:
        mode: the scoring mode asked ("absolute", "listwise" or "pairwise").
        problem: what was wrong, in words.
        raw: the start of the reply (at most 500 characters).
    """

    def __init__(self, mode: str, problem: str, raw: str) -> None:
        self.mode, self.problem, self.raw = mode, problem, raw[:500]
        super().__init__(
            f"malformed {mode} verdict: {problem}; the reply began {raw[:160]!r}. The judge must answer with "
            "exactly the JSON object its prompt template asks for (a ```json fence around it is allowed); "
            "check the judge model and its max_tokens (a cut-off reply is malformed too)"
        )


class MissingTapeError(RLAIFError, LookupError):
    """A strict judge replay needed a call that the judge tape does not hold.

    Attributes:
        key: the content address (sha256) that was looked up.
        tape: the tape file.
    """

    def __init__(self, key: str, tape: str, what: str) -> None:
        self.key, self.tape = key, tape
        super().__init__(
            f"judge tape {tape} holds no verdict for {what} (key {key[:16]}...). A replay is exact: the rubric, "
            "judge model, sampling parameters, prompt template and trajectory must equal the recorded ones. "
            "Record it first (--tape-mode record), judge only what is missing (--tape-mode rescore), or replay "
            "leniently (strict=False) to mark it missing"
        )


class JudgeBudgetExceeded(RLAIFError, RuntimeError):
    """More judge verdicts of one batch failed than its failure budget allows; the batch was stopped.

    Verdicts already answered are on the judge tape, so a rerun with tape mode "rescore" asks only
    for the rest.

    Attributes:
        failures: failed verdicts when the batch stopped.
        allowed: the budget (failures tolerated).
        planned: verdicts the batch planned.
    """

    def __init__(self, failures: int, allowed: int, planned: int, last_error: str) -> None:
        self.failures, self.allowed, self.planned = failures, allowed, planned
        super().__init__(
            f"judge failure budget exceeded: {failures} of {planned} verdicts failed, at most {allowed} allowed "
            f"(last: {last_error[:300]}). Fix the judge server or raise failure_budget; answered verdicts are on "
            "the tape, so rerun with tape mode 'rescore' to ask only for the rest"
        )


class RecordError(RLAIFError, ValueError):
    """A stored trajectory record holds a value the readers cannot use (raised when a run is loaded).

    Attributes:
        source: the file (or run directory) the record came from.
        trajectory_id: the record's trajectory id (or "?" when it has none).
        field: where in the record, as written in the file (e.g. ``steps[2].reward``, ``seed``).
    """

    def __init__(self, source: str, trajectory_id: str, field: str, problem: str, fix: str) -> None:
        self.source, self.trajectory_id, self.field = source, trajectory_id, field
        super().__init__(f"{source}: trajectory {trajectory_id!r}, field {field}: {problem}. {fix}")


class NothingToWriteError(RLAIFError, ValueError):
    """A command would write an empty result (no export records, no judge scores); the message says why.

    Nothing is written, so an earlier file of the same name is left as it was.
    """


class SearchLimitError(RLAIFError, RuntimeError):
    """A search stopped at its bound before it found what it looked for: its cap on ticks played or its deadline.

    Raised by `rlaif_gym.envs.decisions.decision_points` when given `max_ticks_searched` or `deadline` (the
    OpenEnv server gives both, so that one request's work is bounded); nothing is kept of the search.

    Attributes:
        reason: ``"ticks"`` (the cap), ``"deadline"`` or ``"cancelled"`` (see `SearchCancelled`).
        ticks_searched: ticks played before it stopped (0 when refused before playing any).
    """

    def __init__(self, message: str, reason: str, ticks_searched: int) -> None:
        self.reason, self.ticks_searched = reason, ticks_searched
        super().__init__(message)


class SearchCancelled(SearchLimitError):
    """A search stopped because its caller cancelled it (the OpenEnv server does when the client goes away)."""
