"""`FormatOnlyLLM`: an offline teacher of the reply's form and nothing of its side.

An SFT warm start copies its teacher. Copying `ScriptedLLM`, a well-weighted evidence aggregator, leaves
RL nothing to teach: a student that learns the side from the text lands at or below the teacher
(docs/trl.md). This teacher writes the canonical bet (one JSON action, no `<think>`) on the market the
feed talks most about, at a fixed share of cash, with the side drawn at random from the call's seed:
a model warm-started on it learns to answer in form and to bet, and learns nothing about which side
is right. Whatever RL adds on top of it is what the reward taught.

It reads only the prompt text (either prompt style), as a real model would; it waits only where there
is nothing to bet on (no open market, or less than $1 to bet).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..encoding.reply import canonical_reply
from .scripted import offline_completion
from .types import Completion, SamplingParams

__all__ = ["FormatOnlyLLM", "bet_reply"]

_OPEN_MARKET = re.compile(r"^- (market-\d+)\b.*?resolves in (\d+)h\.", re.M)
_CASH = re.compile(r"Cash (-?\$[\d,.]+)")
_MARKET_ID = re.compile(r"\bmarket-\d+\b")


def bet_reply(market: str, outcome: str, amount: float | None, think: str | None = None) -> str:
    """The canonical bet: `{"type": "buy_prediction", "market": ..., "outcome": ..., "amount": ...}` (amount in
    USD, rounded to cents; None: no amount, the bet of a task whose `fixed_stake` sets it), JSON only, or after a
    `<think>think</think>` block."""
    action = {"type": "buy_prediction", "market": market, "outcome": outcome}
    return canonical_reply(action if amount is None else {**action, "amount": round(amount, 2)}, think)


class FormatOnlyLLM:
    """Canonical bets whose side is a coin flip (see the module docstring).

    Args:
        fraction: the share of cash each bet stakes (0.05: 5 %).
        model: the name recorded in LLM-call records.
        writes_amount: False for a task whose `fixed_stake` rule sets the stake (the system prompt says to write
            no amount): the bet names its market and side only.
    """

    def __init__(self, fraction: float = 0.05, model: str = "format-only-v1", *, writes_amount: bool = True) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}; 0.05 stakes 5 % of cash")
        self.fraction = fraction
        self.model = model
        self.writes_amount = writes_amount

    def describe(self) -> dict[str, Any]:
        """Kind, model and bet size (nothing secret exists)."""
        return {"kind": "format-only", "model": self.model, "fraction": self.fraction,
                **({} if self.writes_amount else {"writes_amount": False})}

    def bet(self, prompt: str) -> tuple[str, float] | None:
        """(market, amount in USD) this teacher bets on at `prompt`, or None when there is nothing to bet on.

        The market is the open one the feed names most often (ties: the sooner to resolve, then the lower id);
        the amount is `fraction` of the cash the prompt shows. Neither depends on which side the feed favours."""
        opened = {m: int(h) for m, h in _OPEN_MARKET.findall(prompt) if int(h) > 0}
        cash = _CASH.search(prompt)
        amount = round(self.fraction * float(cash.group(1).replace("$", "").replace(",", "")), 2) if cash else 0.0
        if not opened or amount < 1.0:
            return None
        feed = prompt.split("## News", 1)[1] if "## News" in prompt else ""
        named = _MARKET_ID.findall(feed)
        market = min(opened, key=lambda m: (-named.count(m), opened[m], int(m.split("-")[1])))
        return market, amount

    def decide(self, prompt: str, rng: np.random.Generator) -> str:
        """The reply to `prompt`: a bet with the side drawn from `rng`, or a JSON wait with nothing to bet on."""
        bet = self.bet(prompt)
        if bet is None:
            return canonical_reply({"type": "wait"})
        return bet_reply(bet[0], "YES" if rng.random() < 0.5 else "NO", bet[1] if self.writes_amount else None)

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        """Answer the last user message; the side comes from `params.seed` (0 when unset)."""
        prompt = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        text = self.decide(prompt, np.random.default_rng(params.seed if params.seed is not None else 0))
        return offline_completion(text, messages, self.model)
