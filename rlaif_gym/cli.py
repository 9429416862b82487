"""`rlaif-gym`: the command line (typer + rich, the `[cli]` extra). Thin: it composes the public API.

    rlaif-gym rollout --agent scripted --episodes 8 --num-envs 8 --seed 0 --out runs/demo
    rlaif-gym rollout --agent openai --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct ...
    rlaif-gym report runs/demo
    rlaif-gym export runs/demo --format grpo --output grpo.jsonl
    rlaif-gym check
    rlaif-gym bench
"""

from __future__ import annotations

import json
import shutil
import sys
from enum import Enum
from pathlib import Path
from typing import Any

from .errors import ConfigError, DependencyNotInstalled, RLAIFError

__all__ = ["main"]


def _require_cli():
    try:
        import rich  # noqa: F401
        import typer
    except ImportError as exc:
        raise DependencyNotInstalled(
            'the rlaif-gym command needs typer and rich: pip install "rlaif-gym[cli]"'
        ) from exc
    return typer


class AgentKind(str, Enum):
    scripted = "scripted"
    openai = "openai"


class ExportFormat(str, Enum):
    sft = "sft"
    dpo = "dpo"
    grpo = "grpo"
    db = "db"
    parquet = "parquet"


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    """`key=value` pairs; values are JSON when they parse as JSON, else strings."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r} (e.g. --set num_markets=6)")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def _read_run(directory: Path) -> list:
    """Every trajectory of a run directory; a missing or empty directory is a clear error."""
    from .storage import JsonlStore

    if not directory.is_dir() or not any(directory.glob("*.jsonl")):
        raise ConfigError(f"{directory} holds no run (no *.jsonl files); pass the --out directory of a rollout")
    trajs = list(JsonlStore(directory).read())
    if not trajs:
        raise ConfigError(f"no trajectories in {directory}")
    return trajs


def _summary_table(summary, out: Path | None):
    from rich.table import Table

    table = Table(title="rollout summary", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    d = summary.to_dict()
    rows = [
        ("episodes planned", d["planned"]), ("skipped (already on disk)", d["skipped_existing"]),
        ("completed", d["completed"]), ("bankrupt", d["bankrupt"]), ("failed", d["failed"]),
        ("ticks", d["steps"]), ("LLM calls", d["llm_calls"]), ("failed calls", d["failed_calls"]),
        ("ticks / s", f"{d['ticks_per_s']:.1f}"), ("wall time (s)", f"{d['wall_s']:.1f}"),
        ("mean episode return", f"{d['mean_return']:+.3f}"), ("mean final PnL (USD)", f"{d['mean_final_pnl']:+,.2f}"),
        ("quality: valid / checked", f"{d['quality'].get('valid', 0)} / {d['quality'].get('trajectories', 0)}"),
        ("quality: mean score", f"{d['quality'].get('mean_quality', 0.0):.3f}"),
    ]
    if out is not None:
        rows.append(("output", str(out)))
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def _build_app():
    typer = _require_cli()
    from rich.console import Console

    app = typer.Typer(add_completion=False, no_args_is_help=True,
                      help="rlaif_gym: Babylon-style market world for RLAIF. Collect, inspect and export trajectories.")
    console = Console(stderr=False)

    @app.command()
    def rollout(
        agent: AgentKind = typer.Option(AgentKind.scripted, help="policy: the offline scripted model or an "
                                        "OpenAI-compatible server"),
        base_url: str = typer.Option(None, help="server URL, e.g. http://127.0.0.1:8000/v1 (default: "
                                     "$OPENAI_BASE_URL)"),
        model: str = typer.Option(None, help="model name on the server (default: $RLAIF_MODEL)"),
        num_envs: int = typer.Option(8, help="episodes in flight at once"),
        episodes: int = typer.Option(8, help="trajectories to collect"),
        seed: int = typer.Option(0, help="run seed: env seeds are seed, seed+1, ..."),
        out: Path = typer.Option(Path("runs/latest"), help="output directory (JSONL trajectories + run.json)"),
        resume: bool = typer.Option(False, help="continue a killed run in --out without duplicates"),
        overwrite: bool = typer.Option(False, help="delete a previous run in --out first"),
        group_size: int = typer.Option(1, help="episodes per env seed (GRPO groups)"),
        max_ticks: int = typer.Option(None, help="stop episodes after this many ticks"),
        temperature: float = typer.Option(0.7, help="sampling temperature"),
        max_tokens: int = typer.Option(512, help="max completion tokens per call"),
        timeout: float = typer.Option(60.0, help="seconds per LLM call attempt"),
        max_retries: int = typer.Option(3, help="retries for transient LLM failures"),
        max_concurrent_calls: int = typer.Option(None, help="LLM calls in flight (default: --num-envs)"),
        set_: list[str] = typer.Option([], "--set", help="env config override key=value (repeatable)"),
        parquet: bool = typer.Option(False, help="also write trajectories.parquet at the end"),
        progress: bool = typer.Option(True, help="live progress display"),
    ):
        """Collect trajectories: the main job. The API key is read from $OPENAI_API_KEY and never written."""
        from .agents import OpenAIChatAgent, ScriptedLLMAgent
        from .rollout import RolloutCollector
        from .storage import JsonlStore

        if overwrite and out.exists():
            if resume:
                raise ConfigError("--overwrite and --resume contradict each other; pick one")
            if not (out / "run.json").exists() and any(out.iterdir()):
                raise ConfigError(f"{out} is not an rlaif-gym run directory (no run.json); refusing to delete it")
            shutil.rmtree(out)
        if agent is AgentKind.scripted:
            policy = ScriptedLLMAgent(temperature=temperature)
        else:
            policy = OpenAIChatAgent(model, base_url, temperature=temperature, max_tokens=max_tokens, timeout=timeout,
                                     max_retries=max_retries)
        store = JsonlStore(out)
        collector = RolloutCollector(policy, sink=store, env_config=_parse_overrides(set_), num_envs=num_envs,
                                     max_concurrent_calls=max_concurrent_calls, group_size=group_size,
                                     run_name=out.name or "run", progress=progress and sys.stderr.isatty(),
                                     max_ticks=max_ticks)
        summary = collector.collect(episodes, seed, resume=resume)
        if parquet:
            from .storage import write_parquet

            write_parquet(out / "trajectories.parquet", list(store.read()))
        console.print(_summary_table(summary, out))
        for err in summary.errors[:10]:
            console.print(f"[red]error[/red] {err}")

    @app.command()
    def report(directory: Path = typer.Argument(..., help="a run directory written by rollout")):
        """Summary statistics and the quality report of a run."""
        from rich.table import Table

        from .rollout import summarize_quality

        trajs = _read_run(directory)
        table = Table(title=f"{directory}: {len(trajs)} trajectories")
        table.add_column("metric")
        table.add_column("value", justify="right")
        statuses: dict[str, int] = {}
        for t in trajs:
            statuses[t.final_status] = statuses.get(t.final_status, 0) + 1
        comps: dict[str, list[float]] = {}
        for t in trajs:
            for s in t.steps:
                for k, v in s.reward_components.items():
                    comps.setdefault(k, []).append(v)
        n = len(trajs)
        rows = [("status", ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))),
                ("mean episode length", f"{sum(t.episode_length for t in trajs) / n:.1f}"),
                ("mean return", f"{sum(t.total_reward for t in trajs) / n:+.3f}"),
                ("mean final PnL (USD)", f"{sum(t.final_pnl for t in trajs) / n:+,.2f}"),
                ("LLM calls", str(sum(len(s.llm_calls) for t in trajs for s in t.steps)))]
        rows += [(f"mean {k} component", f"{sum(v) / len(v):+.3f}") for k, v in sorted(comps.items())]
        quality = summarize_quality([t.quality for t in trajs])
        rows += [("quality: valid", f"{quality['valid']} / {quality['trajectories']}"),
                 ("quality: mean score", f"{quality['mean_quality']:.3f}")]
        rows += [(f"issue: {kind}", str(count)) for kind, count in quality["top_issues"]]
        for name, value in rows:
            table.add_row(name, value)
        console.print(table)

    @app.command()
    def export(
        directory: Path = typer.Argument(..., help="a run directory written by rollout"),
        format: ExportFormat = typer.Option(..., "--format", help="sft, dpo, grpo, db (original rows) or parquet"),
        output: Path = typer.Option(..., help="file to write"),
    ):
        """Export trajectories to the formats trainers read."""
        from .storage import write_export, write_parquet

        trajs = _read_run(directory)
        if format is ExportFormat.parquet:
            write_parquet(output, trajs)
        else:
            write_export(format.value, trajs, output)
        console.print(f"wrote {format.value} export of {len(trajs)} trajectories to {output}")

    @app.command()
    def bench(
        vector: bool = typer.Option(True, help="env steps/s: single, sync, async and native vs CartPole"),
        text: bool = typer.Option(True, help="text-face cost per tick"),
        seconds: float = typer.Option(1.0, help="length of one timed window"),
        repeats: int = typer.Option(3, help="windows per cell (median reported)"),
        sizes: str = typer.Option("1,64,1024,16384", help="numbers of envs, comma-separated"),
        backend: str = typer.Option("numpy", help="world-step backend: numpy or numba"),
    ):
        """Benchmarks measured side by side in one run (the collector's: python benchmarks/bench_collector.py)."""
        from .benchmark import bench_text_overhead, bench_vector, format_text, format_vector

        if vector:
            n = tuple(int(x) for x in sizes.split(",") if x.strip())
            typer.echo(format_vector(bench_vector(n, seconds, repeats, backend=backend)))
        if text:
            typer.echo(format_text(bench_text_overhead()))

    @app.command()
    def check():
        """Run Gymnasium's (and SB3's, if installed) env checkers on RLAIF-v0 and RLAIF-Text-v0."""
        import warnings

        import gymnasium as gym
        from gymnasium.utils.env_checker import check_env

        failures = 0
        for env_id in ("RLAIF-v0", "RLAIF-Text-v0"):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                try:
                    check_env(gym.make(env_id).unwrapped)
                    console.print(f"[green]ok[/green]   gymnasium check_env {env_id}")
                except Exception as exc:
                    failures += 1
                    console.print(f"[red]FAIL[/red] gymnasium check_env {env_id}: {exc}")
        try:
            from stable_baselines3.common.env_checker import check_env as sb3_check
        except ImportError:
            console.print('skip SB3 check_env (pip install "rlaif-gym[sb3]")')
        else:
            try:
                sb3_check(gym.make("RLAIF-v0"))
                console.print("[green]ok[/green]   SB3 check_env RLAIF-v0")
            except Exception as exc:
                failures += 1
                console.print(f"[red]FAIL[/red] SB3 check_env RLAIF-v0: {exc}")
        raise typer.Exit(1 if failures else 0)

    return app


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rlaif-gym` command. User errors print one clear line and exit 2."""
    try:
        app = _build_app()
    except DependencyNotInstalled as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        # Standalone mode: typer prints usage errors itself and exits with their code.
        app(args=argv, standalone_mode=True)
    except RLAIFError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
