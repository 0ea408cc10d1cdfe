"""Servers with non-default options, started for one module and always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from harness.run.embedded import embedded_server


@contextmanager
def configured_server(*args: str, store: str = ":memory:") -> Iterator[str]:
    """Base URL of a reference server started with ``args`` (its own store, in memory by default)."""
    with embedded_server(extra_args=["--store", store, *args]) as url:
        yield url


def ws_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://", 1) + "/responses"
