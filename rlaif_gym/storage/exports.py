"""Trajectories turned into the records trainers read: SFT chats, DPO pairs, GRPO groups, database rows.

Pure functions of the trajectories (no I/O except `write_export`). Every training sample is built
only from what the policy actually saw, the recorded prompt of its LLM call, and what it answered:
no environment state, final P&L or market outcome is ever added to a prompt (the original's offline
converter leaked future outcomes into its system prompts,
docs/babylon.md ("The original's defects", 17), and its Atropos env put the final P&L there). The
policy calls of a step are its LLM calls with purpose "action", no error and a non-empty response.

A call's prompt is its recorded `messages` (role and content of each, exactly what was sent)
when present, else `[system, user]` from `system_prompt` / `user_prompt` (the system message is
left out when empty).

Standard library, `rlaif_gym.errors` and `rlaif_gym.trajectory` only.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import RLAIFError
from ..trajectory import LLMCall, Trajectory, TrajectoryStep
from ._files import atomic_write_bytes

__all__ = [
    "EXPORT_KINDS",
    "SecretLeakError",
    "assert_no_secrets",
    "policy_calls",
    "prompt_messages",
    "to_db_rows",
    "to_dpo_pairs",
    "to_grpo_groups",
    "to_sft_records",
    "write_export",
]

Message = dict[str, str]


class SecretLeakError(RLAIFError, ValueError):
    """A secret (an API key) appears in text about to be written."""


# ------------------------------------------------------------------------------------------ pieces


def policy_calls(step: TrajectoryStep) -> list[LLMCall]:
    """The step's policy calls: purpose "action", no error, non-empty response (in call order)."""
    return [c for c in step.llm_calls if c.purpose == "action" and c.error is None and c.response.strip()]


def prompt_messages(call: LLMCall) -> list[Message]:
    """The prompt the model saw for `call`, as chat messages (see the module docstring)."""
    if call.messages:
        return [{"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in call.messages]
    prompt = [{"role": "system", "content": call.system_prompt}] if call.system_prompt else []
    return [*prompt, {"role": "user", "content": call.user_prompt}]


def _assistant(call: LLMCall) -> Message:
    return {"role": "assistant", "content": call.response}


# --------------------------------------------------------------------------------------------- SFT


def to_sft_records(trajectories: Iterable[Trajectory], min_reward: float | None = None) -> list[dict[str, Any]]:
    """One chat sample per policy call: the prompt it saw, then its reply.

    Args:
        trajectories: any trajectories.
        min_reward: keep only samples whose *step* reward is at least this (None keeps all).

    Returns:
        Records `{"messages", "trajectory_id", "step_number", "reward", "call_id"}` where
        `messages` is the prompt (usually [system, user]) plus the assistant reply and `reward`
        is the step's reward.
    """
    records = []
    for trajectory in trajectories:
        for step in trajectory.steps:
            if min_reward is not None and step.reward < min_reward:
                continue
            for call in policy_calls(step):
                records.append({
                    "messages": [*prompt_messages(call), _assistant(call)],
                    "trajectory_id": trajectory.trajectory_id,
                    "step_number": step.step_number,
                    "reward": step.reward,
                    "call_id": call.call_id,
                })
    return records


# --------------------------------------------------------------------------------------------- DPO


def _groups(trajectories: Iterable[Trajectory]) -> tuple[dict[str, list[Trajectory]], list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    ungrouped = []
    for trajectory in trajectories:
        if trajectory.group_id is None:
            ungrouped.append(trajectory)
        else:
            groups[trajectory.group_id].append(trajectory)
    return groups, ungrouped


def to_dpo_pairs(trajectories: Iterable[Trajectory], min_margin: float = 0.0) -> list[dict[str, Any]]:
    """Preference pairs from steps that saw the identical prompt but answered differently.

    Within one `group_id` (trajectories started from the same seed and state), the steps with
    the same `step_number` whose policy prompts are identical are compared pairwise; two
    different replies whose step rewards differ by more than `min_margin` give one pair, the
    higher reward chosen. Ties are skipped, as are repeated (chosen, rejected) reply pairs. The
    step's last policy call is the one compared (earlier ones are superseded answers). Prompts
    that diverged give no pair: there is no trajectory-level variant, since a pair whose two
    sides saw different states says nothing about which reply was better.

    Returns:
        Records in TRL's conversational preference layout: `{"prompt": [messages], "chosen":
        [assistant message], "rejected": [assistant message], "chosen_reward",
        "rejected_reward", "group_id", "step_number", "chosen_trajectory_id",
        "rejected_trajectory_id"}`.
    """
    groups, _ = _groups(trajectories)
    pairs = []
    for group_id, members in groups.items():
        by_prompt: dict[tuple[int, str], list[tuple[Trajectory, TrajectoryStep, LLMCall]]] = defaultdict(list)
        for trajectory in members:
            for step in trajectory.steps:
                calls = policy_calls(step)
                if calls:
                    key = (step.step_number, json.dumps(prompt_messages(calls[-1]), ensure_ascii=False))
                    by_prompt[key].append((trajectory, step, calls[-1]))
        for (step_number, _), candidates in by_prompt.items():
            seen: set[tuple[str, str]] = set()
            for i, (ta, sa, ca) in enumerate(candidates):
                for tb, sb, cb in candidates[i + 1:]:
                    if ca.response == cb.response or abs(sa.reward - sb.reward) <= min_margin:
                        continue
                    (tc, sc, cc), (tr, sr, cr) = ((ta, sa, ca), (tb, sb, cb)) if sa.reward > sb.reward else (
                        (tb, sb, cb), (ta, sa, ca))
                    if (cc.response, cr.response) in seen:
                        continue
                    seen.add((cc.response, cr.response))
                    pairs.append({
                        "prompt": prompt_messages(cc),
                        "chosen": [_assistant(cc)],
                        "rejected": [_assistant(cr)],
                        "chosen_reward": sc.reward,
                        "rejected_reward": sr.reward,
                        "group_id": group_id,
                        "step_number": step_number,
                        "chosen_trajectory_id": tc.trajectory_id,
                        "rejected_trajectory_id": tr.trajectory_id,
                    })
    return pairs


# -------------------------------------------------------------------------------------------- GRPO


def _conversation(trajectory: Trajectory) -> list[Message]:
    """The trajectory's policy calls as one chat: each prompt (a repeated system message or an
    already-sent history is not repeated) followed by its reply."""
    chat: list[Message] = []
    system: str | None = None
    for step in trajectory.steps:
        for call in policy_calls(step):
            prompt = prompt_messages(call)
            if prompt[: len(chat)] == chat and chat:  # the call continued the conversation so far
                prompt = prompt[len(chat):]
            elif prompt and prompt[0]["role"] == "system" and prompt[0]["content"] == system:
                prompt = prompt[1:]
            for message in prompt:
                if message["role"] == "system":
                    system = message["content"]
            chat.extend(prompt)
            chat.append(_assistant(call))
    return chat


def _token_list(call: LLMCall, attr: str) -> list[Any] | None:
    """The call's per-token list `attr` as the server returned it; None where none was recorded or the list
    was cut (named in the record's ``tokenCuts``): a cut list no longer matches the reply it belongs to."""
    cuts = (call.model_extra or {}).get("tokenCuts")
    return None if isinstance(cuts, dict) and attr in cuts else getattr(call, attr)


def _concat(calls: list[LLMCall], attr: str) -> list[Any] | None:
    values = [_token_list(call, attr) for call in calls]
    if not calls or any(v is None for v in values):
        return None
    return [x for v in values for x in v]


def _turn_tokens(call: LLMCall) -> dict[str, list[Any] | None]:
    """One policy call's token-exact record: what a multi-turn trainer needs to train on the sampled tokens
    without re-tokenising (None where the server returned none, or the list was cut)."""
    return {attr: _token_list(call, attr) for attr in ("prompt_token_ids", "completion_token_ids",
                                                       "completion_logprobs")}


def _score_of(score: str | Callable[[Trajectory], float]) -> Callable[[Trajectory], float]:
    if callable(score):
        return score
    if score not in Trajectory.model_fields:
        raise ValueError(f"score must be a Trajectory field name or a function; {score!r} is not a field "
                         "(try 'total_reward' or 'final_pnl')")
    return lambda t: getattr(t, score)


def to_grpo_groups(trajectories: Iterable[Trajectory], score: str | Callable[[Trajectory], float] = "total_reward",
                   normalize: bool = False, *, judge_scores: Mapping[str, float | None] | None = None,
                   drop_degenerate: bool = False) -> tuple[list[dict[str, Any]], int]:
    """Group-relative training groups (one per `group_id`), Atropos ScoredDataGroup-like (legacy layout: Atropos is
    archived; `turns` serves current multi-turn trainers).

    Advantages are the scores minus the group mean (divided by the group's population std when
    `normalize` and the std is not 0). No epsilon is ever added to break ties (the original
    did, so that Atropos would not drop its groups); a group whose scores are all equal is kept
    with zero advantages and `"degenerate": True`, for the trainer to drop or keep (or dropped
    here with `drop_degenerate`).

    Args:
        trajectories: any trajectories; those without a `group_id` form no group.
        score: a Trajectory field name, or a function of the trajectory.
        normalize: also divide by the group std.
        judge_scores: trajectory id -> an AI-judge score (e.g. `rlaif_gym.llm_judge`'s); when
            given it replaces `score`. A trajectory without a judge score (absent or None: the
            judge failed) is left out of its group, never scored 0, and listed in the group's
            `"missing_trajectory_ids"`.
        drop_degenerate: leave out the groups whose scores are all equal.

    Returns:
        `(groups, skipped)`: `groups` is a list of `{"group_id", "trajectory_ids", "scores",
        "advantages", "degenerate", "messages", "tokens", "logprobs", "turns"}`, where `messages`,
        `tokens`, `logprobs` and `turns` hold one entry per trajectory (`tokens` / `logprobs`: the
        concatenated completion token ids / logprobs of its policy calls, None unless every
        policy call recorded them whole; `turns`: per policy call, in order, its `prompt_token_ids`,
        `completion_token_ids` and `completion_logprobs` as the server returned them, None for a list
        that was not recorded or was cut (``tokenCuts``), so that a multi-turn trainer sees each turn's
        exact tokens); `skipped` counts the groups of fewer than
        2 (scored) trajectories (each trajectory without a `group_id` counts as one such group).
    """
    value = _score_of(score) if judge_scores is None else (lambda t: judge_scores[t.trajectory_id])
    groups, ungrouped = _groups(trajectories)
    skipped = len(ungrouped)
    out = []
    for group_id, members in groups.items():
        missing: list[str] = []
        if judge_scores is not None:
            missing = [t.trajectory_id for t in members if judge_scores.get(t.trajectory_id) is None]
            members = [t for t in members if judge_scores.get(t.trajectory_id) is not None]
        if len(members) < 2:
            skipped += 1
            continue
        scores = [float(value(t)) for t in members]
        if not all(math.isfinite(s) for s in scores):
            raise ValueError(f"group {group_id!r} has a non-finite score {scores}; fix the trajectories first")
        mean = math.fsum(scores) / len(scores)
        advantages = [s - mean for s in scores]
        degenerate = max(scores) == min(scores)
        if normalize and not degenerate:
            std = math.sqrt(math.fsum(a * a for a in advantages) / len(advantages))
            if std > 0:
                advantages = [a / std for a in advantages]
        if degenerate:
            if drop_degenerate:
                continue
            advantages = [0.0] * len(scores)
        calls = [[c for step in t.steps for c in policy_calls(step)] for t in members]
        extra = {"missing_trajectory_ids": missing} if judge_scores is not None else {}
        out.append({
            "group_id": group_id,
            "trajectory_ids": [t.trajectory_id for t in members],
            "scores": scores,
            "advantages": advantages,
            "degenerate": degenerate,
            "messages": [_conversation(t) for t in members],
            "tokens": [_concat(c, "completion_token_ids") for c in calls],
            "logprobs": [_concat(c, "completion_logprobs") for c in calls],
            "turns": [[_turn_tokens(c) for c in member] for member in calls],
            **extra,
        })
    return out, skipped


# ---------------------------------------------------------------------------------------------- DB


def to_db_rows(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """Rows in the original database layout (docs/babylon.md ("The original database layout")), for Babylon's readers.

    `stepsJson` is a JSON string of the camelCase steps (all our step fields are kept, the
    original's included); `id` is the trajectory's `id`, or its `trajectory_id` when empty (the
    column is the table's key); times are ISO-8601 strings. `Trajectory.from_json(json.dumps(row))`
    reads a row back (the fields outside this layout, such as `group_id`, take their defaults).
    `isTrainingData` is false for a failed episode (one cut short by a policy-call or runtime error).
    """
    rows = []
    for t in trajectories:
        data = t.to_dict()
        rows.append({
            "id": t.id or t.trajectory_id,
            "trajectoryId": t.trajectory_id,
            "agentId": t.agent_id,
            "windowId": t.window_id,
            "scenarioId": t.scenario_id,
            "archetype": t.archetype,
            "startTime": data["startTime"],
            "endTime": data["endTime"],
            "durationMs": t.duration_ms,
            "stepsJson": json.dumps(data["steps"], ensure_ascii=False, separators=(",", ":")),
            "totalReward": t.total_reward,
            "finalPnL": t.final_pnl,
            "finalBalance": t.final_balance,
            "tradesExecuted": t.trades_executed,
            "episodeLength": t.episode_length,
            "finalStatus": t.final_status,
            "isTrainingData": t.final_status != "failed",
        })
    return rows


# ---------------------------------------------------------------------------------------- writing


def _grpo(trajectories: Iterable[Trajectory], **options: Any) -> list[dict[str, Any]]:
    return to_grpo_groups(trajectories, **options)[0]


EXPORT_KINDS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "sft": to_sft_records,
    "dpo": to_dpo_pairs,
    "grpo": _grpo,
    "db": to_db_rows,
}
"""`write_export` kinds and the function each runs."""


def write_export(kind: str, trajectories: Iterable[Trajectory], path: str | os.PathLike[str],
                 **options: Any) -> int:
    """Write one export as JSONL (one record per line), atomically: temp file, then `os.replace`.

    Args:
        kind: one of `EXPORT_KINDS` ("sft", "dpo", "grpo", "db").
        trajectories: the input.
        path: the output file.
        **options: passed to the export function (e.g. `min_reward`, `score`, `normalize`).

    Returns:
        The number of records written (for "grpo", groups; the skipped count is not written).

    Raises:
        ValueError: unknown kind, or a record holds NaN or infinity (not valid JSON for trainers).
    """
    if kind not in EXPORT_KINDS:
        raise ValueError(f"unknown export kind {kind!r}; expected one of {sorted(EXPORT_KINDS)}")
    records = EXPORT_KINDS[kind](trajectories, **options)
    lines = []
    for number, record in enumerate(records):
        try:
            lines.append(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
        except ValueError as exc:
            raise ValueError(f"{kind} record {number} holds NaN or infinity, which trainers' JSON readers "
                             f"reject; fix the trajectory ({exc})") from exc
    atomic_write_bytes(path, "".join(lines).encode("utf-8"))
    return len(lines)


# ----------------------------------------------------------------------------------------- secrets


def assert_no_secrets(text: str | bytes, secrets: Sequence[str | None]) -> None:
    """Raise if any secret appears in `text`, raw or JSON-escaped; the message never repeats it.

    Empty or None secrets are ignored (an unset key variable is not a secret).

    Raises:
        SecretLeakError: naming which secret (by position and length) and where.
    """
    haystack = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
    for index, secret in enumerate(secrets):
        if not secret:
            continue
        for form in {secret, json.dumps(secret)[1:-1]}:
            offset = haystack.find(form)
            if offset >= 0:
                raise SecretLeakError(
                    f"secret #{index} ({len(secret)} characters) appears at offset {offset} of the text to be "
                    "written; an API key must never enter a record"
                )
