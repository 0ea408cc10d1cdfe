"""The ``loopbench`` entry point: a parser built from the subcommand families, and the dispatch.

Each module in :data:`COMMANDS` registers its subcommands with ``add_parser(subparsers)``
and handles each with a ``cmd_*`` function that returns the exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from harness.cli import catalog, gate, locust, model, report, run, scenario, selfbench, serve
from harness.cli.common import EXIT_ERROR, EXIT_USAGE
from harness.wire.errors import LoopbenchError


class _Family(Protocol):
    def add_parser(self, sub: Any) -> None: ...


#: the subcommand families, in the order ``loopbench --help`` lists them
COMMANDS: tuple[_Family, ...] = (
    run,
    serve,
    scenario,
    catalog,
    gate,
    report,
    model,
    locust,
    selfbench,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopbench",
        description="Latency benchmarking and load testing for agentic LLM workloads over the Responses API "
        "(HTTP+SSE vs WebSocket mode).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for family in COMMANDS:
        family.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        sys.exit(EXIT_USAGE)
    try:
        code = args.func(args)
    except LoopbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
