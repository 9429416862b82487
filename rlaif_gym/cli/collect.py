"""`rlaif-gym rollout`, `serve-local` and `serve`: the commands that play episodes (docs/cli.md).

Each parses its options, calls the library (`rollout.launch`, `integrations.local_llm`,
`integrations.openenv`) and prints; the library functions are what a Python user calls.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ._common import (
    AgentKind,
    ConstrainMode,
    JudgeKind,
    JudgeMode,
    ModelFormat,
    _at_least,
    _console,
    _judge_client,
    _mib,
    _number,
    _outside,
    _parse_overrides,
    _print_judge,
    _summary_table,
)

__all__ = ["rollout", "serve", "serve_local"]


def rollout(
    ctx: typer.Context,
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
    max_response_mb: float = typer.Option(8.0, callback=_number(0.0, 4096.0, above=True),
                                          help="the largest answer read from the model server, in MiB; a larger "
                                          "one is a failed, retried attempt"),
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
    from ..integrations.tracking import metric_loggers
    from ..rollout import RolloutCollector
    from ..rollout.launch import (
        check_policy_options,
        check_run_options,
        collect_run,
        make_backend,
        make_policy,
        open_sink,
    )
    from ..storage import hold_run_folder

    console = _console()
    check_policy_options(agent.value, base_url=base_url, model=model,
                         constrain=constrain.value if constrain else None)
    check_run_options(episodes=episodes, group_size=group_size, fork_tick=fork_tick, resume=resume,
                      overwrite=overwrite, ray_workers=ray_workers, ray_address=ray_address)
    # One writer per run folder, held until the command ends (judge pass included); a second is refused here.
    ctx.with_resource(hold_run_folder(out, "a rollout"))
    max_response_bytes = _mib(max_response_mb)
    policy = make_policy(agent.value, model=model, base_url=base_url, temperature=temperature, max_tokens=max_tokens,
                         timeout=timeout, max_retries=max_retries, constrain=constrain.value if constrain else None,
                         max_response_bytes=max_response_bytes)
    store, sink = open_sink(out, db)
    collector = RolloutCollector(policy, sink=sink, env_config=_parse_overrides(set_), num_envs=num_envs,
                                 max_concurrent_calls=max_concurrent_calls, group_size=group_size,
                                 run_name=out.name or "run", progress=progress,
                                 max_ticks=max_ticks, backend=make_backend(ray_workers, ray_address))
    judge_client = None
    if judge is JudgeKind.llm:  # built before collecting, so a missing judge model fails fast; its own
        # client (same class and server as the policy by default), never the policy's constrained one
        judge_client = _judge_client(judge_base_url or base_url, judge_model or model, timeout, max_retries,
                                     max_response_bytes)
    loggers = metric_loggers(tensorboard, wandb_project, run_name=out.name or "run",
                             config=collector.manifest(episodes, seed, fork_tick))
    # overwrite happens inside, once every option is known good: a refused command deletes nothing
    summary = collect_run(collector, store, episodes, seed, fork_tick=fork_tick, group_size=group_size,
                          include_trunk=include_trunk, resume=resume, retry_failed=retry_failed,
                          overwrite=overwrite, parquet=parquet, loggers=loggers)
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
        from ..llm_judge import JudgeConfig, judge_run

        _print_judge(console, judge_run(out, client=judge_client, config=JudgeConfig(mode=judge_mode.value),
                                        tape_mode="rescore"))
    if summary.failed:
        raise typer.Exit(1)


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
    from ..integrations.local_llm import serve_local as run

    console = _console()
    summary = run(out, episodes=episodes, num_envs=num_envs, max_ticks=max_ticks, seed=seed,
                  temperature=temperature, constrain=constrain.value, install=install, overwrite=overwrite,
                  logprobs=logprobs, progress=progress, quant=quant.value,
                  env_config=_parse_overrides(set_), log=lambda line: console.print(line, highlight=False))
    console.print(_summary_table(summary, out))
    for err in summary.errors[:10]:
        console.print(f"[red]error[/red] {_outside(err)}", highlight=False, soft_wrap=True)
    if summary.failed:  # as rollout: a run with failed episodes is not a success
        raise typer.Exit(1)


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
    decision_max_ticks: int = typer.Option(5_000, callback=_at_least(1),
                                           help="ticks one reset(decision=...) may play looking for its decision "
                                           "point; past it the client gets a SearchLimitError"),
    decision_timeout: float = typer.Option(20.0, callback=_number(0.0, above=True),
                                           help="seconds one reset(decision=...) may search; past it the client "
                                           "gets a SearchLimitError"),
    set_: list[str] = typer.Option([], "--set", help="env config of every session, key=value (repeatable); a "
                                   "reset may override fields for its episode"),
):
    """Serve RLAIF-Text-v0 to OpenEnv clients (WebSocket /ws, HTTP): reset, step, state, snapshot, restore."""
    from ..config import RLAIFEnvConfig
    from ..integrations.openenv import create_app, warm_up
    from ..integrations.openenv import serve as run_server

    console = _console()
    config = RLAIFEnvConfig.from_any(_parse_overrides(set_))  # a bad --set fails now, not after the warm-up
    console.print("warming up: one tick of the env, so that no client waits on the compiled kernels (a "
                  "machine's first run compiles them: minutes)", highlight=False, soft_wrap=True)
    console.print(f"warm in {warm_up(config):.1f} s", highlight=False, soft_wrap=True)
    server = create_app(max_sessions=max_sessions, session_timeout_s=session_timeout,
                        max_sessions_per_client=max_sessions_per_client, env_config=config,
                        decision_max_ticks=decision_max_ticks, decision_timeout_s=decision_timeout, warm=False)
    run_server(server, host=host, port=port, log=lambda line: console.print(_outside(line), highlight=False,
                                                                            soft_wrap=True))
