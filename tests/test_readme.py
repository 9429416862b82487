"""The README and docs stay true: every config field is documented, and the commands they name exist.

The config table is docs/config.md's, generated from the fields' declarations when the docs are built; commands and
paths may be named in the README or any page of docs/ (tests/test_documentation.py runs their code blocks and parses
their command lines).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlaif_gym import RLAIFEnvConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CONFIG_PAGE = (ROOT / "docs" / "config.md").read_text()
DOCS = "\n".join([README, *(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md")))])


def test_every_config_field_is_in_the_config_table():
    """docs/config.md's table is generated when the docs are built (docs_hooks.py): the page as mkdocs renders it
    holds a row per field, with its declared description, and none for a field the config does not have."""
    sys.path.insert(0, str(ROOT))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT))
    assert docs_hooks.CONFIG_TABLE in CONFIG_PAGE, "docs/config.md lost the marker its config table is built at"
    page = docs_hooks.on_page_markdown(CONFIG_PAGE)
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `")}
    for name, field in RLAIFEnvConfig.model_fields.items():
        row = rows.get(f"`{name}`")
        assert row is not None, f"docs/config.md lacks config field {name}"
        assert field.description and field.description in row, f"docs/config.md lacks the description of {name}"
    stale = set(rows) - {f"`{name}`" for name in RLAIFEnvConfig.model_fields}
    assert not stale, f"docs/config.md documents fields the config does not have: {sorted(stale)}"


def test_readme_commands_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo:", "test:", "baselines:", "ranking:"):
        assert target in makefile
    for command in ("make demo", "make test"):
        assert command in README, f"the README no longer names {command}"
    for command in ("make baselines", "make ranking"):
        assert command in DOCS, f"neither the README nor docs/ name {command}"
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    for path in ("examples/baselines.py", "examples/reward_ranking.py", "examples/demo.py",
                 "benchmarks/bench_vector.py", "constraints.txt"):
        assert (ROOT / path).exists() and path in DOCS, f"{path} is missing or named nowhere in README.md / docs/"


def test_the_readme_says_the_openenv_server_has_no_authentication():
    """Issue 25 row 12: the README's OpenEnv paragraph did not say that the server has no authentication."""
    start = README.index("**OpenEnv**")
    paragraph = README[start:README.index("\n\n", start)]
    assert "no authentication" in paragraph, paragraph
    assert "127.0.0.1" in paragraph and "private network" in paragraph, paragraph
