"""The fake OpenAI-compatible server fixture for the rollout tests (a real local HTTP server, no network).

The shared checks live in `rollout_checks.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `import fake_server` from the test modules

from fake_server import FakeOpenAIServer


@pytest.fixture
def fake_server():
    """A started `FakeOpenAIServer` with no faults; set `fake_server.faults` in the test."""
    server = FakeOpenAIServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert not server.handler_errors, f"the fake server itself raised: {server.handler_errors}"
