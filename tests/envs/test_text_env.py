"""RLAIF-Text-v0: the checker, determinism, prompts without ground truth, and replies as actions."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rlaif_gym import InvalidActionError
from rlaif_gym.encoding.prompt import PROMPT_CHARSET, cents
from rlaif_gym.sim import yes_price

BUY = '<think>x</think>{"type": "buy_prediction", "market": "%s", "outcome": "YES", "amount": 300}'


def test_gymnasium_check_env_passes_on_the_text_env():
    env = gym.make("RLAIF-Text-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=False)


def test_spaces_are_text_with_an_explicit_printable_charset():
    env = gym.make("RLAIF-Text-v0")
    for space in (env.observation_space, env.action_space):
        assert isinstance(space, gym.spaces.Text)
        assert {" ", "\n", "{", "}", '"', "<", ">", "$", "%", "¢"} <= set(space.character_set)
    prompt, info = env.reset(seed=0)
    assert env.observation_space.contains(prompt)
    assert "<think>" in info["system_prompt"] and '"type": "buy_prediction"' in info["system_prompt"]
    assert info["system_prompt"] == env.unwrapped.system_prompt


def test_prompt_has_every_section_and_prints_prices_as_cents():
    env = gym.make("RLAIF-Text-v0")
    prompt, _ = env.reset(seed=1)
    for section in ("## Prediction markets", "## Perpetual futures", "## Portfolio", "## News", "## Social feed",
                    "## Group chats", "## Last action"):
        assert section in prompt
    state = env.unwrapped.state
    for p in yes_price(state.pm_yes[0], state.pm_no[0]):
        assert f"YES {cents(p)}" in prompt
    assert cents(0.62) == "62.0¢" and cents(0.005) == "0.5¢"


def test_fixed_seed_and_replies_give_an_identical_episode():
    market = "market-1"
    replies = ['<think>wait</think>{"type": "wait"}', BUY % market, "garbage", '{"type": "join_group", "group": '
               '"Alpha Insiders"}'] * 10

    def run():
        env = gym.make("RLAIF-Text-v0")
        out = [env.reset(seed=7)]
        out += [env.step(r) for r in replies]
        return out

    a, b = run(), run()
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x == y, f"step {t} differs"


def test_prompt_does_not_depend_on_hidden_truth_or_future():
    env = gym.make("RLAIF-Text-v0").unwrapped
    env.reset(seed=3)
    for _ in range(30):
        env.step('<think>x</think>{"type": "join_group", "group": "Alpha Insiders"}')
    from rlaif_gym.encoding.prompt import render_prompt
    from rlaif_gym.encoding.view import build_view

    before = render_prompt(build_view(env.state, env.params, 0))
    env.state.pm_outcome[:] = 1 - env.state.pm_outcome
    env.state.pm_truth[:] = 1 - env.state.pm_truth
    env.state.narr_sign[:] = -env.state.narr_sign
    env.state.key[:] ^= np.uint64(12345)
    assert render_prompt(build_view(env.state, env.params, 0)) == before


def test_an_unparseable_reply_is_a_noop_with_format_penalty_and_errors_in_info():
    a, b = gym.make("RLAIF-Text-v0"), gym.make("RLAIF-Text-v0")
    a.reset(seed=5)
    b.reset(seed=5)
    _, _, _, _, bad = a.step('{"type": "buy_prediction", "market": "market-1"')
    _, _, _, _, wait = b.step('<think>nothing to do</think>{"type": "wait"}')
    assert bad["parsed_action"] is None
    assert bad["feedback"]["success"] is False and "no action found" in bad["feedback"]["error"]
    assert bad["reward_components"]["format"] == -1.0
    assert bad["format_errors"]
    assert bad["equity"] == wait["equity"] and bad["cash"] == wait["cash"]
    sa, sb = a.unwrapped.state, b.unwrapped.state
    for name in ("cash", "hold_yes", "hold_no", "pm_yes", "pm_no", "pos_side", "joined"):
        assert np.array_equal(getattr(sa, name), getattr(sb, name)), name


def test_a_refused_action_reports_the_reason_and_the_next_prompt_says_so():
    env = gym.make("RLAIF-Text-v0")
    env.reset(seed=2)
    prompt, _, _, _, info = env.step('<think>x</think>{"type": "buy_prediction", "market": "market-999", '
                                     '"outcome": "YES", "amount": 10}')
    assert info["feedback"]["success"] is False and "market" in info["feedback"]["error"]
    assert "FAILED" in prompt.split("## Last action")[1]
    prompt, _, _, _, info = env.step('<think>x</think>{"type": "buy_prediction", "market": "market-1", '
                                     '"outcome": "YES", "amount": 999999}')
    assert "insufficient cash" in info["feedback"]["error"]


def test_a_good_trade_shows_fills_in_the_next_prompt():
    env = gym.make("RLAIF-Text-v0")
    env.reset(seed=2)
    prompt, _, _, _, info = env.step(BUY % "market-1")
    assert info["feedback"] == {"success": True, "error": None}
    assert "bought" in prompt.split("## Last action")[1]
    assert set(info["reward_components"]) == {"pnl", "risk", "format", "reasoning"}


def test_non_string_action_is_a_clear_error():
    env = gym.make("RLAIF-Text-v0")
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match="reply string"):
        env.step([1, 0, 0, 0])


def test_charset_covers_every_rendered_prompt_over_an_episode():
    env = gym.make("RLAIF-Text-v0")
    prompt, _ = env.reset(seed=11)
    allowed = set(PROMPT_CHARSET)
    rng = np.random.default_rng(0)
    for _ in range(168):
        assert set(prompt) <= allowed and len(prompt) <= env.observation_space.max_length
        m = rng.integers(0, 30)
        prompt, _, term, trunc, _ = env.step(BUY % f"market-{m}" if rng.random() < 0.5 else '{"type":"wait"}')
        if term or trunc:
            break


def test_both_faces_show_the_same_world():
    text, numeric = gym.make("RLAIF-Text-v0").unwrapped, gym.make("RLAIF-v0")
    text.reset(seed=9)
    obs, _ = numeric.reset(seed=9)
    assert np.array_equal(text.numeric_observation, obs)
    # The same wait in both faces keeps them in lockstep.
    text.step('<think>nothing yet</think>{"type": "wait"}')
    obs, *_ = numeric.step([0, 0, 0, 0])
    assert np.array_equal(text.numeric_observation, obs)


@pytest.mark.parametrize("action", [
    {"type": "buy_prediction", "market_id": "m1", "outcome": "Z" * 50_000, "amount": 10},
    {"type": "buy_prediction", "market_id": "Q" * 50_000, "outcome": "YES", "amount": 10},
    {"type": "open_perp", "ticker": "T" * 50_000, "side": "LONG", "size": 5},
    {"type": "send_dm", "recipient": "R" * 50_000, "content": "hi"},
    {"type": "Y" * 50_000},
    {"type": "buy_prediction", "market_id": "m1", "outcome": "YES", "amount": "9" * 50_000 + "x"},
])
def test_a_reply_with_a_huge_field_leaves_the_next_prompt_within_the_observation_space(action):
    """The feedback quotes what the reply sent: a 50,000-character field made a 51k-character prompt, outside the
    Text space (16,384). Quoted values are cut, and so is the "Last action" line."""
    env = gym.make("RLAIF-Text-v0", num_ticks=4).unwrapped
    env.reset(seed=0)
    prompt, reward, *_, info = env.step("<think>x</think>" + json.dumps(action))
    assert env.observation_space.contains(prompt), len(prompt)
    assert len(str(info["feedback"])) < 2_000 and np.isfinite(reward)
