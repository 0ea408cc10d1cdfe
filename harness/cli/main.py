"""The ``loopbench`` entry point: a parser built from the command table, and the dispatch.

A module of :data:`harness.cli.commands.COMMANDS` registers its commands with
``add_parser(subparsers)``; each ``cmd_*`` returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from harness.cli.commands import COMMANDS, module_of
from harness.cli.common import HelpFormatter, Parser
from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import ExitCode, exit_code_help
from harness.wire.stop_signal import sigterm_as_sigint
from harness.wire.version import loopbench_version
from harness.workload.builtin import shadowed_note


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: every command in full without ``argv``, else only its own (the
    others by name and help line, all that ``--help`` and a usage error show of them)."""
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
    parser.add_argument("--version", action="version", version=f"loopbench {loopbench_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = module_of(list(argv)) if argv is not None else None
    built: set[str] = set()
    for command in COMMANDS:
        if argv is None or command.module == wanted:
            if command.module not in built:
                built.add(command.module)
                importlib.import_module(f"harness.cli.{command.module}").add_parser(sub)
        else:
            sub.add_parser(command.name, help=command.help)
    return parser


def _scenario_notes(args: argparse.Namespace) -> list[str]:
    """What a bare built-in name left unused in the working folder, for every command that
    takes a scenario (``run tiny`` beside a folder ``tiny/``): the user may have meant it."""
    names = [getattr(args, "scenario", None)]
    names += list(getattr(args, "files", None) or ())
    if getattr(args, "ab", False):
        names.append(getattr(args, "subject", None))
    notes = (shadowed_note(n) for n in names if isinstance(n, str))
    return [n for n in notes if n]


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        # Inside the try: a Ctrl-C while a command's modules load is an interruption too.
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            sys.exit(ExitCode.USAGE)
        for note in _scenario_notes(args):
            print(f"note: {note}", file=sys.stderr)
        # Every command stops on SIGTERM as on Ctrl-C (the table's 130 for both): by default
        # SIGTERM would end the process on the spot (143), its cleanup and results unwritten.
        sigterm_as_sigint()
        code = args.func(args)
    except LoopbenchError as exc:
        # Whatever reaches here was raised before or instead of a verdict: a bad file, flag,
        # path or target. A command with a verdict (run, gate, compare) returns its own code.
        print(f"error: {exc}", file=sys.stderr)
        code = ExitCode.USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = ExitCode.INTERRUPTED
    except BrokenPipeError:
        # `loopbench scenarios | head -1`: the reader left, which is not a failure of ours;
        # stdout is pointed at devnull so the interpreter's final flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = ExitCode.OK
    sys.exit(code)
