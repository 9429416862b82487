"""A judge verdict that carries a lone surrogate, raw or as the JSON escape inside the verdict text, is made
storable where it enters: the batch finishes, the tape holds valid UTF-8, and replay and rescore from that
tape work (issue 15, item 5). A real loopback judge server, a real run and a real tape on disk.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from judge_server import JudgeServer, make_run

from rlaif_gym.llm import OpenAIChatClient
from rlaif_gym.llm_judge import JudgeConfig, judge_run

LONE = "\ud800"


class SurrogateJudge(JudgeServer):
    """Each verdict's reasoning holds a lone surrogate: `escaped` writes it as the text \\ud800 inside the
    verdict JSON (the reply itself is plain ASCII, so it is taped as it came); otherwise it is raw in the
    reply (the JSON escape on the wire)."""

    def __init__(self, escaped: bool) -> None:
        super().__init__()
        self.escaped = escaped

    def verdict(self, body: dict[str, Any]) -> str:
        verdict = json.loads(super().verdict(body))
        verdict["reasoning"] = f"weighted {LONE} metrics"
        text = json.dumps(verdict)  # ensure_ascii: the surrogate is the six characters \ud800
        return text if self.escaped else text.replace("\\ud800", LONE)


@pytest.mark.parametrize("escaped", [True, False], ids=["escaped-in-verdict", "raw-in-reply"])
def test_a_verdict_with_a_lone_surrogate_is_stored_and_replays(tmp_path, escaped):
    run = tmp_path / "run"
    trajs = make_run(run, groups=1, group_size=2, ticks=3)
    out = tmp_path / "judged"
    with SurrogateJudge(escaped) as server:
        client = OpenAIChatClient("judge", server.base_url, timeout=5.0, max_retries=0)
        result = judge_run(run, client=client, out_dir=out)
    assert result.health["scored"] == len(trajs), result.health
    assert all(v.outcome == "ok" for v in result.batch.verdicts), [v.error for v in result.batch.verdicts]
    assert all(v.verdict["reasoning"] == "weighted \ufffd metrics" for v in result.batch.verdicts)
    for path in out.iterdir():
        if path.suffix in (".jsonl", ".json"):
            path.read_bytes().decode("utf-8")  # valid UTF-8 throughout
    with sqlite3.connect(out / "judge.sqlite") as db:
        rows = db.execute("SELECT outcome, response FROM calls").fetchall()
    assert rows and all(outcome == "ok" for outcome, _ in rows)
    scores = (out / "scores.absolute.jsonl").read_bytes()

    for mode in ("replay", "rescore"):  # the server is gone: every answer comes from the tape
        again = judge_run(run, client=None if mode == "replay" else OpenAIChatClient("judge", "http://127.0.0.1:9/v1",
                                                                                     max_retries=0),
                          model="judge", tape=out / "judge.sqlite", tape_mode=mode, out_dir=tmp_path / mode,
                          config=JudgeConfig())
        assert again.health["scored"] == len(trajs), (mode, again.health)
        assert (tmp_path / mode / "scores.absolute.jsonl").read_bytes() == scores, mode
