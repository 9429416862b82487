"""`rlaif-gym bench` and the benchmark scripts run (a few seconds; no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlaif_gym.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_bench_command_prints_both_tables(capsys):
    assert main(["bench", "--seconds", "0.05", "--repeats", "1", "--sizes", "1,4"]) == 0
    out = capsys.readouterr().out
    assert "| CartPole-v1 (reference) |" in out and "| RLAIF-v0 |" in out and "native / CartPole" in out
    assert "total text overhead" in out and "rule judge" in out
    # Every row has its reference beside it: the single env's target, CartPole per vector row, and the
    # world step, the LLM call and the 200 us budget per text stage.
    assert "≥ 0.5x CartPole" in out
    vector_rows = [line for line in out.splitlines() if line.startswith("| 1 |") or line.startswith("| 4 |")]
    assert len(vector_rows) == 2 and all(len(line.split("|")) == 11 for line in vector_rows)
    text_rows = [line for line in out.splitlines() if line.startswith("| rule judge |")]
    assert text_rows and text_rows[0].count("%") == 2 and "x |" in text_rows[0]


def test_benchmark_scripts_run():
    for script, args in (("bench_vector.py", ["--seconds", "0.05", "--repeats", "1", "--sizes", "2"]),
                         ("bench_text.py", ["--ticks", "3", "--number", "1"])):
        out = subprocess.run([sys.executable, f"benchmarks/{script}", *args], cwd=ROOT, capture_output=True,
                             text=True, timeout=300, check=True).stdout
        assert "|" in out
