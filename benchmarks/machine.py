"""What a benchmark ran on: the CPU model and the load average, printed beside every table here (the
figures scale with both, and machines differ between sessions)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one, else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average(digits: int = 2) -> str:
    """The 1-, 5- and 15-minute load averages, or "n/a" where the platform has none."""
    return " ".join(f"{v:.{digits}f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
