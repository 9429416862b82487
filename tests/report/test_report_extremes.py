"""`rlaif-gym report` draws every plot whatever number a stored record holds (issue 57, row N1).

The LLM boundary now drops numbers out of range, but a run written before, by another tool or by hand can hold
any value the readers accept: token counts of 2**64 - 1 or of 401 digits (JSON has no bound on an integer),
finite floats up to 1.8e308 and down to 5e-324, all equal or spanning every decade. N1 measured `rlaif-gym
report` exiting 1 "this is a bug" with numpy's ``Too many bins``. Each case below edits a real scripted run's
JSONL as such a writer would, then runs the report: every such record passes the readers' checks, and the
report exits 0 and writes every plot (a value beyond the plots' scale left off, and said so) and a metrics.json
that is strict JSON; never "this is a bug".
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlaif_gym.cli import main
from rlaif_gym.report.plots import PLOTS

pytest.importorskip("matplotlib", reason='the report plots need the [plots] extra: pip install "rlaif-gym[plots]"')
pytest.importorskip("typer", reason='the CLI needs the [cli] extra: pip install "rlaif-gym[cli]"')

HUGE = 1.7976931348623157e308
Edit = Callable[[list[dict[str, Any]]], None]


def _calls(records: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for record in records:
        for step in record["steps"]:
            yield from step["llmCalls"]


def _steps(records: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for record in records:
        yield from record["steps"]


def _each(items: Iterator[dict[str, Any]], key: str, values: Callable[[int], Any]) -> None:
    for i, item in enumerate(items):
        item[key] = values(i)


def _components(records: list[dict[str, Any]], values: Callable[[int], float]) -> None:
    for i, step in enumerate(_steps(records)):
        step["rewardComponents"] = {name: values(i) for name in step["rewardComponents"]}


CASES: dict[str, Edit] = {
    "completion tokens all 2**64 - 1": lambda r: _each(_calls(r), "completionTokens", lambda i: 2**64 - 1),
    "completion tokens of 401 digits once": lambda r: _each(_calls(r), "completionTokens",
                                                            lambda i: 10**400 if i == 0 else 100 + i),
    "prompt and total tokens of 401 digits": lambda r: [_each(_calls(r), k, lambda i: 10**400 + i)
                                                       for k in ("promptTokens", "totalTokens")],
    "token counts from 0 to 2**64 - 1": lambda r: _each(_calls(r), "completionTokens",
                                                        lambda i: [0, 1, 2**31 - 1, 2**53 + 1, 2**64 - 1][i % 5]),
    "latency 1.8e308 once": lambda r: _each(_calls(r), "latencyMs", lambda i: HUGE if i == 0 else 5.0 + i),
    "latency 5e-324 and 1.8e308": lambda r: _each(_calls(r), "latencyMs", lambda i: [5e-324, HUGE, 3.0][i % 3]),
    "latency all 1e300": lambda r: _each(_calls(r), "latencyMs", lambda i: 1e300),
    "rewards of -1.8e308 and 1.8e308": lambda r: _each(_steps(r), "reward", lambda i: HUGE * (-1) ** i),
    "rewards all 1e300": lambda r: _each(_steps(r), "reward", lambda i: 1e300),
    "rewards of 5e-324 and 0": lambda r: _each(_steps(r), "reward", lambda i: 5e-324 * (i % 2)),
    "reward components of -1.8e308 and 1.8e308": lambda r: _components(r, lambda i: HUGE * (-1) ** i),
    "reward components all 1e16 and one ulp more": lambda r: _components(r, lambda i: 1e16 + 2 * (i % 2)),
    "reward components of 1e15 and 0.25 more": lambda r: _components(r, lambda i: 1e15 + 0.25 * (i % 2)),
    "completion tokens of 2**53 and one more": lambda r: _each(_calls(r), "completionTokens",
                                                               lambda i: 2**53 + i % 2),
    "final PnL and return of -1.8e308 and 1.8e308": lambda r: [
        rec.update(finalPnL=HUGE * (-1) ** i, totalReward=-HUGE * (-1) ** i) for i, rec in enumerate(r)],
    "final PnL and return all 1e300": lambda r: [rec.update(finalPnL=1e300, totalReward=1e300) for rec in r],
    "balances and PnL deltas of 1.8e308": lambda r: [
        (step["environmentState"].update(agentBalance=HUGE, agentPnL=-HUGE), step["feedback"].update(pnlDelta=HUGE))
        for step in _steps(r)],
    "judge scores of 1.8e308": lambda r: [step.update(judge={"format": HUGE, "reasoning": -HUGE})
                                          for step in _steps(r)],
}
"""What a writer put in the records -> the edit."""


def _edited(scripted_run: Path, out: Path, edit: Edit) -> Path:
    shutil.copytree(scripted_run, out, ignore=shutil.ignore_patterns("report*"))
    for path in out.glob("trajectories-*.jsonl"):
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        edit(records)
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return out


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_report_draws_every_plot_whatever_number_is_stored(scripted_run, tmp_path, capsys, case):
    run = _edited(scripted_run, tmp_path / "run", CASES[case])
    code = main(["report", str(run), "--out", str(tmp_path / "report"), "--no-baselines"])
    out = capsys.readouterr()
    assert "this is a bug" not in out.out + out.err, f"{case}: {out.err[-2000:]}"
    assert code == 0, (code, out.err[-2000:])
    for stem in PLOTS:
        assert (tmp_path / "report" / f"{stem}.png").stat().st_size > 1000, f"{case}: {stem}.png"
    metrics = (tmp_path / "report" / "metrics.json").read_text(encoding="utf-8")
    json.loads(metrics, parse_constant=lambda c: pytest.fail(f"{case}: metrics.json holds {c}"))
