"""``python -m bench.selfbench`` (``make bench``): measure the harness itself; BENCHMARKS.md."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from bench.cli_args import add_check_and_quiet, names_of
from bench.entry import exit_code
from bench.selfbench.bench import STEPS, SelfbenchOptions, run_selfbench
from bench.selfbench.figures import document, render_table, unjudged, verdict
from harness.transports.rx_socket import RX_STAMP_MODES, resolve_rx_stamp
from harness.wire.exit_codes import ExitCode, UsageParser

#: a target missed on a machine quiet enough to judge it (bench/selfbench/busy.py)
EXIT_TARGET_MISSED = ExitCode.SLO_BREACH
#: a step the machine stayed too busy to judge: the table's "re-measure" row
EXIT_NOT_JUDGED = ExitCode.INVALID


def build_parser() -> UsageParser:
    p = UsageParser(
        prog="python -m bench.selfbench",
        description="Measure loopbench against this machine in one run: the client ceiling "
        "(bare readers that only count events, SSE and WebSocket) and the full pipeline, each "
        "against a library server (uvicorn ASGI / websockets, one write per event: the target) "
        "and a flood server (pre-encoded bytes: the client's own cost), their ratios and the "
        "client and server CPU per event, TTFT "
        "measurement overhead at 1/16/64 streams, decode-TPS and burst pacing accuracy, "
        "overload detection, memory per recorded turn, and Locust on the flood SSE server. "
        "Prints a table with each target and writes it as JSON. See BENCHMARKS.md.",
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
        type=names_of(STEPS),
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
    add_check_and_quiet(
        p,
        f"exit with code {int(EXIT_TARGET_MISSED)} when a target is missed, "
        f"{int(EXIT_NOT_JUDGED)} when the machine was too busy to judge one (make bench)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    opts = SelfbenchOptions.quick() if args.quick else SelfbenchOptions()
    if args.no_locust:
        opts = dataclasses.replace(opts, locust=False)
    try:
        resolve_rx_stamp(args.rx_stamp)
    except ValueError as exc:
        parser.error(str(exc))
    opts = dataclasses.replace(opts, steps=args.steps, rx_stamp=args.rx_stamp)

    def say(line: str) -> None:
        if not args.quiet:
            print(f"selfbench: {line}", file=sys.stderr, flush=True)

    figures, meta, details = run_selfbench(opts, say)
    doc = document(figures, meta, details)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    print(render_table(figures))
    passed, aside = verdict(figures), unjudged(figures)
    if not passed:
        head, code = "TARGET MISSED", EXIT_TARGET_MISSED
    elif aside:
        head, code = (
            f"NOT JUDGED: {len(aside)} targeted figure(s), {aside[0].not_judged}",
            EXIT_NOT_JUDGED,
        )
    else:
        head, code = "all targets met", ExitCode.OK
    print(f"\n{head}; written to {out}")
    return int(code if args.check else ExitCode.OK)


if __name__ == "__main__":
    sys.exit(exit_code(main))
