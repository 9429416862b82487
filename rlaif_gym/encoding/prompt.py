"""Prompt rendering for the text face: a `TickView` becomes one compact, readable user message.

Deterministic: the same view gives the same text. Uses only printable ASCII plus the cent sign, so
every prompt lies inside the text observation space's charset. Prices print as cents with one
decimal (0.62 -> 62.0¢; the original printed 0.62 as "1¢").
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from importlib import resources

from ..sim import WorldParams
from .view import FeedItem, TickView

__all__ = ["PROMPT_CHARSET", "cents", "render_prompt", "system_prompt"]

PROMPT_CHARSET: str = string.ascii_letters + string.digits + string.punctuation + " \n" + "¢"
"""Every character a prompt may contain (the Text observation space's charset)."""

_MAX_FEED = 6  # items per feed section
FEEDBACK_CHARS = 1_000
"""The most characters of the "Last action" line a prompt shows (it may quote what the reply sent)."""


def cents(p: float) -> str:
    """A 0..1 price as cents with one decimal: 0.62 -> "62.0¢"."""
    return f"{100.0 * p:.1f}¢"


def _usd(x: float) -> str:
    return f"-${-x:,.2f}" if x < 0 else f"${x:,.2f}"


@lru_cache(maxsize=1)
def _system_template() -> str:
    """The packaged system-prompt template, read once per process (every env of a collection uses it)."""
    return resources.files("rlaif_gym.encoding").joinpath("prompts/policy_system.txt").read_text()


def system_prompt(params: WorldParams) -> str:
    """The system prompt: the world's rules and the reply format, with one example."""
    template = _system_template()
    return template.format(max_leverage=f"{params.max_leverage:g}", funding_interval=params.funding_interval)


def _direction(item: FeedItem) -> str:
    if item.kind in ("leak", "announcement"):
        return "UP" if item.direction > 0 else "DOWN"
    return "YES" if item.direction > 0 else "NO"


def _news_line(item: FeedItem) -> str:
    if item.kind == "news":
        return f"- [t{item.tick}] {item.source}: {item.subject} is expected to resolve {_direction(item)}"
    if item.kind == "leak":
        return f"- [t{item.tick}] rumour: insiders whisper that {item.subject} is about to move {_direction(item)}"
    return f"- [t{item.tick}] ANNOUNCEMENT: {item.subject} moved {_direction(item)} on breaking news"


def render_prompt(view: TickView, last_feedback: str | None = None) -> str:
    """The user message for one tick.

    Args:
        view: what the agent may see now.
        last_feedback: one line about the previous action's result, or None at the first tick.
    """
    lines = [f"# Babylon market update: hour {view.tick} of {view.num_ticks} ({view.num_ticks - view.tick} left)", ""]
    lines.append("## Prediction markets (YES price = implied probability; a winning share pays $1.00)")
    for m in view.markets:
        held = ""
        if m.held_yes > 0:
            held += f" You hold {m.held_yes:,.1f} YES (cost {_usd(m.cost_yes)})."
        if m.held_no > 0:
            held += f" You hold {m.held_no:,.1f} NO (cost {_usd(m.cost_no)})."
        lines.append(
            f'- {m.market_id} "{m.question}": YES {cents(m.yes_price)}, NO {cents(1.0 - m.yes_price)}, '
            f"{100.0 * m.change:+.1f}¢ last hour, resolves in {m.resolves_in}h.{held}"
        )
    lines += ["", "## Perpetual futures"]
    for p in view.perps:
        pos = " No position."
        if p.side:
            pos = (f" Your position {p.position_id}: {p.side} {_usd(p.notional)} notional x{p.leverage:g} "
                   f"@ {p.entry:,.2f}, unrealized {_usd(p.unrealized)}, liquidation at {p.liquidation_price:,.2f}.")
        lines.append(f"- {p.ticker} ${p.price:,.2f} ({p.change_pct:+.2f}% last hour, {p.vs_average_pct:+.2f}% vs "
                     f"average), funding {p.funding_bp:+.1f}bp.{pos}")
    lines += [
        "",
        "## Portfolio",
        f"Cash {_usd(view.cash)} | Equity {_usd(view.equity)} | Realized PnL {_usd(view.realized_pnl)} | "
        f"Fees paid {_usd(view.fees_paid)} | Exposure {100.0 * view.exposure_ratio:.0f}% of equity",
        "",
        "## News (newest first)",
    ]
    lines += [_news_line(n) for n in view.news[:_MAX_FEED]] or ["- (none yet)"]
    lines += ["", "## Social feed (newest first)"]
    lines += [
        f'- [t{p.tick}] @{p.source} ({p.source_detail}): "{p.subject} is going {_direction(p)}"'
        for p in view.posts[:_MAX_FEED]
    ] or ["- (none yet)"]
    lines += ["", "## Group chats"]
    for name, joined in view.groups:
        if not joined:
            lines.append(f"- {name}: not joined (join_group to read its tips)")
            continue
        tips = [t for t in view.tips if t.source == name][:3]
        body = "; ".join(f"[t{t.tick}] tip: {t.subject} resolves {_direction(t)}" for t in tips) or "no tips yet"
        lines.append(f"- {name} (joined): {body}")
    feedback = last_feedback or "(none: this is the first hour)"
    if len(feedback) > FEEDBACK_CHARS:  # it may quote the reply: a prompt stays within its space whatever was sent
        feedback = feedback[:FEEDBACK_CHARS - 3] + "..."
    lines += ["", "## Last action", feedback]
    return _OUTSIDE_CHARSET.sub("?", "\n".join(lines))


_OUTSIDE_CHARSET = re.compile("[^" + re.escape(PROMPT_CHARSET) + "]")
