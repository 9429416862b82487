"""The baselines an eval plays on the model's own states: what a score means is how far it is from these.

* `wait`: the clean wait (`WAIT_REPLY`); every gain is measured against it, so its gain is 0 by construction.
* `teacher`: the offline scripted model (`ScriptedLLM`, greedy): a well-weighted evidence aggregator, in its own
  reply format (the same reply `--agent scripted` gives at temperature 0).
* `informed`: the simplest evidence rule, reading only what the prompt shows: on the market the feed names most
  (`FormatOnlyLLM.bet`), 5 % of cash on the side the feed items naming it point to (their +1/-1 summed), a wait
  on a tie.
* `truth`: the same bet on the side the market resolves to, read from the hidden outcome no prompt shows: the
  ceiling of these bets (no policy can reach it; it says how much a side is worth).

Outside the scorecard, `calibrated` is the same bet on the side of the feed items' log-odds, each weighted by its
source's true reliability (a news source's, a group's, and for a post its author's behaviour's `POST_HONESTY`, so a
deceiver's post counts against its side): what a reader that had learned every source from outcomes would bet. It
reads the prompt's items and the world's fixed constants, never the hidden outcome: the ceiling of a side learner
at the informed rule's market and size (docs/trl.md).

Reads the text env's view and hidden state through `rlaif_gym.envs.decisions`.
"""

from __future__ import annotations

import functools
import math

from ..envs.decisions import WAIT_REPLY, DecisionPoint
from ..envs.text_env import RLAIFTextEnv
from ..llm.format_teacher import FormatOnlyLLM, bet_reply
from ..llm.scripted import ScriptedLLM
from ..sim import GROUP_NAMES, NEWS_SOURCES, POST_HONESTY, WorldParams, npc_behaviours, npc_name

__all__ = ["BASELINES", "baseline_reply", "deceiver_on_market", "reply_at"]

BASELINES = ("wait", "teacher", "informed", "truth")
"""The baselines' names, in a scorecard's order."""
REFERENCES = ("calibrated",)
"""Replies `reply_at` also gives that no scorecard shows (see the module docstring)."""
BET_FRACTION = 0.05
"""The share of cash the informed and truth bets stake."""


def _bet_side(prompt: str, side: str | None, fraction: float, style: str) -> str:
    """The format-only teacher's bet on `side` ("YES"/"NO") at `prompt`, or the clean wait (no side, nothing to
    bet). A bare JSON action is canonical in the compact prompt style only; in the others the bet gets the
    `<think>` block the reply format asks for, so the baseline is never a format error."""
    bet = FormatOnlyLLM(fraction=fraction).bet(prompt)
    if bet is None or side is None:
        return WAIT_REPLY
    think = f"{bet[0]} resolves soon, so I stake {fraction:.0%} of my cash on {side}."
    return bet_reply(bet[0], side, bet[1], None if style == "compact" else think)


def _feed_side(prompt: str, env: RLAIFTextEnv, weights: dict[tuple[str, str], float] | None = None) -> str | None:
    """The side the shown feed items naming the bet's market point to, each +1/-1 times its (kind, source)'s weight
    in `weights` (None: 1 each; an item of a source not in `weights` counts 0), or None on a tie (or no bet)."""
    bet = FormatOnlyLLM(fraction=BET_FRACTION).bet(prompt)
    if bet is None:
        return None
    view = env.shown_view
    score = sum(item.direction * (1.0 if weights is None else weights.get((item.kind, item.source), 0.0))
                for item in (*view.news, *view.tips, *view.posts) if item.subject == bet[0])
    return "YES" if score > 0 else "NO" if score < 0 else None


@functools.lru_cache(maxsize=8)
def _source_log_odds(params: WorldParams) -> dict[tuple[str, str], float]:
    """The evidence weight of an item of each (kind, source): the log-odds of the source's true reliability (a news
    source's, a group's, a post author's behaviour's `POST_HONESTY`; a deceiver's is negative)."""
    reliability = {**{("news", name): r for name, r in NEWS_SOURCES}, **{("tip", name): r for name, r in GROUP_NAMES},
                   **{("post", npc_name(k)): POST_HONESTY[b] for k, b in enumerate(npc_behaviours(params))}}
    return {key: math.log(r / (1.0 - r)) for key, r in reliability.items()}


def _outcome_side(prompt: str, env: RLAIFTextEnv) -> str | None:
    """The side the bet's market resolves to (the hidden drawn outcome), or None when there is no bet."""
    bet = FormatOnlyLLM(fraction=BET_FRACTION).bet(prompt)
    market = None if bet is None else env.view.market(bet[0])
    if market is None:
        return None
    return "YES" if int(env.state.pm_outcome[0, market.slot]) == 1 else "NO"


def reply_at(name: str, prompt: str, env: RLAIFTextEnv, *, fraction: float = BET_FRACTION) -> str:
    """The reply baseline `name` (one of `BASELINES` or `REFERENCES`) gives to `prompt`, the prompt `env` shows now
    (the informed, calibrated and truth bets read the env's view and hidden state; they stake `fraction` of
    cash)."""
    if name == "wait":
        return WAIT_REPLY
    if name == "teacher":
        return ScriptedLLM().reply(prompt)
    if name == "informed":
        return _bet_side(prompt, _feed_side(prompt, env), fraction, env.config.prompt_style)
    if name == "calibrated":
        side = _feed_side(prompt, env, _source_log_odds(env.params))
        return _bet_side(prompt, side, fraction, env.config.prompt_style)
    if name == "truth":
        return _bet_side(prompt, _outcome_side(prompt, env), fraction, env.config.prompt_style)
    raise ValueError(f"unknown baseline {name!r}; the baselines are {', '.join(BASELINES + REFERENCES)}")


def deceiver_on_market(point: DecisionPoint) -> bool:
    """Whether a post by a deceiver NPC names the market of the informed rule's bet at `point`: where the naive
    feed majority and the calibrated rule part (the post counts for its side in one, against it in the other)."""
    bet = FormatOnlyLLM(fraction=BET_FRACTION).bet(point.prompt)
    if bet is None:
        return False
    env = point.env()
    liars = {npc_name(k) for k, b in enumerate(npc_behaviours(env.params)) if POST_HONESTY[b] < 0.5}
    return any(post.subject == bet[0] and post.source in liars for post in env.shown_view.posts)


def baseline_reply(name: str, point: DecisionPoint, *, fraction: float = BET_FRACTION) -> str:
    """The reply baseline `name` (one of `BASELINES` or `REFERENCES`) gives at `point`; the informed, calibrated and
    truth bets stake `fraction` of cash."""
    return reply_at(name, point.prompt, point.env(), fraction=fraction)
