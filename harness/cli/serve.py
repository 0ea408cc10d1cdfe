"""``loopbench serve``: the reference server in the foreground."""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli.common import EXIT_OK
from reference_server.cli import add_server_arguments, config_from_args
from reference_server.serve import serve


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the reference server in the foreground",
        description="Run the reference Responses API server (HTTP+SSE and WebSocket on /v1/responses).",
    )
    add_server_arguments(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    serve(config_from_args(args))
    return EXIT_OK
