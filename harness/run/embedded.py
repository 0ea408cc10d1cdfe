"""Start and stop the bundled reference server as a child process.

A separate process keeps the server's CPU off the measuring event loop (on two
cores that matters) and lets the harness measure real sockets.  The child binds
port 0 and prints its URL; we read that line, so nothing races for a port.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

from harness.run.child import ReadyChild, ready_child
from harness.wire.errors import LoopbenchError
from harness.workload.scenario import Scenario

READY_PREFIX = "loopbench reference server listening on "


class EmbeddedServerError(LoopbenchError):
    """The embedded reference server did not start or died."""


@contextmanager
def embedded_server(
    *,
    api_profile: str = "optimized",
    engine_profile: str = "cerebras-spark",
    overrides: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    seed: int = 0,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 60.0,
) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT/v1``) of a freshly started server."""
    args = [
        "--host",
        host,
        "--port",
        "0",
        "--api-profile",
        api_profile,
        "--engine-profile",
        engine_profile,
        "--seed",
        str(seed),
    ]
    for key, value in (overrides or {}).items():
        args += ["--set", f"{key}={value}"]
    args += list(extra_args)
    if "--store" not in extra_args:
        # The embedded server lives only as long as the run: its store need not outlive it.
        args += ["--store", ":memory:"]
    with server_child(args, startup_timeout_s=startup_timeout_s) as child:
        yield child.ready


def scenario_server(
    scenario: Scenario, extra_args: Sequence[str] = ()
) -> AbstractContextManager[str]:
    """:func:`embedded_server` with the profiles, overrides and seed the scenario names."""
    api_profile, engine_profile = scenario.server_profiles()
    return embedded_server(
        api_profile=api_profile,
        engine_profile=engine_profile,
        overrides=scenario.embedded_overrides(),
        seed=scenario.seed,
        extra_args=extra_args,
    )


def server_child(
    args: Sequence[str],
    *,
    startup_timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
    keep_stderr: int = 50,
) -> AbstractContextManager[ReadyChild]:
    """``python -m reference_server ARGS``, once it has said where it listens (its URL)."""
    return ready_child(
        # -P: the server is the installed one, never a reference_server/ folder that happens
        # to be in the current directory (an older checkout would answer silently).
        # --exit-with-parent: a harness killed with kill -9 leaves no server behind.
        [sys.executable, "-P", "-m", "reference_server", "--exit-with-parent", *args],
        READY_PREFIX,
        what="reference server",
        timeout_s=startup_timeout_s,
        error=EmbeddedServerError,
        env=env,
        keep_stderr=keep_stderr,
    )
