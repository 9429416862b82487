"""The docs stay true: README.md and docs/**/*.md, checked against the code.

* Every ```python block runs, alone, in a fresh interpreter (cwd: an empty temporary directory), and
  must exit 0. Only a block whose fence is preceded, on the line just before it, by
  `<!-- docs-test: needs-server -->` is skipped (it needs a live LLM server); it is still compiled
  and checked for undefined names.
* Every `rlaif-gym ...` (or `$ rlaif-gym ...`, `python -m rlaif_gym ...`) line of a ```bash, ```sh,
  ```console or ```shell block is parsed by the real command-line app, not run: an unknown option or
  a bad value fails. A `rollout` (or `serve-local`) into a directory that `make demo` or an earlier
  line of the same file wrote must say `--overwrite` or `--resume`, since it would be refused
  otherwise. `make X` lines name Makefile targets; `python examples/...` / `benchmarks/...` files exist.
* Every results table of docs/ (measured figures, not a reference table) names, near it, the command that
  produces it and the commit that recorded it (`test_every_results_table_names_its_command_and_commit`).
* `mkdocs build --strict` passes (broken links, anchors or docstrings fail it).

Needs the full `make test` install: the blocks use SB3, Ray, RLlib, PettingZoo, the plots and the SQL
extras, and the site needs the `[docs]` extra.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlaif_gym import RLAIFEnvConfig

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NEEDS_SERVER = "<!-- docs-test: needs-server -->"
SHELL_LANGS = {"bash", "sh", "console", "shell"}
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
MAKE_DEMO_OUT = "runs/demo"  # `make demo` leaves a run here (see the Makefile)
BLOCK_TIMEOUT_S = 600  # a hang fails here; each block is meant to take seconds (the pages say how long)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: str  # relative to the repository root
    lang: str
    line: int  # line number of the opening fence (1-based)
    code: str
    before: str  # the line just before the opening fence, stripped
    ordinal: int = 0  # 1-based position among the file's blocks of the same kind (python / shell)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.ordinal}"


def _blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(ROOT).as_posix()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2).lower()
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{rel}:{start + 1}: code fence never closed")
        out.append(Block(rel, lang, start + 1, "\n".join(body) + "\n", lines[start - 1].strip() if start else ""))
        i += 1
    return out


def _numbered(kind: set[str]) -> list[Block]:
    found = []
    for path in DOC_FILES:
        n = 0
        for block in _blocks(path):
            if block.lang in kind:
                n += 1
                found.append(Block(block.path, block.lang, block.line, block.code, block.before, n))
    return found


PYTHON_BLOCKS = _numbered({"python", "py"})
SHELL_BLOCKS = _numbered(SHELL_LANGS)


def test_the_docs_have_blocks_to_check():
    assert len(DOC_FILES) >= 14, [p.name for p in DOC_FILES]
    assert len(PYTHON_BLOCKS) >= 15 and len(SHELL_BLOCKS) >= 15


def test_unlabelled_fences_are_not_hiding_code():
    """An output example is ```text; a bare ``` would neither run nor say what it is."""
    bare = [f"{b.path}:{b.line}" for path in DOC_FILES for b in _blocks(path) if not b.lang]
    assert not bare, f"label these fences (```text for output, ```python or ```bash for code): {bare}"


# -- Python blocks --------------------------------------------------------------------------------


def _undefined_names(code: str, name: str) -> str:
    """ruff's undefined-name check (F821) of one block; '' when clean or when ruff is not installed."""
    if importlib.util.find_spec("ruff") is None:
        return ""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "F821", "--output-format",
                           "concise", "--stdin-filename", name, "-"], input=code, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.id for b in PYTHON_BLOCKS])
def test_python_block_runs(block: Block, tmp_path: Path):
    name = f"{block.path.replace('/', '_')}_{block.ordinal}.py"
    compile(block.code, f"{block.id} (line {block.line})", "exec")
    problems = _undefined_names(block.code, name)
    assert not problems, f"{block.id} (line {block.line}) uses undefined names:\n{problems}"
    if block.before == NEEDS_SERVER:
        pytest.skip(f"{block.id} needs a live LLM server (marked {NEEDS_SERVER})")
    script = tmp_path / name
    script.write_text(block.code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S)
    assert proc.returncode == 0, (f"{block.id} (line {block.line}) exited {proc.returncode}:\n"
                                  f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")


# -- shell lines ----------------------------------------------------------------------------------


def _shell_lines(block: Block) -> list[tuple[int, str]]:
    """(line number, command) per logical line: continuations joined, a `$ ` prompt dropped."""
    out: list[tuple[int, str]] = []
    pending, first = "", 0
    for offset, raw in enumerate(block.code.splitlines(), start=1):
        text = raw.strip()
        if not pending:
            first = block.line + offset
            if text.startswith("$ "):
                text = text[2:].lstrip()
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        line = (pending + text).strip()
        pending = ""
        if line and not line.startswith("#"):
            out.append((first, line))
    return out


@pytest.fixture(scope="module")
def cli_command():
    import typer

    from rlaif_gym.cli import _build_app

    return typer.main.get_command(_build_app())


def _must_exist(param) -> tuple[bool, bool]:
    """(the parameter's path must exist, it must be a directory) across click and typer's own types."""
    descriptor = getattr(param, "type_descriptor", None)
    for spec in (getattr(param, "type", None), getattr(descriptor, "parameter_info", None)):
        if spec is not None and getattr(spec, "exists", False):
            return True, getattr(spec, "file_okay", True) is False
    return False, False


def _create_required_paths(command, args: list[str], cwd: Path) -> None:
    """Options such as `--rubrics FILE` (exists=True) are checked on disk while parsing: give them a file."""
    for param in command.params:
        must, is_dir = _must_exist(param)
        if not must:
            continue
        for i, arg in enumerate(args):
            value = None
            for opt in getattr(param, "opts", []):
                if arg == opt and i + 1 < len(args):
                    value = args[i + 1]
                elif arg.startswith(opt + "="):
                    value = arg.split("=", 1)[1]
            if value:
                target = cwd / value
                if is_dir:
                    target.mkdir(parents=True, exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.touch()


def _parse(cli_command, args: list[str], cwd: Path):
    """Parse `rlaif-gym ARGS` like the real command, without running it.

    Returns (subcommand name, its parsed params); ("", why) for an invalid line; (None, {}) for help.
    """
    import typer

    # the click that typer's app uses (typer >= 0.2x vendors it as typer._click), as rlaif_gym.cli does
    errors = sys.modules[typer.BadParameter.__module__]
    try:
        ctx = cli_command.make_context("rlaif-gym", list(args))
        rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])), *ctx.args]
        if not rest:
            return "", "no command given"
        name, sub, sub_args = cli_command.resolve_command(ctx, rest)
        _create_required_paths(sub, sub_args, cwd)
        sub_ctx = sub.make_context(name, list(sub_args), parent=ctx)
        return name, sub_ctx.params
    except typer.Exit as exc:  # --help asked for: a valid line
        return (None, {}) if exc.exit_code == 0 else ("", f"exit {exc.exit_code}")
    except (errors.ClickException, typer.Abort) as exc:
        message = exc.format_message() if isinstance(exc, errors.ClickException) else "aborted"
        return "", f"{type(exc).__name__}: {message}"


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, flags=re.M))


CLI_PREFIXES = ("rlaif-gym ", "python -m rlaif_gym ", "python3 -m rlaif_gym ")


@pytest.mark.parametrize("doc", DOC_FILES, ids=[p.relative_to(ROOT).as_posix() for p in DOC_FILES])
def test_shell_lines_are_valid_after_make_demo(doc: Path, cli_command, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # paths that options require to exist are created here, never in the repo
    rel = doc.relative_to(ROOT).as_posix()
    targets = _makefile_targets()
    written = {os.path.normpath(MAKE_DEMO_OUT)}  # `make demo` ran first
    failures: list[str] = []
    for block in (b for b in SHELL_BLOCKS if b.path == rel):
        for line_no, line in _shell_lines(block):
            where = f"{rel}:{line_no}: {line}"
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if line.startswith("make "):
                missing = [t for t in words[1:] if not t.startswith("-") and "=" not in t and t not in targets]
                if missing:
                    failures.append(f"{where}\n    no Makefile target {missing}")
                continue
            if words[0] in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
                if not (ROOT / words[1]).is_file():
                    failures.append(f"{where}\n    {words[1]} does not exist")
                continue
            prefix = next((p for p in CLI_PREFIXES if line.startswith(p)), None)
            if prefix is None:
                continue
            args = words[len(prefix.split()):]
            name, params = _parse(cli_command, args, tmp_path)
            if name == "":
                failures.append(f"{where}\n    {params}")
                continue
            if name in ("rollout", "serve-local"):
                out = os.path.normpath(str(params["out"]))
                refused = out in written and not params.get("overwrite") and not params.get("resume")
                if refused:
                    failures.append(f"{where}\n    {out} already holds a run (written by make demo or an earlier line "
                                    "of this file): add --overwrite or --resume, or choose a new --out")
                written.add(out)
    assert not failures, "\n".join(failures)


def test_the_cli_check_catches_mistakes(cli_command, tmp_path, monkeypatch):
    """The checker itself: unknown options, bad values and missing commands fail; help is fine."""
    monkeypatch.chdir(tmp_path)
    assert _parse(cli_command, ["rollout", "--episodes", "0"], tmp_path)[0] == ""
    assert _parse(cli_command, ["rollout", "--no-such-option"], tmp_path)[0] == ""
    assert _parse(cli_command, ["rollout", "--temperature", "nan"], tmp_path)[0] == ""
    assert _parse(cli_command, ["rollout", "..."], tmp_path)[0] == ""
    assert _parse(cli_command, ["no-such-command"], tmp_path)[0] == ""
    assert _parse(cli_command, ["rollout", "--help"], tmp_path)[0] is None
    name, params = _parse(cli_command, ["-v", "rollout", "--out", "runs/x", "--resume"], tmp_path)
    assert name == "rollout" and params["resume"] and str(params["out"]) == "runs/x"
    name, _ = _parse(cli_command, ["judge", "runs/q", "--rubrics", "r.json"], tmp_path)
    assert name == "judge" and (tmp_path / "r.json").is_file()


# -- every result names its command and commit ----------------------------------------------------

# A results table holds measured figures. Its provenance is the text near it: the table itself, the RESULT_ABOVE lines
# above its header (up to another table) and the paragraph right after its last row, up to RESULT_BELOW lines, unless
# that paragraph ends with ':' (then it introduces what follows). Tables separated only by blank lines share that text.
RESULT_ABOVE, RESULT_BELOW = 8, 4
# Reference tables whose cells hold numbers (config defaults, reward coefficients), by their first header cell.
REFERENCE_TABLES = {"field", "component"}
TABLE_RULE = re.compile(r"^\s*\|[\s:|-]+\|\s*$")
FIGURE_START = re.compile(r"^[~≈<>≤≥]?\s*[+−-]?\$?\d")  # a cell that starts with a number ...
FIGURE_MARK = re.compile(r"\d\.\d|\d\s?%|\d\s?[x×](?!\w)|±|(?:^|[\s(])[+−-]\d|\d\s/\s[+−-]?\d")  # ... and is a figure
MIN_FIGURES = 3
RESULT_COMMAND = re.compile(r"(?:`|^[ \t]*(?:\$ )?)(?:python3?\s|rlaif-gym\s|make\s|\.venv/bin/)", re.MULTILINE)
SECTION_COMMAND = re.compile(r"\b(?:[Mm]easured|[Rr]eproduce) with\s+`(?:python3?\s|rlaif-gym\s|make\s|\.venv/bin/)")
RESULT_COMMIT = re.compile(r"`[0-9a-f]{7,40}`")
# Results that no script prints (the page names the calls that made them): (page, first header cell). They still
# name their commit.
NO_COMMAND_RESULTS = {("docs/world.md", "style")}  # prompt token counts: decision_points and SmolLM2's tokenizer


def _cells(row: str) -> list[str]:
    return [c.strip().replace("**", "").replace("`", "") for c in row.strip().strip("|").split("|")]


def _results_tables(text: str) -> list[tuple[int, int, str]]:
    """(first header line, last row line, first header cell), 0-based, of each group of results tables.

    A results table has at least MIN_FIGURES cells outside its first column that start with a number and hold a
    decimal point, a %, an x ratio, a ± or a sign, or are two numbers a / b; a table whose first header cell is in
    REFERENCE_TABLES is not one. Tables in fenced blocks are skipped."""
    lines, found, fenced, i = text.splitlines(), [], False, 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            fenced = not fenced
        elif not fenced and lines[i].lstrip().startswith("|") and i + 1 < len(lines) and TABLE_RULE.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            first = _cells(lines[i])[0].lower()
            figures = sum(1 for row in lines[i + 2:j] for cell in _cells(row)[1:]
                          if FIGURE_START.match(cell) and FIGURE_MARK.search(cell))
            if figures >= MIN_FIGURES and first not in REFERENCE_TABLES:
                if found and not "".join(lines[found[-1][1] + 1:i]).strip():  # only blank lines since the last one
                    found[-1] = (found[-1][0], j - 1, found[-1][2])
                else:
                    found.append((i, j - 1, first))
            i = j
            continue
        i += 1
    return found


def _unsourced_results(rel: str, text: str) -> list[str]:
    """file:line of each results table without a command (near it, or a "Measured with `...`" earlier in its
    section) and a commit (near it)."""
    lines, problems, headings, fenced = text.splitlines(), [], [], False
    for k, line in enumerate(lines):
        fenced = fenced != bool(FENCE.match(line))
        if not fenced and line.startswith("#"):
            headings.append(k)
    for start, end, first in _results_tables(text):
        above = start
        while above > max(0, start - RESULT_ABOVE) and not lines[above - 1].lstrip().startswith("|"):
            above -= 1
        below = end + 1
        while below < len(lines) and not lines[below].strip():
            below += 1
        after = []
        while below < len(lines) and lines[below].strip() and len(after) < RESULT_BELOW:
            after.append(lines[below])
            below += 1
        if after and after[-1].rstrip().endswith(":"):
            after = []
        near = "\n".join(lines[above:end + 1] + after)
        heading = max((k for k in headings if k < start), default=0)
        section = "\n".join(lines[heading:start])
        command = ((rel, first) in NO_COMMAND_RESULTS or RESULT_COMMAND.search(near)
                   or SECTION_COMMAND.search(section))
        missing = [what for what, ok in (("command", command), ("commit", RESULT_COMMIT.search(near))) if not ok]
        if missing:
            problems.append(f"{rel}:{start + 1} (table '{first}'): no {' and no '.join(missing)}")
    return problems


RESULT_DOCS = sorted((ROOT / "docs").rglob("*.md"))  # README.md is a first page: its figures point into docs/


def test_every_results_table_names_its_command_and_commit():
    """Every results table in docs/ says how to reproduce it and at which commit it was recorded."""
    problems, tables = [], 0
    for path in RESULT_DOCS:
        text = path.read_text(encoding="utf-8")
        tables += len(_results_tables(text))
        problems += _unsourced_results(path.relative_to(ROOT).as_posix(), text)
    assert tables >= 30, f"the results-table heuristic found only {tables} groups of tables in docs/"
    assert not problems, (
        f"results tables without their provenance (in the {RESULT_ABOVE} lines above the header or the paragraph "
        "after the last row):\n  " + "\n  ".join(problems) + "\nName the command and the commit that recorded it, "
        "e.g. 'Measured with `python benchmarks/bench_vector.py --sizes 1 1024` (recorded at commit `abc1234`).' "
        "Find the commit with `git log -S '<a figure of the table>' --reverse -- docs/<page>.md` (the first listed)."
    )


def test_the_results_check_catches_a_table_without_provenance():
    table = "| policy | mean return | PnL |\n|---|---:|---:|\n| a | +0.12 | 15 % |\n| b | -0.30 | 2.5x |\n"
    assert _results_tables(table) == [(0, 3, "policy")]
    assert _unsourced_results("t.md", table) == ["t.md:1 (table 'policy'): no command and no commit"]
    command_only = "Measured with `python x.py`.\n\n" + table
    assert _unsourced_results("t.md", command_only) == ["t.md:3 (table 'policy'): no commit"]
    sourced = "Measured with `python x.py` (recorded at commit `abc1234`).\n\n" + table + "\n" + table
    assert len(_results_tables(sourced)) == 1 and _unsourced_results("t.md", sourced) == []
    borrowed = table + "\nThe next one (`python y.py`, recorded at commit `abc1234`):\n\n" + table
    assert _unsourced_results("t.md", borrowed) == ["t.md:1 (table 'policy'): no command and no commit"]
    assert _results_tables(table.replace("| policy", "| field")) == []  # a reference table
    assert _results_tables("```text\n" + table + "```\n") == []


# -- links and the site ---------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """Python-Markdown's default toc slug of a heading (code spans kept as text)."""
    text = re.sub(r"[`*]", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    lines, anchors, fenced = path.read_text(encoding="utf-8").splitlines(), set(), False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#").strip()))
    return anchors


def test_readme_links_resolve():
    """mkdocs checks the pages' links; the README is outside docs/, so it is checked here."""
    readme = ROOT / "README.md"
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        path = (ROOT / file) if file else readme
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in _anchors(path)):
            broken.append(target)
    assert not broken, f"README links that lead nowhere: {broken}"


def test_readme_stays_a_first_page():
    """The reference lives in docs/; the README is what a newcomer reads first."""
    size = len((ROOT / "README.md").read_bytes())
    assert size < 16_000, f"README.md is {size} bytes: move reference material to docs/"


def test_mkdocs_build_strict(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-6000:]}"
    config_page = (tmp_path / "site" / "config" / "index.html").read_text()
    missing = [name for name in RLAIFEnvConfig.model_fields if f"<code>{name}</code>" not in config_page]
    assert not missing, f"the built config page has no row for {missing} (docs_hooks.py's table)"
