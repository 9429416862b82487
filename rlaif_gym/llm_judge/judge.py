"""`LLMJudge`: trajectory-level AI feedback from an OpenAI-compatible model, with rubrics, tapes and limits.

Scoring modes (`JudgeConfig.mode`):

* ``absolute``: one call per trajectory (``repeats`` independent calls, averaged). The verdict is
  a score in [0, 1] against the archetype's rubric.
* ``listwise``: one RULER-style call per group (the trajectories sharing a ``group_id``, which the
  collector starts from the same seed). The judge scores every member relative to the others.
* ``pairwise``: for every pair of a group, both orders (A, B) and (B, A) are asked. The two answers
  are averaged into one game (1, 0.5 or 0 for each side), and a Bradley–Terry fit
  (`bradley_terry.fit_bradley_terry`) over the group's games gives each member the fitted
  probability that it beats the group's average member.

Group-relative scores: within each group, ``relative = score - mean`` over the members that have a
score. No noise is ever added to break ties. A group whose scores are all equal has zero variance,
so it gets no relative scores, is flagged ``zero_variance`` and is counted in the health report.

Failures are data, never a zero. A malformed verdict (`VerdictParseError`) is recorded (on the
tape and in `JudgeBatch.verdicts`) and re-asked up to ``verdict_retries`` times. Each re-ask is its
own taped call. If every attempt is malformed, or the call fails for good, the trajectory's score
is None with the reason in ``missing``.

Operation:

* Calls in flight are bounded by ``max_concurrency`` (one `asyncio.Semaphore`; tape hits need no
  slot).
* Every call has a deadline, ``call_deadline_s``, that covers the client's retries. The batch can
  have a deadline too, ``batch_deadline_s``: calls that cannot finish by then are ``expired``.
* Transport retries (timeouts, 5xx, 429) are the client's job (`OpenAIChatClient.max_retries`).
* The failure budget: when more than ``floor(failure_budget * planned verdicts)`` verdicts fail
  (error, deadline or malformed after the re-asks), the batch stops with `JudgeBudgetExceeded`.
  Answered verdicts are already on the tape.

Every call goes through the same `RecordingClient` as the policy (purpose "evaluation"). Its
`LLMCall` record (prompts, usage, latency, error; never a key) is stored on the tape.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, JudgeBudgetExceeded, MissingTapeError, VerdictParseError
from ..llm import ChatClient, LLMError, RecordingClient, SamplingParams
from ..rewards.archetypes import DEFAULT_ARCHETYPE, RubricSet, load_rubrics, normalize_archetype
from ..rewards.bradley_terry import fit_bradley_terry
from ..rewards.composite import resolve_weights
from ..trajectory import LLMCall, LLMCallError, Trajectory
from .prompts import (
    MODES,
    TEMPLATE_VERSION,
    canonical_json,
    load_template,
    priority_weights,
    render_messages,
    sha256_text,
    trajectory_data,
)
from .tape import JudgeTape, TapeMode, tape_key
from .verdicts import AbsoluteVerdict, ListwiseVerdict, PairwiseVerdict, parse_verdict, verdict_gbnf

__all__ = ["GroupJudgement", "JudgeBatch", "JudgeConfig", "LLMJudge", "TrajectoryJudgement", "VerdictRecord"]

_FAILURES = frozenset({"error", "deadline", "malformed"})


@dataclass(frozen=True)
class JudgeConfig:
    """How the judge asks and how much failure it tolerates.

    Attributes:
        mode: "absolute", "listwise" or "pairwise".
        max_concurrency: judge calls in flight at once.
        call_deadline_s: wall-clock seconds one call may take, the client's retries included (None: no limit).
        batch_deadline_s: wall-clock seconds the whole batch may take (None: no limit).
        verdict_retries: re-asks after a malformed verdict (each one is a separate taped call).
        failure_budget: fraction of planned verdicts that may fail before the batch stops.
        repeats: independent verdicts per trajectory in absolute mode (averaged; their spread is a
            health metric).
        temperature, max_tokens, top_p: the judge's sampling. The seed is derived per call from its
            content, so a call is reproducible.
        max_steps: the last this many steps of a trajectory are shown.
        reasoning_chars: each shown step's reasoning is cut to this many characters.
        archetype: judge every trajectory as this archetype (None: each trajectory's own, else "default").
        strict_replay: in replay mode, raise `MissingTapeError` for a call that is not on the tape
            (False: mark it missing).
        bt_prior: virtual wins and losses per item in the Bradley–Terry fit (see `fit_bradley_terry`).
        constrain: "gbnf": the verdict's grammar goes with every call (`verdict_gbnf`: llama.cpp's `grammar`
            field; build the client with `extra_body=verdict_constraint(mode)`), so a small model writes a
            parsable verdict; it enters every tape key. None: unconstrained.
        template_version: the packaged prompt template version.
    """

    mode: str = "absolute"
    max_concurrency: int = 4
    call_deadline_s: float | None = 180.0
    batch_deadline_s: float | None = None
    verdict_retries: int = 1
    failure_budget: float = 0.25
    repeats: int = 1
    temperature: float = 0.0
    max_tokens: int = 512
    top_p: float | None = None
    max_steps: int = 20
    reasoning_chars: int = 400
    archetype: str | None = None
    strict_replay: bool = True
    bt_prior: float = 0.5
    constrain: str | None = None
    template_version: str = TEMPLATE_VERSION

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.max_concurrency < 1:
            problems.append(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        for name in ("call_deadline_s", "batch_deadline_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                problems.append(f"{name} must be > 0 or None, got {value!r}")
        if self.verdict_retries < 0:
            problems.append(f"verdict_retries must be >= 0, got {self.verdict_retries}")
        if not 0.0 <= self.failure_budget <= 1.0:
            problems.append(f"failure_budget must be in [0, 1], got {self.failure_budget}")
        if self.repeats < 1 or (self.repeats > 1 and self.mode != "absolute"):
            problems.append(f"repeats must be >= 1, and > 1 only in absolute mode (got {self.repeats} in {self.mode})")
        if self.max_tokens < 1:
            problems.append(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.constrain not in (None, "gbnf"):
            problems.append(f'constrain must be None or "gbnf", got {self.constrain!r}')
        elif self.constrain and self.mode == "listwise":
            problems.append("constrain: a listwise verdict has no grammar (its labels vary); use absolute or pairwise")
        if self.archetype is not None:
            try:
                normalize_archetype(self.archetype, strict=True)
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigError("invalid JudgeConfig: " + "; ".join(problems))


@dataclass
class VerdictRecord:
    """One judge call attempt, as the batch saw it.

    `outcome`: ``ok``, ``malformed``, ``error``, ``deadline`` (the call's own deadline), ``expired``
    (the batch deadline came first; not taped) or ``missing_tape`` (lenient replay).
    `source`: ``network``, ``tape`` or ``none``.
    """

    key: str
    mode: str
    trajectory_ids: tuple[str, ...]
    repeat: int
    attempt: int
    outcome: str
    source: str
    error: str | None = None
    verdict: dict[str, Any] | None = None
    latency_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        d = asdict(self)
        d["trajectory_ids"] = list(self.trajectory_ids)
        return d


@dataclass
class TrajectoryJudgement:
    """The judge's result for one trajectory.

    Attributes:
        score: in [0, 1]; None when missing (never 0 for a failure).
        relative: score minus its group's mean, None without a group of at least two scored,
            not-all-equal members.
        missing: why the score is None.
        samples: the individual verdict scores (absolute: one per repeat; listwise: the group's
            verdict; pairwise: empty, see `bt_log_strength`).
        bt_log_strength: pairwise mode: the fitted Bradley–Terry log-strength, centred on the group.
        slice_sha: sha256 of the trajectory slice the judge read (equal for duplicate trajectories).
        rubric_sha: sha256 of the rubric text.
        priority_weights: the archetype's key metrics and weights, as shown to the judge.
        reward_weights: the archetype's reward-weight row (pnl, format, reasoning, behavior, risk).
        keys: the tape keys of the calls that judged it.
    """

    trajectory_id: str
    group_id: str | None
    archetype: str
    mode: str
    model: str
    template: str
    score: float | None = None
    relative: float | None = None
    missing: str | None = None
    samples: list[float] = field(default_factory=list)
    bt_log_strength: float | None = None
    slice_sha: str = ""
    rubric_sha: str = ""
    priority_weights: dict[str, float] = field(default_factory=dict)
    reward_weights: dict[str, float] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (deterministic: no wall-clock values)."""
        return asdict(self)


@dataclass
class GroupJudgement:
    """Group-level results: relative-score bookkeeping and, in pairwise mode, the comparisons."""

    group_id: str
    trajectory_ids: list[str]
    scored: int = 0
    mean: float | None = None
    zero_variance: bool = False
    pairs: int = 0
    pairs_complete: int = 0
    order_disagreements: int = 0
    bt_components: int | None = None
    bt_converged: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


@dataclass
class JudgeBatch:
    """Everything one `LLMJudge.score` produced."""

    mode: str
    model: str
    template: str
    tape_mode: str
    judgements: dict[str, TrajectoryJudgement]
    groups: dict[str, GroupJudgement]
    verdicts: list[VerdictRecord]
    config: dict[str, Any]

    def scores(self) -> dict[str, float | None]:
        """trajectory id -> score (None: missing)."""
        return {tid: j.score for tid, j in self.judgements.items()}

    def relative_scores(self) -> dict[str, float | None]:
        """trajectory id -> group-relative score (None: no usable group)."""
        return {tid: j.relative for tid, j in self.judgements.items()}


@dataclass
class _Item:
    """A trajectory prepared for judging."""

    trajectory: Trajectory
    archetype: str
    rubric: str
    rubric_sha: str
    priority: tuple[str, ...]
    data: dict[str, Any]
    slice_sha: str


@dataclass
class _Job:
    ids: tuple[str, ...]
    repeat: int
    group_id: str | None


class _Budget:
    def __init__(self, planned: int, fraction: float) -> None:
        self.planned = planned
        self.allowed = math.floor(fraction * planned + 1e-9)
        self.failures = 0


class LLMJudge:
    """Judge recorded trajectories with an LLM (see the module docstring).

    Args:
        client: any `ChatClient` (e.g. `OpenAIChatClient`), or a `RecordingClient` around one; None
            is allowed only in replay mode, where no call is ever made.
        config: a `JudgeConfig` (default: absolute mode).
        tape: a `JudgeTape`; None judges without one (record mode only).
        tape_mode: "record", "replay" or "rescore" (see `tape.TapeMode`).
        rubrics: the rubric set (default: the packaged ``rubrics.json``, actually loaded; pass
            `load_rubrics(path)` to judge with an edited file).
        model: the judge model name that enters the tape keys (default: the client's model). It is
            required in replay mode without a client.
    """

    def __init__(self, client: ChatClient | RecordingClient | None, *, config: JudgeConfig | None = None,
                 tape: JudgeTape | None = None, tape_mode: TapeMode | str = TapeMode.RECORD,
                 rubrics: RubricSet | None = None, model: str | None = None) -> None:
        self.config = config or JudgeConfig()
        try:
            self.tape_mode = TapeMode(tape_mode)
        except ValueError:
            raise ConfigError(f"tape_mode must be record, replay or rescore, got {tape_mode!r}") from None
        if self.tape_mode is not TapeMode.RECORD and tape is None:
            raise ConfigError(f"tape mode {self.tape_mode.value!r} needs a tape (JudgeTape(path))")
        if client is None and self.tape_mode is not TapeMode.REPLAY:
            raise ConfigError(f"tape mode {self.tape_mode.value!r} calls the judge: pass a client (or use replay)")
        if client is not None and not isinstance(client, RecordingClient):
            client = RecordingClient(client, purpose="evaluation")
        if self.config.constrain and client is not None:
            sent = getattr(client.inner, "extra_body", {}).get("grammar")
            if sent != verdict_gbnf(self.config.mode):
                raise ConfigError(f'constrain="gbnf" needs a client that sends the verdict grammar: build it with '
                                  f'OpenAIChatClient(..., extra_body=verdict_constraint("{self.config.mode}"))')
        self.client = client
        self.model = model or (client.model if client is not None else "")
        if not self.model:
            raise ConfigError("the judge needs a model name (it enters every tape key): pass model=...")
        self.tape = tape
        self.rubrics = rubrics if rubrics is not None else load_rubrics()
        self.template = load_template(self.config.mode, self.config.template_version)

    # -- preparation ------------------------------------------------------------------------------

    def rubric_for(self, archetype: str | None) -> tuple[str, str, tuple[str, ...]]:
        """(normalised archetype, rubric text, priority metrics) from this judge's rubric set."""
        arch = normalize_archetype(self.config.archetype or archetype)
        if arch == DEFAULT_ARCHETYPE:
            return arch, self.rubrics.default_rubric, self.rubrics.default_priority_metrics
        return arch, self.rubrics.rubrics[arch], self.rubrics.priority_metrics[arch]

    def _item(self, trajectory: Trajectory) -> _Item:
        arch, rubric, priority = self.rubric_for(trajectory.archetype)
        data = trajectory_data(trajectory, archetype=arch, priority=priority, max_steps=self.config.max_steps,
                               reasoning_chars=self.config.reasoning_chars)
        return _Item(trajectory, arch, rubric, sha256_text(rubric), priority, data,
                     sha256_text(canonical_json(data)))

    def messages_for(self, items: Sequence[_Item]) -> tuple[list[dict[str, str]], tuple[str, ...]]:
        """The chat messages that judge `items` in this mode (one item in absolute mode, two in order
        (A, B) in pairwise mode, a group in listwise mode), and the labels used."""
        first = items[0]
        if self.config.mode == "absolute":
            labels: tuple[str, ...] = ()
            data: Any = first.data
        elif self.config.mode == "listwise":
            labels = tuple(f"trajectory-{i + 1}" for i in range(len(items)))
            data = [{"trajectory_id": label, **it.data} for label, it in zip(labels, items, strict=True)]
        else:
            labels = ("A", "B")
            data = {"A": items[0].data, "B": items[1].data}
        return render_messages(self.template, archetype=first.archetype, rubric=first.rubric, data=data,
                               labels=labels), labels

    def prompt_for(self, trajectory: Trajectory) -> list[dict[str, str]]:
        """The absolute-mode messages for one trajectory (for inspection; any mode's judge can render it)."""
        item = self._item(trajectory)
        return render_messages(load_template("absolute", self.config.template_version), archetype=item.archetype,
                               rubric=item.rubric, data=item.data)

    def _plan(self, items: dict[str, _Item]) -> tuple[list[_Job], dict[str, list[str]], dict[str, str]]:
        """Jobs, groups (id -> member ids in order) and the trajectories left out (id -> reason)."""
        skipped: dict[str, str] = {}
        groups: dict[str, list[str]] = defaultdict(list)
        for tid, item in items.items():
            t = item.trajectory
            if t.final_status == "failed":
                skipped[tid] = "not judged: the episode failed (its policy call failed for good)"
                continue
            if t.group_id is not None:
                groups[t.group_id].append(tid)
        for gid, members in groups.items():
            members.sort(key=lambda m: (items[m].trajectory.group_index or 0, m))
            seeds = {items[m].trajectory.seed for m in members}
            archetypes = {items[m].archetype for m in members}
            if self.config.mode != "absolute" and (len(seeds) > 1 or len(archetypes) > 1):
                raise ConfigError(f"group {gid!r} mixes seeds {sorted(map(str, seeds))} or archetypes "
                                  f"{sorted(archetypes)}; {self.config.mode} judging compares trajectories that "
                                  "started from the same state with the same rubric")
        jobs: list[_Job] = []
        if self.config.mode == "absolute":
            for tid in items:
                if tid not in skipped:
                    jobs.extend(_Job((tid,), r, items[tid].trajectory.group_id) for r in range(self.config.repeats))
            return jobs, dict(groups), skipped
        for tid, item in items.items():
            if tid not in skipped and (item.trajectory.group_id is None or len(groups[item.trajectory.group_id]) < 2):
                skipped[tid] = f"not judged: {self.config.mode} mode needs a group of at least 2 trajectories"
        for gid, members in groups.items():
            if len(members) < 2:
                continue
            if self.config.mode == "listwise":
                jobs.append(_Job(tuple(members), 0, gid))
            else:
                for i, a in enumerate(members):
                    for b in members[i + 1:]:
                        jobs.append(_Job((a, b), 0, gid))
                        jobs.append(_Job((b, a), 0, gid))
        return jobs, dict(groups), skipped

    # -- calling ----------------------------------------------------------------------------------

    def _material(self, job: _Job, attempt: int, items: dict[str, _Item],
                  messages: list[dict[str, str]]) -> tuple[dict[str, Any], SamplingParams]:
        slices = [items[t].slice_sha for t in job.ids]
        seed_src = canonical_json({"mode": self.config.mode, "ids": list(job.ids), "slices": slices,
                                   "repeat": job.repeat, "attempt": attempt})
        seed = int(sha256_text(seed_src)[:8], 16) & 0x7FFFFFFF
        params = SamplingParams(temperature=self.config.temperature, max_tokens=self.config.max_tokens,
                                top_p=self.config.top_p, seed=seed, logprobs=False)
        first = items[job.ids[0]]
        material = {
            "mode": self.config.mode, "template": self.template.name, "template_sha": self.template.sha256,
            "model": self.model,
            "params": {"temperature": params.temperature, "max_tokens": params.max_tokens, "top_p": params.top_p,
                       "seed": params.seed},
            "rubric_sha": first.rubric_sha, "archetype": first.archetype,
            "trajectory_ids": list(job.ids), "slices": slices, "repeat": job.repeat, "attempt": attempt,
            "messages_sha": sha256_text(canonical_json(messages)),
        }
        if self.config.constrain:  # (absent when None: the keys of unconstrained tapes stay as they were)
            material["constrain"] = self.config.constrain
        return material, params

    async def _ask(self, messages: list[dict[str, str]], params: SamplingParams, call_id: str,
                   ctx: _Context) -> tuple[str, str | None, str | None, LLMCall | None]:
        """One network call under the semaphore and deadlines: (outcome, response, error, record)."""
        remaining = ctx.remaining()
        if remaining is not None and remaining <= 0:
            return "expired", None, "the batch deadline passed before the call started", None
        try:
            await asyncio.wait_for(ctx.slots.acquire(), remaining)
        except asyncio.TimeoutError:
            return "expired", None, "the batch deadline passed while the call waited for a slot", None
        if ctx.stopped:  # the failure budget ran out while this call waited: send nothing more
            ctx.slots.release()
            return "expired", None, "the batch stopped (failure budget exceeded)", None
        try:
            remaining = ctx.remaining()
            limit = self.config.call_deadline_s
            batch_bound = remaining is not None and (limit is None or remaining < limit)
            if batch_bound:
                limit = max(remaining, 0.0)
            assert self.client is not None
            try:
                completion, record = await asyncio.wait_for(self.client.chat(messages, params, call_id=call_id),
                                                            limit)
            except LLMError as exc:
                return "error", None, f"{exc.type}: {exc}", getattr(exc, "record", None)
            except asyncio.TimeoutError:
                what = "the batch deadline" if batch_bound else f"the call deadline ({limit:g} s)"
                record = LLMCall(call_id=call_id, model=self.model, system_prompt=messages[0]["content"],
                                 user_prompt=messages[-1]["content"], temperature=params.temperature,
                                 max_tokens=params.max_tokens, top_p=params.top_p, seed=params.seed,
                                 purpose="evaluation", latency_ms=1000.0 * (limit or 0.0),
                                 error=LLMCallError(type="DeadlineExceeded", message=f"{what} passed",
                                                    retryable=True))
                return ("expired" if batch_bound else "deadline"), None, f"DeadlineExceeded: {what} passed", record
            return "answer", completion.text, None, record
        finally:
            ctx.slots.release()

    async def _attempt(self, job: _Job, attempt: int, items: dict[str, _Item], ctx: _Context) -> tuple[
            VerdictRecord, AbsoluteVerdict | ListwiseVerdict | PairwiseVerdict | None]:
        messages, labels = self.messages_for([items[t] for t in job.ids])
        material, params = self._material(job, attempt, items, messages)
        key = tape_key(material)
        rec = VerdictRecord(key, self.config.mode, job.ids, job.repeat, attempt, outcome="", source="none")
        # record mode asks anew and never reads the tape: so it also mends a tape whose rows fail their checks
        entry = self.tape.get(key) if self.tape is not None and self.tape_mode is not TapeMode.RECORD else None
        response: str | None
        if self.tape_mode is TapeMode.REPLAY or (self.tape_mode is TapeMode.RESCORE and entry is not None
                                                 and entry.reusable):
            if entry is None:
                if self.config.strict_replay:
                    assert self.tape is not None
                    raise MissingTapeError(key, self.tape.path, f"the {self.config.mode} verdict on {list(job.ids)} "
                                                                f"(repeat {job.repeat}, attempt {attempt})")
                rec.outcome, rec.error = "missing_tape", "not on the tape (lenient replay)"
                return rec, None
            rec.source = "tape"
            outcome, response, error, call = entry.outcome, entry.response, entry.error, entry.call
            if outcome in ("ok", "malformed"):
                outcome = "answer"
        else:
            rec.source = "network"
            call_id = f"judge-{self.config.mode}-{key[:16]}"
            outcome, response, error, call = await self._ask(messages, params, call_id, ctx)
        if call is not None:
            rec.latency_ms, rec.prompt_tokens = call.latency_ms, call.prompt_tokens
            rec.completion_tokens, rec.total_tokens = call.completion_tokens, call.total_tokens
        verdict = None
        if outcome == "answer":
            try:
                verdict = parse_verdict(self.config.mode, response or "", labels)
                rec.outcome = "ok"
                rec.verdict = asdict(verdict)
            except VerdictParseError as exc:
                rec.outcome, error = "malformed", str(exc)
        else:
            rec.outcome = outcome
        rec.error = error
        if rec.source == "network" and rec.outcome != "expired" and self.tape is not None:
            self.tape.put(key, material, rec.outcome, response=response, error=error, call=call)
        return rec, verdict

    async def _job(self, job: _Job, items: dict[str, _Item], ctx: _Context) -> tuple[list[VerdictRecord], Any]:
        records: list[VerdictRecord] = []
        verdict = None
        for attempt in range(self.config.verdict_retries + 1):
            rec, verdict = await self._attempt(job, attempt, items, ctx)
            records.append(rec)
            if rec.outcome != "malformed":
                break
        last = records[-1]
        if last.outcome in _FAILURES:
            ctx.budget.failures += 1
            if ctx.budget.failures > ctx.budget.allowed:
                ctx.stopped = True
                raise JudgeBudgetExceeded(ctx.budget.failures, ctx.budget.allowed, ctx.budget.planned,
                                          f"{last.outcome} on {list(job.ids)}: {last.error}")
        return records, verdict

    # -- scoring ----------------------------------------------------------------------------------

    def score(self, trajectories: Sequence[Trajectory]) -> JudgeBatch:
        """Judge a batch (blocking); see `score_async`."""
        return asyncio.run(self.score_async(trajectories))

    async def score_async(self, trajectories: Sequence[Trajectory]) -> JudgeBatch:
        """Judge a batch of trajectories in this judge's mode.

        Raises:
            MissingTapeError: strict replay of a call that the tape lacks.
            JudgeBudgetExceeded: too many verdicts failed; the batch was stopped.
            ConfigError: duplicate trajectory ids, or a group that mixes seeds or archetypes
                (listwise and pairwise modes).
        """
        items: dict[str, _Item] = {}
        for t in trajectories:
            if t.trajectory_id in items:
                raise ConfigError(f"trajectory id {t.trajectory_id!r} appears twice in the batch; ids must be unique")
            items[t.trajectory_id] = self._item(t)
        if self.tape is not None:
            for item in items.values():
                self.tape.put_rubric(item.rubric_sha, item.rubric)
        jobs, groups, skipped = self._plan(items)
        ctx = _Context(asyncio.Semaphore(self.config.max_concurrency), self.config.batch_deadline_s,
                       _Budget(len(jobs), self.config.failure_budget))
        tasks = [asyncio.ensure_future(self._job(job, items, ctx)) for job in jobs]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            close = getattr(getattr(self.client, "inner", None), "aclose", None)
            if close is not None:
                await close()
        return self._aggregate(items, jobs, results, groups, skipped)

    def _judgement(self, item: _Item) -> TrajectoryJudgement:
        t = item.trajectory
        return TrajectoryJudgement(
            trajectory_id=t.trajectory_id, group_id=t.group_id, archetype=item.archetype, mode=self.config.mode,
            model=self.model, template=self.template.name, slice_sha=item.slice_sha, rubric_sha=item.rubric_sha,
            priority_weights={k: round(v, 6) for k, v in priority_weights(item.priority).items()},
            reward_weights=resolve_weights(item.archetype),
        )

    def _aggregate(self, items: dict[str, _Item], jobs: list[_Job], results: list[tuple[list[VerdictRecord], Any]],
                   groups: dict[str, list[str]], skipped: dict[str, str]) -> JudgeBatch:
        out = {tid: self._judgement(item) for tid, item in items.items()}
        for tid, reason in skipped.items():
            out[tid].missing = reason
        verdicts = [rec for records, _ in results for rec in records]
        failure: dict[str, str] = {}
        for job, (records, _) in zip(jobs, results, strict=True):
            for tid in job.ids:
                out[tid].keys.extend(r.key for r in records)
            last = records[-1]
            if last.outcome != "ok":
                for tid in job.ids:
                    failure[tid] = f"{last.outcome}: {last.error}"
        group_out = {gid: GroupJudgement(gid, list(members)) for gid, members in groups.items()}
        mode = self.config.mode
        if mode == "absolute":
            for job, (_, verdict) in zip(jobs, results, strict=True):
                if verdict is not None:
                    out[job.ids[0]].samples.append(verdict.score)
            for j in out.values():
                if j.samples:
                    j.score = math.fsum(j.samples) / len(j.samples)
        elif mode == "listwise":
            for job, (_, verdict) in zip(jobs, results, strict=True):
                if verdict is None:
                    continue
                labels = [f"trajectory-{i + 1}" for i in range(len(job.ids))]
                for tid, label in zip(job.ids, labels, strict=True):
                    out[tid].samples.append(verdict.scores[label])
                    out[tid].score = verdict.scores[label]
        else:
            self._pairwise(jobs, results, groups, out, group_out)
        for tid, j in out.items():
            if j.score is None and j.missing is None:
                j.missing = failure.get(tid, "no verdict")
        for g in group_out.values():
            scored = [out[m].score for m in g.trajectory_ids if out[m].score is not None]
            g.scored = len(scored)
            if len(scored) < 2:
                continue
            g.mean = math.fsum(scored) / len(scored)
            g.zero_variance = max(scored) == min(scored)
            if not g.zero_variance:
                for m in g.trajectory_ids:
                    if out[m].score is not None:
                        out[m].relative = out[m].score - g.mean
        return JudgeBatch(mode=mode, model=self.model, template=self.template.name, tape_mode=self.tape_mode.value,
                          judgements=out, groups=group_out, verdicts=verdicts, config=asdict(self.config))

    def _pairwise(self, jobs: list[_Job], results: list[tuple[list[VerdictRecord], Any]],
                  groups: dict[str, list[str]], out: dict[str, TrajectoryJudgement],
                  group_out: dict[str, GroupJudgement]) -> None:
        """Average each pair's two orders into one game, then fit Bradley–Terry per group."""
        prefs: dict[tuple[str, str], list[float | None]] = {}
        for job, (_, verdict) in zip(jobs, results, strict=True):
            a, b = job.ids
            pair = (a, b) if a < b else (b, a)
            share_a = None
            if verdict is not None:
                share_a = {"A": 1.0, "B": 0.0, "tie": 0.5}[verdict.winner]
            share_first = share_a if pair[0] == a else (None if share_a is None else 1.0 - share_a)
            prefs.setdefault(pair, []).append(share_first)
        for gid, members in groups.items():
            if len(members) < 2:
                continue
            index = {m: i for i, m in enumerate(members)}
            wins = np.zeros((len(members), len(members)))
            g = group_out[gid]
            for pair, shares in prefs.items():
                if pair[0] not in index or pair[1] not in index:
                    continue
                g.pairs += 1
                if len(shares) != 2 or any(s is None for s in shares):
                    continue
                g.pairs_complete += 1
                g.order_disagreements += shares[0] != shares[1]
                mean = (shares[0] + shares[1]) / 2.0  # type: ignore[operator]
                i, j = index[pair[0]], index[pair[1]]
                wins[i, j] += mean
                wins[j, i] += 1.0 - mean
            if g.pairs_complete == 0:
                continue
            fit = fit_bradley_terry(wins, prior=self.config.bt_prior)
            g.bt_components, g.bt_converged = fit.components, fit.converged
            for m, i in index.items():
                if fit.compared[i]:
                    out[m].score = float(fit.probability[i])
                    out[m].bt_log_strength = float(fit.log_strength[i])


@dataclass
class _Context:
    slots: asyncio.Semaphore
    deadline_s: float | None
    budget: _Budget
    start: float = field(default=0.0)
    stopped: bool = False

    def __post_init__(self) -> None:
        self.start = asyncio.get_running_loop().time()

    def remaining(self) -> float | None:
        if self.deadline_s is None:
            return None
        return self.deadline_s - (asyncio.get_running_loop().time() - self.start)
