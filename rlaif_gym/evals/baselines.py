"""The baselines an eval plays on the model's own states: what a score means is how far it is from these.

* `wait`: the clean wait (`WAIT_REPLY`); every gain is measured against it, so its gain is 0 by construction.
* `teacher`: the offline scripted model (`ScriptedLLM`, greedy): a well-weighted evidence aggregator, in its own
  reply format (the same reply `--agent scripted` gives at temperature 0).
* `informed`: the simplest evidence rule, reading only what the prompt shows: on the market the feed names most
  (`FormatOnlyLLM.bet`), 5 % of cash on the side the feed items naming it point to (their +1/-1 summed), a wait
  on a tie.
* `truth`: the same bet on the side the market resolves to, read from the hidden outcome no prompt shows: the
  ceiling of these bets (no policy can reach it; it says how much a side is worth).

Layer L6 (evals): reads the text env's view and hidden state through `rlaif_gym.envs.decisions`.
"""

from __future__ import annotations

from ..envs.decisions import WAIT_REPLY, DecisionPoint
from ..llm.format_teacher import FormatOnlyLLM, bet_reply
from ..llm.scripted import ScriptedLLM

__all__ = ["BASELINES", "baseline_reply"]

BASELINES = ("wait", "teacher", "informed", "truth")
"""The baselines' names, in a scorecard's order."""
BET_FRACTION = 0.05
"""The share of cash the informed and truth bets stake."""


def _bet_side(point: DecisionPoint, side: str | None, fraction: float) -> str:
    """The format-only teacher's bet at `point` on `side` ("YES"/"NO"), or the clean wait (no side, nothing to bet)."""
    bet = FormatOnlyLLM(fraction=fraction).bet(point.prompt)
    return WAIT_REPLY if bet is None or side is None else bet_reply(bet[0], side, bet[1])


def _evidence_side(point: DecisionPoint) -> str | None:
    """The side the shown feed items naming the bet's market point to, or None on a tie (or no bet)."""
    bet = FormatOnlyLLM(fraction=BET_FRACTION).bet(point.prompt)
    if bet is None:
        return None
    view = point.env().shown_view
    score = sum(item.direction for item in (*view.news, *view.tips, *view.posts) if item.subject == bet[0])
    return "YES" if score > 0 else "NO" if score < 0 else None


def _outcome_side(point: DecisionPoint) -> str | None:
    """The side the bet's market resolves to (the hidden drawn outcome), or None when there is no bet."""
    bet = FormatOnlyLLM(fraction=BET_FRACTION).bet(point.prompt)
    if bet is None:
        return None
    env = point.env()
    return "YES" if int(env.state.pm_outcome[0, env.view.market(bet[0]).slot]) == 1 else "NO"


def baseline_reply(name: str, point: DecisionPoint, *, fraction: float = BET_FRACTION) -> str:
    """The reply baseline `name` (one of `BASELINES`) gives at `point`; the informed and truth bets stake `fraction`
    of cash."""
    if name == "wait":
        return WAIT_REPLY
    if name == "teacher":
        return ScriptedLLM().reply(point.prompt)
    if name == "informed":
        return _bet_side(point, _evidence_side(point), fraction)
    if name == "truth":
        return _bet_side(point, _outcome_side(point), fraction)
    raise ValueError(f"unknown baseline {name!r}; the baselines are {', '.join(BASELINES)}")
