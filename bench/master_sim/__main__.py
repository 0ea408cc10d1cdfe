"""``python -m bench.master_sim`` (``make bench-master``): one master, many fake workers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.entry import exit_code
from bench.master_sim.figures import render, verdict
from bench.master_sim.sim import SimOptions, run_sim
from harness.wire.exit_codes import UsageParser


def build_parser() -> UsageParser:
    p = UsageParser(
        prog="python -m bench.master_sim",
        description="Run a real loopbench Locust master against fake workers (Locust's worker "
        "protocol over zmq, loopbench's report messages at the real interval and size) and "
        "measure the master: CPU, time to handle each report, report lag, rows written, the "
        "finals' HDR merges, plan generation. See docs/distributed.md.",
    )
    p.add_argument("--workers", type=int, default=64, help="fake workers (default 64)")
    p.add_argument("--agents", type=int, default=150, help="agents per fake worker (default 150)")
    p.add_argument("--seconds", type=float, default=20.0, help="load after the ramp (default 20)")
    p.add_argument("--procs", type=int, default=4, help="processes the fake workers share")
    p.add_argument("--turn-rate", type=float, default=1.0, help="turns a second per agent")
    p.add_argument("--out", default="results/master-sim.json", help="JSON file to write")
    p.add_argument("--keep", default="", help="keep the logs and results folder here")
    p.add_argument(
        "--check",
        action="store_true",
        help="judge whether the master kept up (report lag p99 <= 500 ms): exit 2 when it fell "
        "behind on a quiet machine, 3 when the machine was too busy to judge",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    opts = SimOptions(args.workers, args.agents, args.seconds, args.procs, args.turn_rate)

    def body() -> int:
        print(
            f"master-sim: {opts.workers} fake workers × {opts.agents} agents in "
            f"{opts.procs} processes, {opts.seconds:g} s after the ramp",
            flush=True,
        )
        fig = run_sim(opts, Path(args.keep) if args.keep else None)
        print(render(fig))
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(fig, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
        code, why = verdict(fig, check=args.check)
        if why:
            print(why)
        return code

    return exit_code(body)


if __name__ == "__main__":
    sys.exit(main())
