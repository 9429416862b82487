"""Decision points: the states of `RLAIF-Text-v0` where one reply decides something a reward can see.

An episode's first prompt has no news, posts or tips ("(none yet)"), and most ticks offer nothing to
act on, so GRPO groups started there have no reward variance: every reply scores the same. A
*decision point* is a tick where an open market resolves within `resolves_within` ticks and the
prompt's news, group tips or NPC posts name it (`min_evidence` items or more): the reply can bet on
it, on the side the evidence points to or the other, or let it pass, and the return (with
`reward_mark="truth"`) tells those apart at once.

`decision_points(seeds, ...)` finds them by playing each seed's episode with the offline scripted
model (`ScriptedLLM`, greedy) from `reset(seed)`: from a tick drawn per point (seeded by the episode's
seed, so the same seeds give the same points), the first tick whose prompt qualifies. Each point
carries the trunk's replies from the reset to that tick (so it can be rebuilt as data: a seed and
replies, as the verifiers adapter stores forks), its `EnvSnapshot` (for `set_state`, or as bytes for a
dataset row), the prompt and the qualifying markets. Train and held-out sets come from disjoint seed
ranges (`TRAIN_SEEDS`, `HELD_OUT_SEEDS`).

A search plays up to `num_ticks` ticks per seed, and options that never qualify play them
all: a caller that serves other people's requests bounds it with `max_ticks_searched`, `deadline` and
`cancel` (the OpenEnv server does, docs/openenv.md), and gets a `SearchLimitError` past them.

`score_decision_replies(points, replies)` is the one scoring of a reply at a point: played, then clean waits
to the point's `resolution_horizon`, minus a clean wait's return on the same state (`DecisionReply`). The TRL
example, `evaluate_decisions` and `rlaif-gym eval` (`rlaif_gym.evals`) all score through it.

It plays the text env and the scripted model, nothing else.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..config import RLAIFEnvConfig
from ..encoding.prompt import render_prompt, shown_feedback
from ..encoding.reply import canonical_reply
from ..encoding.view import mirror_view
from ..errors import ConfigError, SearchCancelled, SearchLimitError
from ..llm.scripted import ScriptedLLM
from .glue import decode_reply
from .inputs import MAX_SEED, check_config, check_int, check_seeds
from .snapshot import EnvSnapshot
from .text_env import RLAIFTextEnv, text_system_prompt

__all__ = ["DECISION_WORLD", "HELD_OUT_SEEDS", "TRAIN_SEEDS", "WAIT_REPLY", "DecisionPoint", "DecisionReply",
           "decision_messages", "decision_points", "evidence_counts", "mirror_reply", "mirrored_prompt",
           "score_decision_replies"]

TRAIN_SEEDS = range(0, 1_000_000)
"""Seeds for training sets; the held-out ranges below never overlap them."""
HELD_OUT_SEEDS = (range(1_000_000, 2_000_000), range(2_000_000, 3_000_000))
"""Two disjoint held-out seed ranges: claims about learning are measured on both."""
DECISION_WORLD: dict[str, Any] = {
    "num_markets": 2, "num_perps": 1, "num_npcs": 4, "num_groups": 1, "market_duration_min": 2,
    "market_duration_max": 4, "news_rate": 1.0, "num_ticks": 48, "reward_mark": "truth",
}
"""`RLAIFEnvConfig` overrides of a small world made for decision points: 2 markets that resolve within 2-4
ticks and news every tick, so most ticks qualify; 48-tick episodes (the form terms' 1/num_ticks scale: a
malformed reply costs 0.0026); the mark-to-truth training reward. The GRPO example and the tests use it."""
_SIDE_WORD = re.compile(r"\b(?:YES|NO)\b")  # a side, as a feedback line names it (outcome=YES)
WAIT_REPLY = canonical_reply({"type": "wait"}, "Nothing here is worth more than its price to me now, so I wait.")
"""The continuation policy's reply after a single decision: a clean wait, the same for every member."""


@dataclass(frozen=True)
class DecisionPoint:
    """A state where one reply decides a bet (see the module docstring).

    Attributes:
        seed: the reset seed of the episode it comes from.
        tick: ticks played before it (the reply it asks for is that tick's).
        replies: the trunk's replies from `reset(seed)` to here, one per tick (replaying them gives the state).
        markets: the qualifying markets: (market id, ticks until it resolves, feed items naming it), the most
            talked-about first.
        prompt: the prompt the reply answers.
        snapshot: the env state (`RLAIFTextEnv.set_state`; `snapshot.to_bytes()` for a dataset row).
    """

    seed: int
    tick: int
    replies: tuple[str, ...]
    markets: tuple[tuple[str, int, int], ...]
    prompt: str
    snapshot: EnvSnapshot

    @property
    def config(self) -> RLAIFEnvConfig:
        """The env config of the episode."""
        return self.snapshot.config

    @property
    def market(self) -> str:
        """The most talked-about qualifying market."""
        return self.markets[0][0]

    @cached_property
    def resolution_horizon(self) -> int:
        """Ticks from here until every market open at this point has resolved (>= 1), the reply's own tick first.

        A rollout this long credits any bet the reply can make at the outcome the world drew, which is what the
        feed is written from; a shorter one leaves bets open at its end, and `reward_mark="truth"` then pays
        them at the hidden p*, which nothing in the prompt predicts (docs/reward.md). Capped by the ticks left
        in the episode."""
        view = self.env().view
        return max(1, min(max((m.resolves_in for m in view.markets), default=1), view.num_ticks - view.tick))

    def env(self) -> RLAIFTextEnv:
        """A text env at this state."""
        env = RLAIFTextEnv(self.config)
        env.set_state(self.snapshot)
        return env

    @cached_property
    def mirrored_prompt(self) -> str:
        """The prompt of this tick in the YES/NO mirror of the world (`encoding.view.mirror_view`: every market's
        prices, holdings and feed items with YES and NO swapped; the last action's sides too), for a training set
        that shows each point as itself or as its mirror. Its better side is the other one: buying YES there
        earns what buying NO earns here. It renders the env's own view, so it holds nothing the prompt lacks."""
        env = self.env()
        if env.prompt != self.prompt:
            raise ValueError(f"the point of seed {self.seed} at tick {self.tick}: its prompt is not its state's "
                             "rendering (a point rebuilt with another prompt?), so it has no mirror")
        return mirrored_prompt(env)


def mirrored_prompt(env: RLAIFTextEnv) -> str:
    """The prompt `env` shows now, in the YES/NO mirror of its world (`DecisionPoint.mirrored_prompt`)."""
    feedback, style = shown_feedback(env.prompt), env.config.prompt_style
    swapped = _SIDE_WORD.sub(lambda m: "NO" if m.group(0) == "YES" else "YES", feedback)
    return render_prompt(mirror_view(env.view), swapped, style)


_OUTCOME_FIELD = re.compile(r'("outcome"\s*:\s*")(YES|NO)(")')


def mirror_reply(reply: str) -> str:
    """A reply to a mirrored prompt as the same decision in the world itself: every canonical `"outcome": "YES"`
    becomes `"NO"` and the reverse (buying YES in the mirror is buying NO here; ids, amounts and text stay). A
    reply in another vocabulary (`"action": "buy_yes"`) is played as written: the mirror is a training device for
    replies in the canonical form, which the constraint (`encoding.grammar.tick_gbnf`) guarantees."""
    return _OUTCOME_FIELD.sub(lambda m: m.group(1) + ("NO" if m.group(2) == "YES" else "YES") + m.group(3), reply)


def evidence_counts(env: RLAIFTextEnv) -> dict[str, int]:
    """Feed items (news, visible group tips, NPC posts) in the current prompt that name each market id (of the
    whole feed for the full prompt style, of what it shows for the compact one: `RLAIFTextEnv.shown_view`)."""
    view = env.shown_view
    counts: dict[str, int] = {}
    for item in (*view.news, *view.tips, *view.posts):
        if item.subject.startswith("market-"):
            counts[item.subject] = counts.get(item.subject, 0) + 1
    return counts


def _qualifying(env: RLAIFTextEnv, resolves_within: int, min_evidence: int) -> tuple[tuple[str, int, int], ...]:
    counts = evidence_counts(env)
    found = [(m.market_id, m.resolves_in, counts.get(m.market_id, 0)) for m in env.view.markets
             if 0 < m.resolves_in <= resolves_within and counts.get(m.market_id, 0) >= min_evidence]
    return tuple(sorted(found, key=lambda x: (-x[2], x[1], x[0])))


def decision_points(seeds: Iterable[int], config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *,
                    resolves_within: int = 12, min_evidence: int = 1, min_tick: int = 2, per_seed: int = 1,
                    horizon: int = 1, max_ticks_searched: int | None = None, deadline: float | None = None,
                    cancel: threading.Event | None = None) -> list[DecisionPoint]:
    """Up to `per_seed` decision points from each seed's episode (see the module docstring).

    Args:
        seeds: reset seeds (take them from `TRAIN_SEEDS` for training, `HELD_OUT_SEEDS` for evaluation), integers
            in [0, 2**63 - 1] (checked as `reset` checks a seed: `rlaif_gym.envs.inputs`).
        config: the env config (a mapping of overrides, its JSON text or an `RLAIFEnvConfig`).
        resolves_within: a qualifying market resolves within this many ticks of the point, >= 1.
        min_evidence: at least this many feed items of the prompt name it, >= 0.
        min_tick: no point before this tick (the first prompts have no feed yet), >= 0.
        per_seed: points per episode, at distinct ticks (fewer when the episode has fewer), >= 1.
        horizon: ticks a rollout from the point will play; a point leaves at least that many in the episode, >= 1.
        max_ticks_searched: the most ticks the search may play, over all seeds (None: no cap). A seed whose drawn
            start tick alone is past what is left is refused before a tick of it is played.
        deadline: a `time.monotonic()` instant (seconds) the search must end by (None: none), checked every tick.
        cancel: an event another thread sets to stop the search at its next tick (None: not cancellable).

    Returns:
        The points, by seed then tick.

    Raises:
        ConfigError: a seed, option or config of the wrong type or out of range (the message names it).
        SearchLimitError: the search reached `max_ticks_searched` or `deadline` (nothing is returned).
        SearchCancelled: `cancel` was set.
    """
    seeds = check_seeds(seeds, "decision_points seeds")
    cfg = check_config(config, "decision_points config")
    resolves_within = check_int(resolves_within, "decision_points resolves_within", low=1)
    min_evidence = check_int(min_evidence, "decision_points min_evidence", low=0)
    min_tick = check_int(min_tick, "decision_points min_tick", low=0)
    per_seed = check_int(per_seed, "decision_points per_seed", low=1)
    horizon = check_int(horizon, "decision_points horizon", low=1)
    budget = None if max_ticks_searched is None else check_int(
        max_ticks_searched, "decision_points max_ticks_searched", low=1, high=MAX_SEED)
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float))):
        raise ConfigError(f"decision_points deadline must be a time.monotonic() instant in seconds or None, got "
                          f"{type(deadline).__name__}; pass time.monotonic() + 10 for a 10 s search")
    if cancel is not None and not callable(getattr(cancel, "is_set", None)):
        raise ConfigError(f"decision_points cancel must be a threading.Event or None, got {type(cancel).__name__}")
    last = cfg.num_ticks - horizon  # the latest tick that leaves `horizon` ticks to play
    if last < min_tick:
        raise ConfigError(f"an episode of num_ticks={cfg.num_ticks} leaves no tick in [{min_tick}, {last}] for a "
                          f"horizon of {horizon}; lower min_tick or horizon, or raise num_ticks")
    model = ScriptedLLM()
    points: list[DecisionPoint] = []
    searched = 0  # ticks played, over all seeds
    for seed in seeds:
        rng = np.random.default_rng([seed, 28])
        starts = sorted(set(rng.integers(min_tick, last + 1, size=per_seed).tolist()))
        if budget is not None and searched + starts[0] > budget:
            raise SearchLimitError(
                f"the decision search of seed {seed} starts at tick {starts[0]} (drawn from the seed in [{min_tick}, "
                f"{last}]), past the {budget:,} ticks it may play ({searched:,} played already); lower num_ticks "
                f"(now {cfg.num_ticks:,}) so the start is drawn earlier, or try another seed", "ticks", searched)
        env = RLAIFTextEnv(cfg)
        prompt, _ = env.reset(seed=seed)
        replies: list[str] = []
        taken = 0
        for t in range(last + 1):
            if taken < len(starts) and t >= starts[taken]:
                markets = _qualifying(env, resolves_within, min_evidence)
                if markets:
                    points.append(DecisionPoint(seed, t, tuple(replies), markets, prompt, env.get_state()))
                    taken += 1
                    while taken < len(starts) and starts[taken] <= t:
                        taken += 1  # one point per tick
                    if taken == len(starts):
                        break
            _check_bounds(seed, searched, budget, deadline, cancel)
            reply = model.reply(prompt)
            prompt, _, terminated, truncated, _ = env.step(reply)
            replies.append(reply)
            searched += 1
            if terminated or truncated:
                break
    return points


def _check_bounds(seed: int, searched: int, budget: int | None, deadline: float | None,
                  cancel: threading.Event | None) -> None:
    """Raise when the search may not play another tick: cancelled, at its cap or past its deadline."""
    if cancel is not None and cancel.is_set():
        raise SearchCancelled(f"the decision search was cancelled after {searched:,} ticks (seed {seed})", "cancelled",
                              searched)
    if budget is not None and searched >= budget:
        raise SearchLimitError(
            f"the decision search played its cap of {budget:,} ticks (seed {seed}) without finding the points asked "
            "for; options that rarely qualify (a large min_evidence, a small resolves_within) search the whole "
            "episode: relax them, lower num_ticks, or try another seed", "ticks", searched)
    if deadline is not None and time.monotonic() > deadline:
        raise SearchLimitError(
            f"the decision search ran past its deadline after {searched:,} ticks (seed {seed}) without finding the "
            "points asked for: relax the options (a smaller min_evidence, a larger resolves_within), lower "
            "num_ticks, or try another seed", "deadline", searched)


# -- one reply at a point, scored ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionReply:
    """One sampled reply at a decision point, and what it was worth.

    Attributes:
        point: index of its decision point.
        reply: the decoded reply.
        format_valid: the reply parsed without a format error.
        executed: it held an action the world executed.
        side: +1 if it bought the side the hidden truth favours in the market it bought (p* above the YES
            price: YES), -1 the other side, 0 for anything else.
        gain: its return over the horizon minus that of a clean wait (`WAIT_REPLY`) from the same state,
            under the point's config (over a horizon that reaches the market's resolution, the bet's value at
            the drawn outcome; over a shorter one with `reward_mark="truth"`, partly its value at p*).
        outcome_side: +1 if it bought the side the market resolves to (the outcome the world drew, which the
            feed is written from), -1 the other side, 0 for anything else.
    """

    point: int
    reply: str
    format_valid: bool
    executed: bool
    side: int
    gain: float
    outcome_side: int = 0


def _sides(env: RLAIFTextEnv, action: Mapping[str, Any] | None) -> tuple[int, int]:
    """(the bet's side against p*'s side of the price, against the drawn outcome): +1 right, -1 wrong, 0 no bet."""
    if not action or action.get("type") != "buy_prediction":
        return 0, 0
    view = env.view.market(str(action.get("market")))
    if view is None:
        return 0, 0
    truth = float(env.state.pm_truth[0, view.slot])
    favoured = "YES" if truth > view.yes_price else "NO"
    drawn = "YES" if int(env.state.pm_outcome[0, view.slot]) == 1 else "NO"
    return (1 if action.get("outcome") == favoured else -1), (1 if action.get("outcome") == drawn else -1)


def _horizon_return(point: DecisionPoint, reply: str, ticks: int | None,
                    ) -> tuple[float, dict[str, Any], tuple[int, int]]:
    """(return over `ticks` from the point after `reply` (None: its `resolution_horizon`), the first step's info,
    the reply's sides as `_sides` gives them)."""
    env = point.env()
    sides = (0, 0)
    total = 0.0
    first: dict[str, Any] = {}
    for t in range(point.resolution_horizon if ticks is None else ticks):
        if t == 0:
            parsed, _ = decode_reply(reply, env.state, env.params, think_required=env.judge.think_required,
                                     fixed_stake=env.config.fixed_stake)  # what the env's step reads
            sides = _sides(env, parsed.action.to_dict() if parsed.action else None)
        _, reward, terminated, truncated, info = env.step(reply if t == 0 else WAIT_REPLY)
        total += reward
        first = first or info
        if terminated or truncated:
            break
    return total, first, sides


def score_decision_replies(points: Sequence[DecisionPoint], replies: Sequence[tuple[int, str]], *,
                           ticks: int | None = None) -> list[DecisionReply]:
    """Each `(point index, reply)` played at its point and scored against a clean wait on the same state.

    The one scoring of single decisions: `evaluate_decisions` sends a model's sampled replies here, and a
    scripted policy's replies (a teacher, a baseline) come here directly, so every column of a
    `decision_table` is scored alike.

    Args:
        points: the decision points.
        replies: (index into `points`, the reply text), in any order and number per point.
        ticks: the horizon: the reply's tick, then a clean wait for the rest; None (the default) plays each
            point to its `resolution_horizon`, so every bet is paid at the outcome the world drew.
    """
    waits: dict[int, float] = {}
    out = []
    for i, reply in replies:
        if i not in waits:
            waits[i] = _horizon_return(points[i], WAIT_REPLY, ticks)[0]
        ret, info, (side, outcome_side) = _horizon_return(points[i], reply, ticks)
        executed = info["parsed_action"] is not None and bool(info["feedback"]["success"])
        out.append(DecisionReply(i, reply, not info["format_errors"], executed, side if executed else 0,
                                 ret - waits[i], outcome_side if executed else 0))
    return out


def decision_messages(point: DecisionPoint, *, mirrored: bool = False) -> list[dict[str, str]]:
    """The chat messages a model answers at `point`: the text env's system prompt (of the point's prompt style)
    and the point's prompt (its `mirrored_prompt` with `mirrored=True`)."""
    return [{"role": "system", "content": text_system_prompt(point.config)},
            {"role": "user", "content": point.mirrored_prompt if mirrored else point.prompt}]
