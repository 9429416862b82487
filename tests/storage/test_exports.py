"""Exports: SFT chats, DPO pairs, GRPO groups, database rows, JSONL files and the secret check."""

from __future__ import annotations

import json
import math

import pytest

from rlaif_gym.storage import (
    SecretLeakError,
    assert_no_secrets,
    to_db_rows,
    to_dpo_pairs,
    to_grpo_groups,
    to_sft_records,
    write_export,
)
from rlaif_gym.trajectory import Trajectory

SYSTEM = "You trade prediction markets. Reply with <think>…</think> then one JSON action."


# --------------------------------------------------------------------------------------------- SFT


def test_sft_records_come_from_successful_policy_calls_only(rich):
    records = to_sft_records([rich])
    # step 0: the failed call is left out; step 1: the reasoning call is left out; step 2: one call
    assert [(r["step_number"], r["call_id"]) for r in records] == [(0, "c1"), (1, "c3"), (2, "c4")]
    first = records[0]
    assert first["trajectory_id"] == "traj-rich-0" and first["reward"] == 0.5
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant"]
    call = rich.steps[0].llm_calls[1]
    assert first["messages"] == [{"role": "system", "content": call.system_prompt},
                                 {"role": "user", "content": call.user_prompt},
                                 {"role": "assistant", "content": call.response}]
    # a call that recorded its request messages gives exactly those (here the same [system, user])
    assert records[1]["messages"][:2] == [{"role": "system", "content": SYSTEM},
                                          {"role": "user", "content": rich.steps[1].llm_calls[1].user_prompt}]
    assert records[2]["messages"][2]["content"].startswith("<think>市场")


def test_sft_records_hold_nothing_outside_the_prompt(rich):
    """No ground truth, outcome or final P&L may reach a training sample.

    The original leaked them: docs/babylon.md ("The original's defects", 17).
    """
    text = json.dumps(to_sft_records([rich]), ensure_ascii=False)
    for leak in ("GROUND-TRUTH", "resolves YES", "-237.25", "finalPnL", "final_pnl", "Risk looks fine"):
        assert leak not in text, leak


def test_sft_min_reward_filters_on_the_step_reward(rich):
    assert [r["step_number"] for r in to_sft_records([rich], min_reward=0.0)] == [0, 2]
    assert to_sft_records([rich], min_reward=1.0) == []


# --------------------------------------------------------------------------------------------- DPO


def test_dpo_pairs_only_for_identical_prompts(grouped):
    pairs = to_dpo_pairs(grouped)
    # g1 step 0: a and c answered the same (buy, 0.5), b answered sell (-0.25): one pair after dedup;
    # g1 step 1: the states (prompts) differ, no pair; g2: equal rewards, no pair; g3/solo: alone
    assert len(pairs) == 1
    (pair,) = pairs
    assert (pair["group_id"], pair["step_number"]) == ("g1", 0)
    assert (pair["chosen_reward"], pair["rejected_reward"]) == (0.5, -0.25)
    assert pair["chosen"] == [{"role": "assistant", "content": '<think>cheap</think>{"type":"buy_prediction"}'}]
    assert pair["rejected"] == [{"role": "assistant", "content": '<think>dear</think>{"type":"sell"}'}]
    assert [m["role"] for m in pair["prompt"]] == ["system", "user"]
    assert pair["chosen_trajectory_id"] == "g1-a" and pair["rejected_trajectory_id"] == "g1-b"
    step0 = next(t for t in grouped if t.group_id == "g1").steps[0]
    assert pair["prompt"][1]["content"] == step0.llm_calls[0].user_prompt


def test_dpo_skips_ties_and_respects_the_margin(grouped):
    assert not [p for p in to_dpo_pairs(grouped) if p["group_id"] == "g2"]
    assert to_dpo_pairs(grouped, min_margin=0.75) == []  # 0.5 - (-0.25) = 0.75 is not above the margin


def test_dpo_never_pairs_across_groups(grouped):
    a = grouped[0]
    other = grouped[1].model_copy(update={"group_id": "elsewhere"})
    assert to_dpo_pairs([a, other]) == []


# -------------------------------------------------------------------------------------------- GRPO


def test_grpo_groups_advantages_and_skips(grouped):
    groups, skipped = to_grpo_groups(grouped)
    assert skipped == 2  # the singleton g3 and the ungrouped trajectory
    by_id = {g["group_id"]: g for g in groups}
    assert set(by_id) == {"g1", "g2"}
    g1 = by_id["g1"]
    assert g1["trajectory_ids"] == ["g1-a", "g1-b", "g1-c"]
    assert g1["scores"] == [0.75, 0.5, 0.5]
    assert math.isclose(sum(g1["advantages"]), 0.0, abs_tol=1e-12)
    assert g1["advantages"][0] > 0 > g1["advantages"][1] and g1["degenerate"] is False
    for group in groups:
        assert math.isclose(sum(group["advantages"]), 0.0, abs_tol=1e-12)
        assert len(group["messages"]) == len(group["tokens"]) == len(group["logprobs"]) == len(group["scores"])


def test_grpo_degenerate_group_is_kept_flagged_and_not_tie_broken(grouped):
    groups, _ = to_grpo_groups(grouped, normalize=True)
    (g2,) = [g for g in groups if g["group_id"] == "g2"]
    assert g2["degenerate"] is True
    assert g2["scores"] == [0.25, 0.25]  # no epsilon was added to force a difference
    assert g2["advantages"] == [0.0, 0.0]


def test_grpo_normalized_advantages_have_unit_std(grouped):
    groups, _ = to_grpo_groups(grouped, normalize=True)
    (g1,) = [g for g in groups if g["group_id"] == "g1"]
    advantages = g1["advantages"]
    assert math.isclose(sum(advantages), 0.0, abs_tol=1e-12)
    assert math.isclose(math.sqrt(sum(a * a for a in advantages) / len(advantages)), 1.0)


def test_grpo_tokens_only_when_every_policy_call_recorded_them(grouped):
    groups, _ = to_grpo_groups(grouped)
    (g1,) = [g for g in groups if g["group_id"] == "g1"]
    assert g1["tokens"][0] == [101, 7, 2048] * 2 and g1["logprobs"][0] == [-0.25, -1.5, -0.0625] * 2
    assert g1["tokens"][2] is None and g1["logprobs"][2] is None  # g1-c recorded no token ids


def test_grpo_turns_keep_each_calls_exact_tokens(grouped):
    groups, _ = to_grpo_groups(grouped)
    (g1,) = [g for g in groups if g["group_id"] == "g1"]
    assert len(g1["turns"]) == len(g1["trajectory_ids"])
    first = g1["turns"][0]
    assert len(first) == 2, "one entry per policy call, in order"
    assert all(turn == {"prompt_token_ids": [1, 2, 3], "completion_token_ids": [101, 7, 2048],
                        "completion_logprobs": [-0.25, -1.5, -0.0625]} for turn in first)
    assert all(turn["completion_token_ids"] is None for turn in g1["turns"][2])  # g1-c recorded none


def test_grpo_messages_are_the_policy_conversation(grouped):
    groups, _ = to_grpo_groups(grouped)
    (g1,) = [g for g in groups if g["group_id"] == "g1"]
    chat = g1["messages"][0]
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user", "assistant"]  # system once
    assert chat[2]["content"] == '<think>cheap</think>{"type":"buy_prediction"}' and chat[4]["content"] == "wait a"


def test_grpo_score_choice(grouped):
    groups, _ = to_grpo_groups(grouped, score="final_pnl")
    assert groups[0]["scores"] == [0.0, -10.0, -20.0]
    groups, _ = to_grpo_groups(grouped, score=lambda t: len(t.steps))
    assert all(g["degenerate"] for g in groups)
    with pytest.raises(ValueError, match="not a field"):
        to_grpo_groups(grouped, score="final_pnll")


# ---------------------------------------------------------------------------------------------- DB


def test_db_rows_have_the_original_layout_and_load_back(rich):
    (row,) = to_db_rows([rich])
    assert set(row) == {"id", "trajectoryId", "agentId", "windowId", "scenarioId", "archetype", "startTime", "endTime",
                        "durationMs", "stepsJson", "totalReward", "finalPnL", "finalBalance", "tradesExecuted",
                        "episodeLength", "finalStatus", "isTrainingData"}
    assert isinstance(row["stepsJson"], str) and row["isTrainingData"] is True
    steps = json.loads(row["stepsJson"])
    assert steps[1]["environmentState"]["agentPnL"] == -250.0 and "llmCalls" in steps[0]
    assert row["finalPnL"] == -237.25 and row["id"] == "row-traj-rich-0"

    back = Trajectory.from_json(json.dumps(row))
    assert back.steps == rich.steps
    for name in ("id", "trajectory_id", "agent_id", "window_id", "scenario_id", "archetype", "start_time", "end_time",
                 "duration_ms", "total_reward", "final_pnl", "final_balance", "trades_executed", "episode_length",
                 "final_status"):
        assert getattr(back, name) == getattr(rich, name), name


def test_db_row_id_falls_back_to_the_trajectory_id(grouped):
    assert to_db_rows(grouped[:1])[0]["id"] == "g1-a"


# ------------------------------------------------------------------------------------------- files


@pytest.mark.parametrize(("kind", "count"), [("sft", 19), ("dpo", 1), ("grpo", 3), ("db", 10)])
def test_write_export_writes_jsonl(tmp_path, sample, kind, count):
    path = tmp_path / "exports" / f"{kind}.jsonl"
    assert write_export(kind, sample, path) == count
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == count and all(isinstance(json.loads(line), dict) for line in lines)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_write_export_passes_options_and_refuses_bad_input(tmp_path, sample, rich):
    assert write_export("sft", sample, tmp_path / "sft.jsonl", min_reward=0.4) == 8
    with pytest.raises(ValueError, match="unknown export kind 'ppo'"):
        write_export("ppo", sample, tmp_path / "x.jsonl")
    broken = rich.model_copy(update={"steps": [rich.steps[0].model_copy(update={"reward": float("nan")})]})
    with pytest.raises(ValueError, match="NaN or infinity"):
        write_export("sft", [broken], tmp_path / "nan.jsonl")
    assert not (tmp_path / "nan.jsonl").exists()


# ----------------------------------------------------------------------------------------- secrets


KEY = "sk-test-4f9a1b2c3d4e5f60718293a4b5c6d7e8"


def test_assert_no_secrets_raises_on_a_planted_key_without_repeating_it(rich):
    planted = rich.model_copy(update={"agent": {"api_key": KEY}})
    with pytest.raises(SecretLeakError, match=r"secret #1 \(40 characters\) appears at offset") as info:
        assert_no_secrets(planted.to_json(), ["", KEY])
    assert KEY not in str(info.value)
    with pytest.raises(SecretLeakError):
        assert_no_secrets(planted.to_json().encode("utf-8"), [KEY])


def test_assert_no_secrets_finds_a_json_escaped_key_and_ignores_unset_ones(rich):
    odd = 'key"with\\quote'
    with pytest.raises(SecretLeakError):
        assert_no_secrets(json.dumps({"k": odd}), [odd])
    assert_no_secrets(rich.to_json(), [None, ""])  # an unset key variable is no secret


def test_no_export_contains_the_key(tmp_path, sample):
    for kind in ("sft", "dpo", "grpo", "db"):
        path = tmp_path / f"{kind}.jsonl"
        write_export(kind, sample, path)
        assert_no_secrets(path.read_text(encoding="utf-8"), [KEY])
