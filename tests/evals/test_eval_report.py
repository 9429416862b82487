"""The report page of an eval (`rlaif-gym report EVAL_DIR`): the scorecard's forest plot, its tables and the judge
validations, from the files the eval wrote."""

from __future__ import annotations

import json

import pytest

from rlaif_gym.agents import ScriptedLLMAgent
from rlaif_gym.cli import main
from rlaif_gym.errors import ConfigError
from rlaif_gym.evals import decision_set, run_decision_eval, run_judge_validation

pytest.importorskip("matplotlib", reason="the plots extra is not installed")
pytest.importorskip("jinja2", reason="the plots extra is not installed")


def test_the_report_of_an_eval_plots_its_intervals_and_carries_its_tables_and_judge_validation(tmp_path, capsys):
    from rlaif_gym.report.scorecard import write_scorecard_report

    dset = decision_set(points=4)
    result = run_decision_eval(ScriptedLLMAgent(temperature=0.0), dset, tmp_path / "e", command=["t"])
    run_judge_validation(result.points, result.out / "judge", model_replies=result.first_replies())
    files = write_scorecard_report(result.out)
    assert files.plot.read_bytes().startswith(b"\x89PNG") and files.html.parent == result.out / "report"
    page = files.html.read_text(encoding="utf-8")
    card = json.loads((result.out / "scorecard.json").read_text())
    assert card["set"]["digest"][:19] in page and "data:image/png;base64," in page
    for row in card["rows"]:  # every row of the scorecard is a cell of the page's table
        assert f"<td>{row['metric']}</td>" in page
    assert "Judge validation: rule" in page and "pairwise accuracy within groups" in page
    assert "<script" not in page and "default-src &#39;none&#39;" in page  # self-contained, nothing to run
    assert main(["report", str(result.out), "--out", str(tmp_path / "page")]) == 0
    assert (tmp_path / "page" / "report.html").is_file() and "wrote scorecard.png" in capsys.readouterr().out


def test_a_folder_without_a_finished_eval_is_refused(tmp_path):
    from rlaif_gym.report.scorecard import write_scorecard_report

    with pytest.raises(ConfigError, match="no finished eval"):
        write_scorecard_report(tmp_path)
