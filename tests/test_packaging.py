"""The wheel ships every data file the package reads at run time (prompts, rubrics, templates).

An editable install reads them from the source tree, so a missing `package-data` pattern only shows
in a real wheel: this test builds one and compares its contents with the package's data files.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "rlaif_gym"


def test_wheel_contains_every_package_data_file(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--quiet", "-w",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("rlaif_gym-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    data = {
        path.relative_to(ROOT).as_posix()
        for path in PKG.rglob("*")
        if path.is_file() and path.suffix not in {".py", ".pyc", ".nbi", ".nbc"} and "__pycache__" not in path.parts
    }
    assert data, "no data files found: the test would be vacuous"
    assert "rlaif_gym/encoding/prompts/policy_system.txt" in data
    # verifiers imports plugins by top-level module name (vf-eval rlaif-gym-verifiers).
    assert "rlaif_gym_verifiers/__init__.py" in shipped
    missing = sorted(data - shipped)
    assert not missing, f"not in the wheel (add them to [tool.setuptools.package-data]): {missing}"
