"""A small, independent reader of the GBNF subset our grammar uses: parse, match and sample.

It reads the grammar *text* (the artifact the server receives), not the generator's internals, so a
test built on it checks what is actually sent. Supported: `name ::= expr` rules (one per line),
`#` comments, string literals with JSON escapes, character classes (ranges, `^`, `\\xNN` escapes),
rule references, groups, `|`, and the quantifiers `?`, `*`, `+`, `{m}`, `{m,}`, `{m,n}`. Rules may
not be recursive (ours describe a regular language), so a grammar compiles to one Python regex.

Sampling is adversarial: a repeated character class draws whole snippets that are known to upset
reply parsers ("</think>", "{", "```", quotes) whenever the class allows all their characters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

# Snippets a repeated character class may emit whole (when the class allows every character).
ADVERSARIAL = ("<think>", "</think>", "<thinking>", "<decisions>", "<decision action=\"buy\"/>", "{", "}",
               '{"type": "wait"}', '"', "\\", "```json", "```", "\n", "\t", " ", ":", ",", "é", "€", "中", "0", "-")
_POOL = [chr(c) for c in range(32, 127)] + ["\n", "\t", "é", "€", "中", "\x00", "\x1f"]
_OPEN_MAX = 4  # repetitions drawn for an open-ended quantifier (*, +, {m,})


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    negated: bool
    ranges: tuple[tuple[str, str], ...]

    def allows(self, ch: str) -> bool:
        inside = any(lo <= ch <= hi for lo, hi in self.ranges)
        return inside != self.negated


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple


@dataclass(frozen=True)
class Alt:
    options: tuple


@dataclass(frozen=True)
class Rep:
    node: object
    lo: int
    hi: int | None


class _Reader:
    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def skip(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def peek(self) -> str:
        self.skip()
        return self.s[self.i] if self.i < len(self.s) else ""

    def alt(self) -> object:
        options = [self.seq()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.seq())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def seq(self) -> object:
        items = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.quantified(self.atom()))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def atom(self) -> object:
        c = self.peek()
        if c == '"':
            decoder = json.JSONDecoder()
            value, end = decoder.raw_decode(self.s, self.i)
            self.i = end
            return Lit(value)
        if c == "[":
            return self.char_class()
        if c == "(":
            self.i += 1
            node = self.alt()
            assert self.peek() == ")", f"missing ) at {self.i} in {self.s!r}"
            self.i += 1
            return node
        m = re.compile(r"[a-zA-Z0-9-]+").match(self.s, self.i)
        assert m, f"unexpected {self.s[self.i:self.i + 20]!r}"
        self.i = m.end()
        return Ref(m.group())

    def char(self) -> str:
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return c
        nxt = self.s[self.i + 1]
        if nxt == "x":
            self.i += 4
            return chr(int(self.s[self.i - 2:self.i], 16))
        self.i += 2
        return {"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt)

    def char_class(self) -> Cls:
        self.i += 1
        negated = self.s[self.i] == "^"
        self.i += negated
        ranges = []
        while self.s[self.i] != "]":
            lo = self.char()
            if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                self.i += 1
                ranges.append((lo, self.char()))
            else:
                ranges.append((lo, lo))
        self.i += 1
        return Cls(negated, tuple(ranges))

    def quantified(self, node: object) -> object:
        while True:
            c = self.s[self.i] if self.i < len(self.s) else ""
            if c in ("?", "*", "+"):
                self.i += 1
                node = Rep(node, 1 if c == "+" else 0, 1 if c == "?" else None)
            elif c == "{":
                m = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.s, self.i)
                assert m, f"bad quantifier at {self.s[self.i:self.i + 10]!r}"
                self.i = m.end()
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                node = Rep(node, lo, hi)
            else:
                return node


def parse_gbnf(text: str) -> dict[str, object]:
    """The rules of a grammar, by name."""
    rules: dict[str, object] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, body = line.partition("::=")
        assert sep, f"not a rule: {line!r}"
        reader = _Reader(body)
        rules[name.strip()] = reader.alt()
        assert reader.peek() == "", f"trailing text in rule {name.strip()!r}: {body[reader.i:]!r}"
    return rules


def to_regex(rules: dict[str, object], start: str = "root") -> str:
    """The grammar as one Python regex (for `re.fullmatch(..., flags=re.DOTALL)`)."""

    def rx(node: object, stack: tuple[str, ...]) -> str:
        if isinstance(node, Lit):
            return re.escape(node.text)
        if isinstance(node, Cls):
            body = "".join(re.escape(lo) if lo == hi else f"{re.escape(lo)}-{re.escape(hi)}" for lo, hi in node.ranges)
            return f"[{'^' if node.negated else ''}{body}]"
        if isinstance(node, Ref):
            assert node.name in rules, f"undefined rule {node.name!r}"
            assert node.name not in stack, f"recursive rule {node.name!r}"
            return f"(?:{rx(rules[node.name], (*stack, node.name))})"
        if isinstance(node, Seq):
            return "".join(rx(n, stack) for n in node.items)
        if isinstance(node, Alt):
            return "(?:" + "|".join(rx(n, stack) for n in node.options) + ")"
        assert isinstance(node, Rep)
        return f"(?:{rx(node.node, stack)}){{{node.lo},{'' if node.hi is None else node.hi}}}"

    return rx(Ref(start), ())


def max_length(rules: dict[str, object], start: str = "root") -> int:
    """The longest string the grammar accepts, in characters (open-ended repetition is an error)."""

    def ml(node: object) -> int:
        if isinstance(node, Lit):
            return len(node.text)
        if isinstance(node, Cls):
            return 1
        if isinstance(node, Ref):
            return ml(rules[node.name])
        if isinstance(node, Seq):
            return sum(ml(n) for n in node.items)
        if isinstance(node, Alt):
            return max(ml(n) for n in node.options)
        assert isinstance(node, Rep) and node.hi is not None, "unbounded repetition"
        return node.hi * ml(node.node)

    return ml(Ref(start))


def sample(rules: dict[str, object], rng: np.random.Generator, start: str = "root", option: int | None = None) -> str:
    """One random string of the grammar. `option` fixes the alternative taken at the top of `start`."""

    pools: dict[Cls, tuple[list[str], list[str]]] = {}

    def cls_piece(node: Cls, budget: int) -> str:
        if node not in pools:
            pools[node] = ([s for s in ADVERSARIAL if all(node.allows(c) for c in s)],
                           [c for c in _POOL if node.allows(c)])
        snippets, allowed = pools[node]
        if rng.random() < 0.5:
            pick = snippets[int(rng.integers(len(snippets)))] if snippets else ""
            if pick and len(pick) <= budget:
                return pick
        return allowed[int(rng.integers(len(allowed)))]

    def gen(node: object, top: bool = False) -> str:
        if isinstance(node, Lit):
            return node.text
        if isinstance(node, Cls):
            return cls_piece(node, 1)
        if isinstance(node, Ref):
            return gen(rules[node.name])
        if isinstance(node, Seq):
            return "".join(gen(n) for n in node.items)
        if isinstance(node, Alt):
            k = option if top and option is not None else int(rng.integers(len(node.options)))
            return gen(node.options[k])
        assert isinstance(node, Rep)
        hi = node.lo + _OPEN_MAX if node.hi is None else node.hi
        # Lengths at both ends of the range, and in between, all get drawn.
        n = int(rng.choice([node.lo, hi, int(rng.integers(node.lo, hi + 1))]))
        if isinstance(node.node, Cls):  # fill n characters with snippets and single characters
            out = ""
            while len(out) < n:
                out += cls_piece(node.node, n - len(out))
            return out
        return "".join(gen(node.node) for _ in range(n))

    return gen(rules[start], top=True)
