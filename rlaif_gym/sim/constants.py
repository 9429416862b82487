"""The world rules' fixed constants, written once: random streams, draw ranges, decays, reliabilities and the
evidence weights of the feed's signals.

The rules (`sim.rules`), the kernels' constant arrays (`sim.packing`) and the state validator's bounds
(`sim.bounds`) read them from here. Units: probabilities and fractions are in [0, 1], decays are per tick, a
signal's weight is its log-odds, and a range is (low, span): a drawn value is low + span * u for a uniform u in
[0, 1).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .params import GROUP_NAMES, NEWS_SOURCES, NPC_ROSTER, POST_HONESTY, WorldParams

__all__ = ["npc_behaviours"]

MARKET_STREAM = 1 << 40  # + market serial: a market's truth depends only on (key, serial)
RESET_STREAM = 1 << 41
SIGNAL_DECAY = 0.97  # per tick, for news/post/tip accumulators
PERP_NEWS_DECAY = 0.9
LEAK_RELIABILITY = 0.75
LEAK_RATE = 0.35
INFORMED_NOISE = 0.06  # std of informed NPCs' belief around p*
REP_STEP = 4.0  # reputation change per right/wrong market call
NEWS_SOURCE_PROBS = np.array([0.35, 0.35, 0.30])
TRUTH = (0.1, 0.8)  # a market's hidden true probability p*
OPENING_PRICE = (0.3, 0.4)  # a new market's YES price (uninformative)
NARRATIVE_LEAD = (6, 15)  # ticks from a narrative's start to its event: low + floor(span * u)
NARRATIVE_MOVE = (0.04, 0.08)  # the log-return size of a narrative's event
PERP_START_SPREAD = 0.05  # std of a perp's log start price around its base price
FUNDING_CAP = 3e-3  # the largest |funding rate| per interval, a fraction of the position's current notional


def _logit_weight(reliability: float | np.ndarray) -> np.ndarray:
    """Evidence weight of a ±1 signal with this reliability (its log-odds)."""
    r = np.asarray(reliability, dtype=np.float64)
    return np.log(r / (1.0 - r))


SOURCE_WEIGHT = _logit_weight(np.array([s[1] for s in NEWS_SOURCES]))
POST_HONESTY_ARRAY = np.array(POST_HONESTY, dtype=np.float64)  # by NpcBehaviour code
GROUP_WEIGHT = _logit_weight(np.array([g[1] for g in GROUP_NAMES]))
LEAK_WEIGHT = float(_logit_weight(LEAK_RELIABILITY))


@lru_cache(maxsize=32)
def npc_behaviours(params: WorldParams) -> np.ndarray:
    """Behaviour code of each NPC, shape (K,). Cached per params (read-only: do not modify)."""
    codes = np.array([NPC_ROSTER[k % len(NPC_ROSTER)][1] for k in range(params.num_npcs)], dtype=np.int64)
    codes.flags.writeable = False
    return codes
