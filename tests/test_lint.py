"""ruff and mypy are part of the suite: a lint failure fails `make test` like any other test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _lint_dirs() -> list[str]:
    """The folders `make lint` checks (its LINT_DIRS): one list for CI and this test."""
    [line] = [
        ln for ln in (ROOT / "Makefile").read_text().splitlines() if ln.startswith("LINT_DIRS")
    ]
    dirs = line.split("=", 1)[1].split()
    assert {"harness", "reference_server", "bench", "tools", "tests"} <= set(dirs), dirs
    return dirs


def test_ruff_clean() -> None:
    proc = _run(str(BIN / "ruff"), "check", *_lint_dirs())
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_clean() -> None:
    proc = _run(str(BIN / "ruff"), "format", "--check", *_lint_dirs())
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    proc = _run(sys.executable, "-m", "mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
