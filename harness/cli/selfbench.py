"""``loopbench selfbench``: measure the harness itself (thin: parse, call, print)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import orjson

from harness.cli.commands import command_help
from harness.cli.common import EXIT_INVALID, EXIT_OK, HelpFormatter, examples
from harness.tools.selfbench.bench import STEPS, SelfbenchOptions, run_selfbench
from harness.tools.selfbench.figures import document, render_table, verdict
from harness.transports.rx_socket import RX_STAMP_MODES, resolve_rx_stamp
from harness.wire.errors import UsageError

#: a missed target on a busy machine is a measurement to repeat: the table's "re-measure" row
EXIT_TARGET_MISSED = EXIT_INVALID


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "selfbench",
        help=command_help("selfbench"),
        description="Measure loopbench against this machine in one run: the client ceiling "
        "(bare readers that only count events, SSE and WebSocket) and the full pipeline, each "
        "against a library server (uvicorn ASGI / websockets, one write per event: the target) "
        "and a flood server (pre-encoded bytes: the client's own cost), their ratios and the "
        "client and server CPU per event, TTFT "
        "measurement overhead at 1/16/64 streams, decode-TPS and burst pacing accuracy, "
        "overload detection, memory per recorded turn, and Locust on the flood SSE server. "
        "Prints a table with each target and writes it as JSON. See BENCHMARKS.md.",
        epilog=examples(
            "loopbench selfbench --quick",
            "loopbench selfbench --steps timing --no-locust --out /tmp/selfbench.json",
            "loopbench selfbench --check",
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--out",
        default="results/selfbench.json",
        help="JSON file to write (default: results/selfbench.json)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="reduced sizes (~30 s): every figure, less precision; for tests and smoke runs",
    )
    p.add_argument("--no-locust", action="store_true", help="skip the Locust comparison")
    p.add_argument(
        "--steps",
        default=",".join(STEPS),
        help=f"comma-separated steps to run (default: all): {', '.join(STEPS)}",
    )
    p.add_argument(
        "--rx-stamp",
        choices=RX_STAMP_MODES,
        default="auto",
        help="how the timing step's runs stamp reads (as loopbench run --rx-stamp; the kstamp "
        "step runs both kernel and user)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help=f"exit with code {EXIT_TARGET_MISSED} when a target is missed (make bench)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_selfbench)


def cmd_selfbench(args: argparse.Namespace) -> int:
    opts = SelfbenchOptions.quick() if args.quick else SelfbenchOptions()
    if args.no_locust:
        opts = dataclasses.replace(opts, locust=False)
    steps = tuple(s.strip() for s in args.steps.split(",") if s.strip())
    unknown = sorted(set(steps) - set(STEPS))
    if unknown or not steps:
        raise UsageError(f"--steps: expected one or more of {', '.join(STEPS)}, got {args.steps!r}")
    try:
        resolve_rx_stamp(args.rx_stamp)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    opts = dataclasses.replace(opts, steps=steps, rx_stamp=args.rx_stamp)

    def say(line: str) -> None:
        if not args.quiet:
            print(f"selfbench: {line}", file=sys.stderr, flush=True)

    figures, meta, details = run_selfbench(opts, say)
    doc = document(figures, meta, details)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    print(render_table(figures))
    passed = verdict(figures)
    print(f"\n{'all targets met' if passed else 'TARGET MISSED'}; written to {out}")
    return EXIT_TARGET_MISSED if args.check and not passed else EXIT_OK
