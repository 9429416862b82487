r"""The original Babylon quality heuristics, reproduced as pure functions for comparability.

Design note. This module (`judge.legacy` forwards to it, for old imports) ports three files of
the original training pipeline (`quality_utils.py`, `format_validator.py`, `quality_scorer.py`;
docs/babylon.md ("The original's quality heuristics")) so that scores produced in rlaif_gym can be
set beside the original's, number for number. It is *not* the judge that rlaif_gym trains with: the
hardened rule judge is `judge.rules.RuleJudge`, which is free to change the rules; this module is not.

Only three defects of the original (docs/babylon.md ("The original's defects", 5 and 8)) are fixed
here, and each fix is documented on the function it touches:

1. every keyword list is matched on word boundaries (regex ``\b``) instead of as substrings, so
   "long" no longer matches "belong", "buy" not "buyer", "sell" not "seller"; a multi-word phrase
   ("need more data") matches as a phrase, with any run of whitespace between its words;
2. directional alignment takes the action's side into account (a SHORT perp or a NO prediction is
   bearish);
3. the unreachable -0.5 tier of `validate_xml_structure` is made reachable.

Everything else, the odd parts included (a lone hyphen counts as "structure", a sentence is a
". "-separated chunk, ``fmt`` lives in [-1, 0.5] while the other scores live in [0, 1]), is kept.

Every function is pure and deterministic, and never raises on any string input (empty, a megabyte,
any unicode, broken JSON): it returns the documented worst score instead. Two regexes of the original
that go quadratic on adversarial input (the think-tag extraction and the list-marker search) are
replaced by linear equivalents that give the same answers.

The port is one module per original file, and this module gathers their names: `keywords` (the
keyword lists and the word-boundary matching they share), `tick_quality` (`quality_utils.py`),
`format_validator` (`format_validator.py`) and `quality_scorer` (`quality_scorer.py`).

Standard library only (below `judge`, which forwards these names).
"""

from __future__ import annotations

from . import format_validator, keywords, quality_scorer, tick_quality
from .format_validator import *  # noqa: F403 (each module lists its public names once, in its __all__)
from .keywords import *  # noqa: F403
from .quality_scorer import *  # noqa: F403
from .tick_quality import *  # noqa: F403
from .tick_quality import CurriculumLevel, Direction  # noqa: F401 (the type aliases old imports name)

__all__ = [*keywords.__all__, *tick_quality.__all__, *format_validator.__all__, *quality_scorer.__all__]
