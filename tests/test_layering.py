"""Imports flow downward (docs/layout.md ("Import layers")): the sim imports only numpy and the standard library.

Walks the AST of every module; fails on an upward or sideways import inside the package, and on
any third-party import in `rlaif_gym/sim` other than numpy. The table of layers names only modules
that exist, every module has a layer, and docs/layout.md shows the same table.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "rlaif_gym"

# Layer of each top-level module or subpackage of rlaif_gym (docs/layout.md ("Import layers")).
LAYERS = {
    "errors": -1, "_version": -1, "config": 0,  # errors is the floor: every module, config included, may raise them
    "sim": 1, "trajectory": 1,
    "encoding": 2, "llm": 2, "storage": 2,
    "babylon": 2,  # the port of the original's formulas: below rewards and judge, which forward its names
    "rewards": 3, "agents": 3, "judge": 3,
    "envs": 4, "llm_judge": 4,
    "rollout": 5,
    # cli is the top: it composes everything, the L6 integrations (e.g. serve-local) included.
    "cli": 7, "integrations": 6, "benchmark": 5, "ranking": 6,
    "rlaif_env": 6, "rollout_generator": 6, "metrics": 3, "report": 6, "evals": 6,
    "__main__": 8,  # python -m rlaif_gym: the command line
}
THIRD_PARTY_BY_LAYER = {0: {"pydantic"}, 1: {"numpy", "numba", "pydantic"}}
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


@pytest.mark.parametrize(("top", "path"), list(_modules()), ids=lambda x: str(x).split("rlaif_gym/")[-1])
def test_imports_flow_downward(top, path):
    layer = LAYERS[top]
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "rlaif_gym":
            if len(parts) == 1:
                pytest.fail(f"{path.name} imports the package root; import the module it needs")
            target = parts[1]
            if target == top:
                continue
            assert LAYERS[target] < layer, f"{path} (L{layer}) imports rlaif_gym.{target} (L{LAYERS[target]})"
        elif parts[0] not in sys.stdlib_module_names and layer in THIRD_PARTY_BY_LAYER:
            assert parts[0] in THIRD_PARTY_BY_LAYER[layer], f"{path} (L{layer}) imports {name}"


def test_sim_imports_neither_gymnasium_nor_pydantic():
    for path in (PKG / "sim").rglob("*.py"):
        for name in _imports(path):
            root = name.split(".")[0]
            assert root not in {"gymnasium", "pydantic", "torch", "openai"}, f"{path} imports {name}"
            # numba only as the optional compiled backend (sim/fast.py), imported under try/except.
            allowed = {"numpy", "rlaif_gym"} | ({"numba"} if path.name == "fast.py" else set())
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
