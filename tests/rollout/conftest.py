"""The fake OpenAI-compatible server fixture for the rollout tests (a real local HTTP server, no network).

The shared checks live in `rollout_checks.py`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # `import fake_server` from the test modules

from fake_server import fake_server  # noqa: F401  (the fixture, offered to the tests here)
