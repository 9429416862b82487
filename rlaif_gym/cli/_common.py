"""What the `rlaif-gym` commands share: option types and checks, safe printing, the summary table.

Importing this module needs neither typer nor rich (the `[cli]` extra): they are imported where used,
so that `import rlaif_gym.cli` and `rlaif-gym --help` without the extra say how to install it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import sys
import time
from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DependencyNotInstalled, NothingToWriteError, install_hint

__all__ = ["AgentKind", "BackendKind", "ConstrainMode", "ExportFormat", "JudgeKind", "JudgeMode", "ModelFormat",
           "TapeModeOption"]


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


def _console():
    """The console a command prints to (stdout; rich, from the `[cli]` extra)."""
    from rich.console import Console

    return Console(stderr=False)


def _require_openai(what: str) -> None:
    """Fail before anything starts when the `[openai]` extra is missing (else every call would fail)."""
    from ..llm.openai_compat import require_http_client

    require_http_client(what)


def _mib(mib: float) -> int:
    """`mib` MiB in bytes (at least 1): the command line's --max-response-mb as the client's max_response_bytes."""
    return max(1, int(mib * 1024 * 1024))


def _judge_client(base_url: str | None, model: str | None, timeout: float, max_retries: int,
                  max_response_bytes: int | None = None, extra_body: dict | None = None):
    """An OpenAI-compatible client for the LLM judge (the key comes from $OPENAI_API_KEY, never recorded)."""
    from ..llm import OpenAIChatClient

    _require_openai("the LLM judge")
    bound = {} if max_response_bytes is None else {"max_response_bytes": max_response_bytes}
    try:
        return OpenAIChatClient(model, base_url, timeout=timeout, max_retries=max_retries, extra_body=extra_body,
                                **bound)
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
    from ..llm_judge import format_health

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
