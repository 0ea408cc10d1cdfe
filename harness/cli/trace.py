"""``loopbench trace show``: what a trace file holds, before replaying it (docs/traces.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.cli.common import EXIT_OK, EXIT_USAGE, add_command, examples
from harness.wire.errors import ScenarioError
from harness.workload.trace import read_trace, read_trace_header
from harness.workload.trace_summary import trace_summary_lines


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "trace",
        description="Look into trace files (loopbench record, loopbench import, or written "
        "by hand): see docs/traces.md for the format.",
        epilog=examples(
            "loopbench trace show trace.jsonl",
            "loopbench validate trace.jsonl    # the built-in scenario around it",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    show = verbs.add_parser(
        "show",
        help="print what a trace holds: per rollout its turns, tool calls, tokens, tool time, "
        "warm-up, recoveries and sub-agents, and the totals",
        description="Print what each trace holds: per rollout its turns, tool calls, output "
        "and reasoning tokens, input tokens of its first and last turn, the client's tool "
        "time, whether a warm-up prepared its connection, the turns answered only after a "
        "recovery (with their failed requests), its sub-agents, and notes (truncated, "
        "follows, forked_from, overlapped_with, ended_on_failure). A malformed trace is "
        "reported with its file, line and field (exit 4).",
        epilog=examples(
            "loopbench trace show trace.jsonl",
            "loopbench run trace.jsonl --transports http,ws   # replay it",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("files", nargs="+", metavar="TRACE", help="trace file(s) (JSON Lines)")
    show.set_defaults(func=cmd_trace_show)


def cmd_trace_show(args: argparse.Namespace) -> int:
    failed = 0
    for i, path in enumerate(args.files):
        try:
            rollouts = read_trace(path)
        except ScenarioError as exc:
            failed += 1
            print(str(exc), file=sys.stderr)
            continue
        if i:
            print()
        print("\n".join(trace_summary_lines(path, rollouts, read_trace_header(path))))
    return EXIT_USAGE if failed else EXIT_OK
