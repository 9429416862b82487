"""`--resume --retry-failed`: a run whose episodes failed (a server outage) is finished later, in place.

The server fails one episode for good from tick 5; once it is healthy again, a plain `--resume` keeps
the failed record (nothing to do), and `--resume --retry-failed` sets it aside and plays that episode
again with the same seeds: every planned id is on disk exactly once and completed, the old record
survives in `retried-failures.jsonl`, and the database row follows the replay.
"""

from __future__ import annotations

import json

import pytest
from fake_server import Fault, episode_seeds
from rollout_checks import check_run, read_store_strict

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.cli import main
from rlaif_gym.errors import ConfigError
from rlaif_gym.rollout import RolloutCollector
from rlaif_gym.storage import SET_ASIDE_NAME, JsonlStore, SqlTrajectorySink

TICKS, EPISODES, SEED = 10, 4, 30
FAILED_EPISODE, FAILED_TICK = 1, 5


def _rollout(fake_server, out, db, *extra):
    return main(["rollout", "--agent", "openai", "--base-url", fake_server.base_url, "--model", "fake",
                 "--episodes", str(EPISODES), "--num-envs", "2", "--seed", str(SEED), "--out", str(out),
                 "--db", db, "--no-progress", "--max-retries", "0", "--timeout", "5",
                 "--set", f"num_ticks={TICKS}", *extra])


def test_resume_retry_failed_replays_the_failed_episode_in_place(fake_server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-retry-key")
    out, db = tmp_path / "run", f"sqlite:///{tmp_path / 'runs.db'}"
    planned = [f"run-s{SEED + e}-m0" for e in range(EPISODES)]
    failed_id = planned[FAILED_EPISODE]
    outage = episode_seeds(SEED + FAILED_EPISODE, 0, range(FAILED_TICK, TICKS))
    fake_server.faults = [Fault("status", match=lambda body: body.get("seed") in outage, status=503)]

    assert _rollout(fake_server, out, db) == 1  # an episode failed: the run says so (issue 15, item 10)
    first = capsys.readouterr().out
    assert "--resume --retry-failed" in first, f"no hint on how to replay the failure: {first[-800:]}"
    before = {t.trajectory_id: t for t in read_store_strict(out)}
    check_run(before.values(), planned, TICKS, expect_failed={failed_id})
    assert len(before[failed_id].steps) == FAILED_TICK

    fake_server.faults = []  # the outage is over
    assert _rollout(fake_server, out, db, "--resume") == 0
    capsys.readouterr()
    assert read_store_strict(out) == list(before.values()), "a plain --resume changed the stored run"

    calls_before = len(fake_server.chat_requests())
    assert _rollout(fake_server, out, db, "--resume", "--retry-failed") == 0
    text = capsys.readouterr().out
    assert "failed before, played again" in text, text[-1500:]
    after = {t.trajectory_id: t for t in read_store_strict(out)}
    check_run(after.values(), planned, TICKS)  # every id once, all completed
    assert len(fake_server.chat_requests()) - calls_before == TICKS, "only the failed episode was played again"
    for tid in planned:
        if tid != failed_id:
            assert after[tid] == before[tid], f"{tid} was not failed but changed"
    # Same seeds, same server: the replay repeats the failed attempt's ticks exactly, then goes on.
    old, new = before[failed_id], after[failed_id]
    for a, b in zip(old.steps, new.steps[:FAILED_TICK], strict=True):
        assert (a.action, a.reward, a.llm_calls[0].response) == (b.action, b.reward, b.llm_calls[0].response)

    aside = [json.loads(line) for line in (out / SET_ASIDE_NAME).read_text().splitlines()]
    assert [(r["trajectoryId"], r["finalStatus"]) for r in aside] == [(failed_id, "failed")]

    rows = {t.trajectory_id: t.final_status for t in SqlTrajectorySink(db, create_tables=False).read()}
    assert rows == dict.fromkeys(planned, "completed"), rows

    # Nothing left to retry: a second retry is a no-op.
    assert _rollout(fake_server, out, db, "--resume", "--retry-failed") == 0
    capsys.readouterr()
    assert read_store_strict(out) == list(after.values())


def test_retry_failed_needs_resume_and_a_sink_that_can_set_aside(tmp_path):
    collector = RolloutCollector(ScriptedLLMAgent(), sink=JsonlStore(tmp_path / "a"), env_config={"num_ticks": 3})
    with pytest.raises(ConfigError, match="resume=True"):
        collector.collect(1, retry_failed=True)
    kept = RolloutCollector(ScriptedLLMAgent(), env_config={"num_ticks": 3})
    with pytest.raises(ConfigError, match="cannot"):
        kept.collect(1, resume=True, retry_failed=True)
