"""The composite reward: the only place where component weights are applied.

`RewardFunction` turns one transition (the world's `StepOutcome`, plus the rule judge's scores and
the behaviour tracker's change where a face has them) into named raw components and weights them.
Two schemes, chosen by `RLAIFEnvConfig.reward_scheme`:

**skill** (the default; the return ranks skill, docs/reward.md). Weights are read relative to the
archetype row's pnl weight (`unit`: .5 for the default row), so with the row's own weights:

    reward_t = pnl_t + (w_risk/w_pnl) risk_t + (w_behavior/w_pnl) behavior_t
               + form_scale x (w_format format_t + w_reasoning reasoning_t) / (w_pnl x num_ticks)

* `pnl_t` = pnl_scale x pnl_delta / starting_cash (pnl_scale 1), minus 1 on the bankrupt step: it
  telescopes, so an episode's trading part sums to PnL / starting cash - 1[bankrupt] exactly.
* `risk_t` = -risk_penalty x USD of exposure the action adds above risk_threshold x equity, over
  starting cash (0.1: ten cents per dollar past 80 % of equity), minus the same for leverage asked
  beyond the cap.
* `format_t` in [-1, 0] (0: clean canonical reply; -1: nothing executable) and `reasoning_t` in
  [0, 1] are divided by the episode length and scaled by `form_scale` (0.25), so their
  whole-episode effect is bounded: with the default row a perfect episode of reasoning is worth
  0.075 (750 USD at 10,000 starting cash) and an episode of unparseable replies costs 0.125. Form
  separates replies of equal trading value; it cannot buy a higher return than trading well.
  Raise `form_scale` to push format harder (e.g. early in LLM training).
* `behavior_t` is the archetype's behaviour score change (potential-based), so its sum is the
  episode's behaviour score; with `social-butterfly` (pnl .10, behavior .55) it dominates, with
  `trader` (.55, .10) PnL does.
* `truth_mark_t` (only with `reward_mark="truth"`, a training option) = pnl_scale x (Phi(s') - Phi(s)) /
  starting_cash, Phi = `sim.truth_potential`: the held shares at the hidden p* less what they would
  fetch now. Potential-based shaping (Ng, Harada & Russell 1999): a bet is credited at its own tick
  with its expected value, the per-step values sum to Phi(s_T) (0 once every position has resolved),
  and the optimal policy is unchanged. Its coefficient is tied to pnl's, like risk's. It reads the
  hidden truth, in the reward only: prompts, observations and feedback are the same with or without it.

**original** (Babylon's composite, for porting code; docs/babylon.md ("The original's reward formulas")):

    reward_t = clip( sum_c w_c x_c / sum_{c present, c != risk} w_c , -1, 1 ),  -1 on bankruptcy

with pnl = clip(10 x pnl_delta / starting_cash, -1, 1), risk a flat -0.5 per buy/open above 80 %
exposure, and format in [-1, 1] (+1 for a clean reply). Its return does not rank traders: every
valid reply earns format and reasoning income each tick, the per-step clip saturates a
resolution's gain while small losses accumulate, and a flat risk charge per buy punishes the
oracle hardest. On 100 held-out seeds (`make ranking`) the oracle, which makes about +38,600 USD,
gets the lowest numeric return (-48.8), a boilerplate hold returns more than the informed text
policy (64.9 against 62.2), and Spearman(return, PnL) is -0.45 (numeric) and 0.02 (text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..config import REWARD_COMPONENTS, RLAIFEnvConfig
from ..errors import ConfigError
from .components import (
    format_penalty,
    pnl_component,
    proportional_risk_component,
    risk_component,
    trading_component,
)

__all__ = [
    "COMPONENT_NAMES",
    "DEFAULT_WEIGHTS",
    "REWARD_MARKS",
    "REWARD_SCHEMES",
    "SCHEME_DEFAULTS",
    "RewardFunction",
    "combine_components",
    "resolve_weights",
]

COMPONENT_NAMES: tuple[str, ...] = REWARD_COMPONENTS
"""Every reward component, in the order `RewardFunction.components` reports them (declared with the config, which
checks weight names against it)."""
REWARD_MARKS: tuple[str, ...] = ("market", "truth")
REWARD_SCHEMES: tuple[str, ...] = ("skill", "original")
SCHEME_DEFAULTS: dict[str, dict[str, float]] = {
    "skill": {"pnl_scale": 1.0, "risk_penalty": 0.1},
    "original": {"pnl_scale": 10.0, "risk_penalty": 0.5},
}
"""What `pnl_scale=None` and `risk_penalty=None` mean under each scheme."""

_PENALTIES = frozenset({"risk"})
_PER_EPISODE = frozenset({"format", "reasoning"})
"""Skill-scheme components whose coefficient is divided by the episode length."""


class TransitionLike(Protocol):
    """The fields of `sim.StepOutcome` the reward reads (arrays of worlds)."""

    pnl_delta: np.ndarray
    bankrupt: np.ndarray
    added_exposure: np.ndarray
    exposure_ratio: np.ndarray
    filled_usd: np.ndarray
    leverage_requested: np.ndarray
    equity_before: np.ndarray


def resolve_weights(archetype: str | None, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Every component weight: the archetype's row of the original's table, risk = the pnl weight, then overrides.

    Args:
        archetype: an archetype name (normalised; None or unknown -> the `default` row).
        overrides: explicit weights from the config, applied last.
    """
    from .archetypes import archetype_weights  # same package; kept local so this module reads standalone

    weights = {k: float(v) for k, v in archetype_weights(archetype).items()}
    weights["risk"] = weights["pnl"]
    if overrides and "pnl" in overrides and "risk" not in overrides:
        weights["risk"] = float(overrides["pnl"])
    weights.update({k: float(v) for k, v in (overrides or {}).items()})
    return weights


def _with_truth_mark(weights: dict[str, float], overrides: Mapping[str, float] | None) -> dict[str, float]:
    """`weights` plus truth_mark at the (final) pnl weight, unless the overrides set it."""
    if "truth_mark" not in (overrides or {}):
        weights = {**weights, "truth_mark": weights["pnl"]}
    return weights


def _check_finite(components: Mapping[str, Any]) -> dict[str, np.ndarray]:
    arrays = {}
    for name, value in components.items():
        if name not in COMPONENT_NAMES:
            raise KeyError(f"unknown reward component {name!r}; known: {', '.join(COMPONENT_NAMES)}")
        arr = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"reward component {name!r} is not finite: {value!r}")
        arrays[name] = arr
    return arrays


def combine_components(components: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """The original scheme's weighting: clip(sum w x / sum of the present non-penalty weights, -1, 1).

    Bankruptcy is not applied here (`RewardFunction.combine` sets -1). Kept public for code that
    reproduces Babylon's numbers component by component.

    Raises:
        KeyError: a component has no weight or an unknown name (the config layer validates weights
            up front, so this signals a programming error).
        ValueError: a component value is NaN or infinite.
    """
    total: np.ndarray | float = 0.0
    norm = 0.0
    for name, arr in _check_finite(components).items():
        w = float(weights[name])
        total = total + w * arr
        if name not in _PENALTIES:
            norm += w
    if norm <= 0.0:
        return np.zeros_like(np.asarray(total, dtype=np.float64))
    return np.clip(np.asarray(total, dtype=np.float64) / norm, -1.0, 1.0)


@dataclass(frozen=True)
class RewardFunction:
    """Components and the weighted total of one transition, for one config (see the module docstring).

    Build it with `from_config`; every face (single, vector, SB3 VecEnv, multi-agent, text) calls the
    same `components` and `combine`, so they agree bit for bit.

    Attributes:
        weights: every component weight (archetype row, risk = pnl, then config overrides).
        unit: the skill scheme's unit weight, the archetype row's own pnl weight before overrides.
            Overriding pnl to twice the row doubles the trading part; to 0, reports it unweighted.
        coefficients: each component's multiplier in the skill scheme's per-step sum.
    """

    scheme: str
    weights: dict[str, float]
    unit: float
    starting_cash: float
    num_ticks: int
    max_leverage: float
    pnl_scale: float
    risk_threshold: float
    risk_penalty: float
    form_scale: float
    mark: str = "market"
    coefficients: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        if self.scheme not in REWARD_SCHEMES:
            raise ConfigError(f"reward_scheme must be one of {REWARD_SCHEMES}, got {self.scheme!r}")
        if self.mark not in REWARD_MARKS or (self.mark == "truth" and self.scheme != "skill"):
            raise ConfigError(f"reward_mark must be one of {REWARD_MARKS} ('truth' with the skill scheme only), "
                              f"got {self.mark!r}")
        object.__setattr__(self, "coefficients", self._coefficients())

    @classmethod
    def from_config(cls, config: RLAIFEnvConfig, archetype: str | None) -> RewardFunction:
        """The reward of `config` for an (already normalised) archetype."""
        defaults = SCHEME_DEFAULTS[config.reward_scheme]
        weights = resolve_weights(archetype, config.reward_weights)
        if config.reward_mark == "truth":
            weights = _with_truth_mark(weights, config.reward_weights)
        return cls(
            scheme=config.reward_scheme,
            weights=weights,
            unit=resolve_weights(archetype)["pnl"],
            starting_cash=config.starting_cash,
            num_ticks=config.num_ticks,
            max_leverage=config.max_leverage,
            pnl_scale=defaults["pnl_scale"] if config.pnl_scale is None else config.pnl_scale,
            risk_threshold=config.risk_threshold,
            risk_penalty=defaults["risk_penalty"] if config.risk_penalty is None else config.risk_penalty,
            form_scale=config.form_scale,
            mark=config.reward_mark,
        )

    def _coefficients(self) -> dict[str, float]:
        """Skill: each component's multiplier in the per-step sum. Original: its weight (then normalised)."""
        if self.scheme == "original":
            return dict(self.weights)
        per_episode = self.form_scale / self.num_ticks
        return {name: w / self.unit * (per_episode if name in _PER_EPISODE else 1.0)
                for name, w in self.weights.items()}

    def components(
        self,
        out: TransitionLike,
        *,
        format_score: np.ndarray | None = None,
        reasoning: np.ndarray | None = None,
        behavior: np.ndarray | None = None,
        truth_gain: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """The raw components of a batch of transitions (B,) under this scheme.

        Args:
            out: the world's step outcome.
            format_score: the rule judge's format score in [-1, 1] (text face); the skill scheme
                reports it as a penalty, `format_penalty(format_score)`.
            reasoning: the rule judge's reasoning score in [0, 1] (text face).
            behavior: the archetype behaviour score's change this step.
            truth_gain: with `mark="truth"`, the change of `sim.truth_potential` over the transition, USD
                (required then, ignored otherwise).
        """
        if self.scheme == "skill":
            comps = {
                "pnl": trading_component(out.pnl_delta, out.bankrupt, self.starting_cash, self.pnl_scale),
                "risk": proportional_risk_component(
                    out.added_exposure, out.exposure_ratio, out.filled_usd, out.leverage_requested,
                    out.equity_before, self.starting_cash, self.max_leverage, self.risk_threshold, self.risk_penalty),
            }
        else:
            comps = {
                "pnl": pnl_component(out.pnl_delta, self.starting_cash, self.pnl_scale),
                "risk": risk_component(out.added_exposure, out.exposure_ratio, out.leverage_requested,
                                       self.max_leverage, self.risk_threshold, self.risk_penalty),
            }
        if format_score is not None:
            fmt = np.asarray(format_score, np.float64)
            comps["format"] = format_penalty(fmt) if self.scheme == "skill" else fmt
        if reasoning is not None:
            comps["reasoning"] = np.asarray(reasoning, np.float64)
        if behavior is not None:
            comps["behavior"] = np.asarray(behavior, np.float64)
        if self.mark == "truth":
            if truth_gain is None:
                raise ValueError("reward_mark='truth' needs the transition's truth_gain (sim.truth_potential after "
                                 "minus before)")
            comps["truth_mark"] = self.pnl_scale * np.asarray(truth_gain, np.float64) / self.starting_cash
        return comps

    def combine(self, components: Mapping[str, np.ndarray], bankrupt: np.ndarray) -> np.ndarray:
        """The per-step reward (B,) from raw components: the one place weights are applied."""
        if self.scheme == "original":
            reward = combine_components(components, self.weights)
            # Bankruptcy is the worst outcome and ends the episode: -1, never the original's unclipped -10.
            return np.where(np.asarray(bankrupt, bool), -1.0, reward)
        total = np.zeros(np.shape(np.asarray(bankrupt)), dtype=np.float64)
        coefficients = self.coefficients
        for name, value in components.items():
            if name not in coefficients:
                _check_finite({name: value})  # an unknown name: the KeyError that lists the known ones
                raise KeyError(f"reward component {name!r} has no weight in this reward (weighted: "
                               f"{', '.join(coefficients)}); set it with reward_weights")
            total = total + coefficients[name] * np.asarray(value, dtype=np.float64)
        if not np.isfinite(total).all():  # a NaN or infinite component (or none: then say which overflowed)
            _check_finite(components)
            raise ValueError(f"the reward overflowed: {total!r} from finite components {dict(components)!r}")
        return total

    def trading_return(self, final_equity: np.ndarray, bankrupt: np.ndarray) -> np.ndarray:
        """Skill scheme: what an episode's trading part (coefficient x pnl component) sums to.

        (w_pnl / unit) x [pnl_scale x (final equity - starting cash) / starting cash - 1[bankrupt]]: the
        PnL in units of starting cash, less 1 for bankruptcy, under the defaults. Equal to the
        per-step sum within float rounding (tests check 1e-9).
        """
        if self.scheme != "skill":
            raise ValueError("only the skill scheme's trading part telescopes; the original clips each step")
        money = trading_component(np.asarray(final_equity, np.float64) - self.starting_cash, bankrupt,
                                  self.starting_cash, self.pnl_scale)
        return self.coefficients["pnl"] * money


DEFAULT_WEIGHTS: dict[str, float] = resolve_weights(None)
"""The original's `default` archetype row, plus risk tied to the pnl weight.

The original's table: docs/babylon.md ("The original's archetypes").
"""
