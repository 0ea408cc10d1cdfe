"""Run the reference server: one process, or ``--workers N`` sharing one socket.

``reference_server/cli.py`` (``python -m reference_server``) and ``loopbench
serve`` build a :class:`ServerConfig` and call :func:`serve`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from reference_server.core.config import ServerConfig
from reference_server.process import serve_process
from reference_server.tls import LOOPBACK_NAMES, TlsFileError, check_files, self_signed
from reference_server.workers import serve_workers


def serve(config: ServerConfig) -> int | None:
    """Serve until stopped; the signal that stopped it (SIGINT, SIGTERM), None if none did.

    ``python -m reference_server`` exits 0 either way; ``loopbench serve`` exits 130 after a
    signal, as every subcommand does (the exit-code table).
    """
    warning = bind_warning(config.host, config.api_keys)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    if config.exit_with_parent:
        watch_parent()
    if config.timing_log is not None:
        start_timing_log(config.timing_log)
    try:
        with tls_files(config) as config:
            if config.workers > 1:
                return serve_workers(config)
            return serve_process(config)
    except _StoppedAfterDrain:
        return signal.SIGTERM


def start_timing_log(path: str) -> None:
    """Empty ``--timing-log``'s file, once, before any worker appends to it."""
    try:
        with open(path, "wb"):
            pass
    except OSError as exc:
        raise SystemExit(
            f"error: --timing-log {path}: cannot create the file ({exc.strerror or exc})"
        ) from None


def watch_parent(period_s: float = 0.5) -> threading.Thread:
    """SIGTERM this process once its parent is gone (``--exit-with-parent``).

    A thread, not a task: it must work before the event loop runs and whatever the loop is
    doing.  An orphan is re-parented (to init or a subreaper), so ``getppid`` changes; the
    SIGTERM then takes the normal drain path.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period_s)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def tls_files(config: ServerConfig) -> Iterator[ServerConfig]:
    """``config`` with usable TLS files: checked, or made for ``--tls-self-signed``.

    Made here, before ``--workers`` forks, so every worker serves the same certificate;
    the temporary folder goes when the server stops.
    """
    with contextlib.ExitStack() as stack:
        if config.tls_self_signed:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="loopbench-tls-"))
            cert, key = self_signed(Path(folder), config.host)
            names = ", ".join(dict.fromkeys((*LOOPBACK_NAMES, config.host)))
            print(
                f"TLS: self-signed certificate for {names} in {cert} "
                "(clients must trust that file or skip verification)",
                file=sys.stderr,
                flush=True,
            )
            config = dataclasses.replace(config, tls_self_signed=False, tls_cert=cert, tls_key=key)
            # uvicorn re-raises the SIGTERM it stopped on once it has shut down; by default
            # that ends the process on the spot, leaving the key behind in the folder.
            previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
            stack.callback(signal.signal, signal.SIGTERM, previous)
        if config.tls_cert is not None and config.tls_key is not None:
            try:
                check_files(config.tls_cert, config.tls_key)
            except TlsFileError as exc:
                raise SystemExit(f"error: {exc}") from None
        yield config


class _StoppedAfterDrain(SystemExit):
    """A stop that was asked for, after a drain: a clean exit (a --workers supervisor too);
    :func:`serve` returns SIGTERM for it."""


def _exit_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise _StoppedAfterDrain(0)


def bind_warning(host: str, api_keys: Sequence[str]) -> str | None:
    """A warning when the server is reachable beyond this machine and accepts any key."""
    if api_keys or _is_loopback(host):
        return None
    return (
        f"warning: listening on {host}, which is not a loopback address, without API keys: "
        "anyone who can reach it can use this server. Pass --api-key, --api-key-file or "
        "LOOPBENCH_API_KEYS, or bind 127.0.0.1."
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: assume it may be reachable
