"""`rlaif-gym eval` and `rlaif-gym eval compare`: score a model on held-out states, and two scorecards against each
other (docs/eval.md). The library is `rlaif_gym.evals`; this module parses options and prints.
"""

from __future__ import annotations

import contextlib
import json
from enum import Enum
from pathlib import Path

import typer

from ._common import ConstrainMode, _at_least, _console, _mib, _number, _outside, _parse_overrides

__all__ = ["app"]


class EvalAgentKind(str, Enum):
    """The policies `rlaif-gym eval` drives."""

    scripted = "scripted"
    openai = "openai"
    local = "local"


app = typer.Typer(add_completion=False, rich_markup_mode=None, invoke_without_command=True,
                  help="Score a model on held-out decision points beside the baselines (wait, the scripted teacher, "
                  "the informed rule, the truth-informed ceiling), with paired 95 % intervals; "
                  "`eval compare A B` pairs two scorecards.")


NOT_RECORDED = ("out", "resume", "overwrite")
"""Options that do not change a scorecard, left out of its `command` (so runs into two folders match byte for byte)."""


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
                                 "or decisions-v1/held-out-b (200 decision points each)"),
    seeds: int = typer.Option(None, callback=_at_least(0), help="other states of the set's world: the first reset "
                              "seed (held out: >= 1,000,000 unless --allow-train-seeds)"),
    points: int = typer.Option(None, callback=_at_least(1), help="points to score (default: the set's 200)"),
    allow_train_seeds: bool = typer.Option(False, help="allow --seeds in the training range 0..999,999 (scores "
                                           "there measure memory, not skill)"),
    set_: list[str] = typer.Option([], "--set", help="world config override key=value (repeatable; makes a set "
                                   "of its own, with its own digest)"),
    samples: int = typer.Option(1, callback=_at_least(1), help="replies per point (use a temperature > 0)"),
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
    seed: int = typer.Option(0, callback=_at_least(0), help="run seed: each call's sampling seed derives from it "
                             "and the point"),
    out: Path = typer.Option(Path("runs/eval"), file_okay=False, help="run folder: scorecard.json, scorecard.md, "
                             "replies.jsonl, points.jsonl, timing.json"),
    resume: bool = typer.Option(False, help="finish an interrupted eval in --out (same options)"),
    overwrite: bool = typer.Option(False, help="delete a previous eval's files in --out first"),
):
    """Score a model on a held-out set; the scorecard goes to --out and the table to the terminal."""
    if ctx.invoked_subcommand is not None:
        return
    from ..agents import OpenAIChatAgent, ScriptedLLMAgent
    from ..evals import decision_set, run_decision_eval
    from ..rollout.launch import check_policy_options

    console = _console()
    dset = decision_set(task_set, seeds=seeds, points=points, overrides=_parse_overrides(set_),
                        allow_train_seeds=allow_train_seeds)
    constrained = constrain.value if constrain else None
    described = None
    with contextlib.ExitStack() as stack:
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
        result = run_decision_eval(policy, dset, out, samples=samples, seed=seed, concurrency=max_concurrent_calls,
                                   resume=resume, overwrite=overwrite, command=_command(ctx.params),
                                   preflight=kind == "openai", describe=described,
                                   log=lambda line: console.print(_outside(line), highlight=False))
    console.print(_outside(result.markdown), highlight=False, soft_wrap=True)
    console.print(f"wrote {_outside(out)}/scorecard.json and scorecard.md", highlight=False)
    calls = result.scorecard["calls"]
    if calls["calls"] and calls["failed"] == calls["calls"]:
        console.print(_outside(f"every call failed; first error in {out}/replies.jsonl"), highlight=False)
        raise typer.Exit(1)


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
