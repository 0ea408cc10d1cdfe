"""Shared fixtures, each started once per session: a reference server, a finished tiny run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.run.embedded import embedded_server
from tests.runs import TINY, run_cli


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a reference server with the default profiles."""
    with embedded_server(extra_args=["--default-tool-calls", "3", "--store", ":memory:"]) as url:
        yield url


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run over http and ws, report rendered by the runner; read, do not change."""
    out = tmp_path_factory.mktemp("results")
    run_cli("run", TINY, "--out", out, "--run-id", "tiny", "-q")
    return out / "tiny"
