"""`RLAIFEnvConfig`: the validated, documented configuration of the RLAIF envs (pydantic v2).

Unknown keys are rejected with a "did you mean" hint; bad values raise `ConfigError` naming the
field, the value and the accepted range. The world fields carry the same names and defaults as the
sim's `WorldParams` (a test pins that), which the env builds from this config.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from .errors import ConfigError

__all__ = ["REWARD_COMPONENTS", "RLAIFEnvConfig"]

REWARD_COMPONENTS = ("pnl", "format", "reasoning", "behavior", "risk", "truth_mark")

_MAX_USD = 1e12
"""Largest amount of money a config may set (USD): far above any use, far below float overflow."""
_MAX_SCALE = 1e6
"""Largest reward scale or price a config may set (pnl_scale, form_scale, risk_*), and largest reward weight."""
_MAX_TICKS = 1_000_000
"""Largest number of ticks a config may set (num_ticks, market durations, funding interval): about 114
simulated years, far above any use, far below int64 overflow in the sim's tick arithmetic."""


class RLAIFEnvConfig(BaseModel):
    """Configuration of `RLAIFEnv`. Money in simulated USD, time in ticks (one simulated hour)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    # --- world
    num_ticks: int = Field(168, ge=2, le=_MAX_TICKS, description="Episode length in ticks; the env truncates here. "
                           "At least 2: Gymnasium's check_env refuses an env that truncates after one step.")
    starting_cash: float = Field(10_000.0, gt=0, le=_MAX_USD, description="Agent cash at reset, USD.")
    num_markets: int = Field(4, ge=1, le=16, description="Prediction markets open at once.")
    num_perps: int = Field(3, ge=1, le=5, description="Perpetual-futures tickers.")
    num_npcs: int = Field(8, ge=1, le=64, description="NPC traders and posters.")
    num_groups: int = Field(3, ge=1, le=3, description="Group chats the agent may join.")
    market_liquidity: float = Field(5_000.0, gt=0, le=_MAX_USD, description="CPMM pool depth per side at 50%, shares.")
    fee_rate: float = Field(0.001, ge=0, lt=0.1, description="Fee on trades and perp notional (fraction).")
    min_fee: float = Field(0.01, ge=0, le=_MAX_USD, description="Minimum fee per agent trade, USD.")
    min_order: float = Field(1.0, gt=0, le=_MAX_USD, description="Smallest agent order, USD or shares.")
    market_duration_min: int = Field(24, ge=1, le=_MAX_TICKS, description="Shortest market life, ticks.")
    market_duration_max: int = Field(72, ge=1, le=_MAX_TICKS, description="Longest market life, ticks.")
    max_leverage: float = Field(10.0, ge=1, le=100, description="Perp leverage cap.")
    funding_interval: int = Field(8, ge=1, le=_MAX_TICKS, description="Ticks between perp funding payments.")
    perp_volatility: float = Field(0.006, ge=0, lt=0.2, description="Per-tick std of the perps' log price change.")
    news_rate: float = Field(0.4, ge=0, le=1, description="Probability of a market news item per tick.")
    post_rate: float = Field(0.7, ge=0, le=1, description="Probability of an NPC post per tick.")
    tip_rate: float = Field(0.1, ge=0, le=1, description="Probability of a tip per group chat per tick.")
    npc_trade_rate: float = Field(0.5, ge=0, le=1, description="Probability that each NPC trades per tick.")
    npc_starting_cash: float = Field(5_000.0, ge=0, le=_MAX_USD, description="Each NPC's cash at reset, USD.")
    narrative_rate: float = Field(0.06, ge=0, le=1, description="Per-tick chance a hidden perp narrative starts.")

    # --- reward
    reward_scheme: Literal["skill", "original"] = Field(
        "skill",
        description="skill (default): a return that ranks traders (telescoping PnL, form as a bounded penalty and "
        "bonus, proportional risk; docs/reward.md). original: Babylon's clipped composite, kept for porting code; its "
        "return does not rank skill.",
    )
    pnl_scale: float | None = Field(
        None, gt=0, le=_MAX_SCALE,
        description="Multiplier of pnl_delta / starting_cash in the pnl component; None: 1 (skill) or 10 (original, "
        "then clipped to [-1, 1] per step).",
    )
    form_scale: float = Field(
        0.25, ge=0, le=_MAX_SCALE,
        description="Skill scheme: weight of a whole episode's format and reasoning, relative to their row weights. "
        "Per tick they get w / (w_pnl x num_ticks) x form_scale: with the default row an episode of perfect reasoning "
        "is worth 0.075 (750 USD at 10,000 starting cash) and one of unparseable replies costs 0.125.",
    )
    risk_threshold: float = Field(0.8, gt=0, le=_MAX_SCALE,
                                  description="Exposure / equity above which adding exposure is risky.")
    risk_penalty: float | None = Field(
        None, ge=0, le=_MAX_SCALE,
        description="Risk price; None: skill charges 0.1 x the USD of exposure an action adds above the threshold "
        "(over starting cash), original a flat 0.5 per risky action.",
    )
    reward_weights: dict[str, float] = Field(
        default_factory=dict,
        description="Overrides of the component weights (pnl .5, format .25, reasoning .15, behavior .10, "
        "risk = the pnl weight). The skill scheme reads them relative to the archetype row's pnl weight (.5 by "
        "default). 0 reports a component without adding it.",
    )

    reward_mark: Literal["market", "truth"] = Field(
        "market",
        description="market (default): the return is the PnL of equity valued at what the holdings would fetch if "
        "sold now. truth (a training option, skill scheme only): adds the potential-based truth_mark component, which "
        "values held shares at the hidden true probability p* inside the reward only, so a good bet is credited at "
        "its own tick with its expected value; its episode sum is the default return plus the p*-value of the "
        "positions still open at the end. It uses privileged information in the reward, never in a prompt, an "
        "observation or a feedback line (docs/reward.md).",
    )

    archetype: str | None = Field(
        None,
        description="Agent archetype (e.g. trader, degen, researcher): selects the original's reward-weight row "
        "and adds the behavior component. None uses the default row without behavior.",
    )

    # --- speed
    backend: Literal["numpy", "numba", "auto"] = Field(
        "auto",
        description="How the world's rules run: auto (numba when it imports, else numpy), numba (compiled: decode, "
        "world, reward and observation in one call; compiled once per machine, then cached) or numpy (the same rules "
        "run as Python, with the same world bits: readable in a debugger, nothing to compile, slower: "
        "docs/benchmarks.md; the observation is encoded by numpy).",
    )

    # --- text face
    prompt_style: Literal["full", "compact"] = Field(
        "full",
        description="How the text face renders a tick. full (default): every section in detail (market questions, "
        "YES and NO prices, perp statistics, the whole portfolio, the newest feed items of every market) under a "
        "system prompt of the rules and every action's example: about 1,250 tokens a decision, chat-templated. "
        "compact: what a decision needs, for RL with small models on CPUs: open markets as id, YES price, last-hour "
        "change and hours to resolution; one short line per perp; cash and equity; of the feed items the full prompt "
        "shows, only those about open markets and perps; under a system prompt of at most 80 tokens (docs/world.md).",
    )

    # --- numeric face
    numeric_perp_leverage: float = Field(2.0, ge=1, le=100, description="Leverage of numeric open_perp actions.")

    def __init__(self, **data: Any) -> None:
        _reject_unknown_keys(data)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(_friendly(exc)) from None

    @classmethod
    def from_any(cls, config: RLAIFEnvConfig | Mapping[str, Any] | None = None, **overrides: Any) -> RLAIFEnvConfig:
        """Build a config from a config, a mapping (e.g. RLlib's env_config) or nothing, plus overrides."""
        if config is None:
            base: dict[str, Any] = {}
        elif isinstance(config, RLAIFEnvConfig):
            base = config.model_dump(exclude_unset=True)
        elif isinstance(config, Mapping):
            base = dict(config)
        else:
            raise ConfigError(
                f"config must be an RLAIFEnvConfig, a mapping or None, got {type(config).__name__}; "
                "pass e.g. RLAIFEnvConfig(num_markets=3) or {'num_markets': 3}"
            )
        return cls(**{**base, **overrides})

    @field_validator("reward_weights")
    @classmethod
    def _known_weights(cls, weights: dict[str, float]) -> dict[str, float]:
        for name, value in weights.items():
            if name not in REWARD_COMPONENTS:
                hint = difflib.get_close_matches(name, REWARD_COMPONENTS, n=1)
                extra = f" Did you mean {hint[0]!r}?" if hint else ""
                raise ValueError(f"unknown reward component {name!r}; known: {', '.join(REWARD_COMPONENTS)}.{extra}")
            if not 0 <= value <= _MAX_SCALE:  # NaN fails too; a bound keeps every weighted reward finite
                raise ValueError(f"weight of {name!r} must be finite and >= 0, at most {_MAX_SCALE:g}, got {value!r}")
        return weights

    @model_serializer(mode="wrap")
    def _omit_late_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A dump leaves out the fields added after records were first pinned while they hold their default
        (`_LATE_DEFAULTS`): a trajectory, manifest or snapshot of a default config stays byte for byte what it
        was (tests/rollout/test_trajectory_bytes.py), and reading one back gives the default anyway."""
        data = handler(self)
        for name, default in _LATE_DEFAULTS.items():
            if data.get(name, None) == default:
                del data[name]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> RLAIFEnvConfig:
        if self.market_duration_min > self.market_duration_max:
            raise ValueError(
                f"market_duration_min ({self.market_duration_min}) must be <= market_duration_max "
                f"({self.market_duration_max})"
            )
        if self.reward_mark == "truth" and self.reward_scheme != "skill":
            raise ValueError("reward_mark='truth' is a potential-based term of the skill scheme; use "
                             "reward_scheme='skill' (the default) with it, or reward_mark='market'")
        if self.min_order <= self.min_fee:
            raise ValueError(f"min_order ({self.min_order}) must be greater than min_fee ({self.min_fee})")
        if self.numeric_perp_leverage > self.max_leverage:
            raise ValueError(
                f"numeric_perp_leverage ({self.numeric_perp_leverage}) must be <= max_leverage ({self.max_leverage})"
            )
        return self


_LATE_DEFAULTS: dict[str, Any] = {"prompt_style": "full"}
"""Fields added after the records were pinned, with the default a dump leaves out (see `_omit_late_defaults`)."""


def _reject_unknown_keys(data: Mapping[str, Any]) -> None:
    known = list(RLAIFEnvConfig.model_fields)
    for key in data:
        if key not in RLAIFEnvConfig.model_fields:
            hint = difflib.get_close_matches(str(key), known, n=1)
            extra = f" Did you mean {hint[0]!r}?" if hint else ""
            raise ConfigError(f"unknown config key {key!r}.{extra} Valid keys: {', '.join(known)}")


_SHOWN = reprlib.Repr()
"""How a bad value is quoted in an error: whole when short, cut when long or deeply nested (it may come from a
network client)."""
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict = 3, 8, 8
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 120


def _friendly(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "config"
        got = err.get("input")
        lines.append(f"{where}: {err['msg']} (got {_SHOWN.repr(got)})")
    return "invalid RLAIFEnvConfig: " + "; ".join(lines)
