"""Shared fixtures, each started once per session: a reference server, a finished tiny run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.run.embedded import embedded_server
from tests.runs import NO_MODELLED_WAITS, TINY, run_cli


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a test marked ``slow`` first, each file's tests still together.

    `make test` hands whole files to its workers in collection order
    (``--dist loadfile --no-loadscope-reorder``); a long file handed out last would leave
    one worker running it alone at the end.  Longest first keeps the two busy together.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: the order within stays


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a reference server with the default profiles."""
    with embedded_server(extra_args=["--default-tool-calls", "3", "--store", ":memory:"]) as url:
        yield url


@pytest.fixture(scope="session")
def fast_server_url() -> Iterator[str]:
    """:func:`server_url`'s server without modelled waits (:data:`tests.runs.NO_MODELLED_WAITS`):
    for tests whose claim is what was sent, recorded or counted, not when."""
    extra = ["--default-tool-calls", "3", "--store", ":memory:", *NO_MODELLED_WAITS]
    with embedded_server(extra_args=extra) as url:
        yield url


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``loopbench run tiny.yaml`` in a subprocess, over http and ws, report rendered by the
    runner: its folder (read, do not change) and what it printed.

    One run per worker process serves every test that reads a finished CLI run.
    """
    out = tmp_path_factory.mktemp("results")
    proc = run_cli("run", TINY, "--out", out, "--run-id", "tiny", "-q")
    return out / "tiny", proc.stdout


@pytest.fixture(scope="session")
def tiny_run_dir(tiny_run: tuple[Path, str]) -> Path:
    """The folder of :func:`tiny_run`."""
    return tiny_run[0]
