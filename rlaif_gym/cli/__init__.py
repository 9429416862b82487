"""`rlaif-gym`: the command line (typer + rich, the `[cli]` extra). Thin: it composes the public API.

    rlaif-gym rollout --agent scripted --episodes 8 --num-envs 8 --seed 0 --out runs/demo
    rlaif-gym rollout --agent openai --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct ...
    rlaif-gym report runs/demo                 # table here; PNGs + report.html in runs/demo/report
    rlaif-gym report runs/before runs/after    # two runs side by side
    rlaif-gym export runs/demo --format grpo --output grpo.jsonl
    rlaif-gym judge runs/demo --mode listwise --base-url http://127.0.0.1:8000/v1 --model judge-model
    rlaif-gym eval --agent openai --base-url http://127.0.0.1:8000/v1 --model my-model --out runs/eval-after
    rlaif-gym eval compare runs/eval-before runs/eval-after
    rlaif-gym check
    rlaif-gym bench
    rlaif-gym serve-local          (a real model: SmolLM2-135M on a local llama.cpp server)
    rlaif-gym serve --port 8000    (the text env for OpenEnv clients and trainers: reset/step/state/snapshot/restore)

One module per job: `collect` (rollout, serve-local, serve), `runs` (report, judge, export), `evals`
(eval, eval compare), `tools` (bench, check) and `_common` (what they share). typer and rich (the `[cli]`
extra) are imported only when the app is built, so that importing this package needs neither.
"""

from __future__ import annotations

import sys

from ..errors import DependencyNotInstalled, RLAIFError
from ._common import (
    AgentKind,
    BackendKind,
    ConstrainMode,
    ExportFormat,
    JudgeKind,
    JudgeMode,
    ModelFormat,
    TapeModeOption,
    _printable,
    _require_cli,
    _setup_logging,
)

__all__ = ["AgentKind", "BackendKind", "ConstrainMode", "ExportFormat", "JudgeKind", "JudgeMode", "ModelFormat",
           "TapeModeOption", "main"]


def _build_app():
    """The typer app: the module-level commands of `collect`, `runs` and `tools` under one `rlaif-gym`."""
    typer = _require_cli()
    from . import collect, evals, runs, tools

    # Plain click help (rich_markup_mode=None): option names are never cut at 80 columns and help text
    # such as "[sb3]" prints as written instead of being read as rich markup.
    app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                      pretty_exceptions_enable=False,
                      help="rlaif_gym: Babylon-style market world for RLAIF. Collect, inspect and export trajectories.")

    @app.callback()
    def _options(verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                             help="-v: retries, fallbacks, skipped and failed episodes; -vv: debug")):
        _setup_logging(verbose)

    # The order of `rlaif-gym --help`.
    app.command()(collect.rollout)
    app.command("serve-local")(collect.serve_local)
    app.command()(collect.serve)
    app.command()(runs.report)
    app.command()(runs.judge)
    app.command()(runs.export)
    app.add_typer(evals.app, name="eval")
    app.command()(tools.bench)
    app.command()(tools.check)
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

