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
from rich.markup import escape
from rich.table import Table

from harness.cli import run_args
from harness.cli.common import (
    SCENARIO_HELP,
    add_command,
    epilog,
    examples,
    progress_printer,
    scenario_overrides,
    transports_epilog,
)
from harness.report.compare import (
    compare,
    compare_document,
    default_out_dir,
    delta_headers,
    delta_rows,
    verdict_line,
    write_comparison,
)
from harness.report.document import to_markdown
from harness.report.files import write_text_atomic
from harness.report.rebuild import needs_rebuild, rebuild_summary, rebuilt_note
from harness.report.render import render_run
from harness.report.results import Run, load_run
from harness.report.sweep import (
    is_sweep,
    load_sweep,
    parse_sweep_sets,
    search_answer_line,
    search_steps_rows,
    sweep_table,
)
from harness.report.verdict import verdict_line as run_verdict_line
from harness.run.goodput import (
    DEFAULT_MAX_STEPS,
    DEFAULT_TARGET,
    PASS_RULES,
    SearchSettings,
    check_search_scenario,
    default_param,
    run_goodput_search,
)
from harness.run.sweep import run_sweep
from harness.wire.errors import ResultsError, UsageError
from harness.wire.exit_codes import ExitCode
from harness.workload.scenario import Scenario, load_scenario


def add_parser(sub: Any) -> None:
    rep = add_command(
        sub,
        "report",
        description="Rebuild the report of a results folder from its files alone; everything "
        "is written inside that folder (report.md, report.html, plots/). A run that was killed "
        "before it wrote summary.json (kill -9) gets one rebuilt from the rows on disk, marked "
        "rebuilt, partial and invalid.",
        epilog=examples(
            "loopbench report results/20261202-110203-quickstart",
            "loopbench report results/baseline",
            "loopbench report results/baseline --server-series vllm:num_requests_waiting",
        ),
    )
    rep.add_argument("run", help="results folder, e.g. results/20261202-110203-quickstart")
    rep.add_argument(
        "--slice-s",
        type=float,
        metavar="S",
        help="rebuild slices.csv.gz and the timeline plot with slices of S seconds (default: the "
        "run's --slice-s, else automatic; docs/metrics.md, Time slices)",
    )
    rep.add_argument(
        "--server-series",
        action="append",
        default=[],
        metavar="NAME",
        help="plot this series of server_metrics.csv.gz under the latency timeline (repeatable; "
        "a counter's _total may be left off), e.g. vllm:num_requests_waiting; default: the "
        "running/waiting requests, KV-cache and prefix-cache series the run has "
        "(docs/server-metrics.md)",
    )
    rep.set_defaults(func=cmd_report)

    cmp = add_command(
        sub,
        "compare",
        description="Compare every run after the first with the first (the reference A) per "
        "transport and metric: for per-turn and per-rollout medians, Δ % of the medians with a "
        "bootstrap 95 % CI of that same ratio and a Mann-Whitney p-value (no CI and no test with "
        "fewer than 5 samples per run); other rows compare summary.json values. First it checks "
        "that the runs are comparable: same scenario (name and content, apart from its server "
        "and slo blocks, description and transports) and seed, the same transports, complete "
        "runs (not partial) that count by the rules run and gate apply (no transport failing "
        "more turns than the scenario's max_error_rate, default 5 %, a completed rollout each, "
        "starts on schedule, a healthy client). Writes compare.html (self-contained, plots inlined), compare.md with "
        "plots/, and compare.json into --out, by default a folder compare-<A>-vs-<B> beside the "
        "first run.",
        epilog=epilog(
            "exit codes: 0 compared; 3 not comparable (the reasons are printed; --force "
            "compares anyway, warns and exits 0); 4 a run folder is missing or unreadable, or "
            "fewer than two runs.",
            examples(
                "loopbench compare results/old results/new",
                "loopbench compare results/vllm results/sglang results/trt --out cmp/",
                "loopbench compare results/a results/b --force --no-html",
            ),
        ),
    )
    cmp.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="results folders: the reference (A) first, then one or more candidates (B, C, ...)",
    )
    cmp.add_argument(
        "--force",
        action="store_true",
        help="compare runs that are not comparable: print the reasons as a warning and exit 0",
    )
    cmp.add_argument(
        "--out",
        help="folder for compare.html, compare.md, compare.json and plots/ "
        "(default: <folder of the first run>/compare-<A>-vs-<B>)",
    )
    cmp.add_argument("--no-html", action="store_true", help="print the table only; write no files")
    cmp.add_argument("--md", help="also write the comparison as Markdown to this file")
    cmp.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    cmp.set_defaults(func=cmd_compare)

    sw = add_command(
        sub,
        "sweep",
        description="Run a scenario once per value of one field (e.g. --set load.concurrency=1,2,4,8) "
        "into one sweep folder; the combined report plots latency against the swept load and marks "
        "the knee.",
        epilog=epilog(
            examples(
                "loopbench sweep quickstart --set load.concurrency=1,2,4,8",
                "loopbench sweep tiny --set load.concurrency=1,4 --transports http,ws",
                "loopbench sweep many-agents --search goodput --slo ttft_ms=500 --max-load 64",
            ),
            transports_epilog(),
        ),
    )
    sw.add_argument("scenario", help=SCENARIO_HELP)
    sw.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="the swept field with its values; more --set KEY=VALUE fix other fields (with "
        "--search, every --set fixes a field)",
    )
    sw.add_argument(
        "--search",
        choices=("goodput",),
        help="goodput: instead of a list of values, find per transport the highest load whose "
        "SLO attainment stays >= --target-attainment, by doubling then bisection "
        "(docs/metrics.md §5); give the SLO with --slo or the scenario's slo:",
    )
    sw.add_argument(
        "--target-attainment",
        type=float,
        metavar="SHARE",
        help=f"--search: the share of rollouts within the SLO a load must keep (default "
        f"{DEFAULT_TARGET:g})",
    )
    sw.add_argument(
        "--search-param",
        metavar="KEY",
        help="--search: the load field (default load.concurrency for a closed loop, "
        "load.arrival.rate for an open one)",
    )
    sw.add_argument("--start", type=float, help="--search: the first load tried (default 1)")
    sw.add_argument(
        "--max-load",
        type=float,
        metavar="N",
        help="--search: the highest load tried (default 64)",
    )
    sw.add_argument(
        "--max-steps",
        type=int,
        metavar="N",
        help=f"--search: at most this many runs per transport (default {DEFAULT_MAX_STEPS})",
    )
    sw.add_argument(
        "--rollouts-per-agent",
        type=int,
        metavar="K",
        help="--search over load.concurrency: each step runs at least K rollouts per agent "
        "(rollout.count raised to K x agents; default 2)",
    )
    sw.add_argument(
        "--pass-rule",
        choices=PASS_RULES,
        help="--search: a step passes when its attainment reaches the target (point, "
        "default) or when its 95 %% interval's lower bound does (ci-lower)",
    )
    run_args.add_endpoint_options(sw)
    run_args.add_client_options(sw)
    run_args.add_live_options(sw)
    sw.add_argument("--sweep-id", help="name of the sweep folder (default: timestamp-sweep-...)")
    sw.add_argument("--baseline", help="transport the others are compared with (default: http)")
    sw.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    sw.set_defaults(func=cmd_sweep)


def cmd_report(args: argparse.Namespace) -> int:
    run_args.check_seconds(args, "slice_s")
    if args.slice_s is not None and is_sweep(args.run):
        # the sweep report does not re-render its runs: the width would be silently unused
        raise UsageError(
            f"--slice-s: re-slices one run, and {args.run} is a sweep folder; give one of its "
            "runs' folders instead"
        )
    if needs_rebuild(args.run):
        # A killed run (kill -9, power loss) left its rows and no summary: fold them into one.
        summary = rebuild_summary(args.run)
        print(rebuilt_note(summary))
        print(run_verdict_line(summary))
    rendered = render_run(args.run, args.server_series, args.slice_s)
    print(f"report: {rendered.report_html}")
    print(f"        {rendered.report_md}")
    for p in rendered.plots:
        print(f"plot:   {p}")
    return ExitCode.OK


def _load_runs(paths: list[str]) -> list[Run]:
    """The runs, or a :class:`UsageError` naming why they cannot be read (exit 4)."""
    if len(paths) < 2:
        raise UsageError(
            f"compare: expected at least two results folders (the reference first), got {len(paths)}"
        )
    runs = []
    for p in paths:
        path = Path(p)
        if not path.is_dir():
            what = "a file, not a folder" if path.exists() else "no such folder"
            raise UsageError(
                f"compare: {path}: {what}; expected a results folder written by loopbench run, "
                "e.g. results/20261202-110203-quickstart"
            )
        try:
            runs.append(load_run(path))
        except ResultsError as exc:
            raise UsageError(f"compare: {exc}") from None
    return runs


def cmd_compare(args: argparse.Namespace) -> int:
    if args.n_boot < 1:
        raise UsageError(f"compare: --n-boot: expected a positive integer, got {args.n_boot}")
    runs = _load_runs(list(args.runs))
    cmp = compare(runs, n_boot=args.n_boot)
    console = Console() if sys.stdout.isatty() else Console(width=200)
    console.print(f"[bold]Verdict:[/] {escape(verdict_line(cmp))}", highlight=False)
    if cmp.reasons:
        head = (
            "warning: not comparable (compared anyway: --force)"
            if args.force
            else ("not comparable: re-measure, or pass --force to compare anyway")
        )
        err = Console(stderr=True, width=console.width)
        err.print(f"[bold red]{head}[/]", highlight=False)
        for reason in cmp.reasons:
            err.print(f"  - {escape(reason)}", highlight=False)
        if not args.force:
            return ExitCode.INVALID
    for note in cmp.warnings:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    ref = cmp.reference
    style = {"better": "green", "worse": "bold red"}
    for cand in cmp.candidates:
        title = f"{cand.label} = {cand.run.run_id}  vs  {ref.label} = {ref.run.run_id} (reference)"
        table = Table(title=title, title_justify="left")
        for i, h in enumerate(delta_headers(ref.label, cand.label)):
            table.add_column(h, justify="left" if i in (0, 1, 7) else "right")
        for row in delta_rows(cmp.deltas[cand.label]):
            verdict = row[-1]
            shown = f"[{style[verdict]}]{verdict}[/]" if verdict in style else escape(verdict)
            table.add_row(*(escape(c) for c in row[:-1]), shown)
        console.print(table)
    if args.md:
        write_text_atomic(Path(args.md), to_markdown(compare_document(cmp)))
        console.print(f"markdown: {args.md}")
    if not args.no_html:
        out = Path(args.out) if args.out else default_out_dir(cmp)
        md, page = write_comparison(cmp, out, n_boot=args.n_boot)
        console.print(f"report: {page}", highlight=False)
        console.print(f"        {md}", highlight=False)
    return ExitCode.OK


def cmd_sweep(args: argparse.Namespace) -> int:
    run_args.check_sweep_args(args)
    if args.search is not None:
        return _cmd_goodput_search(args)
    args.set = run_args.scenario_sets(args)
    key, values, fixed = parse_sweep_sets(args.set)
    # target: is not swept: the first variant's section shapes every run
    first = load_scenario(args.scenario, {**fixed, key: values[0]})
    result = _measure(args, first, run_sweep, args.set)
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
    return _sweep_done(result)


def _cmd_goodput_search(args: argparse.Namespace) -> int:
    sets = run_args.scenario_sets(args)
    fixed = scenario_overrides(sets) or {}
    base = load_scenario(args.scenario, fixed)
    param = args.search_param or default_param(base)
    check_search_scenario(base, param, args.scenario)
    settings = SearchSettings(
        param=param,
        target=args.target_attainment,
        start=args.start,
        max_load=args.max_load,
        max_steps=args.max_steps,
        pass_rule=args.pass_rule,
        rollouts_per_agent=args.rollouts_per_agent,
    )
    result = _measure(args, base, run_goodput_search, fixed, settings)
    doc = load_sweep(result.path)
    headers, rows = search_steps_rows(doc)
    console = Console() if sys.stdout.isatty() else Console(width=200)
    table = Table(title="goodput search steps", title_justify="left")
    for h in headers:
        table.add_column(h)
    for row in rows:
        table.add_row(*(escape(c) for c in row))
    console.print(table)
    print(search_answer_line(doc))
    return _sweep_done(result)


def _measure(args: argparse.Namespace, scenario: Scenario, start: Any, *head: Any) -> Any:
    """Run a sweep or a search (``start``) with the options all of its runs share (``scenario``'s
    ``target:`` shapes them all), serving live metrics while it runs if asked."""
    opts = run_args.run_options(args, scenario)
    with run_args.live_export(args) as opts.live:
        return start(
            str(args.scenario),
            *head,
            opts,
            sweep_id=args.sweep_id,
            printer=progress_printer(args.quiet),
            announce=lambda s: print(s, file=sys.stderr, flush=True),
        )


def _sweep_done(result: Any) -> int:
    """The last lines of a sweep or a search: its combined report and its folder."""
    if result.rendered is not None:
        print(f"report: {result.rendered.report_html}")
    print(f"sweep: {result.path}")
    return ExitCode.OK
