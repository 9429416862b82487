"""Imports flow downward (docs/layout.md ("Import layers")), with no circle, and the sim imports only numpy.

The layers are declared once, as import-linter contracts in pyproject.toml: this module runs them, checks that
they catch an upward import and a circle (on a copy of the package with one added), that every module has a
layer, and that docs/layout.md shows the same table. It also walks the AST of every module for what the
contracts do not cover: third-party imports of the low layers and imports of the package root.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "rlaif_gym"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONTRACTS = {c["id"]: c for c in PYPROJECT["tool"]["importlinter"]["contracts"]}


def _layers() -> dict[str, int]:
    """The layer of each top-level module or subpackage, from the layers contract: the last line is the floor
    (-1), the one above it L0, and so on up."""
    lines = CONTRACTS["layers"]["layers"]
    return {name.strip(): len(lines) - 2 - i for i, line in enumerate(lines) for name in line.split("|")}


LAYERS = _layers()
THIRD_PARTY_BY_LAYER = {0: {"numpy", "numba", "pydantic"}, 1: {"pydantic"}}
# The trajectory schema is pydantic + stdlib only (readers and storage pull in nothing heavy).
SCHEMA_MODULES = {"trajectory"}


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts == ("__init__.py",):
            continue
        yield rel.parts[0].removesuffix(".py"), path


def _top_level_names() -> set[str]:
    """The top-level modules and subpackages of rlaif_gym (the root `__init__` aside)."""
    names = {p.stem for p in PKG.glob("*.py") if p.name != "__init__.py"}
    return names | {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}


def test_every_layer_names_a_module_and_every_module_has_a_layer():
    names = _top_level_names()
    assert not set(LAYERS) - names, f"LAYERS lists what rlaif_gym does not have: {sorted(set(LAYERS) - names)}"
    assert not names - set(LAYERS), f"these have no layer in LAYERS: {sorted(names - set(LAYERS))}"


def test_docs_layout_shows_the_same_layers():
    """docs/layout.md's "Import layers" table is this test's LAYERS (`floor` is -1)."""
    text = (ROOT / "docs" / "layout.md").read_text().split("## Import layers", 1)[1]
    documented = {}
    for label, names in re.findall(r"^\| *(L\d+|floor) *\|([^|\n]*)\|", text, flags=re.MULTILINE):
        for name in re.findall(r"`(\w+)`", names):
            documented[name] = -1 if label == "floor" else int(label[1:])
    assert documented == LAYERS


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    pkg_parts = ["rlaif_gym", *path.relative_to(PKG).parent.parts]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    for alias in node.names:
                        yield f"{name}.{alias.name}"
                    continue
                yield name
            else:
                yield node.module


def _lint_imports(cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "2 kept, 0 broken" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(("module", "added", "broken"), [
    ("sim/rules.py", "from ..envs import rlaif_env", "imports flow downward"),           # L0 imports L5
    ("judge/rules.py", "from .. import rewards", "imports flow downward"),              # sideways in L4
    ("envs/snapshot.py", "from . import rlaif_env", "no import circle"),                # rlaif_env imports snapshot
])
def test_the_contracts_fail_on_an_upward_import_or_a_circle(tmp_path, module, added, broken):
    """The same contracts, run on a copy of the package (under another name, so the installed package is not
    what they read) with one import added: each breaks the contract it should, and the copy without it keeps
    both."""
    probe = tmp_path / "rlaif_gym_probe"
    shutil.copytree(PKG, probe, ignore=shutil.ignore_patterns("__pycache__", "data"))
    config = (ROOT / "pyproject.toml").read_text()
    config = config[config.index("[tool.importlinter]"):config.index("[tool.pytest.ini_options]")]
    (tmp_path / "pyproject.toml").write_text(re.sub(r'"rlaif_gym"', '"rlaif_gym_probe"', config))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    clean = _lint_imports(tmp_path, env)
    assert clean.returncode == 0 and "2 kept, 0 broken" in clean.stdout, clean.stdout[-3000:] + clean.stderr[-2000:]
    target = probe / module
    target.write_text(target.read_text() + f"\n{added}  # noqa\n")
    proc = _lint_imports(tmp_path, env)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert re.search(rf"{re.escape(broken)}.* BROKEN", proc.stdout), proc.stdout[-3000:]  # (an upward import
    # makes a circle too, so it may break both)


@pytest.mark.parametrize(("top", "path"), list(_modules()), ids=lambda x: str(x).split("rlaif_gym/")[-1])
def test_low_layers_import_little_and_nothing_imports_the_root(top, path):
    """What the contracts do not cover: the third-party packages the low layers may import, and no import of the
    package root (it loads the public names; a module imports the module it needs)."""
    layer = LAYERS[top]
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "rlaif_gym":
            assert len(parts) > 1, f"{path.name} imports the package root; import the module it needs"
        elif parts[0] not in sys.stdlib_module_names and layer in THIRD_PARTY_BY_LAYER:
            assert parts[0] in THIRD_PARTY_BY_LAYER[layer], f"{path} (L{layer}) imports {name}"


def test_sim_imports_neither_gymnasium_nor_pydantic():
    for path in (PKG / "sim").rglob("*.py"):
        for name in _imports(path):
            root = name.split(".")[0]
            assert root not in {"gymnasium", "pydantic", "torch", "openai"}, f"{path} imports {name}"
            # numba only as the optional compiled backend, imported once (sim/_jit.py) under try/except.
            allowed = {"numpy", "rlaif_gym"} | ({"numba"} if path.name == "_jit.py" else set())
            assert root in sys.stdlib_module_names or root in allowed, f"{path} imports {name}"
            if root == "rlaif_gym":
                assert name.split(".")[1] in {"sim", "errors"}, f"{path} imports {name}"


def test_no_global_random_state_in_the_package():
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        assert "import random" not in text, path
        for bad in ("np.random.seed(", "np.random.rand(", "np.random.randint(", "np.random.choice(",
                    "np.random.normal(", "np.random.uniform("):
            assert bad not in text, f"{path} uses the global numpy RNG ({bad})"


def test_trajectory_schema_imports_only_pydantic_and_the_standard_library():
    for name in _imports(PKG / "trajectory.py"):
        root = name.split(".")[0]
        assert root in sys.stdlib_module_names or root == "pydantic" or name == "rlaif_gym.errors", name


def test_the_layers_are_numbered_in_one_place():
    """A module's layer number lives in pyproject.toml's contract and docs/layout.md's tables, which the tests
    above hold together; a docstring that restates it goes stale when a layer is inserted (the LLM clients moved
    above the encoding, so that every reply writer uses `encoding.reply.canonical_reply`). Docstrings say what a
    module imports and why, by name."""
    stated = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(PKG.rglob("*.py"))
              for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\bL\d\b", line)]
    assert not stated, f"layer numbers outside pyproject.toml and docs/layout.md: {stated}"
