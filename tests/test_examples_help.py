"""The examples' `--help` says what each flag does, its default and its choices (read from the `Args` docstrings).

The training examples keep their options in one typed `Args` dataclass (CleanRL style) with a docstring under
each field; tyro turns that into the command line, so `--help` carries those docstrings. Before, the examples
built argparse by hand and `--help` listed bare flags.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {  # example -> the extra modules it imports at the top
    "train_sb3_ppo.py": ("stable_baselines3", "torch", "tyro"),
    "train_rllib_ppo.py": ("ray", "tyro"),
    "train_trl_grpo.py": ("trl", "peft", "torch", "tyro"),
    "train_trl_episodes.py": ("trl", "peft", "torch", "tyro"),
    "decision_study.py": ("tyro",),
}
MIN_FIELDS = {"decision_study.py": 6}  # documented Args fields at least (the training examples: 10)


def _documented_fields(path: Path) -> dict[str, str]:
    """`Args` field name -> the first words of the docstring under it, read from the example's source."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Args").body
    out = {}
    for node, nxt in itertools.pairwise(body):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            out[node.target.id] = " ".join(str(nxt.value.value).split()[:3])
    return out


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_help_shows_every_field_with_its_docstring_and_default(example):
    missing = [m for m in EXAMPLES[example] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{example} needs {', '.join(missing)} (its extra is not installed)")
    path = ROOT / "examples" / example
    fields = _documented_fields(path)
    assert len(fields) >= MIN_FIELDS.get(example, 10), \
        f"{example}: expected a documented Args dataclass, found {sorted(fields)}"
    proc = subprocess.run([sys.executable, str(path), "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = " ".join(proc.stdout.split())  # the help wraps lines; compare words
    for name, words in fields.items():
        assert "--" + name.replace("_", "-") in text, f"{example}: --help lacks --{name.replace('_', '-')}"
        assert words in text, f"{example}: --help lacks the docstring of {name} ({words!r} ...)"
    assert text.count("(default:") >= len(fields) - 1, f"{example}: --help does not show the defaults"


def test_a_choice_outside_its_set_is_refused_with_the_choices():
    if importlib.util.find_spec("stable_baselines3") is None or importlib.util.find_spec("tyro") is None:
        pytest.skip("train_sb3_ppo.py needs the sb3 extra")
    proc = subprocess.run([sys.executable, "examples/train_sb3_ppo.py", "--preset", "hard"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2
    assert "default" in proc.stderr and "easy" in proc.stderr and "hard" in proc.stderr


def test_the_decision_levers_script_prints_both_held_out_tables():
    """examples/decision_levers.py (docs/trl.md's lever table) at CI size: every row on both held-out sets."""
    if importlib.util.find_spec("tyro") is None:
        pytest.skip("examples/decision_levers.py needs tyro (the sb3, rllib or trl extra)")
    proc = subprocess.run([sys.executable, "examples/decision_levers.py", "--seeds", "8"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("| reply | gain over waiting |") == 2
    for row in ("teacher", "x0.25", "x0.5", "x2", "cap 100 USD", "other side", "truth's side"):
        assert proc.stdout.count(f"| {row} |") == 2, row


def test_the_decision_study_script_prints_both_held_out_sets():
    """examples/decision_study.py (docs/reward.md's horizon tables) at CI size: every table on both held-out sets."""
    if importlib.util.find_spec("tyro") is None:
        pytest.skip("examples/decision_study.py needs tyro (the sb3, rllib or trl extra)")
    proc = subprocess.run([sys.executable, "examples/decision_study.py", "--points", "6"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("| source | reliability |") == 2
    assert proc.stdout.count("| reply | H=1, truth | H=4, truth | H=4, market |") == 2
    for row in ("Reuters-AI", "NPC posts (all)", "teacher", "evidence rule", "random side", "p*'s side",
                "hindsight ceiling", "evidence - random"):
        assert proc.stdout.count(f"| {row}") >= 2, row
    assert proc.stdout.count("the gains differ (by more than 1e-9) at 0 of 6 points for the teacher") == 2
