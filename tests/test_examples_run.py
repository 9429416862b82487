"""The examples run end to end (the demo and the baselines table)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_the_episodes_recipe_smoke_run_writes_its_results(tmp_path):
    """examples/train_trl_episodes.py --smoke: the shipped SmolLM2-135M, SFT on the format-only teacher, 2 GRPO steps
    on 3-tick episodes (constrained, token-exact rollouts) and greedy play of one episode set before and after RL, on
    one CPU thread in a few minutes. It checks the wiring (exit 0, results.json's keys and finite values), not
    learning."""
    import json
    import math
    import os

    pytest.importorskip("trl", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
    pytest.importorskip("peft", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
    from rlaif_gym.integrations.local_llm import model_path

    try:
        model_path()
    except Exception as exc:  # the model package is installed separately (make venv does it)
        pytest.skip(f"the shipped model is not installed: {exc}")
    results_path = tmp_path / "elsewhere" / "results.json"
    proc = subprocess.run([sys.executable, "examples/train_trl_episodes.py", "--smoke", "--threads", "1",
                           "--out", str(tmp_path / "run"), "--results-json", str(results_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    results = json.loads(results_path.read_text())
    assert set(results) >= {"args", "rows", "sets", "sft_losses", "curve", "stages_s", "wall_s"}
    assert len(results["curve"]) == results["args"]["grpo_steps"] == 2
    assert len(results["sft_losses"]) == results["args"]["sft_steps"] == 2
    assert all(math.isfinite(x) for x in results["sft_losses"])
    assert list(results["sets"]) == ["episodes-v1/decision-world-a"]
    one = results["sets"]["episodes-v1/decision-world-a"]
    assert one["episodes"] == 2 and one["ticks"] == 3
    assert {"after SFT", "after SFT+GRPO", "wait", "teacher"} <= set(one["columns"])
    for column in one["columns"].values():
        assert set(column["return"]) == {"mean", "ci95_low", "ci95_high", "n"} and column["return"]["n"] == 2
        assert 0.0 <= column["format_valid"] <= 1.0
    assert one["paired"]["trained_minus_sft"]["n"] == 2
    note = "--smoke checks the wiring, not learning"
    assert proc.stdout.count(note) == 2 and "trained - SFT, paired over episodes" in proc.stdout
