"""Constant-product market maker (CPMM) for binary prediction markets, as pure array functions.

Pools hold YES and NO shares with invariant k = yes * no and the production Babylon price convention
yes_price = no / (yes + no) (docs/babylon.md ("The original's engines and world")). A trade mints or
burns complete sets (1 USD = 1 YES + 1 NO), the fixed-product form used by Gnosis/Omen: buying YES
with u USD adds u to both pools and takes out YES shares until yes * no = k again. Its marginal
price equals the displayed price, so a share bought at 0.40 really costs 0.40 at the margin; the
literal production formula (no' = no + u, yes' = k / no') charges no/yes per share instead, which at
a 50% price is a full dollar for a share that pays a dollar, so we do not copy it.

All functions take and return numpy arrays of the same shape; the "outcome side" argument is 0 for
YES and 1 for NO. Fees are handled by the caller (taken from the buy amount before shares are
computed, and from sell proceeds).
"""

from __future__ import annotations

import numpy as np

__all__ = ["buy_shares", "sell_proceeds", "yes_price"]


def yes_price(pool_yes: np.ndarray, pool_no: np.ndarray) -> np.ndarray:
    """YES price in (0, 1); the NO price is 1 minus it."""
    return pool_no / (pool_yes + pool_no)


def buy_shares(pool_same: np.ndarray, pool_other: np.ndarray, net_amount: np.ndarray):
    """Buy shares of one side with `net_amount` USD (after fees).

    Args:
        pool_same: pool of the side being bought.
        pool_other: pool of the other side.
        net_amount: USD paid into the market, >= 0.

    Returns:
        (shares_out, new_pool_same, new_pool_other).
    """
    k = pool_same * pool_other
    new_other = pool_other + net_amount
    new_same = k / new_other
    shares = pool_same + net_amount - new_same
    return shares, new_same, new_other


def sell_proceeds(pool_same: np.ndarray, pool_other: np.ndarray, shares: np.ndarray):
    """Sell `shares` of one side back to the pool, burning complete sets for USD.

    The seller adds `shares` to the same-side pool; the market then burns r complete sets so that
    (same + shares - r) * (other - r) = k, which has the closed form below (smaller root).

    Returns:
        (gross_proceeds_usd, new_pool_same, new_pool_other).
    """
    a = pool_same + shares + pool_other
    disc = np.maximum(a * a - 4.0 * shares * pool_other, 0.0)
    # Numerically stable smaller root of r^2 - a r + shares*other = 0.
    r = (2.0 * shares * pool_other) / (a + np.sqrt(disc))
    return r, pool_same + shares - r, pool_other - r
