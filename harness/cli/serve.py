"""``loopbench serve``: the reference server in the foreground."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.cli.common import add_command, examples
from harness.wire.exit_codes import ExitCode
from reference_server.cli import SERVES, add_server_arguments, config_from_args
from reference_server.serve import serve


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "serve",
        description=f"Run the reference server until Ctrl-C: {SERVES}. It prints the URL it listens on; --access-log adds one "
        "line per request. See docs/server.md.",
        epilog=examples(
            "loopbench serve --port 8000",
            "loopbench serve --port 0 --profile legacy+gpu-legacy --access-log",
            "loopbench serve --model gpt-5-codex --set engine.sustained_tps=500",
            "loopbench serve --port 8443 --tls-self-signed    # https:// and wss:// on loopback",
        ),
    )
    add_server_arguments(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    # main() has made SIGTERM stop the server as Ctrl-C does: a drain, then 130 for both
    # (left alone, uvicorn re-raises SIGTERM after the drain and the process dies by it, 143).
    try:
        stopped_by = serve(config_from_args(args))
    except SystemExit as exc:
        # The server reports a bad flag, profile or port as SystemExit("error: ...") (its own
        # entry point exits 1 with it); under loopbench that is the usage row of the table.
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return ExitCode.USAGE
    return ExitCode.OK if stopped_by is None else ExitCode.INTERRUPTED
