"""`ScriptedLLM`: an offline, deterministic chat model that plays Babylon sensibly.

It reads only the chat messages (the prompt text, like a real model would; either prompt style), weighs the evidence
the prompt shows (news by source reliability, group-chat tips, posts by author reputation, perp
rumours), and writes a genuine reply in the canonical format: a `<think>` block that cites the ids,
prices and sources it relied on and argues for the action, then one JSON action. A run with no
model therefore still produces meaningful trajectories (good replies score well with the rule judge
and earn money), and tests and demos need no server.

With `temperature > 0` the per-call `seed` varies the trade size and the evidence threshold a
little, so the members of a GRPO group (same start state, different seeds) diverge. Optional
simulated latency (`latency_s`, `jitter_s`) lets benchmarks model a slow server without one.
"""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..encoding.reply import canonical_reply
from .types import Completion, SamplingParams

__all__ = ["Evidence", "ScriptedLLM"]

# The question and the NO price are optional: the compact prompt style shows neither.
_MARKET = re.compile(r'^- (market-\d+)(?: "(.*?)")?: YES ([\d.]+)¢(?:, NO ([\d.]+)¢)?.*?resolves in (-?\d+)h\.(.*)$',
                     re.M)
_HOLD = re.compile(r"You hold ([\d,.]+) (YES|NO)")
_NEWS = re.compile(r"^- \[t(\d+)\] (.+?): (market-\d+) is expected to resolve (YES|NO)$", re.M)
_LEAK = re.compile(r"^- \[t(\d+)\] rumour: insiders whisper that (\w+) is about to move (UP|DOWN)$", re.M)
_POST = re.compile(r'^- \[t(\d+)\] @(.+?) \(reputation (\d+)\): "(market-\d+) is going (YES|NO)"$', re.M)
_GROUP = re.compile(r"^- (.+?) \(joined\): (.*)$", re.M)
_NOT_JOINED = re.compile(r"^- (.+?): not joined", re.M)
_TIP = re.compile(r"\[t(\d+)\] tip: (market-\d+) resolves (YES|NO)")
_PERP = re.compile(r"^- ([A-Z]+) \$([\d,.]+) \(([+-][\d.]+)% last hour.*?\.( No position\.| Your position (pos-\d+): "
                   r"(LONG|SHORT) .*?unrealized (-?\$[\d,.-]+).*)$", re.M)
_CASH = re.compile(r"Cash (-?\$[\d,.]+) \| Equity (-?\$[\d,.]+)")
_HOUR = re.compile(r"hour (\d+) of (\d+)")

# Evidence weights: log-odds of each source's reliability as the system prompt describes them.
_SOURCE_WEIGHT = {"Reuters-AI": 1.1, "The Daily Pump": 0.4, "anonymous rumour": 0.16}
_GROUP_WEIGHT = {"Alpha Insiders": 1.4, "Whale Watchers": 0.85, "Degen Den": 0.4}


def offline_completion(text: str, messages: list[dict[str, str]], model: str) -> Completion:
    """An offline model's answer as a `Completion`; token counts are whitespace words (no tokenizer runs)."""
    prompt_tokens = sum(len(m.get("content", "").split()) for m in messages)
    completion_tokens = len(text.split())
    return Completion(text=text, model=model, finish_reason="stop", prompt_tokens=prompt_tokens,
                      completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens)


def _money(text: str) -> float:
    return float(text.replace("$", "").replace(",", ""))


@dataclass(frozen=True)
class Evidence:
    """One feed item the scripted model weighs for a market or a perp.

    Attributes:
        weight: signed log-odds weight: above 0 for YES (or a perp moving UP), below 0 for NO (DOWN); its size
            is the source's reliability as the scripted model reads it (news by source, tips by group, posts by
            author reputation).
        citation: how its reasoning cites the item, e.g. "Reuters-AI expects market-15 to resolve NO (t24)".
    """

    weight: float
    citation: str


class ScriptedLLM:
    """A deterministic offline chat model for Babylon prompts (see the module docstring).

    Args:
        model: the name recorded in LLM-call records.
        latency_s: simulated seconds per call (0: none).
        jitter_s: extra uniform random latency in [0, jitter_s], drawn from the call's seed.
    """

    def __init__(self, model: str = "scripted-babylon-v1", latency_s: float = 0.0, jitter_s: float = 0.0) -> None:
        self.model = model
        self.latency_s, self.jitter_s = latency_s, jitter_s

    def describe(self) -> dict[str, Any]:
        """Kind and model (nothing secret exists)."""
        return {"kind": "scripted", "model": self.model, "latency_s": self.latency_s, "jitter_s": self.jitter_s}

    async def complete(self, messages: list[dict[str, str]], params: SamplingParams) -> Completion:
        """Read the last user message and answer it."""
        rng = np.random.default_rng(params.seed if params.seed is not None else 0)
        if self.latency_s or self.jitter_s:
            await asyncio.sleep(self.latency_s + self.jitter_s * rng.random())
        prompt = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        explore = (params.temperature or 0.0) > 0
        return offline_completion(self.reply(prompt, rng if explore else None), messages, self.model)

    def reply(self, prompt: str, rng: np.random.Generator | None = None) -> str:
        """The reply text to one prompt, in the canonical layout: `<think>reasoning</think>` then the JSON action
        (what `complete` answers; `rng` adds exploration, None is fully greedy)."""
        think, action = self.decide(prompt, rng)
        return canonical_reply(action, think)

    def decide(self, prompt: str, rng: np.random.Generator | None = None) -> tuple[str, dict[str, Any]]:
        """(reasoning, action) for one prompt. `rng` adds exploration; None is fully greedy."""
        cash_m = _CASH.search(prompt)
        cash, equity = (_money(cash_m.group(1)), _money(cash_m.group(2))) if cash_m else (0.0, 0.0)
        not_joined = _NOT_JOINED.findall(prompt)
        if not_joined:
            group = not_joined[0]
            return (f"I am not in the {group} group chat yet. Group tips are the most reliable evidence in this "
                    f"world, so I join {group} before trading.", {"type": "join_group", "group": group})

        perps = {m.group(1): m for m in _PERP.finditer(prompt)}
        leaks: dict[str, list[Evidence]] = {}
        for tick, ticker, way in _LEAK.findall(prompt):
            leaks.setdefault(ticker, []).append(Evidence(1.0 if way == "UP" else -1.0,
                                                          f"a rumour at t{tick} says {ticker} will move {way}"))
        for ticker, m in perps.items():
            if m.group(5):  # an open position: close it once its rumours have gone quiet or turned
                side, pnl = m.group(6), m.group(7)
                support = sum(e.weight for e in leaks.get(ticker, []))
                if not leaks.get(ticker) or (support < 0) == (side == "LONG"):
                    why = "the rumours behind it have gone quiet" if not leaks.get(ticker) else "the rumours turned"
                    return (f"My {side} position {m.group(5)} on {ticker} shows unrealized {pnl}, and {why}. "
                            f"So I close {ticker} to lock in the move.", {"type": "close_perp", "ticker": ticker})
        for ticker, items in leaks.items():
            score = sum(e.weight for e in items)
            if abs(score) >= 2 and ticker in perps and not perps[ticker].group(5) and cash > 200:
                side = "LONG" if score > 0 else "SHORT"
                size = round(0.1 * equity, 2)
                cites = "; ".join(e.citation for e in items[:3])
                return (f"{ticker} trades at ${perps[ticker].group(2)}. Several leaks agree: {cites}. Leaks usually "
                        f"precede the move, so I open a {side} of ${size:,.0f} at 2x on {ticker}.",
                        {"type": "open_perp", "ticker": ticker, "side": side, "size": size, "leverage": 2})

        best: tuple[float, str, dict[str, Any]] | None = None
        near: tuple[float, str] | None = None  # the strongest case that did not clear the bar, cited when waiting
        threshold = 0.12 + (0.04 * rng.random() if rng else 0.0)
        for mid, question, yes, _no, resolves, rest in _MARKET.findall(prompt):
            yes_p = float(yes) / 100.0
            evidence = self.evidence(prompt, mid)
            if not evidence or int(resolves) <= 0:
                continue
            total = sum(e.weight for e in evidence)
            implied = 0.5 + 0.5 * math.tanh(0.6 * total)
            gap = implied - yes_p
            side = "YES" if gap > 0 else "NO"
            held = sum(float(q.replace(",", "")) for q, s in _HOLD.findall(rest) if s == side)
            price = yes_p if side == "YES" else 1.0 - yes_p
            if abs(gap) <= threshold or held * price > 0.12 * equity:
                if near is None or abs(gap) > near[0]:
                    why = (f", a gap of {100 * abs(gap):.0f} points, below the {100 * threshold:.0f} I need"
                           if abs(gap) <= threshold else f", but I already hold {held:,.0f} {side} shares")
                    near = (abs(gap), f"{mid} trades at {100 * yes_p:.1f}¢ YES. {evidence[0].citation[0].upper()}"
                                      f"{evidence[0].citation[1:]}, which puts YES near {100 * implied:.0f}%{why}.")
                continue
            if best is None or abs(gap) > best[0]:
                fraction = (0.08 if abs(gap) > 0.25 else 0.05) * (0.75 + 0.5 * rng.random() if rng else 1.0)
                amount = round(min(fraction * equity, 0.9 * cash), 2)
                if amount < 1:
                    continue
                cites = "; ".join(e.citation for e in evidence[:4])
                lean = "underpriced" if side == "YES" else "overpriced"
                named = f"{mid} ({question})" if question else mid
                think = (f"{named} trades at {100 * yes_p:.1f}¢ YES. The evidence: {cites}. Weighing it, "
                         f"I put YES near {100 * implied:.0f}%, so the market is {lean} and {side} has the edge. "
                         f"I buy {side} with ${amount:,.0f}, about {100 * amount / max(equity, 1):.0f}% of equity.")
                best = (abs(gap), think, {"type": "buy_prediction", "market": mid, "outcome": side, "amount": amount})
        if best:
            return best[1], best[2]
        if near:
            return f"{near[1]} No other market or rumour does better, so I wait.", {"type": "wait"}
        return ("No market shows a clear gap between the evidence and its price, and no rumour is strong enough to "
                "trade a perp. I wait and keep my cash.", {"type": "wait"})

    @staticmethod
    def evidence(prompt: str, market_id: str) -> list[Evidence]:
        """The feed items of `prompt` that name `market_id` and that the model weighs (posts by authors of
        reputation within 10 of 50 carry no weight and are left out), strongest first: what its bets follow from."""
        items: list[Evidence] = []
        for tick, source, mid, way in _NEWS.findall(prompt):
            if mid == market_id:
                w = _SOURCE_WEIGHT.get(source, 0.3)
                items.append(Evidence(w if way == "YES" else -w, f"{source} expects {mid} to resolve {way} (t{tick})"))
        for name, body in _GROUP.findall(prompt):
            for tick, mid, way in _TIP.findall(body):
                if mid == market_id:
                    w = _GROUP_WEIGHT.get(name, 0.5)
                    article = "an" if name[:1].lower() in "aeiou" else "a"
                    items.append(Evidence(w if way == "YES" else -w, f"{article} {name} tip says {way} (t{tick})"))
        for tick, author, rep, mid, way in _POST.findall(prompt):
            if mid == market_id:
                cred = (int(rep) - 50) / 50.0
                if abs(cred) >= 0.2:
                    items.append(Evidence(cred if way == "YES" else -cred,
                                           f"@{author} (reputation {rep}) says {way} (t{tick})"))
        return sorted(items, key=lambda e: -abs(e.weight))
