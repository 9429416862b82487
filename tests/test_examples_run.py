"""The examples run end to end (the demo and the baselines table)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs_and_prints_a_summary():
    out = subprocess.run([sys.executable, "examples/demo.py", "--seed", "3"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "=== Summary (same seed) ===" in out and "InformedAgent" in out and "market-" in out


def test_baselines_script_prints_the_table():
    out = subprocess.run([sys.executable, "examples/baselines.py", "--seeds", "8"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    for name in ("OracleAgent", "InformedAgent", "PassiveAgent", "RandomAgent"):
        assert f"| {name} |" in out
