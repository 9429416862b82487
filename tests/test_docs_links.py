"""Every document the code points to is in the repository, and docs/layout.md names every module.

The design notes the package was first written from live outside the repository. What the code
relies on is written into docs/ instead (the original system and its defects in docs/babylon.md,
the world in docs/world.md, the reward in docs/reward.md, the layers and modules in
docs/layout.md), so that a reader can follow every reference. These tests keep it that way:

* no file of the package, its tests, examples, benchmarks or docs names one of the outside design
  documents (the upper-case spec pages, or a path into the shared folder beside the repository), or
  a numbered section of one (a section sign followed by a digit);
* every ``docs/<page>.md`` that a file cites exists, and a heading cited with it, as
  ``docs/<page>.md ("Heading")`` or ``docs/<page>.md#anchor``, is a heading of that page;
* docs/layout.md names every module of ``rlaif_gym`` and ``rlaif_gym_verifiers``, no module that
  does not exist, and gives each module of ``rlaif_gym`` the layer of its "Import layers" table.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LAYOUT = DOCS / "layout.md"
PACKAGES = ("rlaif_gym", "rlaif_gym_verifiers")
SCANNED_DIRS = (*PACKAGES, "tests", "examples", "benchmarks", "docs")
SCANNED_FILES = ("README.md", "Makefile", "pyproject.toml", "mkdocs.yml")
TEXT_SUFFIXES = {".py", ".md", ".txt", ".json", ".toml", ".yml", ".yaml", ".j2", ".js", ".css", ".sh", ".cfg"}

# The outside design documents (their names are upper case; docs/ pages are lower case), and the
# shared folder beside the repository they live in. Spelled so that this file does not match itself.
OUTSIDE = re.compile(r"\b(?:BABYLON|WORLD|ARCHITECTURE|ECOSYSTEM|STYLE)\.md\b|\.\./shared\b|\bshared[/]spec\b")
SECTION_NUMBER = re.compile(r"§\s*\d")
# docs/<page>.md, optionally #anchor, optionally followed by ("Heading", ...) on the same line.
CITATION = re.compile(r"(?<![\w/.-])docs/((?:[\w-]+/)*[\w-]+\.md)(#[\w-]+)?(?:[ \t]*\(([^()\n]*)\))?")
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*\w")


def _scanned() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                files.append(path)
    return files


FILES = _scanned()


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _headings(page: Path) -> list[str]:
    """The Markdown headings of a page (outside code fences), as written, without a trailing {#id}."""
    out, fenced = [], False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            out.append(re.sub(r"\s*\{#[^}]*\}\s*$", "", line.lstrip("#").strip()))
    return out


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_the_scan_covers_the_package_and_the_docs():
    names = {_rel(p) for p in FILES}
    for expected in ("rlaif_gym/sim/rules.py", "rlaif_gym_verifiers/__init__.py", "docs/babylon.md",
                     "tests/test_layering.py", "examples/demo.py", "benchmarks/bench_vector.py", "README.md"):
        assert expected in names, expected


def test_no_file_cites_a_design_document_outside_the_repository():
    hits = []
    for path in FILES:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) or SECTION_NUMBER.search(line):
                hits.append(f"{_rel(path)}:{n}: {line.strip()[:120]}")
    assert not hits, ("these lines cite a document that is not in the repository (or a numbered section "
                      "of one); cite the docs/ page that covers the point, e.g. docs/babylon.md "
                      "(\"The original's defects\"):\n" + "\n".join(hits))


def test_every_cited_docs_page_and_heading_exists():
    bad = []
    headings: dict[str, list[str]] = {}
    for path in FILES:
        text = path.read_text(errors="replace")
        for match in DOCS_PATH.finditer(text):
            target = match.group(0).rstrip(".")
            if not (ROOT / target).exists():
                bad.append(f"{_rel(path)}: {target} does not exist")
        for match in CITATION.finditer(text):
            page, anchor, parens = match.groups()
            if not (DOCS / page).is_file():
                continue  # reported above
            known = headings.setdefault(page, _headings(DOCS / page))
            if anchor and anchor[1:] not in {_slug(h) for h in known}:
                bad.append(f"{_rel(path)}: docs/{page} has no heading with the anchor {anchor}")
            for cited in re.findall(r'"([^"\n]+)"', parens or ""):
                if cited not in known and cited not in {h.replace("`", "") for h in known}:
                    bad.append(f"{_rel(path)}: docs/{page} has no heading \"{cited}\"")
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------------------------ docs/layout.md


def _layout_tree() -> dict[str, str]:
    """The module tree of docs/layout.md: path (from the repository root) -> its line.

    The tree is the page's first ``text`` block. An entry is a line whose first word ends in ``/`` or
    ``.py``; two spaces of indentation per level.
    """
    block = LAYOUT.read_text().split("```text\n", 1)[1].split("```", 1)[0]
    entries, stack = {}, []
    for line in block.splitlines():
        words = line.split()
        if not words or not (words[0].endswith("/") or words[0].endswith(".py")):
            continue
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0, f"docs/layout.md: odd indentation: {line!r}"
        depth = indent // 2
        assert depth <= len(stack), f"docs/layout.md: entry without a parent folder: {line!r}"
        stack[depth:] = [words[0]]
        path = "".join(stack)
        assert path not in entries, f"docs/layout.md names {path} twice"
        entries[path] = line
    return entries


def _layout_layers() -> dict[str, str]:
    """The "Import layers" table of docs/layout.md: top-level module or subpackage -> layer label."""
    text = LAYOUT.read_text().split("## Import layers", 1)[1]
    layers = {}
    for row in re.findall(r"^\| *(L\d+|floor) *\|([^|\n]*)\|", text, flags=re.MULTILINE):
        for name in re.findall(r"`([\w]+)`", row[1]):
            layers[name] = row[0]
    return layers


def _modules() -> list[str]:
    return sorted(_rel(p) for top in PACKAGES for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def test_layout_names_every_module():
    entries = _layout_tree()
    missing = []
    for module in _modules():
        named = module.removesuffix("__init__.py") if module.endswith("/__init__.py") else module
        if named not in entries:
            missing.append(named)
    assert not missing, f"docs/layout.md does not name these modules (one line each: job and layer): {missing}"


def test_layout_names_no_module_that_does_not_exist():
    stale = [path for path in _layout_tree() if path.startswith(PACKAGES) and not (ROOT / path).exists()]
    assert not stale, f"docs/layout.md names modules that do not exist: {stale}"


def test_layout_gives_each_module_its_layer():
    layers = _layout_layers()
    wrong = []
    for path, line in _layout_tree().items():
        if not path.startswith("rlaif_gym/") or path in ("rlaif_gym/", "rlaif_gym/__init__.py"):
            continue
        top = path.split("/")[1].removesuffix(".py")
        stated = re.findall(r"\b(L\d+|floor)\b", line)
        if top not in layers:
            wrong.append(f"{path}: the \"Import layers\" table has no row for {top}")
        elif stated[:1] != [layers[top]]:
            wrong.append(f"{path} should say {layers[top]}: {line.strip()!r}")
    assert not wrong, "docs/layout.md:\n" + "\n".join(wrong)
