"""World parameters and the fixed vocabularies of the Babylon-style world (names, tickers, archetypes).

`WorldParams` is the sim's own frozen, validated parameter set. The pydantic `RLAIFEnvConfig` at the
package boundary carries the same field names and builds one of these; the sim never sees pydantic.
Money is in simulated USD, time in ticks (one simulated hour each).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = [
    "GROUP_NAMES",
    "NEWS_SOURCES",
    "NPC_NAMES",
    "NPC_ROSTER",
    "PERP_BASE_PRICES",
    "PERP_TICKERS",
    "QUESTIONS",
    "NpcBehaviour",
    "WorldParams",
]

# Parody questions after the original's fixed list, cycled by market serial
# (docs/babylon.md ("The original's engines and world")).
QUESTIONS: tuple[str, ...] = (
    "Will BitcAIn reach $150k by end of month?",
    "Will the SEC approve the first AI-run ETF this quarter?",
    "Will ChatGPU announce a 10T-parameter model before the summit?",
    "Will Elon Muskrat's rocket land on the third try?",
    "Will the Fed-AI cut rates at the next meeting?",
    "Will MetAI's smart glasses outsell phones this year?",
    "Will the DAO treasury vote pass with a supermajority?",
    "Will SolAIna's network stay up for 30 days straight?",
    "Will TeslAI's robotaxi launch in three cities?",
    "Will the OpenAGI board reinstate its founder again?",
    "Will the stablecoin BabylUSD hold its peg all week?",
    "Will the AI safety bill pass the senate vote?",
)

PERP_TICKERS: tuple[str, ...] = ("BTCAI", "ETHAI", "SOLAI", "TSLAI", "METAI")
PERP_BASE_PRICES: tuple[float, ...] = (120_000.0, 4_000.0, 200.0, 450.0, 520.0)


class NpcBehaviour:
    """How an NPC archetype trades and posts (integer codes, so the sim can vectorise over NPCs)."""

    INFORMED = 0  # trades towards the hidden truth p*, posts mostly true hints
    NOISE = 1  # random side and size, posts say nothing reliable
    MOMENTUM = 2  # follows the last price move
    DECEIVER = 3  # trades on the truth but posts the opposite (liars, scammers)


POST_HONESTY: tuple[float, ...] = (0.8, 0.5, 0.5, 0.2)
"""The probability that an NPC's post about a market names the side it resolves to, by `NpcBehaviour` code
(informed, noise, momentum, deceiver): a deceiver's post points the wrong way four times in five."""


# (archetype name from the original's 12, behaviour). Cycled when num_npcs exceeds the roster.
NPC_ROSTER: tuple[tuple[str, int], ...] = (
    ("super-predictor", NpcBehaviour.INFORMED),
    ("degen", NpcBehaviour.NOISE),
    ("liar", NpcBehaviour.DECEIVER),
    ("researcher", NpcBehaviour.INFORMED),
    ("trader", NpcBehaviour.MOMENTUM),
    ("social-butterfly", NpcBehaviour.NOISE),
    ("scammer", NpcBehaviour.DECEIVER),
    ("information-trader", NpcBehaviour.INFORMED),
    ("perps-trader", NpcBehaviour.MOMENTUM),
    ("ass-kisser", NpcBehaviour.NOISE),
    ("goody-twoshoes", NpcBehaviour.INFORMED),
    ("infosec", NpcBehaviour.NOISE),
)

# Display names of NPCs, by roster position (cycled with a numeric suffix past the roster).
NPC_NAMES: tuple[str, ...] = (
    "Satoshi Nakamotoe", "Degen Dave", "Honest Abe Lincoin", "Vitalik Butterin", "Momentum Mo",
    "Influencer Ivy", "Rug Pullman", "Cathie Woodpecker", "Perp Pete", "Yes-Man Yuri",
    "Goody Gwen", "Opsec Olga",
)


def npc_name(k: int) -> str:
    """Display name of NPC `k` (what the prompt's feed shows; `send_dm` takes it as well as "agent-k")."""
    base = NPC_NAMES[k % len(NPC_NAMES)]
    return base if k < len(NPC_NAMES) else f"{base} {k // len(NPC_NAMES) + 1}"


# (name, reliability): the probability that an item from this source points the right way.
NEWS_SOURCES: tuple[tuple[str, float], ...] = (
    ("Reuters-AI", 0.75),
    ("The Daily Pump", 0.60),
    ("anonymous rumour", 0.54),
)

# (name, reliability) of each group chat's tips; tips are visible only after `join_group`.
GROUP_NAMES: tuple[tuple[str, float], ...] = (
    ("Alpha Insiders", 0.80),
    ("Whale Watchers", 0.70),
    ("Degen Den", 0.60),
)


@dataclass(frozen=True, kw_only=True)
class WorldParams:
    """Parameters of one batch of worlds. All worlds in a batch share them.

    Validation lives in `__post_init__` (plain ValueError: the pydantic config at the boundary
    turns it into a ConfigError with the field name).
    """

    num_ticks: int = 168
    """Episode length in ticks (one simulated hour each); the env truncates here."""
    starting_cash: float = 10_000.0
    """Agent cash at reset, USD."""
    num_markets: int = 4
    """Binary prediction markets open at once; a resolved market's slot reopens with a new question."""
    num_perps: int = 3
    """Perpetual-futures tickers (at most 5)."""
    num_npcs: int = 8
    """NPC traders/posters, archetypes taken in order from the roster."""
    num_groups: int = 3
    """Group chats the agent may join (at most 3)."""
    market_liquidity: float = 5_000.0
    """CPMM pool depth per side at a 50% price, in shares (≈ USD)."""
    fee_rate: float = 0.001
    """Trading fee on prediction trades and perp notional (0.1%)."""
    min_fee: float = 0.01
    """Minimum fee per agent trade, USD."""
    min_order: float = 1.0
    """Smallest agent order, USD (buys, perp notional) or shares (sells)."""
    market_duration_min: int = 24
    """Shortest market life, ticks."""
    market_duration_max: int = 72
    """Longest market life, ticks."""
    max_leverage: float = 10.0
    """Leverage cap for perps; opening above it fails."""
    funding_interval: int = 8
    """Ticks between perp funding payments."""
    perp_volatility: float = 0.006
    """Per-tick log-return standard deviation of perps."""
    news_rate: float = 0.4
    """Probability that a market news item appears in a tick."""
    post_rate: float = 0.7
    """Probability that an NPC post appears in a tick."""
    tip_rate: float = 0.1
    """Probability per group and tick of a tip in that group chat."""
    npc_trade_rate: float = 0.5
    """Probability that each NPC trades in a tick."""
    npc_starting_cash: float = 5_000.0
    """Each NPC's cash at reset, USD."""
    narrative_rate: float = 0.06
    """Per-tick probability that a hidden perp narrative starts (when none is running)."""

    def __post_init__(self) -> None:
        checks = [
            (self.num_ticks >= 1, "num_ticks", ">= 1"),
            (self.starting_cash > 0, "starting_cash", "> 0"),
            (1 <= self.num_markets <= 16, "num_markets", "in [1, 16]"),
            (1 <= self.num_perps <= len(PERP_TICKERS), "num_perps", f"in [1, {len(PERP_TICKERS)}]"),
            (1 <= self.num_npcs <= 64, "num_npcs", "in [1, 64]"),
            (1 <= self.num_groups <= len(GROUP_NAMES), "num_groups", f"in [1, {len(GROUP_NAMES)}]"),
            (self.market_liquidity > 0, "market_liquidity", "> 0"),
            (0 <= self.fee_rate < 0.1, "fee_rate", "in [0, 0.1)"),
            (self.min_fee >= 0, "min_fee", ">= 0"),
            (self.min_order > self.min_fee, "min_order", "> min_fee"),
            (1 <= self.market_duration_min <= self.market_duration_max, "market_duration_min",
             "in [1, market_duration_max]"),
            (1 <= self.max_leverage <= 100, "max_leverage", "in [1, 100]"),
            (self.funding_interval >= 1, "funding_interval", ">= 1"),
            (0 <= self.perp_volatility < 0.2, "perp_volatility", "in [0, 0.2)"),
            (0 <= self.news_rate <= 1, "news_rate", "in [0, 1]"),
            (0 <= self.post_rate <= 1, "post_rate", "in [0, 1]"),
            (0 <= self.tip_rate <= 1, "tip_rate", "in [0, 1]"),
            (0 <= self.npc_trade_rate <= 1, "npc_trade_rate", "in [0, 1]"),
            (self.npc_starting_cash >= 0, "npc_starting_cash", ">= 0"),
            (0 <= self.narrative_rate <= 1, "narrative_rate", "in [0, 1]"),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Names of every parameter (the config layer copies exactly these)."""
        return tuple(f.name for f in fields(cls))
