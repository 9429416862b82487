"""What a benchmark ran on: the CPU model and the load average, printed beside every table here (the
figures scale with both, and machines differ between sessions). They live in `rlaif_gym.benchmark`, which the
examples that report a run's machine use too."""

from __future__ import annotations

from rlaif_gym.benchmark import cpu_model, load_average

__all__ = ["cpu_model", "load_average"]
