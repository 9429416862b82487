"""mkdocs hooks (mkdocs.yml `hooks:`): docs/config.md's table of every config field, generated from the config's
declarations (`rlaif_gym.config.config_table`) when the docs are built."""

from __future__ import annotations

from rlaif_gym.config import config_table

CONFIG_TABLE = "<!-- the table of every config field (docs_hooks.py) -->"
"""Where docs/config.md's table goes."""


def on_page_markdown(markdown: str, **kwargs) -> str:
    """The page with the config table in place of its marker."""
    return markdown.replace(CONFIG_TABLE, config_table())
