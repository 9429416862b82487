"""Does the return rank skill? Reference policies in both faces, scored by the env's own reward.

The promise of docs/reward.md ("Does the return rank skill?"), measured: summed over whole episodes
on held-out seeds, the default reward of `RLAIF-v0` and `RLAIF-Text-v0` must order policies the way
a trader would. This module plays the reference policies (numeric: the baseline agents; text: the
offline scripted model, boilerplate, random and judge-gaming replies, a social poster) and reports
mean return, mean PnL, their standard errors and the rank correlation between return and PnL.
`examples/reward_ranking.py` prints the ranking tables of docs/reward.md from it;
`tests/test_reward_ranking.py` asserts the orderings on a smaller sample.

Every text policy answers the prompt the env renders (and, where its rule needs ids, the same
tick's `TickView`): nothing reads the hidden truth except `OracleAgent` in the numeric face.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from .agents import BaselineAgent, InformedAgent, OracleAgent, PassiveAgent, RandomAgent
from .config import RLAIFEnvConfig
from .encoding.observation import ACCOUNT_FEATURES
from .encoding.reply import canonical_reply
from .encoding.view import TickView
from .envs import RLAIFCore, evaluate_policy, seed_keys
from .envs.text_env import RLAIFTextEnv
from .llm.scripted import ScriptedLLM
from .sim import yes_price

__all__ = [
    "ARCHETYPE_POLICIES",
    "EXPECTED_ORDERS",
    "GAMED",
    "HOLD",
    "INFORMED",
    "JUNK",
    "NUMERIC_POLICIES",
    "RANDOM",
    "SOCIAL",
    "TEXT_POLICIES",
    "BetSignal",
    "GroupAgreement",
    "LateBlindBuyer",
    "PolicyScore",
    "TextPolicy",
    "bet_signal",
    "chain",
    "grpo_agreement",
    "markdown_table",
    "numeric_ranking",
    "ordering_gaps",
    "orderings_table",
    "pooled_spearman",
    "spearman",
    "text_ranking",
]

_TIME_LEFT = [name for name, *_ in ACCOUNT_FEATURES].index("time_left")

NUMERIC_POLICIES: dict[str, type] = {
    "OracleAgent": OracleAgent,
    "InformedAgent": InformedAgent,
    "PassiveAgent": PassiveAgent,
    "RandomAgent": RandomAgent,
}
"""The numeric face's reference policies, best first (the oracle reads the hidden truth)."""


@dataclass
class PolicyScore:
    """One policy's episodes (one per seed, same seeds for every policy of a table).

    Attributes:
        name: the policy.
        seeds: the episodes' seeds.
        episode_return: sum of the env's rewards per episode.
        final_pnl: final equity minus starting cash per episode, USD.
        components: per-component sums of the raw components per episode (text: pnl, risk, format,
            reasoning, and behavior with an archetype).
        coefficients: the reward's per-step coefficient of each component (so coefficient x sum is
            that component's share of the return).
        ticks: steps per episode.
        scheme: the reward scheme; only the skill scheme's return is a sum of coefficient x
            component (the original normalises and clips each step), so only it has parts.
    """

    name: str
    seeds: np.ndarray
    episode_return: np.ndarray
    final_pnl: np.ndarray
    components: dict[str, np.ndarray] = field(default_factory=dict)
    coefficients: dict[str, float] = field(default_factory=dict)
    ticks: np.ndarray | None = None
    scheme: str = "skill"

    def part(self, *names: str) -> float:
        """Mean over episodes of the return's share from the named components (coefficient x sum)."""
        return float(sum(self.coefficients[n] * self.components[n].mean() for n in names if n in self.components))

    def per_tick(self, name: str) -> float:
        """Mean raw value of a component per tick, over all ticks of all episodes."""
        return float(self.components[name].sum() / self.ticks.sum())

    @property
    def mean_return(self) -> float:
        return float(self.episode_return.mean())

    @property
    def se_return(self) -> float:
        """Standard error of the mean return."""
        n = len(self.episode_return)
        return float(self.episode_return.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0

    @property
    def mean_pnl(self) -> float:
        return float(self.final_pnl.mean())


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties share their average rank); 0 when either side is constant."""
    rx, ry = _ranks(np.asarray(x, np.float64)), _ranks(np.asarray(y, np.float64))
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a), dtype=np.float64)
    _, inverse = np.unique(a, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse]


def pooled_spearman(scores: Iterable[PolicyScore]) -> float:
    """Spearman(return, final PnL) over every episode of every policy."""
    scores = list(scores)
    return spearman(np.concatenate([s.episode_return for s in scores]), np.concatenate([s.final_pnl for s in scores]))


def ordering_gaps(scores: Mapping[str, PolicyScore], pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str, float]]:
    """For each (better, worse) pair: the gap in mean return, in standard errors (paired by seed).

    Both policies play the same seeds, so the test is on the per-seed differences d = r_better -
    r_worse: mean(d) / (std(d) / sqrt(n)). A constant positive difference is +inf.
    """
    out = []
    for a, b in pairs:
        d = scores[a].episode_return - scores[b].episode_return
        se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
        mean = float(d.mean())
        out.append((a, b, mean / se if se > 0 else (math.inf if mean > 0 else -math.inf if mean < 0 else 0.0)))
    return out


def chain(*names: str) -> list[tuple[str, str]]:
    """Consecutive pairs of an ordering, best first: chain(a, b, c) = [(a, b), (b, c)]."""
    return list(pairwise(names))


INFORMED, HOLD, RANDOM = "scripted model (informed)", "boilerplate hold", "random buys, canned line"
SOCIAL, JUNK = "social poster (never trades)", "no executable action"
GAMED = ("same trades, padded reasoning", "same trades, keyword stuffing", "same trades, prompt copied")

EXPECTED_ORDERS: dict[str, list[tuple[str, str]]] = {
    "numeric": chain("OracleAgent", "InformedAgent", "PassiveAgent", "RandomAgent"),
    "text": [*chain(INFORMED, HOLD, RANDOM), *((INFORMED, g) for g in GAMED), (HOLD, JUNK)],
    "trader": [*chain(INFORMED, HOLD, RANDOM), (INFORMED, SOCIAL)],
    "social-butterfly": [(SOCIAL, INFORMED), (SOCIAL, HOLD), (SOCIAL, RANDOM)],
}
"""The orderings the default return must show (better, worse), per table: the ranking tables of docs/reward.md
and tests/test_reward_ranking.py check these pairs."""

ARCHETYPE_POLICIES: tuple[str, ...] = (INFORMED, SOCIAL, HOLD, RANDOM)
"""The text policies of the archetype tables."""


# -- numeric face ---------------------------------------------------------------------------------


def numeric_ranking(seeds: Sequence[int], config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
                    policies: Mapping[str, type] | None = None) -> dict[str, PolicyScore]:
    """Play every numeric reference policy once per seed (one batch per policy, the single env's core)."""
    cfg = RLAIFEnvConfig.from_any(config)
    core = RLAIFCore(cfg, num_worlds=len(seeds))
    out = {}
    for name, cls in (policies or NUMERIC_POLICIES).items():
        stats = evaluate_policy(cls(core, seed=0), seeds, cfg, core=core)
        out[name] = PolicyScore(name, np.asarray(seeds), stats.episode_return, stats.final_pnl)
    return out


class LateBlindBuyer(BaselineAgent):
    """A reward-hack probe, not a policy: it waits, then in each of its episode's last `k` ticks (k drawn from
    1-4 per world) buys the largest size (25 % of equity) of a random side of a random market, reading nothing.

    Its expected PnL is at most 0 when equity is what the holdings would fetch if sold now (every buy pays
    the fee and slippage twice over). Marked at the price its own buying made, it showed a profit in
    most held-out episodes (docs/reward.md).
    """

    def _act(self, obs, state):
        b = len(obs)
        account = self._split(obs)[3]
        if not hasattr(self, "_last") or len(self._last) != b:
            self._last = self.rng.integers(1, 5, size=b)
        ticks_left = np.rint(account[:, _TIME_LEFT] * self.params.num_ticks)
        act = np.zeros((b, 4), dtype=np.int64)
        buy = ticks_left <= self._last
        act[buy, 0] = 1
        act[buy, 1] = self.rng.integers(0, self._m, size=int(buy.sum()))
        act[buy, 2] = 4
        act[buy, 3] = self.rng.integers(0, 2, size=int(buy.sum()))
        return act


@dataclass
class BetSignal:
    """Does the reward tell a right bet from a wrong one at horizon H? Paired over fork states.

    Attributes:
        horizon: ticks from the bet to the end of the comparison (the bet's tick included).
        states: fork states compared.
        right_beats_wait: share of states where the bet on the side the hidden truth favours earns more
            return than waiting, over the horizon.
        wrong_beats_wait: the same for the bet on the other side (it should be small).
        right_gain, wrong_gain: mean return of each bet minus that of a wait on the same state.
    """

    horizon: int
    states: int
    right_beats_wait: float
    wrong_beats_wait: float
    right_gain: float
    wrong_gain: float


def bet_signal(seeds: Sequence[int], config: RLAIFEnvConfig | Mapping[str, Any] | None = None, *, horizon: int = 1,
               fork_ticks: Sequence[int] = (8, 24, 48, 96), bucket: int = 2) -> BetSignal:
    """From each seed's episode, played by `InformedAgent` to each of `fork_ticks`, branch three ways: wait, bet
    `BUY_FRACTIONS[bucket]` of equity (5 % by default) on the side the hidden truth p* favours in the market
    where |p* - price| is largest, or the same bet on the other side; then wait out the horizon.
    A learnable reward makes the right bet beat waiting and the wrong one lose to it."""
    cfg = RLAIFEnvConfig.from_any(config)
    seeds = list(seeds)
    b = len(seeds)
    core = RLAIFCore(cfg, num_worlds=b)
    obs = core.reset(seed_keys(seeds))
    trunk = InformedAgent(core, seed=0)
    right, wrong = [], []
    for t in range(max(fork_ticks) + 1):
        if t in fork_ticks:
            state = core.state
            gap = state.pm_truth - yes_price(state.pm_yes, state.pm_no)
            m = np.argmax(np.abs(gap), axis=1)
            side = (gap[np.arange(b), m] < 0).astype(np.int64)  # 0 YES, 1 NO
            branch = RLAIFCore(cfg, num_worlds=3 * b)
            branch.state = state.take(np.repeat(np.arange(b), 3))
            acts = np.zeros((3 * b, 4), dtype=np.int64)
            acts[1::3] = np.stack([np.ones(b, np.int64), m, np.full(b, bucket), side], axis=1)
            acts[2::3] = np.stack([np.ones(b, np.int64), m, np.full(b, bucket), 1 - side], axis=1)
            ret = np.zeros(3 * b)
            for h in range(horizon):
                res = branch.step(acts if h == 0 else np.zeros_like(acts))
                ret += res.reward
            right.append(ret[1::3] - ret[0::3])
            wrong.append(ret[2::3] - ret[0::3])
        obs = core.step(trunk.act(obs, core.state)).observation
    r, w = np.concatenate(right), np.concatenate(wrong)
    return BetSignal(horizon, len(r), float((r > 0).mean()), float((w > 0).mean()), float(r.mean()), float(w.mean()))


# -- text face --------------------------------------------------------------------------------------


class TextPolicy:
    """A reply-writing policy for `RLAIF-Text-v0`: `reset(seed)` per episode, then `reply(prompt, view)`."""

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def reply(self, prompt: str, view: TickView) -> str:
        raise NotImplementedError


class ScriptedInformed(TextPolicy):
    """The offline scripted model (`ScriptedLLM`), greedy: reads the evidence, cites it, trades on gaps."""

    def __init__(self) -> None:
        self.model = ScriptedLLM()

    def reply(self, prompt, view):
        think, action = self.model.decide(prompt)
        return canonical_reply(action, think)


class GamedInformed(ScriptedInformed):
    """The scripted model's *actions* with gamed reasoning: the judge alone must tell them apart.

    Args:
        how: "stuffing" (trading keywords), "copying" (the prompt pasted back) or "padding" (the
            honest reasoning plus 400 words of filler).
    """

    _STUFF = ("bullish buy long profit exposure risk momentum trend upside opportunity pnl loss hedge sentiment "
              "probability volume breakout support resistance ") * 4
    _FILLER = " ".join(f"Consideration {i}: markets are complex adaptive systems shaped by many participants "
                       "whose incentives vary over time and place." for i in range(25))

    def __init__(self, how: str) -> None:
        super().__init__()
        if how not in ("stuffing", "copying", "padding"):
            raise ValueError(f"how must be stuffing, copying or padding, got {how!r}")
        self.how = how

    def reply(self, prompt, view):
        think, action = self.model.decide(prompt)
        if self.how == "stuffing":
            think = self._STUFF + "So I act."
        elif self.how == "copying":
            think = prompt + "\nSo I act."
        else:
            think = f"{think} {self._FILLER}"
        return canonical_reply(action, think)


class BoilerplateHold(TextPolicy):
    """Always waits with one cited price and a stock sentence: a clean reply that never trades."""

    def reply(self, prompt, view):
        m = view.markets[0]
        think = f"{m.market_id} trades at {100 * m.yes_price:.1f}¢ YES. The evidence is mixed, so I hold."
        return canonical_reply({"type": "wait"}, think)


class RandomCanned(TextPolicy):
    """A random buy (random market and side, 2-5 % of equity) on a quarter of the ticks, else a wait; canned lines."""

    def reply(self, prompt, view):
        if self.rng.random() >= 0.25:
            return canonical_reply({"type": "wait"}, "Nothing stands out, so I wait.")
        m = view.markets[int(self.rng.integers(len(view.markets)))]
        side = "YES" if self.rng.random() < 0.5 else "NO"
        amount = round(float(self.rng.uniform(0.02, 0.05)) * view.equity, 2)
        return canonical_reply({"type": "buy_prediction", "market": m.market_id, "outcome": side, "amount": amount},
                               f"I have a good feeling about {m.market_id}, so I buy {side}.")


class Unparseable(TextPolicy):
    """Prose with no action block: every tick is a no-op with format -1."""

    def reply(self, prompt, view):
        return "I think the markets look interesting today and I would probably buy something."


class SocialPoster(TextPolicy):
    """Joins every group, then alternates a grounded post about the latest news and a DM to the next NPC.

    It never trades: the reference for archetypes whose priorities are social (social-butterfly).
    """

    def reset(self, seed):
        super().reset(seed)
        self.turn = 0

    def reply(self, prompt, view):
        for name, joined in view.groups:
            if not joined:
                return canonical_reply({"type": "join_group", "group": name},
                                       f"I am not in {name} yet; joining it connects me with more traders, so I join.")
        self.turn += 1
        news = next((n for n in view.news if n.subject.startswith("market-")), None)
        if self.turn % 2 and news is not None:
            way = "YES" if news.direction > 0 else "NO"
            content = f"{news.source} expects {news.subject} to resolve {way}. What do you all think?"
            return canonical_reply({"type": "create_post", "content": content},
                                   f"{news.source} just said {news.subject} resolves {way}; sharing it starts a "
                                   "conversation, so I post it.")
        npc = view.npcs[(self.turn // 2) % len(view.npcs)]
        agent, name = npc.split(" ", 1)
        dm = {"type": "send_dm", "recipient": agent, "content": "Hi! What are you watching this week?"}
        return canonical_reply(dm, f"I have not talked with {name} lately, so I send {agent} a DM to keep in touch.")


TEXT_POLICIES: dict[str, Callable[[], TextPolicy]] = {
    "scripted model (informed)": ScriptedInformed,
    "same trades, padded reasoning": lambda: GamedInformed("padding"),
    "same trades, keyword stuffing": lambda: GamedInformed("stuffing"),
    "same trades, prompt copied": lambda: GamedInformed("copying"),
    "boilerplate hold": BoilerplateHold,
    "social poster (never trades)": SocialPoster,
    "random buys, canned line": RandomCanned,
    "no executable action": Unparseable,
}
"""The text face's reference policies (names are the table's rows)."""


def play_text(policy: TextPolicy, seeds: Sequence[int], config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
              name: str = "") -> PolicyScore:
    """One `RLAIF-Text-v0` episode per seed with `policy`; returns, PnL and component sums."""
    env = RLAIFTextEnv(RLAIFEnvConfig.from_any(config))
    returns, pnl, ticks, comps = [], [], [], {}
    for i, seed in enumerate(seeds):
        prompt, _ = env.reset(seed=int(seed))
        policy.reset(int(seed))
        total, sums, done, n = 0.0, {}, False, 0
        while not done:
            prompt, reward, terminated, truncated, info = env.step(policy.reply(prompt, env.view))
            total += reward
            n += 1
            for k, v in info["reward_components"].items():
                sums[k] = sums.get(k, 0.0) + v
            done = terminated or truncated
        returns.append(total)
        ticks.append(n)
        pnl.append(info["equity"] - env.config.starting_cash)
        for k, v in sums.items():
            comps.setdefault(k, np.zeros(len(seeds)))[i] = v
    return PolicyScore(name, np.asarray(seeds), np.asarray(returns), np.asarray(pnl), comps,
                       dict(env.reward_function.coefficients), np.asarray(ticks), env.reward_function.scheme)


def _play_named(args: tuple[str, Sequence[int], dict[str, Any]]) -> PolicyScore:
    name, seeds, config = args
    return play_text(TEXT_POLICIES[name](), seeds, config, name)


def text_ranking(seeds: Sequence[int], config: RLAIFEnvConfig | Mapping[str, Any] | None = None,
                 policies: Sequence[str] | None = None, workers: int = 1) -> dict[str, PolicyScore]:
    """Play the named text policies (default: all of `TEXT_POLICIES`) once per seed.

    Args:
        seeds: one episode per seed, the same seeds for every policy.
        config: the env config (default: `RLAIFEnvConfig()`).
        policies: names from `TEXT_POLICIES`.
        workers: processes; each plays whole policies, so results do not depend on it.
    """
    cfg = RLAIFEnvConfig.from_any(config).model_dump(exclude_unset=True)
    names = list(policies or TEXT_POLICIES)
    jobs = [(n, list(seeds), cfg) for n in names]
    if workers <= 1:
        results = [_play_named(j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_play_named, jobs))
    return dict(zip(names, results, strict=True))


# -- tables -----------------------------------------------------------------------------------------


def markdown_table(scores: Mapping[str, PolicyScore], starting_cash: float) -> str:
    """Mean return ± 2 SE and mean PnL per policy; for the text face, the return's parts and the judge's scores.

    The parts (skill scheme only) are means over episodes of coefficient x summed component: trading
    (pnl + risk), form (format + reasoning) and, with an archetype, behavior; they add up to the mean
    return. Format and reasoning per tick are the raw components (the original's format is +1 for a
    clean reply, the default's 0).
    """
    text = any("reasoning" in s.components for s in scores.values())
    behavior = any("behavior" in s.components for s in scores.values())
    parts = all(s.scheme == "skill" for s in scores.values())
    head = "| policy | mean return (± 2 SE) | mean PnL (USD) |"
    rule = "|---|---:|---:|"
    if text:
        if parts:
            head += " trading part | form part |" + (" behavior part |" if behavior else "")
            rule += "---:|---:|" + ("---:|" if behavior else "")
        head += " format / tick | reasoning / tick |"
        rule += "---:|---:|"
    else:
        head += " PnL / starting cash |"
        rule += "---:|"
    lines = [head, rule]
    for name, s in scores.items():
        row = f"| {name} | {s.mean_return:+.3f} (± {2 * s.se_return:.3f}) | {s.mean_pnl:+,.0f} |"
        if text:
            if parts:
                row += f" {s.part('pnl', 'risk'):+.3f} | {s.part('format', 'reasoning'):+.4f} |"
                if behavior:
                    row += f" {s.part('behavior'):+.3f} |"
            row += f" {s.per_tick('format'):+.2f} | {s.per_tick('reasoning'):.2f} |"
        else:
            row += f" {s.mean_pnl / starting_cash:+.3f} |"
        lines.append(row)
    return "\n".join(lines)


def orderings_table(scores: Mapping[str, PolicyScore], pairs: Iterable[tuple[str, str]]) -> str:
    """One line per expected (better, worse) pair: the gap in mean return and in paired standard errors."""
    lines = ["| expected | gap in mean return | gap / paired SE | holds |", "|---|---:|---:|:---:|"]
    for a, b, z in ordering_gaps(scores, pairs):
        gap = scores[a].mean_return - scores[b].mean_return
        lines.append(f"| {a} > {b} | {gap:+.3f} | {z:+.1f} | {'yes' if gap > 0 else 'NO'} |")
    return "\n".join(lines)


# -- GRPO groups -------------------------------------------------------------------------------------


@dataclass
class GroupAgreement:
    """How often, within GRPO groups, the return orders two members the way their PnL does.

    Attributes:
        pairs: member pairs whose final PnL differs by more than the margin.
        agreeing: of those, pairs whose returns are ordered the same way.
        groups: groups played; members: their size.
    """

    pairs: int
    agreeing: int
    groups: int
    members: int

    @property
    def rate(self) -> float:
        return self.agreeing / self.pairs if self.pairs else float("nan")


def grpo_agreement(groups: int, seed: int, *, group_size: int = 8, fork_tick: int = 24, margin: float = 0.01,
                   config: RLAIFEnvConfig | Mapping[str, Any] | None = None, temperature: float = 0.9,
                   ) -> GroupAgreement:
    """Collect GRPO groups with the scripted model and compare each group's return order with its PnL order.

    Each group forks one episode at `fork_tick` (`RolloutCollector.collect_forks`): the members share
    that state and differ only in the scripted model's sampling seeds, which vary its evidence
    threshold and trade size. Scores are the trajectories' `total_reward` (what `to_grpo_groups`
    exports); a pair counts when the members' final PnL differ by more than `margin` x starting cash.
    """
    from itertools import combinations

    from .agents import ScriptedLLMAgent
    from .rollout import RolloutCollector
    from .storage.exports import to_grpo_groups

    cfg = RLAIFEnvConfig.from_any(config)
    collector = RolloutCollector(ScriptedLLMAgent(temperature=temperature), env_config=cfg, num_envs=group_size,
                                 group_size=group_size)
    collector.collect_forks(groups, seed=seed, fork_tick=fork_tick)
    by_id = {t.trajectory_id: t for t in collector.trajectories}
    exported, _ = to_grpo_groups(collector.trajectories)
    pairs = agreeing = 0
    for group in exported:
        members = [by_id[i] for i in group["trajectory_ids"]]
        for (a, sa), (b, sb) in combinations(zip(members, group["scores"], strict=True), 2):
            if abs(a.final_pnl - b.final_pnl) > margin * cfg.starting_cash:
                pairs += 1
                agreeing += (sa - sb) * (a.final_pnl - b.final_pnl) > 0
    return GroupAgreement(pairs, agreeing, len(exported), group_size)
