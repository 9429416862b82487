"""Trading and LLM metrics computed from recorded trajectories (pure numpy over the trajectory schema).

What the record holds and what it does not. A trajectory step records the equity before the
action (`environment_state.agent_balance`), the equity change of the whole transition
(`feedback.pnl_delta`), the canonical action and whether it executed, the reward components, the
rule judge's breakdown and every LLM call. From that alone this module computes PnL and return,
Sharpe, Sortino, Calmar, maximum drawdown, the format-valid rate, the reward components, the
judge score and latency and tokens per call.

Since fills were added to `Feedback`, each step also records the fee, the USD and shares its action
moved, the resolution payout and the counts of resolved markets and liquidations. It does **not**
hold which markets resolved, their outcomes and hidden probabilities, or the positions a trade
opened and closed (and records written before fills were kept lack the fills too). The
metrics that need them (win rate, profit factor, turnover, fees, prediction accuracy and Brier
score) read an `EpisodeLedger` instead: the ground truth of one episode, which
`rlaif_gym.report.replay` rebuilds by replaying the recorded actions on the recorded seed and
config, checking every tick's equity against the record. Without a ledger those metrics are
`None`; they are never guessed.

Conventions (all documented again where they are computed):

* **Time.** One tick is one simulated hour, so a year is `TICKS_PER_YEAR = 24 * 365 = 8760`
  ticks. Ratios are annualised from per-tick returns with that factor and a zero risk-free rate.
* **Returns.** The equity curve has one point before the first tick and one after each tick;
  per-tick returns are simple returns `e[t+1] / e[t] - 1`.
* **Undefined values are NaN**, not 0: a Sharpe ratio with no variance, a win rate with no
  trades. `to_jsonable` turns NaN into None and infinities into the strings "inf" / "-inf".

Imports numpy, the standard library and `rlaif_gym.trajectory` only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from .trajectory import LLMCall, Trajectory

__all__ = [
    "TICKS_PER_YEAR",
    "CallStats",
    "ClosedTrade",
    "ComponentStats",
    "Drawdown",
    "EpisodeLedger",
    "EpisodeMetrics",
    "Interval",
    "PredictionScores",
    "Resolution",
    "RunMetrics",
    "call_latencies",
    "call_stats",
    "calmar_ratio",
    "component_stats",
    "episode_metrics",
    "equity_curve",
    "format_rates",
    "interval",
    "judge_score",
    "max_drawdown",
    "prediction_scores",
    "profit_factor",
    "rank_correlation",
    "run_metrics",
    "sharpe_ratio",
    "sortino_ratio",
    "tick_returns",
    "to_jsonable",
    "turnover",
    "win_rate",
]

TICKS_PER_YEAR = 24 * 365
"""Ticks in a simulated year: one tick is one simulated hour (docs/world.md). The annualisation factor."""

_FLAT = 1e-15
"""A per-tick return spread at or below this is no spread at all (an equity curve that never moved)."""

# Keys of `Trajectory.judge_scores` read as the episode's judge score, in order of preference: the LLM
# judge's entries (`rlaif_gym.llm_judge.apply_judge_scores` writes {"score": ...} under "llm_<mode>"), then
# flat numeric entries.
_JUDGE_KEYS = ("llm_absolute", "llm_listwise", "llm_pairwise", "score", "absolute", "ruler", "listwise",
               "bradley_terry", "pairwise")


# ---------------------------------------------------------------------------------------------
# Equity, returns and risk-adjusted ratios


def equity_curve(traj: Trajectory) -> np.ndarray:
    """The agent's equity in USD before the first tick and after every tick: shape (len(steps) + 1,).

    Point 0 is the first step's `environment_state.agent_balance`; point t + 1 is step t's balance
    plus its `feedback.pnl_delta` (the equity change of the whole transition: the action, the
    world's tick, resolutions and liquidations). A step without feedback falls back to the next
    step's balance, and the last one to `final_balance`.
    """
    steps = traj.steps
    if not steps:
        start = traj.final_balance if traj.final_balance is not None else float(traj.config.get("starting_cash", 0.0))
        return np.array([float(start)])
    out = np.empty(len(steps) + 1)
    out[0] = steps[0].environment_state.agent_balance
    for i, step in enumerate(steps):
        if step.feedback is not None:
            out[i + 1] = step.environment_state.agent_balance + step.feedback.pnl_delta
        elif i + 1 < len(steps):
            out[i + 1] = steps[i + 1].environment_state.agent_balance
        else:
            out[i + 1] = traj.final_balance if traj.final_balance is not None else step.environment_state.agent_balance
    return out


def tick_returns(equity: np.ndarray) -> np.ndarray:
    """Simple per-tick returns `e[t+1] / e[t] - 1`, shape (len(equity) - 1,); 0 after equity reached 0."""
    e = np.asarray(equity, dtype=np.float64)
    prev, nxt = e[:-1], e[1:]
    return np.divide(nxt, prev, out=np.ones_like(prev), where=prev > 0) - 1.0


def sharpe_ratio(returns: np.ndarray, periods_per_year: float = TICKS_PER_YEAR) -> float:
    """Annualised Sharpe ratio: mean / sample std (ddof 1) of per-tick returns x sqrt(periods_per_year).

    Zero risk-free rate. NaN with fewer than two returns or no spread (e.g. an agent that only
    waits and never holds anything).
    """
    r = np.asarray(returns, dtype=np.float64)
    if len(r) < 2:
        return math.nan
    sd = float(r.std(ddof=1))
    if sd <= _FLAT:
        return math.nan
    return float(r.mean()) / sd * math.sqrt(periods_per_year)


def sortino_ratio(returns: np.ndarray, periods_per_year: float = TICKS_PER_YEAR) -> float:
    """Annualised Sortino ratio: mean / downside deviation of per-tick returns x sqrt(periods_per_year).

    Downside deviation = sqrt(mean(min(r, 0)^2)) over *all* ticks (target return 0, Sortino & Price).
    NaN with fewer than two returns or no losing tick (the ratio is unbounded, not informative).
    """
    r = np.asarray(returns, dtype=np.float64)
    if len(r) < 2:
        return math.nan
    downside = math.sqrt(float(np.mean(np.minimum(r, 0.0) ** 2)))
    if downside <= _FLAT:
        return math.nan
    return float(r.mean()) / downside * math.sqrt(periods_per_year)


@dataclass(frozen=True)
class Drawdown:
    """The worst fall of an equity curve from its running peak.

    Attributes:
        max_fraction: largest (peak - equity) / peak, in [0, 1] (0.25 = a 25% drawdown).
        max_usd: largest peak - equity, USD (maximised on its own; may sit elsewhere than max_fraction).
        peak_index: index of the peak before the max_fraction trough (an index into the equity curve).
        trough_index: index of the max_fraction trough.
        duration_ticks: the longest stretch of consecutive ticks spent below the running peak; an
            unrecovered drawdown counts up to the end of the curve. E.g. [100, 90, 95, 100] gives 2.
    """

    max_fraction: float
    max_usd: float
    peak_index: int
    trough_index: int
    duration_ticks: int


def max_drawdown(equity: np.ndarray) -> Drawdown:
    """Maximum drawdown of an equity curve (value as a fraction and in USD, and its duration in ticks)."""
    e = np.asarray(equity, dtype=np.float64)
    if len(e) == 0:
        return Drawdown(0.0, 0.0, 0, 0, 0)
    peak = np.maximum.accumulate(e)
    gap = peak - e
    frac = np.divide(gap, peak, out=np.zeros_like(gap), where=peak > 0)
    trough = int(np.argmax(frac))
    peak_index = int(np.nonzero(e[: trough + 1] == peak[trough])[0][0]) if trough else 0
    # Below the peak by more than float noise (1e-9 of the peak) counts as under water.
    under = gap > 1e-9 * np.maximum(np.abs(peak), 1.0)
    longest = run = 0
    for flag in under:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    return Drawdown(float(frac[trough]), float(gap.max()), peak_index, trough, longest)


def calmar_ratio(returns: np.ndarray, drawdown: Drawdown, periods_per_year: float = TICKS_PER_YEAR) -> float:
    """Calmar ratio: annualised mean return (mean per-tick return x periods_per_year) / max drawdown fraction.

    The arithmetic annualisation keeps a one-week episode (168 ticks) from compounding into
    meaningless numbers. NaN with no returns or no drawdown.
    """
    r = np.asarray(returns, dtype=np.float64)
    if len(r) == 0 or drawdown.max_fraction <= 0:
        return math.nan
    return float(r.mean()) * periods_per_year / drawdown.max_fraction


# ---------------------------------------------------------------------------------------------
# Ground truth of an episode (rebuilt by rlaif_gym.report.replay) and the metrics that need it


@dataclass(frozen=True)
class ClosedTrade:
    """One round trip: a position from the tick it was opened to the tick it was closed.

    A prediction-market position is one (market id, outcome side); it opens with the first buy
    while flat and closes when a sell empties it or the market resolves. A perp position opens with
    `open_perp` and closes with `close_perp` or a liquidation. Positions still open when the
    episode ends are not trades.

    Attributes:
        instrument: e.g. "market-7 YES" or "BTCAI LONG".
        kind: "prediction" or "perp".
        open_tick, close_tick: world ticks (the tick of the opening action; the tick the close took effect).
        cost_usd: cash paid into the position: buy amounts (fees included), or perp margin plus the
            opening fee.
        proceeds_usd: cash paid back: sell proceeds net of fees and the resolution payout, or what a
            perp close returned (0 on liquidation). Funding is in it: it is taken from the margin.
        closed_by: "sold", "resolved", "closed" or "liquidated".
    """

    instrument: str
    kind: Literal["prediction", "perp"]
    open_tick: int
    close_tick: int
    cost_usd: float
    proceeds_usd: float
    closed_by: str

    @property
    def pnl_usd(self) -> float:
        """Realised PnL of the round trip, USD: proceeds - cost (every fee and funding payment included)."""
        return self.proceeds_usd - self.cost_usd


@dataclass(frozen=True)
class Resolution:
    """A market that resolved while the agent held shares in it (ground truth: outcome and truth).

    Attributes:
        market: market id, e.g. "market-7".
        tick: the tick it resolved at.
        outcome: 1 if YES won, 0 if NO won.
        truth: the hidden true probability p* of YES.
        price: the YES price the agent last saw before the resolution (the market's forecast).
        yes_shares, no_shares: the agent's shares at resolution.
    """

    market: str
    tick: int
    outcome: int
    truth: float
    price: float
    yes_shares: float
    no_shares: float


@dataclass(frozen=True)
class EpisodeLedger:
    """What an episode did that the trajectory record does not hold (see the module docstring).

    Attributes:
        fees_usd: fees the agent's action paid at each step, USD, shape (steps,).
        traded_usd: gross USD the action moved at each step: a buy's amount, a sell's proceeds
            before fees, an opened perp's notional, a closed perp's notional at the closing price.
        payout_usd: resolution payouts to the agent at each step, USD.
        trades: closed round trips, in closing order.
        open_at_end: positions still open when the episode ended (not trades).
        resolutions: markets that resolved while the agent held shares.
        perp_prices: perp prices before the first tick and after each tick, shape (steps + 1, P).
    """

    fees_usd: np.ndarray
    traded_usd: np.ndarray
    payout_usd: np.ndarray
    trades: tuple[ClosedTrade, ...]
    open_at_end: int
    resolutions: tuple[Resolution, ...]
    perp_prices: np.ndarray


def win_rate(trades: Sequence[ClosedTrade]) -> float:
    """Share of closed trades with PnL > 0 (break-even is not a win). NaN without trades."""
    if not trades:
        return math.nan
    return sum(t.pnl_usd > 0 for t in trades) / len(trades)


def profit_factor(trades: Sequence[ClosedTrade]) -> float:
    """Gross profit / gross loss of closed trades (USD / USD). +inf with profits and no loss; NaN with neither."""
    gains = sum(t.pnl_usd for t in trades if t.pnl_usd > 0)
    losses = -sum(t.pnl_usd for t in trades if t.pnl_usd < 0)
    if losses > 0:
        return gains / losses
    return math.inf if gains > 0 else math.nan


def turnover(traded_usd: np.ndarray, equity: np.ndarray) -> float:
    """Total USD traded / mean equity over the episode: how many times the book was turned over. NaN at 0 equity."""
    mean_equity = float(np.mean(equity)) if len(equity) else 0.0
    if mean_equity <= 0:
        return math.nan
    return float(np.sum(traded_usd)) / mean_equity


@dataclass(frozen=True)
class PredictionScores:
    """How the agent's market positions forecast the resolved outcomes (ground truth).

    The agent states no probabilities, so its forecast of YES for a market is the one its shares
    at resolution imply: p = yes_shares / (yes_shares + no_shares) (1 for a YES-only position,
    0 for NO-only, in between when hedged). Its call is the side with more shares; an exact hedge
    is no call and counts as wrong.

    Attributes:
        count: resolved markets the agent held shares in.
        accuracy: share of them whose call matched the outcome.
        brier: mean (p - outcome)^2 of the agent's position-implied forecast (0 best, 1 worst; for
            one-sided positions it equals 1 - accuracy).
        market_brier: the same for the market's YES price before resolution (the crowd's forecast):
            the bar to beat.
        truth_brier: the same for the hidden true probability p* (the best any forecaster can expect).
    """

    count: int
    accuracy: float
    brier: float
    market_brier: float
    truth_brier: float


def prediction_scores(resolutions: Iterable[Resolution]) -> PredictionScores:
    """Accuracy and Brier scores over the resolutions where the agent held shares (NaN when none)."""
    held = [r for r in resolutions if r.yes_shares + r.no_shares > 0]
    if not held:
        return PredictionScores(0, math.nan, math.nan, math.nan, math.nan)
    o = np.array([float(r.outcome) for r in held])
    p = np.array([r.yes_shares / (r.yes_shares + r.no_shares) for r in held])
    price = np.array([r.price for r in held])
    truth = np.array([r.truth for r in held])
    correct = (p - 0.5) * (o - 0.5) > 0
    return PredictionScores(len(held), float(correct.mean()), float(np.mean((p - o) ** 2)),
                            float(np.mean((price - o) ** 2)), float(np.mean((truth - o) ** 2)))


# ---------------------------------------------------------------------------------------------
# LLM-side metrics


def format_rates(traj: Trajectory) -> tuple[float, float]:
    """(valid, clean) shares of ticks. Valid: the reply parsed into one executable action (a failed
    trade still counts); clean: valid and no format error at all (canonical `<think>` + JSON). NaN without steps.
    """
    flags = _tick_flags(traj)
    if not flags:
        return math.nan, math.nan
    return float(np.mean([v for v, _ in flags])), float(np.mean([c for _, c in flags]))


@dataclass(frozen=True)
class ComponentStats:
    """One reward component over a set of ticks: raw values (before weighting) and its weight."""

    count: int
    mean: float
    std: float
    min: float
    max: float
    weight: float | None


def component_stats(trajs: Iterable[Trajectory]) -> dict[str, ComponentStats]:
    """Per reward component, statistics of its raw per-tick values over every step of `trajs` (sorted by name).

    The weight is the trajectories' `reward_weights` entry (None if absent or if they disagree).
    """
    values: dict[str, list[float]] = {}
    weights: dict[str, set[float]] = {}
    for t in trajs:
        for s in t.steps:
            for name, v in s.reward_components.items():
                values.setdefault(name, []).append(float(v))
                if name in t.reward_weights:
                    weights.setdefault(name, set()).add(float(t.reward_weights[name]))
    out = {}
    for name in sorted(values):
        v = np.array(values[name])
        w = weights.get(name, set())
        out[name] = ComponentStats(len(v), float(v.mean()), float(v.std()), float(v.min()), float(v.max()),
                                   next(iter(w)) if len(w) == 1 else None)
    return out


@dataclass(frozen=True)
class CallStats:
    """LLM calls: counts, latency (ms) and tokens per call. Failed calls count; their latency too.

    Latency statistics use the calls that recorded a latency, token statistics the calls that
    recorded usage (a server may omit it) that a float can hold. Percentiles interpolate linearly.
    """

    calls: int
    failed: int
    latency_mean_ms: float
    latency_p50_ms: float
    latency_p95_ms: float
    latency_max_ms: float
    prompt_tokens_mean: float
    completion_tokens_mean: float
    total_tokens_mean: float


def _calls(trajs: Iterable[Trajectory]) -> list[LLMCall]:
    return [c for t in trajs for c in [*(c for s in t.steps for c in s.llm_calls), *t.failed_calls]]


def _count_as_float(value: int) -> float:
    """A stored token count as a float; one too large for a float (a record may hold any JSON integer) is inf."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def call_stats(trajs: Iterable[Trajectory]) -> CallStats:
    """Latency and token statistics over every LLM call of `trajs` (step calls and failed calls)."""
    calls = _calls(trajs)
    lat = np.array([c.latency_ms for c in calls if c.latency_ms is not None], dtype=np.float64)

    def mean_of(attr: str) -> float:
        v = [_count_as_float(getattr(c, attr)) for c in calls if getattr(c, attr) is not None]
        v = [x for x in v if math.isfinite(x)]
        return math.fsum(v) / len(v) if v else math.nan

    def pct(q: float) -> float:
        return float(np.percentile(lat, q)) if len(lat) else math.nan

    return CallStats(len(calls), sum(c.error is not None for c in calls),
                     float(lat.mean()) if len(lat) else math.nan, pct(50), pct(95),
                     float(lat.max()) if len(lat) else math.nan,
                     mean_of("prompt_tokens"), mean_of("completion_tokens"), mean_of("total_tokens"))


def call_latencies(trajs: Iterable[Trajectory]) -> np.ndarray:
    """Every recorded call latency of `trajs`, ms (for histograms)."""
    return np.array([c.latency_ms for c in _calls(trajs) if c.latency_ms is not None], dtype=np.float64)


def judge_score(traj: Trajectory) -> tuple[float, str]:
    """The episode's judge score and where it came from.

    The trajectory-level judge's score when the run was judged: the first entry of `judge_scores`
    among "llm_absolute", "llm_listwise", "llm_pairwise" (dicts with a "score"; a missing score is
    skipped), "score", "absolute", "ruler", "listwise", "bradley_terry", "pairwise", then any other
    numeric entry in name order. Otherwise the rule judge's per-step `reasoning` component averaged
    over the episode (in [0, 1]). NaN with neither. `run_metrics` never mixes the two: in a run where
    any trajectory holds a `judge_scores` entry, an episode without one counts as unscored.
    """
    numeric: dict[str, float] = {}
    for k, v in traj.judge_scores.items():
        if isinstance(v, dict):
            v = v.get("score")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            numeric[k] = float(v)
    for key in (*_JUDGE_KEYS, *sorted(numeric)):
        if key in numeric:
            return numeric[key], f"judge_scores.{key}"
    values = [s.reward_components["reasoning"] for s in traj.steps if "reasoning" in s.reward_components]
    if values:
        return float(np.mean(values)), "rule judge: mean reasoning component"
    return math.nan, "none"


def rank_correlation(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties), over pairs where both are finite. NaN if < 3 pairs
    or a constant side."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if len(a) < 3:
        return math.nan
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(1, len(v) + 1)
    for value in np.unique(v):  # ties share their average rank
        tie = v == value
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


# ---------------------------------------------------------------------------------------------
# Per episode and per run


@dataclass
class EpisodeMetrics:
    """Every metric of one trajectory. USD amounts, fractions in [0, 1], ratios annualised per
    `TICKS_PER_YEAR`. Fields from the ledger are None when no ledger was available (`ledger_note` says why).
    """

    trajectory_id: str
    seed: int | None
    status: str
    ticks: int
    start_equity: float
    final_equity: float
    pnl: float
    pnl_ratio: float
    """final equity / starting equity - 1 (PnL as a fraction of the stake; "return" always means the reward sum)."""
    sharpe: float
    sortino: float
    calmar: float
    max_drawdown: float
    max_drawdown_usd: float
    drawdown_ticks: int
    total_reward: float
    format_valid_rate: float
    format_clean_rate: float
    failed_actions: int
    judge_score: float
    judge_source: str
    components: dict[str, float] = field(default_factory=dict)
    trades: int | None = None
    win_rate: float | None = None
    profit_factor: float | None = None
    open_at_end: int | None = None
    fees: float | None = None
    turnover: float | None = None
    predictions: PredictionScores | None = None
    ledger_note: str = ""


def episode_metrics(traj: Trajectory, ledger: EpisodeLedger | None = None, ledger_note: str = "",
                    periods_per_year: float = TICKS_PER_YEAR) -> EpisodeMetrics:
    """All metrics of one trajectory; the ledger-based ones only when `ledger` is given."""
    e = equity_curve(traj)
    r = tick_returns(e)
    dd = max_drawdown(e)
    valid, clean = format_rates(traj)
    judge, source = judge_score(traj)
    comps = {name: s.mean for name, s in component_stats([traj]).items()}
    m = EpisodeMetrics(
        trajectory_id=traj.trajectory_id, seed=traj.seed, status=traj.final_status, ticks=len(traj.steps),
        start_equity=float(e[0]), final_equity=float(e[-1]), pnl=float(e[-1] - e[0]),
        pnl_ratio=float(e[-1] / e[0] - 1.0) if e[0] > 0 else math.nan,
        sharpe=sharpe_ratio(r, periods_per_year), sortino=sortino_ratio(r, periods_per_year),
        calmar=calmar_ratio(r, dd, periods_per_year), max_drawdown=dd.max_fraction, max_drawdown_usd=dd.max_usd,
        drawdown_ticks=dd.duration_ticks, total_reward=float(sum(s.reward for s in traj.steps)),
        format_valid_rate=valid, format_clean_rate=clean,
        failed_actions=sum(1 for s in traj.steps if s.action is not None and not s.action.success
                           and s.action.action_type != "invalid"),
        judge_score=judge, judge_source=source, components=comps, ledger_note=ledger_note,
    )
    if ledger is not None:
        m.trades = len(ledger.trades)
        m.win_rate = win_rate(ledger.trades)
        m.profit_factor = profit_factor(ledger.trades)
        m.open_at_end = ledger.open_at_end
        m.fees = float(np.sum(ledger.fees_usd))
        m.turnover = turnover(ledger.traded_usd, e)
        m.predictions = prediction_scores(ledger.resolutions)
    return m


def _mean(values: Iterable[float | None]) -> float:
    v = [x for x in values if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else math.nan


@dataclass
class RunMetrics:
    """A run's metrics: per-episode values averaged over episodes, and pooled trades, ticks and calls.

    Ratios (Sharpe, Sortino, Calmar) are the mean over the episodes where they are defined. Win
    rate, profit factor and the prediction scores pool every trade / resolution of the run; the
    format rates pool every tick; latency and tokens pool every call.
    """

    name: str
    episodes: int
    statuses: dict[str, int]
    ticks: int
    mean_ticks: float
    mean_pnl: float
    median_pnl: float
    std_pnl: float
    mean_pnl_ratio: float
    mean_total_reward: float
    sharpe: float
    sortino: float
    calmar: float
    mean_max_drawdown: float
    worst_max_drawdown: float
    mean_drawdown_ticks: float
    format_valid_rate: float
    format_clean_rate: float
    failed_actions: int
    judge_score: float
    judge_source: str
    judge_pnl_correlation: float
    components: dict[str, ComponentStats]
    calls: CallStats
    trades: int | None = None
    win_rate: float | None = None
    profit_factor: float | None = None
    open_at_end: int | None = None
    mean_fees: float | None = None
    mean_turnover: float | None = None
    predictions: PredictionScores | None = None
    ledger_episodes: int = 0
    reward_pnl_correlation: float = math.nan
    """Spearman between episode reward (sum over ticks) and final PnL: near 1 when the return ranks trading."""
    judge_scored: int = 0
    """Episodes with a score from `judge_source`: in a run judged by an LLM, those with a verdict (the others are
    left out of `judge_score` and `judge_pnl_correlation`, never filled in by the rule judge)."""
    ledger_notes: list[str] = field(default_factory=list)
    episodes_detail: list[EpisodeMetrics] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (NaN -> None, infinities -> "inf"/"-inf"), per-episode details included."""
        return to_jsonable(asdict(self))


def run_metrics(trajs: Sequence[Trajectory], ledgers: Mapping[str, EpisodeLedger] | None = None,
                notes: Mapping[str, str] | None = None, name: str = "run",
                periods_per_year: float = TICKS_PER_YEAR) -> RunMetrics:
    """Metrics of a run.

    Args:
        trajs: the run's trajectories.
        ledgers: trajectory id -> its ledger (from `rlaif_gym.report.replay`); episodes without one
            are left out of the ledger-based metrics, and `ledger_episodes` says how many had one.
        notes: trajectory id -> why it has no ledger.
        name: the run's label in tables.
    """
    ledgers = ledgers or {}
    notes = notes or {}
    eps = [episode_metrics(t, ledgers.get(t.trajectory_id), notes.get(t.trajectory_id, ""), periods_per_year)
           for t in trajs]
    statuses: dict[str, int] = {}
    for t in trajs:
        statuses[t.final_status] = statuses.get(t.final_status, 0) + 1
    pnl = np.array([m.pnl for m in eps]) if eps else np.zeros(0)
    valid_ticks = [v for t in trajs for v in _tick_flags(t)]
    if any(t.judge_scores for t in trajs):  # judged by a trajectory-level (LLM) judge: one judge only
        for m in eps:
            if not m.judge_source.startswith("judge_scores."):  # no verdict: left out, not the rule judge's
                m.judge_score, m.judge_source = math.nan, "none"
    judges = [m.judge_score for m in eps]
    sources = sorted({m.judge_source for m in eps if m.judge_source != "none"})
    rm = RunMetrics(
        name=name, episodes=len(eps), statuses=dict(sorted(statuses.items())), ticks=sum(m.ticks for m in eps),
        mean_ticks=_mean(m.ticks for m in eps), mean_pnl=_mean(pnl), median_pnl=float(np.median(pnl)) if len(pnl)
        else math.nan, std_pnl=float(pnl.std(ddof=1)) if len(pnl) > 1 else math.nan,
        mean_pnl_ratio=_mean(m.pnl_ratio for m in eps), mean_total_reward=_mean(m.total_reward for m in eps),
        sharpe=_mean(m.sharpe for m in eps), sortino=_mean(m.sortino for m in eps),
        calmar=_mean(m.calmar for m in eps), mean_max_drawdown=_mean(m.max_drawdown for m in eps),
        worst_max_drawdown=max((m.max_drawdown for m in eps), default=math.nan),
        mean_drawdown_ticks=_mean(m.drawdown_ticks for m in eps),
        format_valid_rate=float(np.mean([v for v, _ in valid_ticks])) if valid_ticks else math.nan,
        format_clean_rate=float(np.mean([c for _, c in valid_ticks])) if valid_ticks else math.nan,
        failed_actions=sum(m.failed_actions for m in eps), judge_score=_mean(judges),
        judge_source=", ".join(sources) if sources else "none",
        judge_pnl_correlation=rank_correlation(judges, [m.pnl for m in eps]),
        reward_pnl_correlation=rank_correlation([m.total_reward for m in eps], [m.pnl for m in eps]),
        judge_scored=sum(1 for j in judges if math.isfinite(j)),
        components=component_stats(trajs), calls=call_stats(trajs), episodes_detail=eps,
        ledger_notes=sorted({n for n in notes.values() if n}),
    )
    with_ledger = [t for t in trajs if t.trajectory_id in ledgers]
    rm.ledger_episodes = len(with_ledger)
    if with_ledger:
        all_trades = [tr for t in with_ledger for tr in ledgers[t.trajectory_id].trades]
        rm.trades = len(all_trades)
        rm.win_rate = win_rate(all_trades)
        rm.profit_factor = profit_factor(all_trades)
        rm.open_at_end = sum(ledgers[t.trajectory_id].open_at_end for t in with_ledger)
        led = [m for m in eps if m.fees is not None]
        rm.mean_fees = _mean(m.fees for m in led)
        rm.mean_turnover = _mean(m.turnover for m in led)
        rm.predictions = prediction_scores([r for t in with_ledger for r in ledgers[t.trajectory_id].resolutions])
    return rm


def _tick_flags(traj: Trajectory) -> list[tuple[bool, bool]]:
    out = []
    for s in traj.steps:
        valid = s.action is not None and s.action.action_type != "invalid"
        out.append((valid, valid and not s.format_errors))
    return out


def to_jsonable(value: Any) -> Any:
    """Recursively: NaN -> None, +/-inf -> "inf"/"-inf", numpy scalars and arrays -> Python values."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


@dataclass(frozen=True)
class Interval:
    """A mean over `n` values (points, episodes, groups) and its normal 95 % interval (NaN bounds with fewer than 2
    values)."""

    mean: float
    ci95_low: float
    ci95_high: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        """As JSON: NaN becomes None."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


def interval(values: Sequence[float]) -> Interval:
    """The mean of `values` (one per independent unit: a point, an episode, a group) and its 95 % interval, mean ±
    1.96 standard errors (the normal interval lm-eval-harness reports too)."""
    if not values:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, math.nan, math.nan, 1)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values))
