"""The package version (one place; pyproject.toml reads the same string)."""

__version__ = "0.1.0"
