"""The rule judge's fast paths give the same answers as their plain forms.

`_copied_fraction` only substring-searches n-grams whose words all occur in the prompt, and
`_CONCLUSION` runs case-sensitively on lower-cased text behind a first-letter look-ahead. Both are
checked here against the straightforward versions on real prompts and replies of a scripted
episode, plus shuffled and adversarial reasoning that copies from the prompt.
"""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np

from rlaif_gym.judge import rules
from rlaif_gym.llm import ScriptedLLM

_PLAIN_CONCLUSION = re.compile(
    r"\b(so|therefore|thus|hence|because|since|which is why|i will|i'll|i buy|i sell|i open|"
    r"i close|i wait|i join|i short|i go long|buying|selling)\b",
    re.IGNORECASE,
)


def _plain_copied_fraction(words: list[str], prompt: str, n: int = 6) -> float:
    grams = {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}
    haystack = rules._normalised(prompt)
    return sum(f" {g} " in haystack for g in grams) / max(len(grams), 1)


def _corpus():
    env = gym.make("RLAIF-Text-v0", num_ticks=60).unwrapped
    prompt, _ = env.reset(seed=3)
    llm, rng = ScriptedLLM(), np.random.default_rng(0)
    for _ in range(60):
        think, action = llm.decide(prompt)
        words = prompt.split()
        start = int(rng.integers(0, max(1, len(words) - 30)))
        for text in (think, " ".join(rng.choice(words, 50)), " ".join(words[start:start + 30]) + " " + think,
                     "SO-called so-so I'LL buy; Which Is Why THUS", "sober thusly isobar ibuy"):
            yield prompt, text
        prompt, *_ = env.step(f"<think>{think}</think>\n{json.dumps(action)}")


def test_fast_paths_equal_the_plain_forms():
    copied = 0
    for prompt, text in _corpus():
        words = rules._words(text)
        fast = rules._copied_fraction(words, prompt)
        assert fast == _plain_copied_fraction(words, prompt), text
        copied += fast > 0.2
        assert bool(rules._CONCLUSION.search(text.lower())) == bool(_PLAIN_CONCLUSION.search(text)), text
    assert copied >= 30  # the corpus really exercises the copy check, not only texts with no overlap


def test_prompt_tokens_equal_the_regex_normalisation():
    """`_prompt_tokens` (bytes.translate) splits exactly as `_normalised` (the regex) on prompts and on text whose
    lower-casing turns non-ASCII letters into ASCII ones (the Kelvin sign, a dotted capital I)."""
    odd = ["K\u212a elvin İstanbul ẞ", "a\ud800b ¢¢ x--y 'a' \t\n\r\x00", "ÀÉÎ õü 12,5¢ $3.20", "", "¢", "-' '-"]
    texts = [prompt for prompt, _ in _corpus()][::5] + odd
    for text in texts:
        assert " " + " ".join(rules._prompt_tokens(text)) + " " == rules._normalised(text), text


def test_the_copying_factor_equals_its_plain_form():
    """`_copying` skips the substring search only when at most 20% of the n-grams could be copied."""
    searched = 0
    for prompt, text in _corpus():
        words = rules._words(text)
        plain = _plain_copied_fraction(words, prompt)
        assert rules._copying(words, prompt) == (1.0 if plain <= 0.2 else max(0.0, 1.0 - plain)), text
        searched += plain > 0.2
    assert searched >= 30
