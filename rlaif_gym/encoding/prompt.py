"""Prompt rendering for the text face: a `TickView` becomes one readable user message.

Two styles (`RLAIFEnvConfig.prompt_style`). "full" shows every section in detail under a system prompt
of the rules and every action. "compact" shows what a decision needs, for RL on small models: open
markets without their questions or NO prices, one short line per perp, cash and equity, and of the
feed items the full prompt shows only those about open markets and the perps (`shown_view`), under a
system prompt of at most 80 tokens. Both use the same section headers and line grammar, so every reader
of prompts (the scripted model, `TickIds.from_prompt`) reads both.

Deterministic: the same view gives the same text. Uses only printable ASCII plus the cent sign, so
every prompt lies inside the text observation space's charset. Prices print as cents with one
decimal (0.62 -> 62.0¢; the original printed 0.62 as "1¢").
"""

from __future__ import annotations

import dataclasses
import json
import re
import string
from functools import lru_cache
from importlib import resources

from ..errors import ConfigError
from ..sim import ACTION_SPECS, WorldParams
from .view import FeedItem, MarketView, PerpView, TickView

__all__ = ["LAST_ACTION", "PROMPT_CHARSET", "PROMPT_STYLES", "cents", "render_prompt", "shown_feedback", "shown_view",
           "stake_rule", "system_prompt"]

PROMPT_STYLES: tuple[str, ...] = ("full", "compact")
"""The prompt styles (`RLAIFEnvConfig.prompt_style`)."""
_SYSTEM_FILES = {"full": "policy_system.txt", "compact": "policy_system_compact.txt"}

PROMPT_CHARSET: str = string.ascii_letters + string.digits + string.punctuation + " \n" + "¢"
"""Every character a prompt may contain (the Text observation space's charset)."""

_MAX_FEED = 6  # items per feed section
_MAX_TIPS = 3  # tips per joined group chat
LAST_ACTION = "## Last action"
"""The heading of a prompt's last section, whose line says what the previous action did (both styles)."""
FEEDBACK_CHARS = 1_000
"""The most characters of the "Last action" line a prompt shows (it may quote what the reply sent)."""


def cents(p: float) -> str:
    """A 0..1 price as cents with one decimal: 0.62 -> "62.0¢"."""
    return f"{100.0 * p:.1f}¢"


def _usd(x: float) -> str:
    return f"-${-x:,.2f}" if x < 0 else f"${x:,.2f}"


def _check_style(style: str) -> None:
    if style not in PROMPT_STYLES:
        raise ConfigError(f"unknown prompt style {style!r}; expected one of {', '.join(map(repr, PROMPT_STYLES))}")


@lru_cache(maxsize=len(_SYSTEM_FILES))
def _system_template(style: str = "full") -> str:
    """The packaged system-prompt template of `style`, read once per process (every env of a collection uses it)."""
    return resources.files("rlaif_gym.encoding").joinpath(f"prompts/{_SYSTEM_FILES[style]}").read_text()


def system_prompt(params: WorldParams, style: str = "full", *, fixed_stake: float | None = None) -> str:
    """The system prompt: the world's rules and the reply format.

    "full": the rules in detail (leverage cap, funding interval, fees) and every action's example, with a
    worked reply. "compact": at most 80 tokens (SmolLM2's tokenizer; tests/encoding/test_compact_prompt.py
    counts them): the rules a decision needs, the buy and wait examples and the other trading types by
    name. It states no leverage cap (`TickIds` then admits any leverage; the engine still refuses one above
    `max_leverage`), and names neither `join_group` (each unjoined group's line in the prompt does) nor the
    social actions.

    `fixed_stake` (the config's task rule, a fraction of cash): the prompt states it (`stake_rule`, the sentence
    `TickIds.from_prompt` reads back), and the compact style's bet example leaves the amount out.
    """
    _check_style(style)
    template = _system_template(style)
    if style == "compact":
        text = template.rstrip("\n")  # the file's final newline would be one more token
        if fixed_stake is not None:
            text = text.replace(',"amount":50}', "}")
    else:
        text = template.format(max_leverage=f"{params.max_leverage:g}", funding_interval=params.funding_interval,
                               actions=_action_examples())
    return text if fixed_stake is None else f"{text}\n{stake_rule(fixed_stake)}"


def stake_rule(fraction: float) -> str:
    """The system prompt's sentence for the `fixed_stake` rule: "Every bet stakes 5% of cash; write no amount."."""
    return f"Every bet stakes {100 * fraction:g}% of cash; write no amount."


@lru_cache(maxsize=1)
def _action_examples() -> str:
    """The full system prompt's list of actions: each declared kind's example (`sim.ActionSpec.example`) as
    `json.dumps` writes it, one per line, with its unit's note aligned two columns after the longest line."""
    lines = [(json.dumps({"type": spec.name, **spec.example}), spec.unit) for spec in ACTION_SPECS]
    width = max(len(text) for text, _ in lines) + 2
    return "\n".join(f"  {text.ljust(width)}({unit})" if unit else f"  {text}" for text, unit in lines)


def shown_view(view: TickView, style: str = "full") -> TickView:
    """The part of `view` that a prompt of `style` shows, for checking a reply's claims against it.

    "full": `view` itself (the rule judge has always read the whole view, older feed items included).
    "compact": the open markets (resolving in at least one tick) and, of the feed items the full prompt
    shows (the 6 newest news items and posts, each joined group's 3 newest tips), those about an open
    market, plus the perps' rumours and announcements. The compact prompt therefore holds no feed item
    the full one lacks, and a reply that cites a resolved market's news cites something it was not shown.
    """
    _check_style(style)
    if style == "full":
        return view
    markets = tuple(m for m in view.markets if m.resolves_in > 0)
    live = {m.market_id for m in markets} | {p.ticker for p in view.perps}  # perps never resolve
    per_group: dict[str, int] = {}
    tips = []
    for t in view.tips:  # newest first, as the full prompt takes each group's first _MAX_TIPS
        per_group[t.source] = per_group.get(t.source, 0) + 1
        if per_group[t.source] <= _MAX_TIPS and t.subject in live:
            tips.append(t)
    return dataclasses.replace(
        view, markets=markets, news=tuple(n for n in view.news[:_MAX_FEED] if n.subject in live),
        posts=tuple(p for p in view.posts[:_MAX_FEED] if p.subject in live), tips=tuple(tips))


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


def _post_line(item: FeedItem) -> str:
    return f'- [t{item.tick}] @{item.source} ({item.source_detail}): "{item.subject} is going {_direction(item)}"'


def _held(m: MarketView) -> str:
    held = ""
    if m.held_yes > 0:
        held += f" You hold {m.held_yes:,.1f} YES (cost {_usd(m.cost_yes)})."
    if m.held_no > 0:
        held += f" You hold {m.held_no:,.1f} NO (cost {_usd(m.cost_no)})."
    return held


def _position(p: PerpView) -> str:
    if not p.side:
        return " No position."
    return (f" Your position {p.position_id}: {p.side} {_usd(p.notional)} notional x{p.leverage:g} "
            f"@ {p.entry:,.2f}, unrealized {_usd(p.unrealized)}, liquidation at {p.liquidation_price:,.2f}.")


def _group_lines(view: TickView, none: str) -> list[str]:
    lines = []
    for name, joined in view.groups:
        if not joined:
            lines.append(f"- {name}: not joined (join_group to read its tips)")
            continue
        tips = [t for t in view.tips if t.source == name][:_MAX_TIPS]
        body = "; ".join(f"[t{t.tick}] tip: {t.subject} resolves {_direction(t)}" for t in tips) or none
        lines.append(f"- {name} (joined): {body}")
    return lines


def _feedback_lines(last_feedback: str | None) -> list[str]:
    feedback = last_feedback or "(none: this is the first hour)"
    if len(feedback) > FEEDBACK_CHARS:  # it may quote the reply: a prompt stays within its space whatever was sent
        feedback = feedback[:FEEDBACK_CHARS - 3] + "..."
    return ["", LAST_ACTION, feedback]


def shown_feedback(prompt: str) -> str:
    """The last action's line as `prompt` (a `render_prompt` text) shows it: passed back as `last_feedback` with
    the same view, it renders the same prompt (so a prompt can be rendered again from a changed view)."""
    return prompt.partition(f"\n{LAST_ACTION}\n")[2]


def render_prompt(view: TickView, last_feedback: str | None = None, style: str = "full") -> str:
    """The user message for one tick.

    Args:
        view: what the agent may see now.
        last_feedback: one line about the previous action's result, or None at the first tick.
        style: "full" or "compact" (see the module docstring); "compact" renders `shown_view(view, "compact")`.
    """
    _check_style(style)
    if style == "compact":
        return _OUTSIDE_CHARSET.sub("?", "\n".join(_compact_lines(shown_view(view, style), last_feedback)))
    lines = [f"# Babylon market update: hour {view.tick} of {view.num_ticks} ({view.num_ticks - view.tick} left)", ""]
    lines.append("## Prediction markets (YES price = implied probability; a winning share pays $1.00)")
    for m in view.markets:
        lines.append(
            f'- {m.market_id} "{m.question}": YES {cents(m.yes_price)}, NO {cents(1.0 - m.yes_price)}, '
            f"{100.0 * m.change:+.1f}¢ last hour, resolves in {m.resolves_in}h.{_held(m)}"
        )
    lines += ["", "## Perpetual futures"]
    for p in view.perps:
        lines.append(f"- {p.ticker} ${p.price:,.2f} ({p.change_pct:+.2f}% last hour, {p.vs_average_pct:+.2f}% vs "
                     f"average), funding {p.funding_bp:+.1f}bp.{_position(p)}")
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
    lines += [_post_line(p) for p in view.posts[:_MAX_FEED]] or ["- (none yet)"]
    lines += ["", "## Group chats", *_group_lines(view, "no tips yet"), *_feedback_lines(last_feedback)]
    return _OUTSIDE_CHARSET.sub("?", "\n".join(lines))


def _compact_lines(view: TickView, last_feedback: str | None) -> list[str]:
    """The compact prompt's lines for a view that `shown_view` has already cut to what it shows."""
    lines = [f"# Babylon market update: hour {view.tick} of {view.num_ticks}", "", "## Prediction markets"]
    lines += [f"- {m.market_id}: YES {cents(m.yes_price)}, {100.0 * m.change:+.1f}¢ last hour, resolves in "
              f"{m.resolves_in}h.{_held(m)}" for m in view.markets]
    lines += ["", "## Perpetual futures"]
    lines += [f"- {p.ticker} ${p.price:,.2f} ({p.change_pct:+.2f}% last hour).{_position(p)}" for p in view.perps]
    lines += ["", "## Portfolio", f"Cash {_usd(view.cash)} | Equity {_usd(view.equity)}", "", "## News"]
    lines += [_news_line(n) for n in view.news] or ["- (none)"]
    lines += ["", "## Social feed"]
    lines += [_post_line(p) for p in view.posts] or ["- (none)"]
    return [*lines, "", "## Group chats", *_group_lines(view, "no current tips"),
            *_feedback_lines(last_feedback)]


_OUTSIDE_CHARSET = re.compile("[^" + re.escape(PROMPT_CHARSET) + "]")
