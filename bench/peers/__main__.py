"""``python -m bench.peers``: the peer bench (``make bench-peers``); docs/peers.md."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.cli_args import add_check_and_quiet, names_of, positive_ints
from bench.peers.bench import MORE_TRANSPORTS, TOOLS, PeersOptions, run_peers
from bench.peers.figures import render_section, render_table, replace_section
from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import ExitCode, UsageParser


def main(argv: Sequence[str] | None = None) -> int:
    p = UsageParser(
        prog="python -m bench.peers",
        description="loopbench, guidellm and aiperf side by side against one reference server: "
        "each request's measured TTFT matched to the TTFT the server modelled (docs/peers.md).",
    )
    p.add_argument("--out", type=Path, default=Path("results/peers.json"), help="JSON to write")
    p.add_argument(
        "--artifacts",
        type=Path,
        default=None,
        help="folder for each run's files and the server's timing log (default: next to --out)",
    )
    p.add_argument(
        "--peers-venv",
        type=Path,
        default=Path(".venv-peers"),
        help="virtualenv holding guidellm and aiperf (default .venv-peers; make bench-peers "
        "creates it)",
    )
    p.add_argument(
        "--levels",
        type=positive_ints("stream counts like 1,16,64"),
        default=None,
        help="stream counts (default 1,16,64)",
    )
    p.add_argument(
        "--tools", type=names_of(TOOLS), default=TOOLS, help="default: loopbench,guidellm,aiperf"
    )
    p.add_argument(
        "--no-ws", action="store_true", help="skip loopbench over ws and http (information only)"
    )
    p.add_argument(
        "--no-locust", action="store_true", help="skip loopbench chat through loopbench locust"
    )
    p.add_argument("--quick", action="store_true", help="1 and 4 streams, few requests (tests)")
    p.add_argument(
        "--benchmarks",
        type=Path,
        default=None,
        help="also write the table into this file between <!-- peers:begin --> and "
        "<!-- peers:end --> (make bench-peers: BENCHMARKS.md)",
    )
    add_check_and_quiet(
        p,
        f"exit {int(ExitCode.SLO_BREACH)} when the target is missed, "
        f"{int(ExitCode.INVALID)} when it could not be judged (a side missing, the machine busy)",
    )
    args = p.parse_args(argv)

    artifacts = args.artifacts or args.out.with_suffix("")
    base = PeersOptions.quick if args.quick else PeersOptions
    opts = base(
        tools=args.tools,
        more_transports=() if args.no_ws else MORE_TRANSPORTS,
        locust=not args.no_locust,
        peers_venv=args.peers_venv,
        artifacts=artifacts,
    )
    if args.levels:
        opts = PeersOptions(
            **{**{f: getattr(opts, f) for f in opts.__dataclass_fields__}, "levels": args.levels}
        )

    def say(line: str) -> None:
        if not args.quiet:
            print(f"peers: {line}", file=sys.stderr, flush=True)

    if args.benchmarks is not None and not args.benchmarks.exists():
        print(f"error: --benchmarks {args.benchmarks}: no such file", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        doc = run_peers(opts, say)
    except LoopbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(ExitCode.INVALID)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(render_table(doc["runs"]))
    print()
    print(f"target: {doc['target']['text']}")
    print(f"precision target: {doc['precision_target']['text']}")
    print(f"CPU steal over the run: {doc['machine']['cpu_steal_pct']} %; results: {args.out}")
    if args.benchmarks is not None:
        text = args.benchmarks.read_text()
        try:
            args.benchmarks.write_text(replace_section(text, render_section(doc)))
        except ValueError as exc:
            print(f"error: --benchmarks {args.benchmarks}: {exc}", file=sys.stderr)
            return int(ExitCode.USAGE)
        print(f"table written into {args.benchmarks}")
    passed = doc["passed"]
    if args.check and passed is False:
        return int(ExitCode.SLO_BREACH)
    if args.check and passed is None:
        return int(ExitCode.INVALID)
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
