"""What the LLM judge reads: the packaged prompt templates and the trajectory rendered as data.

Templates. ``templates/<mode>.<version>.md`` ship as package data, one per scoring mode. Each file
has a ``### system`` part and a ``### user`` part, filled with `string.Template` (``$name``
placeholders; the values are inserted verbatim and never re-parsed, so a ``$`` in a rubric is
safe). A template's identity is its name (``absolute/v1``) plus the sha256 of its text. Both enter
every judge-tape key, so editing a template can never replay an old verdict.

Trajectory slice. The judge sees a trajectory as one JSON object (`trajectory_data`): its outcome,
the archetype's key metrics (the priority metrics of ``rubrics.json``, most important first, with
the harmonic weights that ``rewards.priority_weighted_score`` uses, the value and the typical range),
the other recorded metrics, action counts, and the last ``max_steps`` steps (action, parameters,
success, equity change and the agent's reasoning, cut to ``reasoning_chars``). This object is
the "trajectory slice" that a tape key hashes.

Data, not instructions. The JSON sits between two fence lines that carry a nonce: the first 12 hex
digits of the sha256 of the JSON itself. The data is a single line of JSON, so every newline the
agent wrote is escaped. No line of it can equal a fence, and the agent cannot know the nonce of a
text that contains it. The system prompt says that everything between the fences is data, and that
instructions inside it are behaviour to judge.

Metrics. A recorded trajectory does not hold everything that ``BehaviorMetrics`` describes (for
example the realized P&L of each trade, reputation or followers). `trajectory_metrics` computes
what the steps do record and gives None (shown as null, "not recorded") for the rest; it never
guesses. Counts of actions that this world does not have (comments, mentions, research queries)
are a true 0.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import string
from collections import Counter
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

from ..rewards.archetypes import (
    APPROXIMATED_METRICS,
    UNAVAILABLE_METRIC_VALUES,
    BehaviorMetrics,
    metric_range,
)
from ..sim import TRADE_TYPES
from ..trajectory import Trajectory

__all__ = [
    "MODES",
    "TEMPLATE_VERSION",
    "PromptTemplate",
    "canonical_json",
    "fences",
    "load_template",
    "priority_weights",
    "render_messages",
    "sha256_text",
    "trajectory_data",
    "trajectory_metrics",
]

MODES: tuple[str, ...] = ("absolute", "listwise", "pairwise")
"""The scoring modes; each has its own template."""

TEMPLATE_VERSION = "v1"
"""The template version the judge uses unless told otherwise."""

_SOCIAL = frozenset({"join_group", "create_post", "send_dm"})
_ABSENT_ACTIONS = frozenset({
    "comments_made", "mentions_given", "research_actions", "market_data_queries", "info_requests_sent",
    "group_messages_sent",
})
"""Metrics that count actions this world does not offer: a true 0, not a missing value."""

_ALL_METRICS: tuple[str, ...] = tuple(
    dict.fromkeys([f.name for f in fields(BehaviorMetrics)] + list(UNAVAILABLE_METRIC_VALUES)
                  + list(APPROXIMATED_METRICS) + ["action_success_rate"])
)


def sha256_text(text: str) -> str:
    """Hex sha256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    """The canonical JSON of a value (sorted keys, no spaces, no NaN): what hashes are taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class PromptTemplate:
    """One packaged template.

    Attributes:
        name: ``<mode>/<version>``, e.g. ``absolute/v1``.
        system, user: the two parts, with ``$name`` placeholders.
        sha256: hash of the file's text (enters every tape key).
    """

    name: str
    system: str
    user: str
    sha256: str


@functools.lru_cache(maxsize=16)
def load_template(mode: str, version: str = TEMPLATE_VERSION) -> PromptTemplate:
    """Read a packaged template (cached).

    Raises:
        ValueError: an unknown mode, or a template file without its two parts.
        FileNotFoundError: no such version is packaged.
    """
    if mode not in MODES:
        raise ValueError(f"unknown judge mode {mode!r}; expected one of {MODES}")
    text = resources.files("rlaif_gym.llm_judge").joinpath("templates", f"{mode}.{version}.md").read_text("utf-8")
    head, sep, rest = text.partition("### system\n")
    system, sep2, user = rest.partition("\n### user\n")
    if not sep or not sep2 or head.strip():
        raise ValueError(f"template {mode}.{version}.md must be '### system' then '### user' sections")
    return PromptTemplate(f"{mode}/{version}", system.strip(), user.strip(), sha256_text(text))


def priority_weights(names: tuple[str, ...]) -> dict[str, float]:
    """The harmonic weights 1/(i+1), normalised to sum to 1, of an ordered priority list."""
    raw = [1.0 / (i + 1) for i in range(len(names))]
    total = math.fsum(raw)
    return {name: w / total for name, w in zip(names, raw, strict=True)}


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def trajectory_metrics(trajectory: Trajectory) -> dict[str, float | None]:
    """Every behaviour metric name -> its value from the recorded steps, or None if not recorded.

    Units follow ``BehaviorMetrics``: USD for money, counts, fractions for rates. ``max_drawdown``
    is the largest fall of equity from its running peak over the episode, in USD (equity before each
    step, then the final equity). ``action_success_rate`` is the fraction of steps whose action
    succeeded.
    """
    actions = [s.action for s in trajectory.steps if s.action is not None]
    ok = [a for a in actions if a.success]
    trades = [a for a in ok if a.action_type in TRADE_TYPES]
    social = [a for a in ok if a.action_type in _SOCIAL]
    markets = {str(a.parameters.get("market") or a.parameters.get("ticker") or "") for a in trades} - {""}
    sizes = [float(v) for a in trades if a.action_type in ("buy_prediction", "open_perp")
             for v in [a.parameters.get("amount", a.parameters.get("size"))] if isinstance(v, (int, float))]
    recipients = {str(a.parameters.get("recipient")) for a in ok if a.action_type == "send_dm"}
    ticks = len(trajectory.steps)
    equity = [s.environment_state.agent_balance for s in trajectory.steps]
    if trajectory.final_balance is not None:
        equity.append(trajectory.final_balance)
    drawdown = 0.0
    peak = -math.inf
    for e in equity:
        peak = max(peak, e)
        drawdown = max(drawdown, peak - e)
    values: dict[str, float | None] = dict.fromkeys(_ALL_METRICS)
    values.update({
        "total_pnl": trajectory.final_pnl,
        "trades_executed": float(len(trades)),
        "markets_traded": float(len(markets)),
        "avg_position_size": math.fsum(sizes) / len(sizes) if sizes else 0.0,
        "group_chats_joined": float(sum(a.action_type == "join_group" for a in ok)),
        "dms_initiated": float(sum(a.action_type == "send_dm" for a in ok)),
        "posts_created": float(sum(a.action_type == "create_post" for a in ok)),
        "unique_users_interacted": float(len(recipients)),
        "predictions_made": float(sum(a.action_type == "buy_prediction" for a in ok)),
        "episode_length": float(ticks),
        "actions_per_tick": (len(trades) + len(social)) / max(ticks, 1),
        "social_to_trade_ratio": len(social) / len(trades) if trades else float(len(social)),
        "action_success_rate": len(ok) / len(actions) if actions else None,
        "max_drawdown": drawdown if equity else None,
    })
    values.update(dict.fromkeys(_ABSENT_ACTIONS, 0.0))
    return values


def _step_view(step: Any, reasoning_chars: int) -> dict[str, Any]:
    action = step.action
    text = (action.reasoning if action is not None else None) or ""
    view: dict[str, Any] = {
        "tick": step.step_number,
        "action": action.action_type if action is not None else None,
        "parameters": dict(action.parameters) if action is not None else {},
        "succeeded": bool(action.success) if action is not None else False,
        "error": action.error if action is not None else None,
        "equity_change_usd": _round(step.feedback.pnl_delta if step.feedback else 0.0, 2),
    }
    if not text:  # an unparsable reply: show what the agent wrote instead
        calls = [c for c in step.llm_calls if c.purpose == "action" and c.error is None]
        text = calls[-1].response if calls else ""
        view["reply_unparsed"] = True
    view["reasoning"] = text if len(text) <= reasoning_chars else text[:reasoning_chars] + " [...]"
    return view


def trajectory_data(trajectory: Trajectory, *, archetype: str, priority: tuple[str, ...], max_steps: int = 20,
                    reasoning_chars: int = 400, label: str | None = None) -> dict[str, Any]:
    """The trajectory slice the judge reads (see the module docstring); JSON-able and deterministic.

    Args:
        trajectory: the recorded episode.
        archetype: the archetype it is judged as (already normalised).
        priority: that archetype's ordered priority metrics.
        max_steps: the last this many steps are shown.
        reasoning_chars: each step's reasoning is cut to this many characters.
        label: the id the prompt gives it ("trajectory-1", "A"), for comparisons.
    """
    metrics = trajectory_metrics(trajectory)
    weights = priority_weights(priority)
    key_metrics = []
    for name in priority:
        lo, hi = metric_range(name)
        key_metrics.append({"name": name, "weight": round(weights[name], 3), "value": _round(metrics.get(name)),
                            "typical_range": [lo, hi]})
    others = {k: _round(v) for k, v in metrics.items() if k not in weights and v is not None}
    counts: Counter[str] = Counter()
    succeeded: Counter[str] = Counter()
    for step in trajectory.steps:
        kind = step.action.action_type if step.action is not None else "none"
        counts[kind] += 1
        succeeded[kind] += bool(step.action is not None and step.action.success)
    shown = trajectory.steps[-max_steps:] if max_steps > 0 else []
    data: dict[str, Any] = {}
    if label is not None:
        data["trajectory_id"] = label
    data.update({
        "archetype": archetype,
        "outcome": {
            "status": trajectory.final_status,
            "ticks": len(trajectory.steps),
            "final_pnl_usd": _round(trajectory.final_pnl, 2),
            "final_equity_usd": _round(trajectory.final_balance, 2),
        },
        "key_metrics": key_metrics,
        "other_metrics": others,
        "actions": {k: {"count": counts[k], "succeeded": succeeded[k], "failed": counts[k] - succeeded[k]}
                    for k in sorted(counts)},
        "steps_shown": f"last {len(shown)} of {len(trajectory.steps)}",
        "steps": [_step_view(s, reasoning_chars) for s in shown],
    })
    return data


def fences(data_json: str) -> tuple[str, str]:
    """The opening and closing fence lines around a data block (nonce: sha256 of the data)."""
    nonce = sha256_text(data_json)[:12]
    return f"<<<TRAJECTORY DATA {nonce}>>>", f"<<<END OF TRAJECTORY DATA {nonce}>>>"


def render_messages(template: PromptTemplate, *, archetype: str, rubric: str, data: Any,
                    labels: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """The chat messages of one judge call: [system, user].

    Args:
        template: the mode's template.
        archetype: shown in the prompt.
        rubric: the archetype's rubric text (Markdown).
        data: the JSON-able data block (one trajectory, a list, or {"A", "B"}).
        labels: the trajectory ids a listwise verdict must use.
    """
    data_json = json.dumps(data, ensure_ascii=False, separators=(", ", ": "), allow_nan=False)
    open_fence, close_fence = fences(data_json)
    values = {"archetype": archetype, "rubric": rubric.strip(), "open_fence": open_fence,
              "close_fence": close_fence, "data": data_json, "count": str(len(labels)),
              "labels": ", ".join(f'"{label}"' for label in labels)}
    return [{"role": "system", "content": string.Template(template.system).substitute(values)},
            {"role": "user", "content": string.Template(template.user).substitute(values)}]
