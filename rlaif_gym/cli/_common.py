"""`rlaif-gym`: the command line (typer + rich, the `[cli]` extra). Thin: it composes the public API.

    rlaif-gym rollout --agent scripted --episodes 8 --num-envs 8 --seed 0 --out runs/demo
    rlaif-gym rollout --agent openai --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct ...
    rlaif-gym report runs/demo                 # table here; PNGs + report.html in runs/demo/report
    rlaif-gym report runs/before runs/after    # two runs side by side
    rlaif-gym export runs/demo --format grpo --output grpo.jsonl
    rlaif-gym judge runs/demo --mode listwise --base-url http://127.0.0.1:8000/v1 --model judge-model
    rlaif-gym check
    rlaif-gym bench
    rlaif-gym serve-local          (a real model: SmolLM2-135M on a local llama.cpp server)
    rlaif-gym serve --port 8000    (the text env for OpenEnv clients and trainers: reset/step/state/snapshot/restore)
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sys
import time
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Any

from .errors import ConfigError, DependencyNotInstalled, NothingToWriteError, RLAIFError, install_hint

__all__ = ["main"]


def _require_cli():
    try:
        import rich  # noqa: F401
        import typer
    except ImportError as exc:
        raise DependencyNotInstalled(
            "the rlaif-gym command needs typer and rich: " + install_hint("cli")
        ) from exc
    return typer


def _number(lo: float | None = None, hi: float | None = None, *, above: bool = False):
    """A typer callback that accepts a finite number in [lo, hi] (in (lo, hi] with `above`), or None.

    click's FloatRange lets NaN through (every comparison with NaN is false); this does not.
    """
    import typer

    if lo is None:
        allowed = f"<= {hi}" if hi is not None else ""
    else:
        allowed = f"{'>' if above else '>='} {lo}" + (f" and <= {hi}" if hi is not None else "")

    def check(value: float | None) -> float | None:
        if value is None:
            return value
        bad = not math.isfinite(value) or (lo is not None and (value <= lo if above else value < lo)) or \
            (hi is not None and value > hi)
        if bad:
            raise typer.BadParameter(f"{value} is not a finite number {allowed}".rstrip())
        return value

    return check


def _at_least(lo: int):
    """A typer callback that accepts an integer >= lo (or None: the option's "not set")."""
    import typer

    def check(value: int | None) -> int | None:
        if value is not None and value < lo:
            raise typer.BadParameter(f"{value} is not allowed; it must be an integer >= {lo}")
        return value

    return check


def _sizes(value: str) -> tuple[int, ...]:
    """`--sizes 1,64,1024`: positive integers, comma-separated."""
    import typer

    try:
        sizes = tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a comma-separated list of integers, e.g. 1,64,1024") from None
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter(f"{value!r}: give one or more numbers of envs, each >= 1, e.g. 1,64,1024")
    return sizes


class AgentKind(str, Enum):
    scripted = "scripted"
    openai = "openai"


class ConstrainMode(str, Enum):
    """Constrained decoding of the reply (rlaif_gym.encoding.grammar.CONSTRAIN_MODES)."""

    gbnf = "gbnf"
    guided_json = "guided_json"
    response_format = "response_format"


class ModelFormat(str, Enum):
    """The local model's weights for serve-local (rlaif_gym.integrations.local_llm.MODEL_FORMATS)."""

    Q4_0 = "Q4_0"
    Q8_0 = "Q8_0"
    IQ4_NL = "IQ4_NL"
    Q4_1 = "Q4_1"


class BackendKind(str, Enum):
    auto = "auto"
    numpy = "numpy"
    numba = "numba"


class JudgeKind(str, Enum):
    rule = "rule"
    llm = "llm"


class JudgeMode(str, Enum):
    absolute = "absolute"
    listwise = "listwise"
    pairwise = "pairwise"


class TapeModeOption(str, Enum):
    record = "record"
    replay = "replay"
    rescore = "rescore"


class ExportFormat(str, Enum):
    sft = "sft"
    dpo = "dpo"
    grpo = "grpo"
    db = "db"
    parquet = "parquet"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters (ANSI escapes start with \\x1b) other than newline and tab."""


def _printable(text: object) -> str:
    """`text` with every control character shown as an escape (\\x1b, \\x07, ...), never sent to the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def _outside(text: object) -> str:
    """Text that came from outside (a server, a record, a path) made safe for `console.print`: rich markup
    escaped (``[/red]`` and ``[link=...]`` print as written) and control characters shown as escapes."""
    from rich.markup import escape

    return escape(_printable(text))


def _require_openai(what: str) -> None:
    """Fail before anything starts when the `[openai]` extra is missing (else every call would fail)."""
    from .llm.openai_compat import require_http_client

    require_http_client(what)


def _judge_client(base_url: str | None, model: str | None, timeout: float, max_retries: int):
    """An OpenAI-compatible client for the LLM judge (the key comes from $OPENAI_API_KEY, never recorded)."""
    from .llm import OpenAIChatClient

    _require_openai("the LLM judge")
    try:
        return OpenAIChatClient(model, base_url, timeout=timeout, max_retries=max_retries)
    except ValueError as exc:
        raise ConfigError(f"the LLM judge needs a model: {exc} (for rollout: --judge-model, or --model)") from None


def _failed_note(trajs) -> str:
    """'k of n trajectories failed (first error: ...)', or '' when none failed."""
    failed = [t for t in trajs if t.final_status == "failed"]
    if not failed:
        return ""
    first = next((t.errors[0] for t in failed if t.errors), "")
    return f"{len(failed)} of {len(trajs)} trajectories failed" + (f" (first error: {first})" if first else "")


def _why_empty(kind: str, trajs, judged: bool) -> str:
    """Why an export of `trajs` (or a judge batch) holds no record, in words, with the fix."""
    note = _failed_note(trajs)
    if note and all(t.final_status == "failed" for t in trajs):
        return f"{note}; fix the cause and play them again with rollout --resume --retry-failed"
    largest = max(Counter(t.group_id for t in trajs if t.group_id is not None).values(), default=0)
    tail = f" ({note})" if note else ""
    if kind in ("dpo", "grpo", "listwise", "pairwise") and largest < 2:
        what = {"dpo": "DPO pairs compare replies to the same prompt", "grpo": "GRPO groups compare trajectories",
                "listwise": "listwise judging ranks trajectories", "pairwise": "pairwise judging compares "
                "trajectories"}[kind]
        return (f"{what} within a group (one env seed), and every group of this run holds one trajectory; collect "
                f"with rollout --group-size 2 or more{' (and a temperature > 0)' if kind == 'dpo' else ''}"
                f"{', or judge with --mode absolute' if kind in ('listwise', 'pairwise') else ''}{tail}")
    if kind == "dpo":
        return f"no two replies to an identical prompt within a group differ in reward{tail}"
    if kind == "grpo" and judged:
        return f"no group has 2 or more trajectories with a judge score (unscored ones are left out){tail}"
    if kind == "sft":
        return f"no step has a successful policy reply (or none passed --min-reward){tail}"
    return f"no record qualified{tail}"


def _print_judge(console, result) -> None:
    """The judge's scores summary, its health table and the files it wrote."""
    from .llm_judge import format_health

    scores = [s for s in result.batch.scores().values() if s is not None]
    mean = f", mean {sum(scores) / len(scores):.3f}" if scores else ""
    console.print(f"judged {len(result.batch.judgements)} trajectories ({result.batch.mode}): {len(scores)} scored"
                  f"{mean}, {result.health['missing']} missing; {result.health['groups_zero_variance']} zero-variance "
                  f"group(s) flagged and left out of the GRPO export", soft_wrap=True)
    console.print(_printable(format_health(result.health)), highlight=False, markup=False, soft_wrap=True)
    for name, path in result.files.items():
        console.print(_printable(f"{name}: {path}"), highlight=False, markup=False, soft_wrap=True)
    if not scores:  # every file above is empty of scores: say so and why, and fail the command
        mode = result.batch.mode
        reason = (_why_empty(mode, result.trajectories, True) if mode in ("listwise", "pairwise") else "")
        if not reason or reason.startswith("no record"):
            reason = "every verdict is missing (see the health table above and verdicts.*.jsonl)"
        raise NothingToWriteError(f"the {mode} judge scored nothing: {reason}")


def _metric_loggers(tensorboard: Path | None, wandb_project: str | None, run_name: str,
                    manifest: dict[str, Any]) -> list:
    """The `--tensorboard` / `--wandb-project` loggers (built before collecting: a missing extra fails now)."""
    from .integrations.tracking import TensorBoardLogger, WandbLogger

    loggers: list = []
    if tensorboard is not None:
        loggers.append(TensorBoardLogger(tensorboard))
    if wandb_project is not None:
        loggers.append(WandbLogger(wandb_project, name=run_name, config=manifest))
    return loggers


def _setup_logging(verbose: int) -> None:
    """Log records of the package to stderr: warnings always, INFO with -v, DEBUG with -vv."""
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logger = logging.getLogger("rlaif_gym")
    logger.setLevel(level)
    if not any(getattr(h, "_rlaif_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler._rlaif_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


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
        except RecursionError:
            raise ConfigError(f"--set {key.strip()}=...: the value is JSON nested too deeply to read") from None
    return out


def _summary_table(summary, out: Path | None):
    from rich.table import Table

    table = Table(title="rollout summary", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    d = summary.to_dict()
    rows = [
        ("episodes planned", d["planned"]), ("skipped (already on disk)", d["skipped_existing"]),
        *([("failed before, played again", d["retried_failed"])] if d["retried_failed"] else []),
        ("completed", d["completed"]), ("bankrupt", d["bankrupt"]), ("failed", d["failed"]),
        ("ticks", d["steps"]), ("LLM calls", d["llm_calls"]), ("failed calls", d["failed_calls"]),
        ("ticks / s", f"{d['ticks_per_s']:.1f}"), ("wall time (s)", f"{d['wall_s']:.1f}"),
        ("start-up before the first tick (s)", f"{d['startup_s']:.1f}"),
        ("mean episode return", f"{d['mean_return']:+.3f}"), ("mean final PnL (USD)", f"{d['mean_final_pnl']:+,.2f}"),
        ("quality: valid / checked", f"{d['quality'].get('valid', 0)} / {d['quality'].get('trajectories', 0)}"),
        ("quality: mean score", f"{d['quality'].get('mean_quality', 0.0):.3f}"),
    ]
    if out is not None:
        rows.append(("output", str(out)))
    for name, value in rows:
        table.add_row(name, _outside(value))
    return table


@contextlib.contextmanager
def _stage(console, text: str):
    """Say what a long step of a command is doing while it runs (a spinner on a terminal, a line elsewhere),
    then how long it took, so minutes of work (a first run compiles the kernels) never look like a hang."""
    started = time.perf_counter()
    if console.is_terminal:
        with console.status(_outside(text) + " ..."):
            yield
    else:
        console.print(_outside(text) + " ...", highlight=False, soft_wrap=True)
        yield
    console.print(_outside(f"{text}: done in {time.perf_counter() - started:.1f} s"), highlight=False,
                  soft_wrap=True)


def _build_app():
    typer = _require_cli()
    from rich.console import Console

    # Plain click help (rich_markup_mode=None): option names are never cut at 80 columns and help text
    # such as "[sb3]" prints as written instead of being read as rich markup.
    app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                      pretty_exceptions_enable=False,
                      help="rlaif_gym: Babylon-style market world for RLAIF. Collect, inspect and export trajectories.")
    console = Console(stderr=False)

    @app.callback()
    def _options(verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                             help="-v: retries, fallbacks, skipped and failed episodes; -vv: debug")):
        _setup_logging(verbose)

    @app.command()
    def rollout(
        agent: AgentKind = typer.Option(AgentKind.scripted, help="policy: the offline scripted model or an "
                                        "OpenAI-compatible server"),
        base_url: str = typer.Option(None, help="server URL, e.g. http://127.0.0.1:8000/v1 (default: "
                                     "$OPENAI_BASE_URL)"),
        model: str = typer.Option(None, help="model name on the server (default: $RLAIF_MODEL)"),
        num_envs: int = typer.Option(8, callback=_at_least(1), help="episodes in flight at once"),
        episodes: int = typer.Option(8, callback=_at_least(1), help="trajectories to collect"),
        seed: int = typer.Option(0, callback=_at_least(0), help="run seed: env seeds are seed, seed+1, ..."),
        out: Path = typer.Option(Path("runs/latest"), file_okay=False,
                                 help="output directory (JSONL trajectories + run.json)"),
        resume: bool = typer.Option(False, help="continue a killed run in --out without duplicates"),
        retry_failed: bool = typer.Option(False, help="--resume: also play again the trajectories stored as failed "
                                          "(the old records move to retried-failures.jsonl)"),
        overwrite: bool = typer.Option(False, help="delete a previous run in --out first"),
        group_size: int = typer.Option(1, callback=_at_least(1), help="episodes per env seed (GRPO groups)"),
        fork_tick: int = typer.Option(None, callback=_at_least(0),
                                      help="GRPO groups from one mid-episode state: play each seed to this "
                                      "tick once, fork it into --group-size branches (--episodes must be a "
                                      "multiple of --group-size)"),
        include_trunk: bool = typer.Option(False, help="--fork-tick: prepend the shared trunk to every branch"),
        ray_workers: int = typer.Option(None, callback=_at_least(1),
                                        help="collect on this many Ray actors ([ray] extra); each runs "
                                        "--num-envs episodes at once"),
        ray_address: str = typer.Option(None, help="--ray-workers: an existing Ray cluster, e.g. auto or "
                                        "ray://head:10001 (default: a local instance)"),
        max_ticks: int = typer.Option(None, callback=_at_least(1),
                                      help="stop episodes after this many ticks (default: num_ticks)"),
        temperature: float = typer.Option(0.7, callback=_number(0.0, 10.0), help="sampling temperature, >= 0"),
        max_tokens: int = typer.Option(512, callback=_at_least(1), help="max completion tokens per call"),
        timeout: float = typer.Option(60.0, callback=_number(0.0, above=True), help="seconds per LLM call attempt"),
        max_retries: int = typer.Option(3, callback=_at_least(0), help="retries for transient LLM failures"),
        constrain: ConstrainMode = typer.Option(None, help="constrained decoding of the reply format (--agent openai): "
                                                "gbnf (llama.cpp), guided_json (vLLM), response_format (OpenAI)"),
        max_concurrent_calls: int = typer.Option(None, callback=_at_least(1),
                                                 help="LLM calls in flight (default: --num-envs)"),
        set_: list[str] = typer.Option([], "--set", help="env config override key=value (repeatable)"),
        parquet: bool = typer.Option(False, help="also write trajectories.parquet at the end"),
        db: str = typer.Option(None, "--db", help="also write each trajectory to this database's original "
                               "`trajectories` table: sqlite:///runs.db, postgresql://user@host/db ([sql] extra)"),
        progress: bool = typer.Option(True, help="progress on stderr: a live bar on a terminal, else a line every 5 s"),
        judge: JudgeKind = typer.Option(JudgeKind.rule, help="rule: the rule judge inside the env (default); llm: "
                                        "also judge the run's trajectories with an LLM afterwards (RUN_DIR/judge/)"),
        judge_mode: JudgeMode = typer.Option(JudgeMode.absolute, help="--judge llm: absolute, listwise or pairwise"),
        judge_base_url: str = typer.Option(None, help="--judge llm: judge server URL (default: --base-url)"),
        judge_model: str = typer.Option(None, help="--judge llm: judge model (default: --model)"),
        tensorboard: Path = typer.Option(None, file_okay=False, help="also log each trajectory's metrics as "
                                         "TensorBoard scalars in this directory ([tracking] extra)"),
        wandb_project: str = typer.Option(None, help="also log each trajectory's metrics to this Weights & Biases "
                                          "project ([wandb] extra; WANDB_MODE=offline keeps it on disk)"),
    ):
        """Collect trajectories: the main job. The API key is read from $OPENAI_API_KEY and never written."""
        from .agents import OpenAIChatAgent, ScriptedLLMAgent
        from .rollout import RolloutCollector
        from .storage import JsonlStore

        if constrain is not None and agent is AgentKind.scripted:
            raise ConfigError("--constrain applies to a model server (--agent openai), not the scripted agent")
        if agent is AgentKind.openai:  # refuse now what would fail every episode later
            if not (base_url or os.environ.get("OPENAI_BASE_URL")):
                raise ConfigError("--agent openai needs --base-url (or $OPENAI_BASE_URL), e.g. "
                                  "http://127.0.0.1:8000/v1; without one, requests would go to the public OpenAI API")
            if not (model or os.environ.get("RLAIF_MODEL") or os.environ.get("OPENAI_MODEL")):
                raise ConfigError("--agent openai needs --model (or $RLAIF_MODEL), the model name on the server")
            _require_openai("--agent openai")
        if overwrite and resume:
            raise ConfigError("--overwrite and --resume contradict each other; pick one")
        if fork_tick is not None and episodes % group_size:
            raise ConfigError(f"--fork-tick collects whole groups: --episodes ({episodes}) must be a multiple of "
                              f"--group-size ({group_size})")
        if ray_address is not None and ray_workers is None:
            raise ConfigError("--ray-address needs --ray-workers (the number of Ray actors)")
        if agent is AgentKind.scripted:
            policy = ScriptedLLMAgent(temperature=temperature)
        else:
            policy = OpenAIChatAgent(model, base_url, temperature=temperature, max_tokens=max_tokens, timeout=timeout,
                                     max_retries=max_retries, constrain=constrain.value if constrain else None)
        store = JsonlStore(out)
        sink: Any = store
        if db:  # the JSONL run stays the primary record (manifest, resume); the database follows it
            from .storage import FanoutSink, SqlTrajectorySink

            sink = FanoutSink(store, SqlTrajectorySink(db))
        backend = None
        if ray_workers is not None:
            from .rollout.ray_backend import RayBackend

            backend = RayBackend(ray_workers, address=ray_address)
        collector = RolloutCollector(policy, sink=sink, env_config=_parse_overrides(set_), num_envs=num_envs,
                                     max_concurrent_calls=max_concurrent_calls, group_size=group_size,
                                     run_name=out.name or "run", progress=progress,
                                     max_ticks=max_ticks, backend=backend)
        judge_client = None
        if judge is JudgeKind.llm:  # built before collecting, so a missing judge model fails fast; its own
            # client (same class and server as the policy by default), never the policy's constrained one
            judge_client = _judge_client(judge_base_url or base_url, judge_model or model, timeout, max_retries)
        loggers = _metric_loggers(tensorboard, wandb_project, out.name or "run",
                                  collector.manifest(episodes, seed, fork_tick))
        if loggers:
            collector.on_trajectory = lambda traj: [log(traj) for log in loggers]
        if overwrite:  # last, once every option is known good: a refused command deletes nothing
            from .storage.run_dir import clear_run

            clear_run(out)  # only what a run wrote, after checking run.json is ours
        try:
            if fork_tick is not None:
                summary = collector.collect_forks(episodes // group_size, seed, fork_tick=fork_tick, resume=resume,
                                                  include_trunk=include_trunk, retry_failed=retry_failed)
            else:
                summary = collector.collect(episodes, seed, resume=resume, retry_failed=retry_failed)
        finally:
            if backend is not None:
                backend.shutdown()
            for log in loggers:
                log.close()
        if parquet:
            from .storage import write_parquet

            write_parquet(out / "trajectories.parquet", list(store.read()))
        console.print(_summary_table(summary, out))
        for err in summary.errors[:10]:  # server text: printed as written, never as markup or escapes
            console.print(f"[red]error[/red] {_outside(err)}", highlight=False, soft_wrap=True)
        if summary.failed:
            played = summary.planned - summary.skipped_existing
            url = policy.describe().get("base_url") if agent is AgentKind.openai else None
            first = f"; first error: {summary.errors[0]}" if summary.errors else ""
            where = f"; the policy server tried was {url}" if url else ""
            console.print(_outside(f"{summary.failed} of {played} episodes failed{first}{where}. They are recorded "
                                   "with their errors; once the cause is fixed, the same command with --resume "
                                   "--retry-failed plays them again"), highlight=False, soft_wrap=True)
        if judge_client is not None:  # a post-pass over the stored run; rescore: judge only what the tape lacks
            from .llm_judge import JudgeConfig, judge_run

            _print_judge(console, judge_run(out, client=judge_client, config=JudgeConfig(mode=judge_mode.value),
                                            tape_mode="rescore"))
        if summary.failed:
            raise typer.Exit(1)

    @app.command("serve-local")
    def serve_local(
        episodes: int = typer.Option(2, callback=_at_least(1), help="trajectories to collect"),
        num_envs: int = typer.Option(1, callback=_at_least(1),
                                     help="episodes in flight at once (the server answers one call at a time: "
                                     "more only queue)"),
        max_ticks: int = typer.Option(4, callback=_at_least(1),
                                      help="ticks per episode (one model call each: seconds on a 2-core machine)"),
        seed: int = typer.Option(0, callback=_at_least(0), help="run seed"),
        out: Path = typer.Option(Path("runs/local-llm"), file_okay=False, help="output directory"),
        overwrite: bool = typer.Option(False, help="delete a previous run in --out first"),
        install: bool = typer.Option(True, help="install the local-llm extra and the model when missing"),
        constrain: ConstrainMode = typer.Option(ConstrainMode.gbnf, help="constrained decoding of the reply"),
        temperature: float = typer.Option(0.7, callback=_number(0.0, 10.0), help="sampling temperature, >= 0"),
        logprobs: bool = typer.Option(False, help="record per-token logprobs (slow on llama-cpp-python)"),
        quant: ModelFormat = typer.Option(ModelFormat.Q4_0, help="the model's weights: the shipped Q4_1 converted "
                                          "once to Q4_0 (fastest), Q8_0 (exactly the shipped weights, a call about "
                                          "1.2x as long) or IQ4_NL; Q4_1: the shipped file as it is"),
        set_: list[str] = typer.Option([], "--set", help="env config override key=value (repeatable)"),
        progress: bool = typer.Option(True, help="progress on stderr: a live bar on a terminal, else a line every 5 s"),
    ):
        """See a real model play: SmolLM2-135M on a local llama.cpp server (started and stopped here), offline."""
        from .integrations.local_llm import serve_local as run

        summary = run(out, episodes=episodes, num_envs=num_envs, max_ticks=max_ticks, seed=seed,
                      temperature=temperature, constrain=constrain.value, install=install, overwrite=overwrite,
                      logprobs=logprobs, progress=progress, quant=quant.value,
                      env_config=_parse_overrides(set_), log=lambda line: console.print(line, highlight=False))
        console.print(_summary_table(summary, out))
        for err in summary.errors[:10]:
            console.print(f"[red]error[/red] {_outside(err)}", highlight=False, soft_wrap=True)
        if summary.failed:  # as rollout: a run with failed episodes is not a success
            raise typer.Exit(1)

    @app.command()
    def serve(
        host: str = typer.Option("127.0.0.1", help="address to listen on (0.0.0.0: every interface; there is no "
                                 "authentication: expose it only on a private network)"),
        port: int = typer.Option(8000, min=0, max=65535, help="port to listen on (0: a free one, printed)"),
        max_sessions: int = typer.Option(64, callback=_at_least(1), help="sessions open at once; one more gets a "
                                         "CAPACITY_REACHED error (HTTP 503) saying so"),
        max_sessions_per_client: int = typer.Option(None, callback=_at_least(1),
                                                    help="sessions one client address may hold at once (default: "
                                                    "up to --max-sessions), so that one client cannot take them all"),
        session_timeout: float = typer.Option(120.0, callback=_number(0.0, above=True),
                                              help="seconds without a request after which a session is closed"),
        set_: list[str] = typer.Option([], "--set", help="env config of every session, key=value (repeatable); a "
                                       "reset may override fields for its episode"),
    ):
        """Serve RLAIF-Text-v0 to OpenEnv clients (WebSocket /ws, HTTP): reset, step, state, snapshot, restore."""
        from .config import RLAIFEnvConfig
        from .integrations.openenv import create_app, warm_up
        from .integrations.openenv import serve as run_server

        config = RLAIFEnvConfig.from_any(_parse_overrides(set_))  # a bad --set fails now, not after the warm-up
        console.print("warming up: one tick of the env, so that no client waits on the compiled kernels (a "
                      "machine's first run compiles them: minutes)", highlight=False, soft_wrap=True)
        console.print(f"warm in {warm_up(config):.1f} s", highlight=False, soft_wrap=True)
        server = create_app(max_sessions=max_sessions, session_timeout_s=session_timeout,
                            max_sessions_per_client=max_sessions_per_client, env_config=config, warm=False)
        run_server(server, host=host, port=port, log=lambda line: console.print(_outside(line), highlight=False,
                                                                                soft_wrap=True))

    @app.command()
    def report(
        directory: Path = typer.Argument(..., help="a run directory written by rollout"),
        compare: Path = typer.Argument(None, metavar="RUN_B", help="a second run to put side by side with the "
                                       "first (e.g. before and after training)"),
        out: Path = typer.Option(None, file_okay=False, help="where to write the plots, report.html and metrics.json "
                                 "(default: DIRECTORY/report; for two runs, report-A-vs-B beside the first)"),
        baselines: bool = typer.Option(True, help="play the numeric baseline agents and buy-and-hold on the "
                                       "run's seeds"),
        plots: bool = typer.Option(True, help="write the PNG plots and report.html (needs the plots extra)"),
    ):
        """Metrics of a run (or two side by side): a summary table here, PNG plots and one HTML page on disk."""
        from rich.table import Table

        from .report import analyze_run, headline, load_run, require_report_extra, summary_rows, write_report
        from .rollout import summarize_quality

        dirs = [directory] if compare is None else [directory, compare]
        names = [d.resolve().name or str(d) for d in dirs]
        if len(dirs) == 2:
            names = [f"A: {names[0]}", f"B: {names[1]}"]
        with _stage(console, f"reading {' and '.join(str(d) for d in dirs)}"):
            loaded = [load_run(d) for d in dirs]
        if out is not None:
            target = out
        elif compare is None:
            target = directory / "report"
        else:  # beside the runs: a comparison is neither run's own report, so it never replaces A's
            a, b = directory.resolve(), compare.resolve()
            target = a.parent / f"report-{a.name}-vs-{b.name}"
        if plots and (target / "report.html").exists():
            console.print(_outside(f"replacing the report in {target}"), highlight=False, soft_wrap=True)
        plots_missing = None
        if plots:
            try:
                require_report_extra()
            except DependencyNotInstalled as exc:  # the table still prints; the end says how to get the rest
                plots_missing = exc
            else:  # an --out that cannot be written fails now, not after the analysis and the table
                target.mkdir(parents=True, exist_ok=True)
        what = "replaying the trajectories" + (" and playing the baselines on their seeds" if baselines else "")
        with _stage(console, f"{what} ({sum(map(len, loaded))} trajectories)"):
            runs = [analyze_run(trajs, name=n, directory=d, baselines=baselines)
                    for trajs, d, n in zip(loaded, dirs, names, strict=True)]
        for d, r in zip(dirs, runs, strict=True):
            console.print(_outside(f"{r.name}: {d} ({len(r.trajectories)} trajectories)"), highlight=False,
                          soft_wrap=True)
        for r in runs:  # the headline first: what a reader wants before the 60 rows below
            console.print(f"[bold]{_outside(headline(r))}[/bold]", highlight=False, soft_wrap=True)
        table = Table(title="rlaif-gym report")
        table.add_column("metric")
        for r in runs:
            table.add_column(_outside(r.name), justify="right")
        if len(runs) == 2:
            table.add_column("B - A", justify="right")
        group = None
        for row in summary_rows(runs):
            if row.group != group:
                group = row.group
                table.add_section()
                table.add_row(f"[bold]{group}[/bold]", *([""] * (len(runs) + (len(runs) == 2))))
            # Labels and values may carry trajectory text (statuses, component names): never rich markup.
            table.add_row(_outside(row.label), *map(_outside, row.values), *([row.delta] if len(runs) == 2 else []))
        qualities = [summarize_quality([t.quality for t in r.trajectories]) for r in runs]
        table.add_section()
        quality_title = "[bold]Quality (the original's rules, docs/babylon.md)[/bold]"
        table.add_row(quality_title, *([""] * (len(runs) + (len(runs) == 2))))
        extra = [""] if len(runs) == 2 else []
        table.add_row("quality: valid", *(f"{q['valid']} / {q['trajectories']}" for q in qualities), *extra)
        table.add_row("quality: mean score", *(f"{q['mean_quality']:.3f}" for q in qualities), *extra)
        kinds = sorted({kind for q in qualities for kind, _ in q["top_issues"]})
        for kind in kinds:
            counts = [dict(q["top_issues"]).get(kind, 0) for q in qualities]
            table.add_row(_outside(f"issue: {kind}"), *(str(c) for c in counts), *extra)
        console.print(table)
        for health in sorted(p for d in dirs for p in (d / "judge").glob("health.*.json")):  # rlaif-gym judge's
            from .llm_judge import format_health

            console.print(_printable(f"{health}:\n{format_health(json.loads(health.read_text()))}"), highlight=False,
                          markup=False, soft_wrap=True)
        for r in runs:
            for note in (*r.metrics.ledger_notes, r.baseline_note):
                if note:
                    console.print(f"[yellow]note[/yellow] {_outside(r.name)}: {_outside(note)}", highlight=False,
                                  soft_wrap=True)
        if not plots:
            return
        if plots_missing is not None:
            console.print(f"[yellow]no plots or report.html[/yellow]: {_outside(str(plots_missing))}", highlight=False,
                          soft_wrap=True)
            return
        with _stage(console, f"drawing the plots and report.html in {target}"):
            files = write_report(runs, target)
        console.print(_outside(f"wrote {len(files.plots)} plots, {files.html.name} and {files.metrics.name} to "
                             f"{files.directory} (open {files.html})"), highlight=False, soft_wrap=True)

    @app.command()
    def judge(
        directory: Path = typer.Argument(..., help="a run directory written by rollout"),
        mode: JudgeMode = typer.Option(JudgeMode.absolute, help="absolute (one trajectory), listwise (a group, "
                                       "RULER-style) or pairwise (both orders, Bradley-Terry)"),
        tape: Path = typer.Option(None, help="judge tape, SQLite (default: RUN_DIR/judge/judge.sqlite)"),
        tape_mode: TapeModeOption = typer.Option(TapeModeOption.record, help="record: ask and store; replay: "
                                                 "only the tape (exact, no server); rescore: ask only what the "
                                                 "tape lacks (after a rubric change)"),
        base_url: str = typer.Option(None, help="judge server URL (default: $OPENAI_BASE_URL)"),
        model: str = typer.Option(None, help="judge model (default: $RLAIF_MODEL); replay needs it too"),
        rubrics: Path = typer.Option(None, exists=True, dir_okay=False,
                                     help="rubric file to judge with (default: the packaged rubrics.json)"),
        archetype: str = typer.Option(None, help="judge every trajectory as this archetype"),
        max_concurrency: int = typer.Option(4, callback=_at_least(1), help="judge calls in flight"),
        timeout: float = typer.Option(60.0, callback=_number(0.0, above=True), help="seconds per judge call attempt"),
        max_retries: int = typer.Option(3, callback=_at_least(0), help="retries for transient judge failures"),
        call_deadline: float = typer.Option(180.0, callback=_number(0.0, above=True),
                                            help="seconds one verdict may take, retries included"),
        failure_budget: float = typer.Option(0.25, callback=_number(0.0, 1.0),
                                             help="fraction of verdicts (0 to 1) that may fail before the batch stops"),
        repeats: int = typer.Option(1, callback=_at_least(1),
                                    help="absolute mode: verdicts per trajectory (their spread is reported)"),
        max_tokens: int = typer.Option(512, callback=_at_least(1), help="max completion tokens per verdict"),
        strict: bool = typer.Option(True, help="replay: fail on a call that is not on the tape"),
        out: Path = typer.Option(None, file_okay=False, help="output directory (default: RUN_DIR/judge)"),
    ):
        """Judge a stored run with an LLM, never re-running the world: scores, health, GRPO groups in RUN_DIR/judge."""
        import os

        from .llm_judge import JudgeConfig, judge_run

        config = JudgeConfig(mode=mode.value, max_concurrency=max_concurrency, call_deadline_s=call_deadline,
                             failure_budget=failure_budget, repeats=repeats, max_tokens=max_tokens,
                             archetype=archetype, strict_replay=strict)
        if tape_mode is TapeModeOption.replay and base_url is None:
            client = None
            model = model or os.environ.get("RLAIF_MODEL") or os.environ.get("OPENAI_MODEL")
            if not model:
                raise ConfigError("replay needs the judge model the tape was recorded with: pass --model")
        else:
            client = _judge_client(base_url, model, timeout, max_retries)
        _print_judge(console, judge_run(directory, client=client, model=model, config=config, tape=tape,
                                        tape_mode=tape_mode.value, rubrics_path=rubrics, out_dir=out))

    @app.command()
    def export(
        directory: Path = typer.Argument(..., help="a run directory written by rollout"),
        format: ExportFormat = typer.Option(..., "--format", help="sft, dpo, grpo, db (original rows) or parquet"),
        output: Path = typer.Option(..., dir_okay=False, help="file to write"),
        judge_scores: Path = typer.Option(None, exists=True, dir_okay=False,
                                          help="grpo: score groups with this scores.<mode>.jsonl of "
                                          "rlaif-gym judge (unscored trajectories are left out, never 0)"),
    ):
        """Export trajectories to the formats trainers read."""
        from .report import load_run
        from .storage import EXPORT_KINDS, write_export, write_parquet

        trajs = load_run(directory)
        if judge_scores is not None and format is not ExportFormat.grpo:
            raise ConfigError("--judge-scores applies to --format grpo only")
        if format is ExportFormat.parquet:
            write_parquet(output, trajs)
            written = len(trajs)
        else:
            options: dict[str, Any] = {}
            if judge_scores is not None:
                from .llm_judge import read_judge_scores

                options["judge_scores"] = read_judge_scores(judge_scores)
            if not EXPORT_KINDS[format.value](trajs, **options):  # say so, and leave `output` as it was
                raise NothingToWriteError(f"{format.value} export of the {len(trajs)} trajectories in {directory}: "
                                          f"nothing to write, so {output} was not written: "
                                          f"{_why_empty(format.value, trajs, judge_scores is not None)}")
            written = write_export(format.value, trajs, output, **options)
        unit = {"sft": "records", "dpo": "pairs", "grpo": "groups", "db": "rows", "parquet": "rows"}[format.value]
        console.print(_outside(f"wrote {written} {format.value} {unit} from {len(trajs)} trajectories to {output}"),
                      highlight=False, soft_wrap=True)

    @app.command()
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
        from .benchmark import bench_text_overhead, bench_vector, format_text, format_vector

        if vector:
            typer.echo(format_vector(bench_vector(sizes, seconds, repeats, backend=backend.value)))
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

    return app


def _os_error(exc: OSError) -> str:
    """An OSError (unwritable --out, a directory where a file goes, a full disk) as one line with the path."""
    what = exc.strerror or type(exc).__name__
    where = f": {exc.filename}" if exc.filename else ""
    return f"{what}{where} (check the path and its permissions)"


BUG_HINT = ("this is a bug in rlaif-gym, not in your input: please report it with the command line and the "
            "traceback above")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rlaif-gym` command.

    Exit codes: 0 done; 1 the work ran but some of it failed (episodes, checks); 2 a user error (bad
    option, bad config, a path that cannot be written), printed as one line naming what to change;
    130 interrupted (Ctrl-C; what was finished is kept). Only a bug prints a traceback.
    """
    try:
        app = _build_app()
    except DependencyNotInstalled as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import typer

    # typer >= 0.2x vendors click (typer._click); older releases use click itself: take the classes
    # from the module that defines typer.BadParameter, whichever it is.
    errors = sys.modules[typer.BadParameter.__module__]
    try:
        result = app(args=argv, prog_name="rlaif-gym", standalone_mode=False)
    except errors.NoArgsIsHelpError as exc:
        print(exc.format_message(), file=sys.stderr)
        return 2
    except errors.UsageError as exc:  # bad options: one line, the option and what is allowed
        command = exc.ctx.command_path if exc.ctx is not None else "rlaif-gym"
        print(f"error: {_printable(exc.format_message())} (see {command} --help)", file=sys.stderr)
        return 2
    except errors.ClickException as exc:  # e.g. a file option that cannot be opened
        print(f"error: {_printable(exc.format_message())}", file=sys.stderr)
        return 2
    except RLAIFError as exc:
        print(f"error: {_printable(exc)}", file=sys.stderr)  # may quote server text: no raw escapes
        return 2
    except OSError as exc:
        print(f"error: {_printable(_os_error(exc))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, typer.Abort):
        result = 130
    except Exception:
        import traceback

        traceback.print_exc()
        print(f"error: {BUG_HINT}", file=sys.stderr)
        return 1
    if result == 130:  # typer turns Ctrl-C into exit code 130
        print("interrupted (Ctrl-C): stopped; what had finished is kept", file=sys.stderr)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
