"""The package's docstrings and comments say why, not what one run measured or which ticket asked for it.

Figures go stale (a docstring once quoted a speed three changes old); the benchmark tables in docs/ carry
them with their command, commit and machine, and a docstring points there. Ticket numbers and "formerly"
wording are history, which git keeps.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlaif_gym", "rlaif_gym_verifiers")
STALE = {
    "a timing in µs or ms": re.compile(r"\d(?:[\d,.]*\d)?\s?(?:us|µs|ms)\b"),
    "an issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    '"formerly"': re.compile(r"\bformerly\b", re.IGNORECASE),
}


def _prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring (a string statement: module, class, function or attribute docstring) and
    every comment of one module."""
    out = [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source))
           if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)]
    out += [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT]
    return out


def test_no_figures_issue_numbers_or_formerly_in_package_prose():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, text in _prose(path.read_text(encoding="utf-8")):
                for what, pattern in STALE.items():
                    if match := pattern.search(text):
                        found.append(f"{path.relative_to(ROOT)}:{line}: {what} ({match.group(0)!r})")
    assert not found, ("package docstrings and comments should keep the why and point to docs/ for figures "
                       "(docs/benchmarks.md names each one's command and commit):\n" + "\n".join(found))


def test_the_check_finds_what_it_looks_for():
    """The scan is not vacuous: each pattern fires on a docstring and on a comment, and skips plain code."""
    source = ('"""Costs 1.5 ms a call (issue 17); formerly `x`."""\n'
              "TARGET = '1.2 us per tick'  # 30 us each\n")
    texts = [text for _, text in _prose(source)]
    assert texts == ["Costs 1.5 ms a call (issue 17); formerly `x`.", "# 30 us each"]
    assert all(pattern.search(texts[0]) for pattern in STALE.values())
    assert STALE["a timing in µs or ms"].search(texts[1])
