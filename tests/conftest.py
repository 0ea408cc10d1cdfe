"""Shared fixtures: a real reference server on a free loopback port, started once per session."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.report.results import read_csv_gz
from harness.run.embedded import embedded_server


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a reference server with the default profiles."""
    with embedded_server(extra_args=["--default-tool-calls", "3", "--store", ":memory:"]) as url:
        yield url


def rows_flushed(proc: subprocess.Popen[str], turns: Path, at_least: int) -> int:
    """Rows in a running ``loopbench run``'s turns file once it has ``at_least`` (or 120 s pass).

    Rows reach the file in blocks (every 0.5 s) and there is no event to await from another
    process, so the file is polled, bounded; returns early if the run ends first.
    """
    deadline = time.monotonic() + 120
    seen = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if turns.exists():
            seen = len(read_csv_gz(turns))
            if seen >= at_least:
                break
        time.sleep(0.1)
    return seen
