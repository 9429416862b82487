"""Checks shared by the encoding tests (a plain module, imported as `from tick_checks import ...`)."""

from __future__ import annotations

from rlaif_gym.encoding.grammar import TickIds
from rlaif_gym.encoding.view import TickView


def assert_ids_match_view(ids: TickIds | None, view: TickView) -> None:
    """`TickIds.from_prompt` read back the markets, holdings, perps, positions and unjoined groups of `view`."""
    assert ids is not None
    assert ids.markets == tuple(m.market_id for m in view.markets)
    assert ids.held == tuple((m.market_id, o) for m in view.markets
                             for o, h in (("YES", m.held_yes), ("NO", m.held_no)) if h > 0)
    assert ids.tickers == tuple(p.ticker for p in view.perps if not p.position_id)
    assert ids.positions == tuple((p.ticker, p.position_id) for p in view.perps if p.position_id)
    assert ids.groups == tuple(g for g, joined in view.groups if not joined)
