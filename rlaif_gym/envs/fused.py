"""One compiled call per numeric step: check + decode + world + reward + encode (the default path).

`RLAIFCore.step` with the compiled backend and the skill reward calls `FusedStep.step`, which hands
integer actions of shape (B, 4) to `_fused`, a numba function that, per world, checks the action
against the space, decodes it (`encoding.action.numeric_amount`, as `decode_actions`), runs the world kernel
(`sim.rules.kernel`), computes the reward components and their weighted sum
(`rewards.composite.RewardFunction` with the skill scheme: pnl and risk), and writes the observation
(`encoding.fast`). Python only wraps the results. Without it, one step crossed the Python/numpy
boundary about twenty times (decoding, ~86 unboxed array arguments twice, the reward's numpy
temporaries, the observation), which cost 10-20x the compiled work at one world.

Exactness: each stage does the same floating-point operations, in the same order, as the unfused
stages it replaces (decode's equity is the kernel's own `equity`, which sums in numpy's order; the
reward is `(0 + c_pnl x pnl) + c_risk x risk`, as `RewardFunction.combine` accumulates it), so the
fused and unfused compiled paths agree bit for bit (tests/envs/test_fused.py). Configs it does not
cover (the original reward scheme, an archetype's behaviour term) take the unfused path.
"""

from __future__ import annotations

import numpy as np

from .. import sim
from ..encoding import fast as encoding_fast
from ..encoding.action import (
    ACTION_KINDS,
    BUY_FRACTIONS,
    KIND_SIZE_RULES,
    SELL_FRACTIONS,
    SIZE_EQUITY,
    SIZE_LEVERAGED,
    numeric_amount,
)
from ..errors import InvalidActionError
from ..rewards.components import BANKRUPTCY_PENALTY
from ..sim import rules as sim_rules

__all__ = ["FusedStep", "supports"]


_KIND_CODES = np.asarray(ACTION_KINDS, dtype=np.int64)
"""The ActionType code of each numeric action kind (the space's kind i), read by `_fused` from `ic`; its size rule
(`encoding.action.KIND_SIZE_RULES`) follows them."""

# Status codes of `_fused`.
OK, BAD_ACTION, NOT_FINITE = 0, 1, 2

# Rows of the float outcome array after sim.rules's 11 (`OUT_F`): the components, then the reward.
COMPONENTS = ("pnl", "risk")
"""The components the fused step computes, in `RewardFunction.components`' order."""
_PNL_ROW, _RISK_ROW, _REWARD_ROW = len(sim_rules.OUT_F), len(sim_rules.OUT_F) + 1, len(sim_rules.OUT_F) + 2

# The rows and constants `_fused` reads, looked up by name in sim.rules's layouts (compile-time constants).
_NUM_MARKETS, _NUM_PERPS = sim_rules.PI.index("num_markets"), sim_rules.PI.index("num_perps")
_FEE_RATE, _MIN_FEE = sim_rules.PF.index("fee_rate"), sim_rules.PF.index("min_fee")
_FILLED_USD, _EQUITY_BEFORE, _PNL_DELTA, _EXPOSURE_RATIO, _LEVERAGE_REQUESTED = (
    sim_rules.OUT_F.index(n) for n in ("filled_usd", "equity_before", "pnl_delta", "exposure_ratio",
                                      "leverage_requested"))
_ADDED_EXPOSURE, _BANKRUPT = sim_rules.OUT_B.index("added_exposure"), sim_rules.OUT_B.index("bankrupt")

FC = (("buy_fractions", len(BUY_FRACTIONS)), ("sell_fractions", len(SELL_FRACTIONS)), ("perp_leverage", 1),
      ("starting_cash", 1), ("pnl_scale", 1), ("max_leverage", 1), ("risk_threshold", 1), ("risk_penalty", 1),
      ("c_pnl", 1), ("c_risk", 1), ("bankruptcy_penalty", 1),
      ("obs_cash", 1), ("obs_duration_max", 1), ("obs_num_ticks", 1), ("obs_max_leverage", 1))
"""The layout of `_fused`'s float constants (fc), name and length in order: the decoder's fractions and leverage,
the reward's 8 constants, the encoder's 4 scales; the observation's low and high bounds (D each) follow."""
_FC_AT = dict(zip((name for name, _ in FC), np.cumsum([0] + [n for _, n in FC[:-1]]).tolist(), strict=True))
_FC_BOUNDS = sum(n for _, n in FC)
_BUYS, _SELLS, _PERP_LEVERAGE = _FC_AT["buy_fractions"], _FC_AT["sell_fractions"], _FC_AT["perp_leverage"]
_REWARD_CONSTS = tuple(_FC_AT[n] for n in ("starting_cash", "pnl_scale", "max_leverage", "risk_threshold",
                                           "risk_penalty", "c_pnl", "c_risk", "bankruptcy_penalty"))
_OBS_CONSTS = tuple(_FC_AT[n] for n in ("obs_cash", "obs_duration_max", "obs_num_ticks", "obs_max_leverage"))


def _fused(pf, pi, beh, cf, fc, ic, acts, isc, fsc, out_f, out_i, out_b, obs, fb, ib, kb, bb, tab, sf, si, sb, esc):
    """One step of every world; returns a status code (OK, BAD_ACTION, NOT_FINITE).

    fc: the float constants, laid out as `FC` names them, then the observation's low and high bounds (D each);
    ic: the action space's nvec (4), then the ActionType code of each numeric kind (`_KIND_CODES`), then its size
    rule (`KIND_SIZE_RULES`). isc, fsc:
    scratch rows of the decoded batch; sf, si, sb: the world kernel's scratch (`sim.rules.scratch`); esc: the
    encoder's (`encoding.fast.scratch`), whose first max(M, P) floats also serve the decoder.
    """
    s = sim_rules.state_views(fb, ib, kb, bb, tab)
    nb = s.tick.shape[0]
    kind, target, side, pre_error = isc[0], isc[1], isc[2], isc[3]
    amount, leverage, pre_a, pre_b = fsc[0], fsc[1], fsc[2], fsc[3]
    buy_fractions = fc[_BUYS:_BUYS + len(BUY_FRACTIONS)]
    sell_fractions = fc[_SELLS:_SELLS + len(SELL_FRACTIONS)]
    perp_leverage = fc[_PERP_LEVERAGE]
    dim = obs.shape[1]
    low, high = fc[_FC_BOUNDS:_FC_BOUNDS + dim], fc[_FC_BOUNDS + dim:_FC_BOUNDS + 2 * dim]
    # The space check comes first and rejects the whole batch before any world changes.
    for b in range(nb):
        for j in range(4):
            if acts[b, j] < 0 or acts[b, j] >= ic[j]:
                return BAD_ACTION
    m, np_, kinds = pi[_NUM_MARKETS], pi[_NUM_PERPS], ic[0]
    buf = esc[0:max(m, np_)]
    for b in range(nb):
        t, q, sd = acts[b, 1], acts[b, 2], acts[b, 3]
        rule = ic[4 + kinds + acts[b, 0]]
        kind[b] = ic[4 + acts[b, 0]]
        target[b] = t
        side[b] = sd
        leverage[b] = perp_leverage
        pre_error[b] = 0
        pre_a[b] = 0.0
        pre_b[b] = 0.0
        priced = rule == SIZE_EQUITY or rule == SIZE_LEVERAGED
        eq = sim_rules.equity_of(b, s, pf, pi, buf) if priced else 0.0
        amount[b] = numeric_amount(rule, q, t, sd, b, s, pi, eq, buy_fractions, sell_fractions, perp_leverage)
    sim_rules.kernel(pf, pi, beh, cf, kind, target, side, amount, leverage, pre_error, pre_a, pre_b, out_f, out_i,
                    out_b, fb, ib, kb, bb, tab, sf, si, sb)
    # The skill scheme's components (rewards.components.trading_component and
    # proportional_risk_component), then RewardFunction.combine's accumulation.
    r0, r1, r2, r3, r4, r5, r6, r7 = _REWARD_CONSTS
    start, pnl_scale, max_lev, threshold, penalty, c_pnl, c_risk, bankrupt_penalty = (
        fc[r0], fc[r1], fc[r2], fc[r3], fc[r4], fc[r5], fc[r6], fc[r7])
    status = OK
    for b in range(nb):
        bankrupt = out_b[_BANKRUPT, b]
        pnl = pnl_scale * out_f[_PNL_DELTA, b] / start - bankrupt_penalty * (1.0 if bankrupt else 0.0)
        lev = out_f[_LEVERAGE_REQUESTED, b]
        equity = sim_rules.fmax(out_f[_EQUITY_BEFORE, b], 1e-9)
        added_usd = out_f[_FILLED_USD, b] * sim_rules.fmax(lev, 1.0)
        above_usd = sim_rules.fmax(out_f[_EXPOSURE_RATIO, b] - threshold, 0.0) * equity
        excess_usd = sim_rules.fmin(added_usd, above_usd) if out_b[_ADDED_EXPOSURE, b] else 0.0
        excess_lev = sim_rules.fmax(lev / max_lev - 1.0, 0.0)
        risk = 0.0 - penalty * (excess_usd / start + excess_lev)
        out_f[_PNL_ROW, b] = pnl
        out_f[_RISK_ROW, b] = risk
        if not (sim_rules.isfinite(pnl) and sim_rules.isfinite(risk)):
            status = NOT_FINITE
        out_f[_REWARD_ROW, b] = (0.0 + c_pnl * pnl) + c_risk * risk
    o0, o1, o2, o3 = _OBS_CONSTS
    encoding_fast.kernel(fc[o0], fc[o1], fc[o2], fc[o3], pf[_FEE_RATE], pf[_MIN_FEE], low, high, fb, ib, kb, bb, tab,
                         obs, esc)
    return status


_fused = sim_rules.jit_flat(_fused)  # `_fused` itself where numba is missing (`supports` is then False)


def supports(reward_fn, archetype: str | None) -> bool:
    """True when the fused step computes this reward: the skill scheme with pnl and risk only (no truth mark)."""
    return sim_rules.available() and reward_fn.scheme == "skill" and reward_fn.mark == "market" and archetype is None


class FusedStep:
    """Constants and scratch buffers for `_fused` over a core of `num_worlds` worlds."""

    components = COMPONENTS

    def __init__(self, params: sim.WorldParams, layout, reward_fn, nvec: np.ndarray, perp_leverage: float,
                 num_worlds: int) -> None:
        n = num_worlds
        self.nvec = np.asarray(nvec, dtype=np.int64)
        values = {"buy_fractions": BUY_FRACTIONS, "sell_fractions": SELL_FRACTIONS, "perp_leverage": perp_leverage,
                  "starting_cash": reward_fn.starting_cash, "pnl_scale": reward_fn.pnl_scale,
                  "max_leverage": reward_fn.max_leverage, "risk_threshold": reward_fn.risk_threshold,
                  "risk_penalty": reward_fn.risk_penalty, "c_pnl": reward_fn.coefficients["pnl"],
                  "c_risk": reward_fn.coefficients["risk"], "bankruptcy_penalty": BANKRUPTCY_PENALTY,
                  "obs_cash": params.starting_cash, "obs_duration_max": params.market_duration_max,
                  "obs_num_ticks": params.num_ticks, "obs_max_leverage": params.max_leverage}
        parts = [np.atleast_1d(np.asarray(values[name], dtype=np.float64)) for name, _ in FC]
        assert [len(p) for p in parts] == [n for _, n in FC], "a constant's length differs from FC's"
        fc = np.concatenate([*parts, layout.low.astype(np.float64), layout.high.astype(np.float64)])
        ic = np.concatenate([self.nvec, _KIND_CODES, KIND_SIZE_RULES]).astype(np.int64)
        self._consts = (*sim_rules.param_arrays(params), fc, ic)
        self._scratch = (*sim_rules.scratch(self._consts[1]),
                         encoding_fast.scratch(params.num_markets, params.num_perps, len(layout.names)))
        self._isc, self._fsc = np.empty((4, n), np.int64), np.empty((4, n))
        self._reused = self._outputs(n)
        self._dim = len(layout.names)
        self.num_worlds = n
        self._warm = False

    def __setstate__(self, state: dict) -> None:
        """After `pickle` or `copy.deepcopy`: the world constants read-only again, as `sim.rules.param_arrays`
        made them.

        The compiled step is specialised on read-only constant arrays; a writable copy would make the
        next step compile a second specialisation (minutes on a cold cache) without a word."""
        self.__dict__.update(state)
        for arr in self._consts[:4]:
            arr.setflags(write=False)

    @staticmethod
    def _outputs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.empty((len(sim_rules.OUT_F) + 3, n)), np.empty((len(sim_rules.OUT_I), n), dtype=np.int64),
                np.empty((len(sim_rules.OUT_B), n), dtype=np.bool_))

    def step(self, state: sim.WorldState, actions: np.ndarray, *, reuse: bool = False):
        """Run one step of every world in `state` (mutated in place) with int64 actions (B, 4).

        Args:
            reuse: write the outcome into buffers that the next step overwrites (for a caller that
                copies what it keeps, e.g. the single env's Python floats); the observation is
                always a fresh array.

        Returns:
            (observation (B, D) float32, floats (14, B): `sim.rules.OUT_F`'s 11 rows then pnl, risk and
            the reward; ints (3, B) and bools (3, B) in `sim.rules`'s row order).

        Raises:
            InvalidActionError: an action lies outside the space (no world changed).
            ValueError: a reward component is not finite (as `RewardFunction.combine` raises).
        """
        obs = np.empty((self.num_worlds, self._dim), dtype=np.float32)
        out_f, out_i, out_b = self._reused if reuse else self._outputs(self.num_worlds)
        pf, pi, beh, cf, fc, ic = self._consts
        fb, ib, kb, bb, tab = sim_rules.packed(state)
        if not self._warm:
            with sim_rules.compile_notice(_fused):
                status = _fused(pf, pi, beh, cf, fc, ic, actions, self._isc, self._fsc, out_f, out_i, out_b, obs,
                                fb, ib, kb, bb, tab, *self._scratch)
            self._warm = True
        else:
            status = _fused(pf, pi, beh, cf, fc, ic, actions, self._isc, self._fsc, out_f, out_i, out_b, obs,
                            fb, ib, kb, bb, tab, *self._scratch)
        if status != OK:
            self._raise(status, out_f)
        return obs, out_f, out_i, out_b

    def _raise(self, status: int, out_f: np.ndarray) -> None:
        if status == BAD_ACTION:
            raise InvalidActionError(f"actions must be integers with 0 <= a[..., i] < {self.nvec.tolist()} "
                                     "([kind, target, size, side]); sample one with env.action_space.sample()")
        rows = {"pnl": out_f[_PNL_ROW], "risk": out_f[_RISK_ROW]}
        raise ValueError(f"reward component(s) not finite: {rows!r}")

    def components_of(self, out_f: np.ndarray) -> dict[str, np.ndarray]:
        """The reward components (B,) of a step's float outcome, as `RewardFunction.components` names them."""
        return {"pnl": out_f[_PNL_ROW], "risk": out_f[_RISK_ROW]}

    @staticmethod
    def reward_of(out_f: np.ndarray) -> np.ndarray:
        """The reward (B,) of a step's float outcome."""
        return out_f[_REWARD_ROW]

    @staticmethod
    def outcome(out_f: np.ndarray, out_i: np.ndarray, out_b: np.ndarray) -> sim.StepOutcome:
        """A `StepOutcome` whose arrays are rows of `step`'s outcome arrays."""
        return sim_rules.outcome_of(out_f[:_PNL_ROW], out_i, out_b)
