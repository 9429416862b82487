"""`RuleJudge`: deterministic AI-feedback scores for one reply, with no model and no I/O.

Design. The original's heuristics (docs/babylon.md ("The original's quality heuristics")) paid for
keywords: any reply that said "bullish", "exposure" and "profit" and was long enough scored well.
This judge keeps their ideas (format tags, reasoning that agrees with the action, a conclusion) but
pays only for things a reader can check against the tick the model saw:

* **grounding**: distinct facts the reasoning cites that are true in the prompt. Evidence (news
  sources, NPCs and group chats that said something about the market in question) counts 1 each;
  descriptive facts (market ids, prices within 1.5¢, tickers) count 1/2, so a reply that only
  restates a price is not "grounded" like one that weighs the news. False claims (a price no market
  shows, a source that never spoke about that market) cost more than true ones earn.
* **consistency**: the reasoning names what the action trades and argues for its direction. An
  `open_perp` SHORT or a NO buy is bearish; "buy YES because it is overpriced" is a contradiction.
  A wait must say why; "the evidence is mixed" while some market's news and tips all agree, and
  without citing any of them, is half-consistent (a boilerplate hold does not out-score a grounded
  trade, and a reasoned hold on really mixed evidence stays fine).
* **anti-gaming factors** that multiply the score: repeated sentences, low word variety, keyword
  density (stuffing), length beyond what the cited facts need (padding) and word 6-grams copied
  from the prompt. Keywords never earn points by themselves, so stuffing, repeating or pasting the
  prompt cannot beat a short, specific, honest rationale (tests/judge/test_rules.py).

Ranges: `format` in [-1, 1] (-1: no executable action; 1: canonical `<think>` + one JSON action);
`reasoning` in [0, 1]. Matching is on word boundaries throughout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from ..encoding.reply import ParsedReply
from ..encoding.view import TickView
from ..sim import NEWS_SOURCES

__all__ = ["JudgeVerdict", "RuleJudge"]

_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
_NON_WORD = re.compile(r"[^a-z0-9'-]+")
_SENTENCE = re.compile(r"(?<=[.!?;\n])\s+")
_MARKET_ID = re.compile(r"\bmarket-(\d+)\b", re.IGNORECASE)
# Prices: "41.0¢", "41c", "41 cents", "0.41", "$0.41"; and "41%", which may also mean a share of
# equity or a price move, so a percentage earns credit when it matches but is never called false.
_PRICE = re.compile(r"(?<![\w.$])(?:\$?(0?\.\d+)|(\d{1,3}(?:\.\d+)?)\s*(¢|c\b|cents?\b|%))", re.IGNORECASE)

_YES_WORDS = frozenset(
    [
        "yes",
        "likely",
        "underpriced",
        "undervalued",
        "cheap",
        "bullish",
        "up",
        "upside",
        "rise",
        "rising",
        "long",
        "buy",
        "win",
        "wins",
    ]
)
_NO_WORDS = frozenset(
    [
        "no",
        "unlikely",
        "overpriced",
        "overvalued",
        "expensive",
        "bearish",
        "down",
        "downside",
        "fall",
        "falling",
        "short",
        "lose",
        "loses",
    ]
)
_SOURCE_NAMES = frozenset(name for name, _ in NEWS_SOURCES)
_WAIT_WORDS = frozenset(
    ["wait", "waiting", "hold", "holding", "unclear", "uncertain", "mixed", "conflicting", "no-edge", "sideline"]
)
# "60.7¢ YES", "YES at 41¢", "YES near 27%": YES/NO used as a price label, not as an argument.
_PRICE_LABEL = re.compile(
    r"\d+(?:\.\d+)?\s*(?:¢|c\b|cents?\b|%)\s+(?:yes|no)\b|\b(?:yes|no)\s+(?:at|near|around|is at|trades at)\s+\$?\d",
    re.IGNORECASE,
)
# Searched in the lower-cased text; the look-ahead on the first letters skips most positions
# without trying every alternative (3x faster than IGNORECASE).
_CONCLUSION = re.compile(
    r"\b(?=[sthbwi])(?:so|therefore|thus|hence|because|since|which is why|i will|i'll|i buy|i sell|i open|"
    r"i close|i wait|i join|i short|i go long|buying|selling)\b"
)
_STUFF_WORDS = frozenset(
    [
        "bullish",
        "bearish",
        "buy",
        "sell",
        "long",
        "short",
        "risk",
        "exposure",
        "profit",
        "loss",
        "pnl",
        "momentum",
        "trend",
        "market",
        "price",
        "volume",
        "position",
        "funding",
        "probability",
        "sentiment",
        "support",
        "resistance",
        "breakout",
        "consolidation",
        "hedge",
        "upside",
        "downside",
        "opportunity",
        "analysis",
        "strategy",
    ]
)


@dataclass(frozen=True)
class JudgeVerdict:
    """Scores for one reply. `details` explains them (all floats, for logs and trajectories)."""

    format: float
    reasoning: float
    details: dict[str, float] = field(default_factory=dict)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _normalised(text: str) -> str:
    """Lower-case words joined by single spaces, padded, for whole-word substring search (the plain form of
    `_prompt_tokens`, kept as its reference)."""
    return " " + _NON_WORD.sub(" ", text.lower()).strip() + " "


_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789'-")
_KEEP = bytes(c if c in _WORD_BYTES else 32 for c in range(256))
"""bytes.translate table: a byte of a word ([a-z0-9'-]) stays, any other becomes a space."""
_FOLD_KEEP = bytes(c + 32 if 65 <= c <= 90 else _KEEP[c] for c in range(256))
"""As `_KEEP`, and A-Z become a-z (ASCII text only: that is all `str.lower` does to it)."""


def _prompt_tokens(prompt: str) -> list[str]:
    """The words of `_normalised(prompt)`, in order, for a fraction of the cost of its regex.

    Word bytes are kept and every other byte becomes a space in one `bytes.translate`. A prompt is ASCII
    but for the cent sign (a separator either way), so lower-casing is folded into the same table;
    other text is lower-cased by `str.lower` first (which can map a non-ASCII letter to an ASCII one).
    After lower-casing, a non-ASCII character is never a word character, and each of its UTF-8 bytes is
    >= 0x80, so it becomes spaces just as the regex makes it one.
    """
    plain = prompt.replace("¢", " ")
    if plain.isascii():
        raw = plain.encode("ascii").translate(_FOLD_KEEP)
    else:
        raw = prompt.lower().encode("utf-8", "surrogatepass").translate(_KEEP)
    return raw.decode("ascii").split()


@lru_cache(maxsize=16)
def _name_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """One alternation that finds any of `names` as a whole phrase (longest names first)."""
    alternatives = "|".join(re.escape(n.lower()) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")


@lru_cache(maxsize=256)
def _word_patterns(words: tuple[str, ...], before: str = r"\b", after: str = r"\b") -> tuple[re.Pattern[str], ...]:
    """Compiled whole-word patterns for lower-cased `words` (cached: the same tickers every tick)."""
    return tuple(re.compile(f"{before}{re.escape(w.lower())}{after}") for w in words)


@lru_cache(maxsize=16)
def _source_names(npcs: tuple[str, ...], groups: tuple[str, ...]):
    """Group names, every nameable source by its lower-case name, and one pattern that finds them."""
    npc_names = {n.split(" ", 1)[1] for n in npcs if " " in n}
    group_set = frozenset(groups)
    by_lower = {name.lower(): name for name in _SOURCE_NAMES | npc_names | group_set}
    return group_set, by_lower, _name_pattern(tuple(sorted(by_lower.values())))


def _one_sided(view: TickView) -> bool:
    """Whether some open market has at least two news items or tips about it, all pointing the same way."""
    open_ids = {m.market_id for m in view.markets if m.resolves_in > 0}
    seen: dict[str, set[int]] = {}
    count: dict[str, int] = {}
    for item in (*view.news, *view.tips):
        if item.subject in open_ids:
            seen.setdefault(item.subject, set()).add(item.direction)
            count[item.subject] = count.get(item.subject, 0) + 1
    return any(count[m] >= 2 and len(dirs) == 1 for m, dirs in seen.items())


def _candidate_grams(words: list[str], prompt: str, n: int) -> tuple[list[tuple[str, ...]], int, list[str]]:
    """(the reasoning's distinct word n-grams made only of prompt words, how many distinct n-grams it has, the
    prompt's words). With no candidate the count is not needed by any caller and is 0.

    Which words occur in the prompt is read first: unless `n` of them stand together somewhere, no
    n-gram can be a candidate, and the n-gram set (the costly part) is never built. That is nearly
    every honest reply."""
    if len(words) < n:
        return [], 0, []
    tokens = _prompt_tokens(prompt)
    vocabulary = set(words).intersection(tokens)  # the reasoning's words that the prompt has: all any gram needs
    run = 0
    for word in words:
        run = run + 1 if word in vocabulary else 0
        if run == n:
            break
    else:
        return [], 0, tokens
    grams = {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}
    return [g for g in grams if vocabulary.issuperset(g)], len(grams), tokens


def _copied_fraction(words: list[str], prompt: str, n: int = 6) -> float:
    """Share of the reasoning's word n-grams that appear verbatim in the prompt.

    An n-gram can only occur in the space-separated haystack (`_normalised(prompt)`) if each of its
    words is a whole word of the prompt, so the substring search runs only on those, and the haystack
    is joined only when one is left: same result, a fraction of the cost.
    """
    candidates, count, tokens = _candidate_grams(words, prompt, n)
    if not candidates:
        return 0.0
    haystack = " " + " ".join(tokens) + " "
    return sum(f" {' '.join(g)} " in haystack for g in candidates) / count


def _copying(words: list[str], prompt: str, n: int = 6, allowed: float = 0.2) -> float:
    """The copying factor: 1 while at most `allowed` of the n-grams are copied, else 1 - that share.

    The share of n-grams whose words all occur in the prompt bounds the copied share from above; when
    that bound is within `allowed` (nearly every honest reply), the factor is 1 without any substring
    search. Otherwise it is `_copied_fraction`'s exact share.
    """
    candidates, count, tokens = _candidate_grams(words, prompt, n)
    if len(candidates) <= allowed * count:
        return 1.0
    haystack = " " + " ".join(tokens) + " "
    overlap = sum(f" {' '.join(g)} " in haystack for g in candidates) / count
    return 1.0 if overlap <= allowed else max(0.0, 1.0 - overlap)


class RuleJudge:
    """Deterministic format and reasoning scores. Cheap to build; `score` is pure.

    Args:
        price_tolerance: a cited price counts as true within this many cents of a shown price.
        padding_words: words of reasoning that need no justification; beyond it, length must carry
            facts or the score shrinks.
    """

    def __init__(self, price_tolerance: float = 1.5, padding_words: int = 120, think_required: bool = True) -> None:
        self.price_tolerance = price_tolerance
        self.padding_words = padding_words
        self.think_required = think_required

    # -- format ---------------------------------------------------------------------------------

    def format_score(self, reply: ParsedReply) -> float:
        """-1 without an executable action; otherwise 1 minus deductions for each format problem. Where the
        prompt makes `<think>` optional (`think_required=False`), a bare JSON action is canonical: 1."""
        if reply.action is None:
            return -1.0
        score = 1.0
        bare = not self.think_required and reply.layout == "json" and not reply.reasoning
        if reply.layout != "think+json" and not bare:
            score -= 0.3
        if not reply.reasoning and not bare:
            score -= 0.3
        if not reply.think_closed:
            score -= 0.2
        score -= 0.15 * sum(1 for e in reply.errors if not e.startswith("legacy layout"))
        return max(-1.0, min(1.0, score))

    # -- reasoning ------------------------------------------------------------------------------

    def score(self, reply: ParsedReply, view: TickView, prompt: str = "") -> JudgeVerdict:
        """Score a parsed reply against the view (and prompt text) it answered."""
        fmt = self.format_score(reply)
        text = reply.reasoning
        words = _words(text)
        if len(words) < 3:
            return JudgeVerdict(fmt, 0.0, {"format": fmt, "words": float(len(words))})
        correct, wrong = self._facts(text, view)
        evidence = sum(1 for f in correct if f.startswith("source:"))
        cited = evidence + 0.5 * (len(correct) - evidence)
        grounding = max(0.0, min(1.0, cited / 3.0) - 0.25 * wrong)
        consistency, contradiction = self._consistency(reply, text, words, view, evidence)
        conclusion = 1.0 if _CONCLUSION.search(text.lower()) else 0.0
        base = 0.2 + 0.4 * grounding + 0.3 * consistency + 0.1 * conclusion

        sentences = [s.strip().lower() for s in _SENTENCE.split(text) if s.strip()]
        repetition = len(set(sentences)) / len(sentences) if sentences else 1.0
        variety = len(set(words)) / len(words)
        variety_factor = 1.0 if len(words) < 20 or variety >= 0.4 else variety / 0.4
        density = sum(map(_STUFF_WORDS.__contains__, words)) / len(words)
        stuffing = 1.0 if density <= 0.3 else 0.3 / density
        allowance = self.padding_words + 40 * len(correct)
        padding = 1.0 if len(words) <= allowance else (allowance / len(words)) ** 0.5
        copying = _copying(words, prompt) if prompt and len(words) >= 6 else 1.0
        factor = repetition * variety_factor * stuffing * padding * copying * (0.5 if contradiction else 1.0)
        reasoning = max(0.0, min(1.0, base * factor))
        return JudgeVerdict(
            fmt,
            reasoning,
            {
                "format": fmt,
                "grounding": grounding,
                "consistency": consistency,
                "conclusion": conclusion,
                "facts_correct": float(len(correct)),
                "facts_evidence": float(evidence),
                "facts_wrong": float(wrong),
                "contradiction": float(contradiction),
                "repetition": repetition,
                "variety": variety_factor,
                "stuffing": stuffing,
                "padding": padding,
                "copying": copying,
                "factor": factor,
                "words": float(len(words)),
            },
        )

    def _facts(self, text: str, view: TickView) -> tuple[set[str], int]:
        """Distinct true facts cited, and the number of false claims.

        A price is checked against the markets named in the same sentence (any market if the
        sentence names none). A named source (news outlet, NPC or group chat) must have spoken about
        a market or ticker the reasoning cites; naming a group chat without a tip is allowed only
        when the action joins it.
        """
        correct: set[str] = set()
        wrong = 0
        lower = text.lower()
        by_id = {m.market_id: m for m in view.markets}
        feed = (*view.news, *view.posts, *view.tips)
        cited_ids = {f"market-{n}" for n in _MARKET_ID.findall(text)}
        if cited_ids:
            subjects_shown = {f.subject for f in feed}  # a cited "market-N" is in it only as a market's subject
            for mid in cited_ids:
                if mid in by_id or mid in subjects_shown:
                    correct.add(mid)
                else:
                    wrong += 1
        every_price = [m.yes_price for m in view.markets] + [1.0 - m.yes_price for m in view.markets]
        # A price or a market id that a sentence holds is found in the whole text too (a sentence is a slice
        # of it, and the characters around a slice are whitespace, which the patterns' boundaries accept):
        # without one in the text, no sentence needs a look.
        sentences = _SENTENCE.split(text) if _PRICE.search(text) is not None else ()
        for sentence in sentences:
            named = [by_id[f"market-{n}"] for n in _MARKET_ID.findall(sentence) if f"market-{n}" in by_id] \
                if cited_ids else ()
            shown = [q for m in named for q in (m.yes_price, 1.0 - m.yes_price)] if named else every_price
            for dec, num, unit in _PRICE.findall(sentence):
                value = 100.0 * float(dec) if dec else float(num)
                near = [100.0 * q for q in shown if abs(100.0 * q - value) <= self.price_tolerance]
                if near:
                    correct.add(f"price:{near[0]:.1f}")
                elif 0 < value < 100 and unit != "%":
                    wrong += 1
        tickers = tuple(p.ticker for p in view.perps)
        # A whole-word match needs the word as a substring first (a cheap test that rules most out).
        correct.update(tickers[i] for i, pattern in enumerate(_word_patterns(tickers))
                       if tickers[i].lower() in lower and pattern.search(lower))
        subjects = cited_ids | {t for t in tickers if t in correct}
        groups, by_lower, pattern = _source_names(view.npcs, tuple(g for g, _ in view.groups))
        named_sources = {by_lower[m.group(0)] for m in pattern.finditer(lower)} \
            if any(n in lower for n in by_lower) else ()
        if not named_sources:
            return correct, wrong
        said: dict[str, set[str]] = {}  # what each source spoke about
        for f in feed:
            said.setdefault(f.source, set()).add(f.subject)
        for name in named_sources:
            spoken = said.get(name)
            if spoken and (not subjects or not spoken.isdisjoint(subjects)):
                correct.add(f"source:{name}")
            elif name in groups and not spoken:
                continue  # a group whose tips the agent cannot read yet: naming it claims nothing
            else:
                wrong += 1
        return correct, wrong

    def _consistency(self, reply: ParsedReply, text: str, words: list[str], view: TickView,
                     evidence: int = 0) -> tuple[float, bool]:
        """How well the reasoning argues for the action taken; and whether it argues against it.

        A wait is consistent when it says why it waits and, if some market's evidence is one-sided
        (`_one_sided`), engages with that evidence by citing a source: "the evidence is mixed, I hold"
        is true only when it is.
        """
        action = reply.action
        if action is None:
            return 0.0, False
        kind = action.type
        if kind == "wait":
            if not any(w in _WAIT_WORDS for w in words):
                return 0.5, False
            return (1.0 if evidence or not _one_sided(view) else 0.5), False
        target = {
            "buy_prediction": action.market,
            "sell_prediction": action.market,
            "open_perp": action.ticker,
            "close_perp": action.ticker or action.position_id,
            "join_group": action.group,
            "send_dm": action.recipient,
        }.get(kind)
        lower = text.lower()
        mentioned = bool(target) and str(target).lower() in lower and \
            _word_patterns((str(target),), r"(?<!\w)", r"(?!\w)")[0].search(lower)
        want = self._leaning(reply, view)
        if want == 0:
            return (1.0 if mentioned else 0.5), False
        # Direction words in the sentences about the target (or the whole text if it is never named).
        argument = _PRICE_LABEL.sub(" ", text)
        scope = None
        if mentioned:
            sentences = [s for s in _SENTENCE.split(argument) if str(target).lower() in s.lower()]
            scope = _words(" ".join(sentences))
        if not scope:
            scope = _words(argument)
        yes = sum(map(_YES_WORDS.__contains__, scope))
        no = sum(map(_NO_WORDS.__contains__, scope))
        lean = (yes > no) - (no > yes)
        agree = 1.0 if lean == want else (0.5 if lean == 0 else 0.0)
        return 0.5 * bool(mentioned) + 0.5 * agree, lean == -want

    @staticmethod
    def _leaning(reply: ParsedReply, view: TickView) -> int:
        """+1 if the action bets on YES/up, -1 on NO/down, 0 if it has no direction."""
        a = reply.action
        if a.type == "buy_prediction":
            return 1 if a.outcome == "YES" else -1
        if a.type == "sell_prediction":
            return -1 if a.outcome == "YES" else 1
        if a.type == "open_perp":
            return 1 if a.side == "LONG" else -1
        if a.type == "close_perp":
            held = next((p.side for p in view.perps if p.ticker == (a.ticker or "").upper()), None)
            return {"LONG": -1, "SHORT": 1}.get(held or "", 0)
        return 0
