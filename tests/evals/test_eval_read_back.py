"""Files the eval reads back are checked like input (issue 57, E2, E3 and E5), on real files and the real CLI.

* E2: a line of `replies.jsonl` that no eval writes (a row moved to point -1 scored the last point twice; others
  were skipped, re-called or "this is a bug") is a one-line `EvalFileError` naming the file, the line and
  `--overwrite`, and nothing is rewritten.
* E3: `eval compare` on crafted `scorecard.json` / `points.jsonl` (NaN, 1e308, a point twice, a bool point, a digest
  that is no string, a row that is no object, ...) exits 2 with one line naming the file and `--overwrite`; it was
  "this is a bug" (`numerator`, fsum `OverflowError`, `TypeError`, `KeyError`) or a silent score.
* E5: `--samples` and `--points` are bounded with a one-line error (`--samples 10**9` took 3 GB in 16 s,
  `--points 10**30` raised `OverflowError`).
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.cli import main
from rlaif_gym.evals import EvalFileError, decision_set, run_decision_eval

POINTS, SAMPLES = 6, 2


def _eval(out, **kw):
    return run_decision_eval(ScriptedLLMAgent(temperature=1.0), decision_set(points=POINTS), out, samples=SAMPLES,
                             command=["read-back"], **kw)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished eval of 6 points x 2 samples (the scripted model at temperature 1)."""
    return _eval(tmp_path_factory.mktemp("read-back") / "done").out


def _at(rows, point, sample):
    return next(r for r in rows if r["point"] == point and r["sample"] == sample)


def _swap_points(rows):
    a, b = _at(rows, 1, 0), _at(rows, 3, 0)
    a["point"], b["point"] = 3, 1


EDITS = {  # name: (edit of the parsed rows, or of the raw lines; what the error says)
    "point -1 (scored the last point twice)": (lambda rows: _at(rows, 2, 0).update(point=-1), '"point"'),
    "a point beyond the set": (lambda rows: _at(rows, 2, 0).update(point=POINTS), '"point"'),
    "a point true": (lambda rows: _at(rows, 1, 0).update(point=True), '"point"'),
    "a sample beyond --samples": (lambda rows: _at(rows, 2, 1).update(sample=SAMPLES), '"sample"'),
    "two rows moved to each other's point": (_swap_points, "the state of seed"),
    "a reply that is no text": (lambda rows: _at(rows, 0, 0).update(reply=123), '"reply"'),
    "a failed call with a reply": (lambda rows: _at(rows, 0, 1).update(error="boom"), '"error"'),
    "attempts as text": (lambda rows: _at(rows, 4, 0)["call"].update(attempts="many"), '"attempts"'),
    "negative tokens": (lambda rows: _at(rows, 4, 1)["call"].update(prompt_tokens=-5), '"prompt_tokens"'),
    "another call's seed": (lambda rows: _at(rows, 5, 0)["call"].update(seed=7), "made with the seed"),
    "a NaN latency": (lambda rows: _at(rows, 5, 1)["call"].update(latency_ms=float("nan")), "not a JSON line"),
    "a row twice": (lambda rows: rows.append(dict(_at(rows, 3, 1))), "a second line of point 3, sample 1"),
    "a line that is no JSON": (lambda rows: rows.insert(3, "not json"), "not a JSON line"),
    "a line that is no object": (lambda rows: rows.insert(3, [1, 2]), "expected a JSON object"),
}


def _edit(folder, edit):
    path = folder / "replies.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    edit(rows)
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row, sort_keys=True)) + "\n"
                            for row in rows))


@pytest.mark.parametrize("name", list(EDITS))
def test_an_edited_replies_line_is_a_typed_one_line_error_and_changes_nothing(name, finished, tmp_path):
    edit, needle = EDITS[name]
    folder = tmp_path / "edited"
    shutil.copytree(finished, folder)
    _edit(folder, edit)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(EvalFileError) as caught:
        _eval(folder, resume=True)
    message = str(caught.value)
    assert needle in message and f"{folder / 'replies.jsonl'}:" in message and "--overwrite" in message, message
    assert len(message.splitlines()) == 1
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing scored, nothing rewritten
    assert _eval(folder, overwrite=True).scorecard == json.loads((finished / "scorecard.json").read_text())


def test_an_edited_replies_line_through_the_cli_names_the_file_and_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", "--points", "4", "--out", str(out)]
    assert main(argv) == 0
    _edit(out, lambda rows: _at(rows, 1, 0).update(point=-1))
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "this is a bug" not in err, err
    assert f"{out / 'replies.jsonl'}:" in err and "--overwrite" in err
    assert main([*argv, "--overwrite"]) == 0


def test_a_torn_last_line_is_cut_before_the_resumed_eval_appends(finished, tmp_path):
    """A killed eval's torn last line is cut, not glued to the next reply (which made a line no reader takes)."""
    folder = tmp_path / "torn"
    shutil.copytree(finished, folder)
    for name in ("scorecard.json", "points.jsonl"):
        (folder / name).unlink()
    lines = (folder / "replies.jsonl").read_text().splitlines(keepends=True)
    (folder / "replies.jsonl").write_text("".join(lines[:5]) + lines[5][:40])
    result = _eval(folder, resume=True)
    rows = [json.loads(line) for line in (folder / "replies.jsonl").read_text().splitlines()]
    assert sorted((r["point"], r["sample"]) for r in rows) == [(p, k) for p in range(POINTS) for k in range(SAMPLES)]
    assert (folder / "scorecard.json").read_bytes() == (finished / "scorecard.json").read_bytes()
    assert _eval(folder, resume=True).scorecard == result.scorecard  # and the file reads back again


# ------------------------------------------------------------------------------------------ E3: eval compare


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two finished evals of the same 4 points (the scripted model, greedy)."""
    root = tmp_path_factory.mktemp("compare")
    for name in ("a", "b"):
        run_decision_eval(ScriptedLLMAgent(temperature=0.0), decision_set(points=4), root / name, command=["c"])
    return root


def _card(edit):
    def go(folder):
        path = folder / "scorecard.json"
        card = json.loads(path.read_text())
        edit(card)
        path.write_text(json.dumps(card))
        return path
    return go


def _points(edit):
    def go(folder):
        path = folder / "points.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        edit([r for r in rows if r["policy"] == "model"], rows)
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
        return path
    return go


def _each(field, value, count=4):
    def edit(model, rows):
        for row in model[:count]:
            row[field] = value
    return edit


CRAFTED = {  # name: (the edit of B's folder, whether A gets it too)
    "NaN values (NaN numerator)": (_points(_each("gain_over_wait", float("nan"), 2)), False),
    "1e308 values (fsum OverflowError)": (_points(_each("gain_over_wait", 1.7e308)), False),
    "an infinite value": (_points(_each("gain_over_wait", float("inf"), 1)), False),
    "a share of 7": (_points(_each("format_valid", 7.0, 1)), False),
    "a value as text": (_points(_each("format_valid", "1", 1)), False),
    "a value true": (_points(_each("executed", True, 1)), False),
    "a point -1": (_points(_each("point", -1, 1)), False),
    "a point 1.5": (_points(_each("point", 1.5, 1)), False),
    "a point true": (_points(_each("point", True, 1)), False),
    "a point twice": (_points(lambda model, rows: model[1].update(point=0)), False),
    "a row that is no object": (_points(lambda model, rows: rows.insert(0, "[]")), False),
    "no rows": (_card(lambda card: card.update(rows=[])), False),
    "a digest that is no string": (_card(lambda card: card["set"].update(digest=5)), True),
    "a set name that is no string": (_card(lambda card: card["set"].update(name=[])), False),
    "a model that is no object": (_card(lambda card: card.update(model="x")), False),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_compare_refuses_crafted_inputs_with_one_line_naming_the_file(name, pair, tmp_path, capsys):
    edit, both = CRAFTED[name]
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(pair / "a", a)
    shutil.copytree(pair / "b", b)
    path = edit(b)
    if both:  # (A is read first)
        path = edit(a)
    assert main(["eval", "compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "this is a bug" not in err, err
    assert str(path) in err and "--overwrite" in err, err


def test_compare_refuses_a_scorecard_nested_too_deep(pair, tmp_path, capsys):
    b = tmp_path / "b"
    shutil.copytree(pair / "b", b)
    (b / "scorecard.json").write_text("[" * 100_000)
    assert main(["eval", "compare", str(pair / "a"), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nested deeper" in err and "--overwrite" in err, err


# ------------------------------------------------------------------------------------------ E5: bounds


BOUNDS = [
    (["--samples", "65", "--points", "2", "--temperature", "1"], "--samples must be in [1, 64]"),
    (["--samples", str(10**9), "--points", "2", "--temperature", "1"], "--samples must be in [1, 64]"),
    (["--points", "400", "--samples", "64", "--temperature", "1"], "25,600 calls, at most 20,000"),
    (["--points", "2001"], "--points must be in [1, 2,000]"),
    (["--points", str(10**30)], "--points must be in [1, 2,000]"),
    (["--task-set", "episodes-v1/decision-world-a", "--points", str(10**30)], "--points must be in [1, 2,000]"),
    (["--seeds", str(2**63 - 10), "--points", "3"], "--seeds must be in [0, "),
]


def test_samples_and_points_are_bounded_with_a_one_line_error(tmp_path, capsys):
    for argv, needle in BOUNDS:
        started = time.perf_counter()
        code = main(["eval", *argv, "--out", str(tmp_path / "run")])
        took = time.perf_counter() - started
        err = capsys.readouterr().err.strip()
        assert code == 2 and needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, (argv, err)
        assert took < 30.0 and not (tmp_path / "run" / "replies.jsonl").exists(), argv  # refused before any work
