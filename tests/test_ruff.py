"""The code stays lint-clean: `ruff check` (configured in pyproject.toml) passes, run by `make test`.

ruff comes with the `dev` extra (`pip install -e ".[dev]"`, which `make test` installs); without it
the test is skipped and says so.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("rlaif_gym", "rlaif_gym_verifiers", "tests", "examples", "benchmarks")


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                    reason="ruff is not installed: it is in the dev extra (pip install -e '.[dev]')")
def test_ruff_check_passes():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *CHECKED], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"ruff check {' '.join(CHECKED)} failed:\n{result.stdout}{result.stderr}"
