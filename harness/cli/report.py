"""``loopbench report``, ``compare`` and ``sweep``: reports of results folders, and load sweeps.

Under cli/, not harness/report/, because ``sweep`` starts runs and reports never import
the runner.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.cli import run_args
from harness.cli.common import EXIT_OK, HelpFormatter, parse_transports, transports_epilog
from harness.report.compare import DELTA_HEADERS, compare_document, compare_runs, delta_rows
from harness.report.document import to_markdown
from harness.report.files import write_text_atomic
from harness.report.render import render_run
from harness.report.results import load_run
from harness.report.sweep import sweep_table
from harness.run.runner import RunOptions
from harness.run.sweep import run_sweep
from harness.wire.errors import ResultsError


def add_parser(sub: Any) -> None:
    rep = sub.add_parser(
        "report",
        help="(re)render report.md, report.html and plots/ of a run or sweep folder",
        description="Rebuild the report of a results folder from its files alone.",
    )
    rep.add_argument("run", help="results folder, e.g. results/20261202-110203-quickstart")
    rep.set_defaults(func=cmd_report)

    cmp = sub.add_parser(
        "compare",
        help="metric deltas between two runs, with significance",
        description="Compare run B with run A per transport and metric: deltas, Mann-Whitney "
        "p-values and bootstrap CIs of the median ratio on the per-turn/per-rollout samples. "
        "Always exits 0 (use a gate for pass/fail).",
    )
    cmp.add_argument("run_a", help="baseline results folder (A)")
    cmp.add_argument("run_b", help="candidate results folder (B)")
    cmp.add_argument("--md", help="also write the comparison as Markdown to this file")
    cmp.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    cmp.set_defaults(func=cmd_compare)

    sw = sub.add_parser(
        "sweep",
        help="one run per value of a scenario field, and a combined report with the knee",
        description="Run a scenario once per value of one field (e.g. --set load.concurrency=1,2,4,8) "
        "into one sweep folder; the combined report plots latency against the swept load and marks "
        "the knee.",
        epilog=transports_epilog(),
        formatter_class=HelpFormatter,
    )
    sw.add_argument("scenario", help="scenario YAML file")
    sw.add_argument(
        "--set",
        action="append",
        default=[],
        required=True,
        metavar="KEY=V1,V2,...",
        help="the swept field with its values; more --set KEY=VALUE fix other fields",
    )
    sw.add_argument("--transports", help="comma-separated transports (default: the scenario's)")
    sw.add_argument("--target", help="base URL of a Responses endpoint (default: embedded server)")
    run_args.add_client_options(sw)
    sw.add_argument("--out", default="results", help="results root folder (default: results/)")
    sw.add_argument("--sweep-id", help="name of the sweep folder (default: timestamp-sweep-...)")
    sw.add_argument("--baseline", help="transport the others are compared with (default: http)")
    sw.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    sw.set_defaults(func=cmd_sweep)


def cmd_report(args: argparse.Namespace) -> int:
    rendered = render_run(args.run)
    print(f"report: {rendered.report_html}")
    print(f"        {rendered.report_md}")
    for p in rendered.plots:
        print(f"plot:   {p}")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    a, b = load_run(args.run_a), load_run(args.run_b)
    try:
        deltas = compare_runs(a, b, n_boot=args.n_boot)
    except ValueError as exc:
        raise ResultsError(str(exc)) from None
    console = Console() if sys.stdout.isatty() else Console(width=180)
    table = Table(title=f"compare: A={a.run_id}  B={b.run_id}", title_justify="left")
    for i, h in enumerate(DELTA_HEADERS):
        table.add_column(h, justify="left" if i in (0, 1, 8) else "right")
    style = {"better": "green", "worse": "bold red"}
    for row in delta_rows(deltas):
        verdict = row[-1]
        table.add_row(*row[:-1], f"[{style[verdict]}]{verdict}[/]" if verdict in style else verdict)
    console.print(table)
    if not deltas:
        console.print("no transport in common: nothing to compare")
    if args.md:
        write_text_atomic(Path(args.md), to_markdown(compare_document(a, b, deltas)))
        console.print(f"markdown: {args.md}")
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    run_args.check_sweep_args(args)
    opts = RunOptions(
        transports=parse_transports(args.transports),
        target=args.target,
        results_root=Path(args.out),
        baseline=args.baseline,
        **run_args.client_run_options(args),
    )
    quiet = args.quiet

    def printer(line: str) -> None:
        if not quiet:
            print(line.rstrip("\n"), file=sys.stderr, flush=True)

    result = run_sweep(
        str(args.scenario),
        args.set,
        opts,
        sweep_id=args.sweep_id,
        printer=printer,
        announce=lambda s: print(s, file=sys.stderr, flush=True),
    )
    table = sweep_table(result.path)
    if not table.empty:
        cols = [
            "value",
            "transport",
            "rollout_p50_ms",
            "rollout_p99_ms",
            "ttft_p50_ms",
            "rollouts_per_s",
        ]
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    if result.rendered is not None:
        print(f"report: {result.rendered.report_html}")
    print(f"sweep: {result.path}")
    return EXIT_OK
