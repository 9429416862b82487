"""`RLAIFEnvConfig`: the validated, documented configuration of the RLAIF envs (pydantic v2).

Unknown keys are rejected with a "did you mean" hint; bad values raise `ConfigError` naming the
field, the value and the accepted range. The world fields are `sim.params.WorldParams`'s own declarations
(name, type, default, description, bounds), copied here; the env builds its `WorldParams` from them.
"""

from __future__ import annotations

import dataclasses
import difflib
import reprlib
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)

from .errors import ConfigError
from .sim.params import WorldParams

__all__ = ["REWARD_COMPONENTS", "RLAIFEnvConfig", "config_table"]

REWARD_COMPONENTS = ("pnl", "format", "reasoning", "behavior", "risk", "truth_mark")

_MAX_SCALE = 1e6
"""Largest reward scale or price a config may set (pnl_scale, form_scale, risk_*), and largest reward weight."""
_PYTHON_TYPES = {"int": int, "float": float}


def _world_fields() -> dict[str, Any]:
    """The world's parameters as config fields: each `WorldParams` field with its type, default, description and
    bounds, as `sim.params` declares them (so a parameter is written once, and the env builds its `WorldParams`
    from the config's fields of the same names)."""
    return {f.name: (_PYTHON_TYPES[f.type], Field(f.default, description=f.metadata["doc"], **f.metadata["bounds"]))
            for f in dataclasses.fields(WorldParams)}


_WorldConfig = create_model(
    "_WorldConfig", __config__=ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False),
    **_world_fields())
"""The world's fields as a model; `RLAIFEnvConfig` extends it and inherits its `model_config`."""


class RLAIFEnvConfig(_WorldConfig):
    """Configuration of `RLAIFEnv`. Money in simulated USD, time in ticks (one simulated hour).

    The world's fields come first, from `sim.params.WorldParams` (its declarations: names, defaults, descriptions and
    bounds); the rest are the reward's, the episode's, the faces' and the backend's, declared below."""

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

    fixed_stake: float | None = Field(
        None, gt=0, le=1,
        description="A task rule for training and evaluating the side of a bet (text face). None (default): a reply "
        "sets each bet's amount. A fraction of cash in (0, 1]: every buy_prediction stakes that share of the agent's "
        "cash at the tick (USD, rounded to cents); the reply names the market and the side, and an amount it writes "
        "is replaced, so no reply can lower a wrong bet's loss by betting less. The system prompt states it and the "
        "per-tick grammar leaves the amount out (docs/trl.md).",
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
        """A dump leaves out the fields added after records were first pinned (any field not in `_PINNED_FIELDS`)
        while they hold their default: a trajectory, manifest or snapshot of a default config stays byte for byte
        what it was (tests/rollout/test_trajectory_bytes.py) when a field is added, and reading one back gives the
        default anyway."""
        data = handler(self)
        for name, field in type(self).model_fields.items():
            late = name not in _PINNED_FIELDS and name in data
            if late and data[name] == field.get_default(call_default_factory=True):
                del data[name]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> RLAIFEnvConfig:
        WorldParams(**{name: getattr(self, name) for name in WorldParams.field_names()})  # its cross-field checks
        if self.reward_mark == "truth" and self.reward_scheme != "skill":
            raise ValueError("reward_mark='truth' is a potential-based term of the skill scheme; use "
                             "reward_scheme='skill' (the default) with it, or reward_mark='market'")
        if self.numeric_perp_leverage > self.max_leverage:
            raise ValueError(
                f"numeric_perp_leverage ({self.numeric_perp_leverage}) must be <= max_leverage ({self.max_leverage})"
            )
        return self


_PINNED_FIELDS = frozenset((
    "num_ticks", "starting_cash", "num_markets", "num_perps", "num_npcs", "num_groups", "market_liquidity", "fee_rate",
    "min_fee", "min_order", "market_duration_min", "market_duration_max", "max_leverage", "funding_interval",
    "perp_volatility", "news_rate", "post_rate", "tip_rate", "npc_trade_rate", "npc_starting_cash", "narrative_rate",
    "reward_scheme", "pnl_scale", "form_scale", "risk_threshold", "risk_penalty", "reward_weights", "reward_mark",
    "archetype", "backend", "numeric_perp_leverage"))
"""The fields the records held when they were first pinned: a dump always writes these, and a field added since
only where it differs from its default (`_omit_late_defaults`), so adding a field changes no record."""


def config_table() -> str:
    """Every config field as a markdown table (name, default, meaning): what docs/config.md shows, generated from the
    fields' declarations when the docs are built (docs_hooks.py), so a new field is documented where it is declared."""
    rows = ["| field | default | meaning |", "|---|---|---|"]
    for name, field in RLAIFEnvConfig.model_fields.items():
        default = field.default_factory() if field.default_factory is not None else field.default
        rows.append(f"| `{name}` | {default} | {field.description} |")
    return "\n".join(rows)


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
