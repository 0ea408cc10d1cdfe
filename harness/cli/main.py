"""The ``loopbench`` entry point: a parser built from the subcommand families, and the dispatch.

Each module in :data:`COMMANDS` registers its subcommands with ``add_parser(subparsers)``
and handles each with a ``cmd_*`` function that returns the exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from harness.cli import (
    catalog,
    gate,
    locust,
    model,
    probe,
    record,
    report,
    run,
    scenario,
    selfbench,
    serve,
)
from harness.cli.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, HelpFormatter, Parser, version
from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import exit_code_help


class _Family(Protocol):
    def add_parser(self, sub: Any) -> None: ...


#: the subcommand families, in the order ``loopbench --help`` lists them
COMMANDS: tuple[_Family, ...] = (
    run,
    probe,
    record,
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
    parser = Parser(
        prog="loopbench",
        description="Latency benchmarking and load testing for agentic LLM workloads: the same "
        "rollouts over the Responses API (HTTP+SSE and WebSocket mode), Chat Completions and "
        "Anthropic Messages, paired.",
        epilog="exit codes (every subcommand):\n"
        + exit_code_help()
        + "\n\nRun `loopbench COMMAND --help` for a command's options and examples.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"loopbench {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for family in COMMANDS:
        family.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        code = args.func(args)
    except LoopbenchError as exc:
        # Whatever reaches here was raised before or instead of a verdict: a bad file, flag,
        # path or target. A command with a verdict (run, gate, compare) returns its own code.
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        # `loopbench scenarios | head -1`: the reader left, which is not a failure of ours;
        # stdout is pointed at devnull so the interpreter's final flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    sys.exit(code)
