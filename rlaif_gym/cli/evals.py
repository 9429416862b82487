"""`rlaif-gym eval` and `rlaif-gym eval compare`: score a model on held-out states, and two scorecards against each
other (docs/eval.md). The library is `rlaif_gym.evals`; this module parses options and prints.
"""

from __future__ import annotations

import contextlib
import json
import sys
from enum import Enum
from pathlib import Path

import typer

from ._common import (
    ConstrainMode,
    JudgeMode,
    TapeModeOption,
    _at_least,
    _console,
    _judge_client,
    _mib,
    _number,
    _outside,
    _parse_overrides,
    _printable,
)

__all__ = ["app"]


class EvalAgentKind(str, Enum):
    """The policies `rlaif-gym eval` drives."""

    scripted = "scripted"
    openai = "openai"
    local = "local"


class EvalJudgeKind(str, Enum):
    """The judges `rlaif-gym eval --judge` validates against the world's truth."""

    none = "none"
    rule = "rule"
    llm = "llm"
    local = "local"


JUDGE_CONTEXT = 8192
"""--judge local: the context window of the judge's llama.cpp server, in tokens (a judge prompt with the rubric and
one trajectory is about 1,500; SmolLM2 was trained to 8,192)."""

app = typer.Typer(add_completion=False, rich_markup_mode=None, invoke_without_command=True,
                  help="Score a model on held-out decision points beside the baselines (wait, the scripted teacher, "
                  "the informed rule, the truth-informed ceiling), with paired 95 % intervals; "
                  "`eval compare A B` pairs two scorecards.")


NOT_RECORDED = ("out", "resume", "retry_failed", "overwrite", "allow_failed_calls", "judge", "judge_mode",
                "judge_base_url", "judge_model", "judge_tape_mode", "judge_max_tokens", "judge_grammar")
"""Options that do not change a scorecard, left out of its `command` (so runs into two folders match byte for byte,
and a judge can be validated on a finished eval with --resume). `--allow-failed-calls` changes nothing of an eval
whose calls were all answered, and the scorecard's `calls` says how many failed when some did."""


def _command(params: dict) -> list[str]:
    """The eval's options as a command line, as the scorecard records them: every option that changes the scores,
    URLs without credentials (the API key is never on it: $OPENAI_API_KEY)."""
    from ..llm.openai_compat import redact_url

    line = ["rlaif-gym", "eval"]
    for name, value in params.items():
        if name in NOT_RECORDED or value is None or value == []:
            continue
        flag = "--" + name.rstrip("_").replace("_", "-")
        for one in value if isinstance(value, list) else [value]:
            one = getattr(one, "value", one)
            if isinstance(one, bool):
                line.append(flag if one else "--no-" + flag[2:])
            else:
                line += [flag, redact_url(str(one)) if "://" in str(one) else str(one)]
    return line


@app.callback()
def evaluate(
    ctx: typer.Context,
    agent: EvalAgentKind = typer.Option(EvalAgentKind.scripted, help="scripted: the offline teacher; openai: any "
                                        "OpenAI-compatible server; local: SmolLM2-135M on a local llama.cpp server "
                                        "(started and stopped here, as serve-local does)"),
    base_url: str = typer.Option(None, help="--agent openai: server URL, e.g. http://127.0.0.1:8000/v1 (default: "
                                 "$OPENAI_BASE_URL)"),
    model: str = typer.Option(None, help="--agent openai: model name on the server (default: $RLAIF_MODEL)"),
    task_set: str = typer.Option("decisions-v1/held-out-a", help="the named held-out set: decisions-v1/held-out-a "
                                 "or decisions-v1/held-out-b (200 decision points each); whole episodes: "
                                 "episodes-v1/decision-world-a or -b (50 each), episodes-v1/default-a (10 of the "
                                 "default world)"),
    seeds: int = typer.Option(None, callback=_at_least(0), help="other states of the set's world: the first reset "
                              "seed (held out: >= 1,000,000 unless --allow-train-seeds)"),
    points: int = typer.Option(None, callback=_at_least(1), help="points (episodes, in an episode set) to score, "
                               "at most 2,000 (default: the set's)"),
    allow_train_seeds: bool = typer.Option(False, help="allow --seeds in the training range 0..999,999 (scores "
                                           "there measure memory, not skill)"),
    set_: list[str] = typer.Option([], "--set", help="world config override key=value (repeatable; makes a set "
                                   "of its own, with its own digest)"),
    samples: int = typer.Option(1, callback=_at_least(1), help="replies per point, at most 64 and 20,000 calls in "
                                "all (use a temperature > 0)"),
    temperature: float = typer.Option(0.0, callback=_number(0.0, 10.0), help="sampling temperature (0: greedy, "
                                      "reproducible)"),
    max_tokens: int = typer.Option(256, callback=_at_least(1), help="max completion tokens per call"),
    timeout: float = typer.Option(60.0, callback=_number(0.0, above=True), help="seconds per call attempt"),
    max_retries: int = typer.Option(3, callback=_at_least(0), help="retries of a transient failure per call"),
    max_response_mb: float = typer.Option(8.0, callback=_number(0.0, 4096.0, above=True),
                                          help="the largest answer read from the server, in MiB"),
    constrain: ConstrainMode = typer.Option(None, help="constrained decoding of the reply (server agents): gbnf, "
                                            "guided_json, response_format"),
    max_concurrent_calls: int = typer.Option(8, callback=_at_least(1), help="calls in flight"),
    seed: int = typer.Option(0, callback=_at_least(0), help="run seed (decision sets): each call's sampling seed "
                             "derives from it and the point"),
    out: Path = typer.Option(Path("runs/eval"), file_okay=False, help="run folder: scorecard.json, scorecard.md, "
                             "replies.jsonl, points.jsonl, timing.json"),
    resume: bool = typer.Option(False, help="finish an interrupted eval in --out (same options)"),
    retry_failed: bool = typer.Option(False, help="--resume: also make the failed calls again (an episode set: play "
                                      "the failed episodes again); the old lines move to retried-failures.jsonl"),
    allow_failed_calls: bool = typer.Option(False, help="write the scorecard although calls failed after their "
                                            "retries: the model is scored on what it answered, the failed calls "
                                            "counted apart (without it, failed calls exit 1 with no scorecard)"),
    overwrite: bool = typer.Option(False, help="delete a previous eval's files in --out first"),
    judge: EvalJudgeKind = typer.Option(EvalJudgeKind.none, help="also validate a judge on the same points: rule "
                                        "(the env's rule judge), llm (an LLM judge on --judge-base-url), local "
                                        "(SmolLM2 as the judge, on a llama.cpp server started here); writes "
                                        "--out/judge/validation.*"),
    judge_mode: JudgeMode = typer.Option(JudgeMode.absolute, help="the LLM judge's mode: absolute, listwise, "
                                         "pairwise"),
    judge_base_url: str = typer.Option(None, help="--judge llm: the judge's server URL (default: $OPENAI_BASE_URL)"),
    judge_model: str = typer.Option(None, help="--judge llm: the judge model (default: $RLAIF_MODEL)"),
    judge_tape_mode: TapeModeOption = typer.Option(TapeModeOption.rescore, help="the judge tape "
                                                   "(--out/judge/judge.sqlite): rescore asks only what it lacks, "
                                                   "replay asks nothing (no server), record asks everything"),
    judge_max_tokens: int = typer.Option(256, callback=_at_least(1), help="max completion tokens per verdict"),
    judge_grammar: bool = typer.Option(None, help="send the verdict's GBNF grammar (llama.cpp servers), so a small "
                                       "model writes a parsable verdict (absolute and pairwise modes; default: on "
                                       "for --judge local, off for --judge llm)"),
):
    """Score a model on a held-out set; the scorecard goes to --out and the table to the terminal."""
    if ctx.invoked_subcommand is not None:
        return
    from ..agents import OpenAIChatAgent, ScriptedLLMAgent
    from ..errors import ConfigError
    from ..evals import EpisodeSet, FailedCallsError, run_decision_eval, run_episode_eval
    from ..evals import task_set as named_set
    from ..rollout.launch import check_policy_options
    from ..storage import hold_run_folder

    console = _console()
    dset = named_set(task_set, seeds=seeds, points=points, overrides=_parse_overrides(set_),
                     allow_train_seeds=allow_train_seeds)
    episodes = isinstance(dset, EpisodeSet)
    if episodes and samples != 1:
        raise ConfigError(f"--samples: an episode set plays one episode per seed, got --samples {samples}; score more "
                          "episodes with --points")
    if episodes and seed != 0:
        raise ConfigError(f"--seed: in an episode set each call's sampling seed derives from its episode's seed and "
                          f"tick, so --seed {seed} would change nothing; leave it out (pick other episodes with "
                          "--seeds)")
    if episodes and judge is not EvalJudgeKind.none:
        raise ConfigError("--judge validates a judge on decision points: use a decisions-v1 set with --judge")
    constrained = constrain.value if constrain else None
    described = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(hold_run_folder(out, "an eval"))  # one writer per run folder; released last
        if agent is EvalAgentKind.local:
            from ..integrations.local_llm import LocalLLMServer, fast_model_path

            server = stack.enter_context(LocalLLMServer(fast_model_path(), logits_all=False))
            base_url, model = server.base_url, server.alias
            console.print(f"local llama.cpp server ready at {server.base_url}", highlight=False)
        kind = "scripted" if agent is EvalAgentKind.scripted else "openai"
        check_policy_options(kind, base_url=base_url, model=model, constrain=constrained)
        policy = ScriptedLLMAgent(temperature=temperature) if kind == "scripted" else OpenAIChatAgent(
            model, base_url, temperature=temperature, max_tokens=max_tokens, logprobs=False, timeout=timeout,
            max_retries=max_retries, constrain=constrained, max_response_bytes=_mib(max_response_mb))
        if agent is EvalAgentKind.local:  # the server's port changes from run to run: it is not the model
            described = {**policy.describe(), "base_url": "local llama.cpp server (--agent local)",
                         "model_file": server.model_file.name}
        say = lambda line: console.print(_outside(line), highlight=False)  # noqa: E731
        failures = {"retry_failed": retry_failed, "allow_failed_calls": allow_failed_calls}
        try:
            if episodes:
                result = run_episode_eval(policy, dset, out, concurrency=max_concurrent_calls, resume=resume,
                                          overwrite=overwrite, command=_command(ctx.params),
                                          preflight=kind == "openai", describe=described, log=say, **failures)
            else:
                result = run_decision_eval(policy, dset, out, samples=samples, seed=seed,
                                           concurrency=max_concurrent_calls, resume=resume, overwrite=overwrite,
                                           command=_command(ctx.params), preflight=kind == "openai",
                                           describe=described, log=say, **failures)
        except FailedCallsError as exc:  # the work ran and part of it failed: exit 1, as rollout's failed episodes
            print(f"error: {_printable(exc)}", file=sys.stderr)
            raise typer.Exit(1) from None
        console.print(_outside(result.markdown), highlight=False, soft_wrap=True)
        console.print(f"wrote {_outside(out)}/scorecard.json and scorecard.md", highlight=False)
        if judge is not EvalJudgeKind.none:
            grammar = judge is EvalJudgeKind.local if judge_grammar is None else judge_grammar
            _validate_judge(stack, console, result, judge, judge_mode, judge_base_url, judge_model, judge_tape_mode,
                            judge_max_tokens, grammar, timeout, max_retries, _mib(max_response_mb))
    calls = result.scorecard["calls"]
    if calls["calls"] and calls["failed"] == calls["calls"]:
        console.print(_outside(f"every call failed; first error in {out}/replies.jsonl"), highlight=False)
        raise typer.Exit(1)


def _validate_judge(stack, console, result, judge, mode, base_url, model, tape_mode, max_tokens, grammar, timeout,
                    max_retries, max_response_bytes) -> None:
    """`--judge`: the skill ladder on the eval's points (the model's first replies as a rung), scored by the judge
    and compared with the PnL (`rlaif_gym.evals.judging`); the validation goes to --out/judge."""
    from ..evals.judging import run_judge_validation, validation_markdown
    from ..llm_judge import JudgeConfig, JudgeTape, LLMJudge, verdict_constraint

    folder = result.out / "judge"
    meta = {"set": result.scorecard["set"], "model": result.scorecard["model"]}
    llm = None
    if judge is not EvalJudgeKind.rule:
        if judge is EvalJudgeKind.local:
            from ..integrations.local_llm import LocalLLMServer, fast_model_path

            server = stack.enter_context(LocalLLMServer(fast_model_path(), logits_all=False, n_ctx=JUDGE_CONTEXT))
            base_url, model = server.base_url, server.alias
            console.print(f"local llama.cpp judge ready at {server.base_url}", highlight=False)
        # failure_budget 1: a validation measures the judge, its failures too (the parse-failure rate, the
        # missing share), so a judge that mostly fails is reported, not stopped
        config = JudgeConfig(mode=mode.value, max_tokens=max_tokens, failure_budget=1.0,
                             constrain="gbnf" if grammar else None)
        client = None if tape_mode is TapeModeOption.replay and base_url is None else _judge_client(
            base_url, model, timeout, max_retries, max_response_bytes,
            extra_body=verdict_constraint(mode.value) if grammar else None)
        folder.mkdir(parents=True, exist_ok=True)
        tape = stack.enter_context(JudgeTape(folder / "judge.sqlite"))
        llm = LLMJudge(client, config=config, tape=tape, tape_mode=tape_mode.value, model=model)
    replies = result.first_replies()
    if None in replies:  # (--allow-failed-calls) a rung needs a reply at every point: leave the model's out
        console.print(_outside(f"the judge's ladder leaves the model's rung out: no answered call at "
                               f"{replies.count(None)} of {len(replies)} points"), highlight=False, soft_wrap=True)
    report = run_judge_validation(result.points, folder, judge=llm, meta=meta,
                                  model_replies=None if None in replies else replies)
    console.print(_outside(validation_markdown(report)), highlight=False, soft_wrap=True)
    console.print(f"wrote {_outside(folder)}/validation.*", highlight=False)


@app.command()
def compare(
    a: Path = typer.Argument(..., file_okay=False, help="the first eval's folder (e.g. before training)"),
    b: Path = typer.Argument(..., file_okay=False, help="the second eval's folder (e.g. after)"),
    output: Path = typer.Option(None, dir_okay=False, help="also write the comparison as JSON here"),
):
    """B's model minus A's, paired point by point on the states both scored; refused when their sets differ."""
    from ..evals.scorecard import compare_markdown, compare_runs

    result = compare_runs(a, b)
    _console().print(_outside(compare_markdown(result)), highlight=False, soft_wrap=True)
    if output is not None:
        output.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
