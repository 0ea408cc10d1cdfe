"""One Locust worker process, two versions side by side in one run: the same agent counts,
alternating, against one reference server (a shared machine slows both alike).

    python -m bench.selfbench.locust_side_by_side --old /path/to/old/checkout --agents 150,600

``--old`` is a checkout (or ``git archive`` of one) whose ``harness`` the "old" worker
runs; "new" is this checkout; ``--with-run`` adds ``loopbench run`` (the agents-per-core step, in
this process on the client core) at each count.  Prints one line per step and a table; ``--json`` keeps
every step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from bench.selfbench.agents import AgentsOptions, _cores, agents_server, run_step
from bench.selfbench.locust_agents import ROOT, run_locust_step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.selfbench.locust_side_by_side")
    p.add_argument("--old", type=Path, required=True, help="the checkout of the old worker")
    p.add_argument("--agents", default="150,300,600,1000", help="comma-separated agent counts")
    p.add_argument("--transport", default="ws")
    p.add_argument("--seconds", type=float, default=10.0, help="steady seconds per step")
    p.add_argument("--json", type=Path, help="write every step here")
    p.add_argument("--reps", type=int, default=1, help="rounds of (old, new[, run]) per count")
    p.add_argument(
        "--with-run", action="store_true", help="also loopbench run at each count (this process)"
    )
    args = p.parse_args(argv)
    opts = dataclasses.replace(
        AgentsOptions(), transports=(args.transport,), step_seconds=args.seconds
    )
    cores = _cores() if opts.pin else None
    rows = []
    with agents_server(opts) as (url, pid, facts):
        for n, _ in ((int(x), r) for x in args.agents.split(",") for r in range(args.reps)):
            for edge, root in (("old", args.old.resolve()), ("new", ROOT), ("run", None)):
                if root is None:
                    if not args.with_run:
                        continue
                    step = run_step(url, opts, args.transport, n, pid)
                else:
                    step = run_locust_step(
                        url, opts, args.transport, n, pid, root=root, cores=cores
                    )
                rows.append((edge, step))
                print(
                    f"{edge} {n} agents: {step.metric} p50 {step.error_p50_ms} p99 "
                    f"{step.error_p99_ms} ms, {'valid' if step.valid else 'invalid'}, "
                    f"{step.turns_per_s} turns/s, worker CPU {step.client_cpu_share:.0%}, "
                    f"loop lag p99 {step.loop_lag_p99_ms} ms -> "
                    f"{'pass' if step.passed else 'fail'}",
                    flush=True,
                )
    print("\n| agents | edge | client error p50 / p99 ms | turns/s | worker CPU | valid | pass |")
    print("|---:|---|---|---:|---:|---|---|")
    for edge, s in rows:
        print(
            f"| {s.agents} | {edge} | {s.error_p50_ms} / {s.error_p99_ms} | {s.turns_per_s} "
            f"| {s.client_cpu_share:.0%} | {s.valid} | {s.passed} |"
        )
    if args.json:
        doc = {"placement": facts, "steps": [{"edge": e, **s.as_dict()} for e, s in rows]}
        args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
