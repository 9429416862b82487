"""World parameters and the fixed vocabularies of the Babylon-style world (names, tickers, archetypes).

`WorldParams` is the sim's own frozen, validated parameter set. The pydantic `RLAIFEnvConfig` at the
package boundary carries the same field names and builds one of these; the sim never sees pydantic.
Money is in simulated USD, time in ticks (one simulated hour each).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

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


MAX_USD = 1e12
"""Largest amount of money a parameter may set (USD): far above any use, far below float overflow."""
MIN_USD = 1e-6
"""Smallest `starting_cash` and `market_liquidity` (USD, shares): a millionth of a dollar, far below any use.

The reward divides PnL by starting_cash, and an account can come to hold all the world's money (`sim.bounds.money`,
at most 1e120 USD): with the largest scales and weights a tick's reward is then at most about 1e135 / starting_cash
and an episode's return (1e6 ticks at most) about 1e141 / starting_cash, 1e147 at this floor: far inside the 1e300 a
snapshot carries (at 1e-300 a restored world paid -4.5e301 a tick, then an infinite reward). A market's pools multiply
to 0.84 to 1 x market_liquidity^2 (`sim.bounds.pool_product_range`), 8.4e-13 at this floor; below about 1e-162 the
product is 0 in floats, and pools of 0 shares price a share at 0 / 0."""
MAX_TICKS = 1_000_000
"""Largest number of ticks a parameter may set (num_ticks, market durations, funding interval): about 114 simulated
years, far above any use, far below int64 overflow in the tick arithmetic."""


def _param(default: float, doc: str, **bounds: float):
    """A `WorldParams` field, written once: its default, what it means (the config's description, docs/config.md)
    and its bounds (ge, gt, le, lt: checked here, and by the config that copies them)."""
    return field(default=default, metadata={"doc": doc, "bounds": bounds})


_BOUND_CHECKS = {"ge": (lambda v, b: v >= b, ">="), "gt": (lambda v, b: v > b, ">"),
                 "le": (lambda v, b: v <= b, "<="), "lt": (lambda v, b: v < b, "<")}


@dataclass(frozen=True, kw_only=True)
class WorldParams:
    """Parameters of one batch of worlds. All worlds in a batch share them.

    Each parameter is declared once, here (`_param`: default, description, bounds); the pydantic config at the
    package boundary (`RLAIFEnvConfig`) copies the fields, and the kernels' constant arrays read every int and float
    field by name (`sim.packing`). Validation lives in `__post_init__` (plain ValueError: the config turns it into a
    ConfigError with the field name).
    """

    num_ticks: int = _param(168, "Episode length in ticks; the env truncates here. At least 2: Gymnasium's "
                            "check_env refuses an env that truncates after one step.", ge=2, le=MAX_TICKS)
    starting_cash: float = _param(10_000.0, "Agent cash at reset, USD (the reward's unit: PnL / starting_cash).",
                                  ge=MIN_USD, le=MAX_USD)
    num_markets: int = _param(4, "Prediction markets open at once.", ge=1, le=16)
    num_perps: int = _param(3, "Perpetual-futures tickers.", ge=1, le=len(PERP_TICKERS))
    num_npcs: int = _param(8, "NPC traders and posters.", ge=1, le=64)
    num_groups: int = _param(3, "Group chats the agent may join.", ge=1, le=len(GROUP_NAMES))
    market_liquidity: float = _param(5_000.0, "CPMM pool depth per side at 50%, shares.", ge=MIN_USD, le=MAX_USD)
    fee_rate: float = _param(0.001, "Fee on trades and perp notional (fraction).", ge=0, lt=0.1)
    min_fee: float = _param(0.01, "Minimum fee per agent trade, USD.", ge=0, le=MAX_USD)
    min_order: float = _param(1.0, "Smallest agent order, USD or shares.", gt=0, le=MAX_USD)
    market_duration_min: int = _param(24, "Shortest market life, ticks.", ge=1, le=MAX_TICKS)
    market_duration_max: int = _param(72, "Longest market life, ticks.", ge=1, le=MAX_TICKS)
    max_leverage: float = _param(10.0, "Perp leverage cap.", ge=1, le=100)
    funding_interval: int = _param(8, "Ticks between perp funding payments.", ge=1, le=MAX_TICKS)
    perp_volatility: float = _param(0.006, "Per-tick std of the perps' log price change.", ge=0, lt=0.2)
    news_rate: float = _param(0.4, "Probability of a market news item per tick.", ge=0, le=1)
    post_rate: float = _param(0.7, "Probability of an NPC post per tick.", ge=0, le=1)
    tip_rate: float = _param(0.1, "Probability of a tip per group chat per tick.", ge=0, le=1)
    npc_trade_rate: float = _param(0.5, "Probability that each NPC trades per tick.", ge=0, le=1)
    npc_starting_cash: float = _param(5_000.0, "Each NPC's cash at reset, USD.", ge=0, le=MAX_USD)
    narrative_rate: float = _param(0.06, "Per-tick chance a hidden perp narrative starts.", ge=0, le=1)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            for kind, bound in f.metadata.get("bounds", {}).items():
                holds, op = _BOUND_CHECKS[kind]
                if not holds(value, bound):  # NaN fails every bound
                    raise ValueError(f"{f.name} must be {op} {bound:g}, got {value!r}")
        if self.market_duration_min > self.market_duration_max:
            raise ValueError(f"market_duration_min ({self.market_duration_min}) must be <= market_duration_max "
                             f"({self.market_duration_max})")
        if self.min_order <= self.min_fee:
            raise ValueError(f"min_order ({self.min_order}) must be greater than min_fee ({self.min_fee})")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Names of every parameter (the config layer copies exactly these)."""
        return tuple(f.name for f in fields(cls))
