"""A judge tape is read back checked like input (issue 57, E4): every row carries a digest over its columns, verified
on replay and rescore, so a verdict rewritten in the SQLite file, two rows swapped, an outcome or a call record
changed, or a table altered is a one-line `TapeFormatError` naming the file and the fix, never a replayed verdict the
judge did not give, nor "this is a bug" (SQLite's `OperationalError`). Record mode re-asks and mends the tape.

Real tapes written by a real judge run against the judge server on 127.0.0.1; the tampering is plain SQL on the file.
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from judge_server import JudgeServer, make_run

from rlaif_gym.cli import main
from rlaif_gym.llm import OpenAIChatClient
from rlaif_gym.llm_judge import JudgeTape, TapeFormatError, TapeIntegrityError, judge_run

MODEL = "judge-model"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A scripted run of one group of 4 and the absolute judge's tape of it (4 verdicts), with its scores."""
    root = tmp_path_factory.mktemp("tape")
    run = root / "run"
    make_run(run, groups=1, group_size=4, ticks=8)
    with JudgeServer() as server:
        result = judge_run(run, client=OpenAIChatClient(MODEL, server.base_url, timeout=5.0, max_retries=0),
                           out_dir=root / "judged")
    assert len(set(result.batch.scores().values())) == 4  # four verdicts, each its own: a swap changes scores
    return run, root / "judged" / "judge.sqlite", result.batch.scores()


def _keys(db):
    return [k for (k,) in db.execute("SELECT key FROM calls ORDER BY key")]


def _rewrite_verdict(db):
    key = _keys(db)[0]
    (response,) = db.execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
    verdict = json.loads(response)
    verdict["score"] = 1.0 if verdict["score"] != 1.0 else 0.0
    db.execute("UPDATE calls SET response = ? WHERE key = ?", (json.dumps(verdict), key))


def _swap_rows(db):
    a, b = _keys(db)[:2]
    db.execute("UPDATE calls SET key = 'moving' WHERE key = ?", (a,))
    db.execute("UPDATE calls SET key = ? WHERE key = ?", (a, b))
    db.execute("UPDATE calls SET key = ? WHERE key = 'moving'", (b,))


TAMPER = {
    "a verdict rewritten": _rewrite_verdict,
    "two rows swapped between their keys": _swap_rows,
    "two verdicts swapped": lambda db: db.execute(
        "UPDATE calls SET response = (SELECT response FROM calls c WHERE c.key = ?) WHERE key = ?",
        (_keys(db)[1], _keys(db)[0])),
    "an outcome changed": lambda db: db.execute("UPDATE calls SET outcome = 'malformed' WHERE key = ?",
                                                (_keys(db)[0],)),
    "a call record replaced": lambda db: db.execute("UPDATE calls SET call = '{\"nope\": 1}' WHERE key = ?",
                                                    (_keys(db)[0],)),
}


def _tampered(recorded, tmp_path, tamper):
    run, tape, _ = recorded
    copy = tmp_path / "judge.sqlite"
    shutil.copy(tape, copy)
    db = sqlite3.connect(copy)
    with db:
        tamper(db)
    db.close()
    return run, copy


@pytest.mark.parametrize("name", list(TAMPER))
def test_a_tampered_tape_row_is_never_replayed(name, recorded, tmp_path):
    run, tape = _tampered(recorded, tmp_path, TAMPER[name])
    for mode in ("replay", "rescore"):
        client = None if mode == "replay" else OpenAIChatClient(MODEL, "http://127.0.0.1:9/v1", max_retries=0)
        with pytest.raises(TapeIntegrityError) as caught:
            judge_run(run, client=client, model=MODEL, tape=tape, tape_mode=mode, out_dir=tmp_path / mode)
        message = str(caught.value)
        assert str(tape) in message and "--tape-mode record" in message and "--overwrite" in message, message
        assert len(message.splitlines()) == 1


def test_record_mode_asks_anew_and_mends_a_tampered_tape(recorded, tmp_path):
    run, tape = _tampered(recorded, tmp_path, _rewrite_verdict)
    with JudgeServer() as server:
        mended = judge_run(run, client=OpenAIChatClient(MODEL, server.base_url, timeout=5.0, max_retries=0),
                           tape=tape, tape_mode="record", out_dir=tmp_path / "record")
        assert len(server.chat_requests()) == 4
    replay = judge_run(run, model=MODEL, tape=tape, tape_mode="replay", out_dir=tmp_path / "replay")
    assert replay.batch.scores() == mended.batch.scores() == recorded[2]


def test_an_altered_table_is_a_tape_format_error_not_a_sqlite_traceback(recorded, tmp_path, capsys):
    run, tape = _tampered(recorded, tmp_path, lambda db: db.execute("ALTER TABLE calls RENAME COLUMN response TO x"))
    with pytest.raises(TapeFormatError, match="SQLite said"):
        JudgeTape(tape)
    code = main(["judge", str(run), "--tape", str(tape), "--tape-mode", "replay", "--model", MODEL,
                 "--out", str(tmp_path / "cli")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err and "this is a bug" not in err, err
    assert str(tape) in err and "--overwrite" in err


def test_a_tampered_judge_tape_of_an_eval_is_refused_through_the_cli(tmp_path, capsys):
    """`eval --judge llm`: the tape in --out/judge replays only as it was written."""
    out = tmp_path / "run"
    with JudgeServer() as server:
        assert main(["eval", "--points", "2", "--judge", "llm", "--judge-base-url", server.base_url,
                     "--judge-model", MODEL, "--out", str(out)]) == 0
    tape = out / "judge" / "judge.sqlite"
    db = sqlite3.connect(tape)
    with db:
        _rewrite_verdict(db)
    db.close()
    capsys.readouterr()
    replay = ["eval", "--points", "2", "--resume", "--judge", "llm", "--judge-tape-mode", "replay", "--judge-model",
              MODEL, "--out", str(out)]
    assert main(replay) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(tape) in err and "--overwrite" in err and "digest" in err
