"""Runs collected by the real `RolloutCollector` for the report tests: one scripted, one hostile with errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `import report_runs` from the test modules

from report_runs import collect, hostile_agent

from rlaif_gym.agents import ScriptedLLMAgent


@pytest.fixture(scope="session")
def scripted_run(tmp_path_factory) -> Path:
    """3 episodes x 14 ticks of the embedded scripted model (trades, resolutions, perps)."""
    return collect(tmp_path_factory.mktemp("runs") / "scripted", ScriptedLLMAgent(), 3, 14, "small")


@pytest.fixture(scope="session")
def hostile_run(tmp_path_factory) -> Path:
    """2 episodes x 8 ticks; every episode fails at tick 5 (the call times out), run name with markup in it."""
    return collect(tmp_path_factory.mktemp("runs") / "hostile", hostile_agent(), 2, 8, 'evil<b>"&')


@pytest.fixture(scope="session")
def analyzed(scripted_run, hostile_run):
    """Both runs analysed (replay, baselines, metrics): (scripted, hostile)."""
    from rlaif_gym.report import analyze_run, load_run

    return (analyze_run(load_run(scripted_run), name="scripted", directory=scripted_run),
            analyze_run(load_run(hostile_run), name="hostile", directory=hostile_run))


def _needs_plots() -> None:
    pytest.importorskip("matplotlib", reason='the report plots need the [plots] extra: pip install "rlaif-gym[plots]"')
    pytest.importorskip("jinja2", reason='the HTML report needs the [plots] extra: pip install "rlaif-gym[plots]"')


@pytest.fixture(scope="session")
def single_report(analyzed, tmp_path_factory):
    """The report of the scripted run alone."""
    _needs_plots()
    from rlaif_gym.report import write_report

    return write_report([analyzed[0]], tmp_path_factory.mktemp("report-single"))


@pytest.fixture(scope="session")
def compare_report(analyzed, tmp_path_factory):
    """The scripted run (A) and the hostile run (B) side by side."""
    _needs_plots()
    from rlaif_gym.report import write_report

    return write_report(list(analyzed), tmp_path_factory.mktemp("report-compare"))
