"""Shared fixtures: a real reference server on a free loopback port, started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.embedded import embedded_server


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a reference server with the default profiles."""
    with embedded_server(extra_args=["--default-tool-calls", "3", "--store", ":memory:"]) as url:
        yield url
