"""`rlaif-gym bench` and `check`: measure the env and run the env checkers on it (docs/cli.md)."""

from __future__ import annotations

import typer

from ..errors import install_hint
from ._common import BackendKind, _at_least, _console, _number, _outside, _sizes

__all__ = ["bench", "check"]


def bench(
    vector: bool = typer.Option(True, help="env steps/s: single, sync, async and native vs CartPole"),
    text: bool = typer.Option(True, help="text-face cost per tick"),
    seconds: float = typer.Option(1.0, callback=_number(0.0, 3600.0, above=True),
                                  help="length of one timed window, seconds"),
    repeats: int = typer.Option(3, callback=_at_least(1), help="windows per cell (median reported)"),
    sizes: str = typer.Option("1,64,1024,16384", callback=_sizes, help="numbers of envs, comma-separated"),
    backend: BackendKind = typer.Option(BackendKind.auto, help="world-step backend (auto: the default, numba "
                                        "when it imports)"),
):
    """Benchmarks measured side by side in one run (the collector's: python benchmarks/bench_collector.py)."""
    from ..benchmark import bench_text_overhead, bench_vector, format_text, format_vector

    if vector:
        typer.echo(format_vector(bench_vector(sizes, seconds, repeats, backend=backend.value)))
    if text:
        typer.echo(format_text(bench_text_overhead()))


def check():
    """Run Gymnasium's (and SB3's, if installed) env checkers on RLAIF-v0 and RLAIF-Text-v0."""
    import warnings

    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    console = _console()
    failures = 0
    for env_id in ("RLAIF-v0", "RLAIF-Text-v0"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                check_env(gym.make(env_id).unwrapped)
                console.print(f"[green]ok[/green]   gymnasium check_env {env_id}")
            except Exception as exc:
                failures += 1
                console.print(f"[red]FAIL[/red] gymnasium check_env {env_id}: {_outside(exc)}")
    try:
        from stable_baselines3.common.env_checker import check_env as sb3_check
    except ImportError:
        console.print(f'skip SB3 check_env ({install_hint("sb3")})', markup=False, highlight=False)
    else:
        try:
            sb3_check(gym.make("RLAIF-v0"))
            console.print("[green]ok[/green]   SB3 check_env RLAIF-v0")
        except Exception as exc:
            failures += 1
            console.print(f"[red]FAIL[/red] SB3 check_env RLAIF-v0: {_outside(exc)}")
    raise typer.Exit(1 if failures else 0)
