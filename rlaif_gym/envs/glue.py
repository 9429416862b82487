"""The face glue every env shares, in one place: the archetype check, a reply's action row, feedback, info.

The single env (`RLAIFEnv`), the text env, the multi-agent env, SB3's VecEnv and the replay of a
recorded run (`report/replay.py`) all turn what arrives into an `ActionBatch` row and what the world
did into the same `info` dicts. They call these functions rather than keep copies, so one reply gives the
same row, the same `feedback` and the same `info` keys in every face (docs/layout.md ("Design rules")).
The compiled fast path of the single env (`RLAIFEnv._fused_step`) builds its info from the kernel's
scalars but calls `feedback_of` for its feedback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import sim
from ..encoding.reply import ParsedReply, parse_reply
from ..errors import ConfigError, InvalidActionError
from ..rewards.archetypes import normalize_archetype

__all__ = ["action_row", "check_archetype", "check_reply", "decode_reply", "feedback_of", "fill_info",
           "fixed_stake_amount", "reset_infos", "step_feedback", "step_info"]


def check_archetype(archetype: str | None) -> str | None:
    """The config's `archetype` in canonical form (None: no archetype).

    Raises:
        ConfigError: an archetype the original system does not have (the message lists the known ones).
    """
    try:
        return None if archetype is None else normalize_archetype(archetype, strict=True)
    except ValueError as exc:
        raise ConfigError(f"archetype: {exc}") from None


def check_reply(action: object, subject: str = "the text env's action") -> str:
    """A text-face action: the reply string itself.

    Args:
        action: what the policy sent.
        subject: how the message names it (the multi-agent env prefixes the agent's name).

    Raises:
        InvalidActionError: anything but a `str`.
    """
    if not isinstance(action, str):
        raise InvalidActionError(f"{subject} is the reply string, got {type(action).__name__}")
    return action


def action_row(state: sim.WorldState, params: sim.WorldParams, world: int,
               action: sim.Action | None) -> sim.ResolvedAction:
    """The `ActionBatch` row of a reply's canonical action in world `world`.

    None (the reply had no executable action) is `ResolvedAction.invalid_reply()`: a wait the engine
    reports as failed. (`sim.resolve_action` reads None as a plain wait instead.)
    """
    if action is None:
        return sim.ResolvedAction.invalid_reply()
    return sim.resolve_action(state, params, world, action)


def fixed_stake_amount(fraction: float, cash: float) -> float:
    """The amount in USD every bet stakes under the `fixed_stake` task rule: `fraction` of `cash`, rounded to cents
    (what the format-only teacher writes for the same fraction)."""
    return round(fraction * cash, 2)


def decode_reply(reply: str, state: sim.WorldState, params: sim.WorldParams,
                 world: int = 0, *, think_required: bool = True,
                 fixed_stake: float | None = None) -> tuple[ParsedReply, sim.ResolvedAction]:
    """Parse a reply and resolve its action against world `world`: (the parsed reply, its `ActionBatch` row).
    `think_required=False` where the system prompt makes `<think>` optional (`parse_reply`). `fixed_stake` (the
    config's rule, a fraction of cash): a bet's amount is that share of the world's cash now, whatever the reply
    wrote (`fixed_stake_amount`)."""
    fixed = None if fixed_stake is None else {
        "buy_prediction": {"amount": fixed_stake_amount(fixed_stake, float(state.cash[world]))}}
    parsed = parse_reply(reply, think_required=think_required, fixed=fixed)
    return parsed, action_row(state, params, world, parsed.action)


def feedback_of(success: bool, code: Any = 0, a: Any = 0.0, b: Any = 0.0,
                reply_errors: Sequence[str] | None = None) -> dict[str, Any]:
    """`info["feedback"]`: `{"success": bool, "error": str | None}`.

    The error is the reply's format errors (joined by "; ") when `reply_errors` is given (a reply
    without an executable action), else None on success and `sim.error_message(code, a, b)` on failure.
    """
    if reply_errors is not None:
        return {"success": success, "error": "; ".join(reply_errors)}
    return {"success": success, "error": None if success else sim.error_message(code, a, b)}


def step_feedback(out: sim.StepOutcome, world: int = 0, parsed: ParsedReply | None = None) -> dict[str, Any]:
    """`info["feedback"]` of world `world` after a step; `parsed`: the text face's parsed reply (None: numeric)."""
    ok = bool(out.success[world])
    if parsed is not None and parsed.action is None:
        return feedback_of(ok, reply_errors=parsed.errors)
    return feedback_of(ok, out.error[world], out.error_a[world], out.error_b[world])


def fill_info(out: sim.StepOutcome, world: int) -> dict[str, float | int]:
    """`info["fill"]` of world `world`: what its action filled and what the tick settled, in USD and shares.

    The one definition for every numeric env (the single env, the SB3 VecEnv, the multi-agent env): `shares`
    and `usd` filled by the action (USD paid for a buy, received for a sell, margin posted or returned for a
    perp), its `fee` in USD, the `payout` of resolved markets in USD, and counts of `markets_resolved` and
    `positions_liquidated` this tick.
    """
    return {"shares": float(out.filled_shares[world]), "usd": float(out.filled_usd[world]),
            "fee": float(out.fee[world]), "payout": float(out.payout[world]),
            "markets_resolved": int(out.resolved[world]), "positions_liquidated": int(out.liquidated[world])}


def step_info(components: Mapping[str, np.ndarray], out: sim.StepOutcome, state: sim.WorldState,
              fb: dict[str, Any] | None, world: int = 0) -> dict[str, Any]:
    """The info every env returns after a step, for world `world`.

    `reward_components` (floats), `pnl_delta`, `equity`, `cash` (USD), `feedback` (`fb`), `tick` and
    `fill` (`fill_info`): the keys `RLAIFEnv` documents as a public contract. `state` is the world after
    the step (cash and tick are read from it).
    """
    return {
        "reward_components": {name: float(v[world]) for name, v in components.items()},
        "pnl_delta": float(out.pnl_delta[world]),
        "equity": float(out.equity_after[world]),
        "cash": float(state.cash[world]),
        "feedback": fb,
        "tick": int(state.tick[world]),
        "fill": fill_info(out, world),
    }


def reset_infos(state: sim.WorldState, params: sim.WorldParams,
                worlds: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The info a reset returns, for each of `worlds` (default: every world of the batch).

    `equity` and `cash` (USD) and `tick` of the new episode's first state: what `RLAIFEnv.reset` returns, the
    account keys its `step` info carries too (no action mask: like the step info, a reset's info carries none;
    `action_masks()` computes one when asked). The one definition for the single env and SB3's VecEnv, at a
    reset and at an auto-reset, so that a VecEnv's `reset_infos` are what `DummyVecEnv`'s sub-envs return.
    """
    equity = sim.equity(state, params)
    picked = range(state.batch_size) if worlds is None else worlds
    return [{"equity": float(equity[i]), "cash": float(state.cash[i]), "tick": int(state.tick[i])} for i in picked]
