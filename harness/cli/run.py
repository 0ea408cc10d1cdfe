"""``loopbench run``: replay a scenario over each transport and print the summary."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.cli.common import SCENARIO_HELP, add_command, epilog, examples, transports_epilog
from harness.cli.run_args import (
    add_client_options,
    add_endpoint_options,
    add_live_options,
    check_run_args,
    check_server_profiles,
    live_export,
    run_options,
    run_scenario_of,
    shaping_line,
)
from harness.cli.summary_table import print_summary
from harness.metrics.results_model import Summary, as_summary
from harness.report.error_summary import error_lines
from harness.run.locust_options import NO_REPORT_HELP
from harness.run.probe import DEFAULT_TIMEOUT_S as PROBE_TIMEOUT_S
from harness.run.probe import probe_for_run
from harness.run.procs import run_procs
from harness.run.progress import make_progress
from harness.run.runner import run_scenario
from harness.wire.exit_codes import ExitCode
from harness.wire.stop_signal import sigterm_as_sigint
from harness.workload.rollout import scenario_trace_gaps


def add_parser(sub: Any) -> None:
    run = add_command(
        sub,
        "run",
        description="Replay the same seeded rollouts over each transport. Without --target, an embedded "
        "reference server is started on a free loopback port and stopped afterwards.",
        epilog=epilog(
            examples(
                "loopbench run quickstart",
                "loopbench run tiny --transports http,ws --run-id try1",
                "loopbench run quickstart --set load.concurrency=4",
                "loopbench run traces/mine.jsonl   # a trace: open loop at its recorded starts",
                "loopbench run quickstart "
                "--target https://api.example.com/v1 --api-key-env OPENAI_API_KEY",
            ),
            transports_epilog(),
        ),
    )
    run.add_argument(
        "scenario",
        help=f"{SCENARIO_HELP}, or a trace file (*.jsonl): replayed at its recorded starts, "
        "--set load.mode=closed for a closed loop (docs/traces.md)",
    )
    add_endpoint_options(run)
    run.add_argument("--run-id", help="name of the run folder (default: timestamp-scenario)")
    run.add_argument(
        "--baseline",
        help="transport the others are compared with (default: the first of the run's "
        "transports in the order http, chat, messages, http-chained, ws, ws-store, ws-append)",
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. load.concurrency=4",
    )
    run.add_argument(
        "--no-probe",
        action="store_true",
        help="with --target: measure without first checking that the endpoint supports the "
        "transports (see loopbench probe)",
    )
    run.add_argument(
        "--probe-timeout-s",
        type=float,
        default=PROBE_TIMEOUT_S,
        metavar="S",
        help="with --target: seconds each check of that probe may take (connect, one request, "
        f"one WebSocket exchange; default {PROBE_TIMEOUT_S:g})",
    )
    add_client_options(run)
    run.add_argument(
        "--tls",
        action="store_true",
        help="start the embedded server with --tls-self-signed and measure over https:// and "
        "wss:// (the TLS handshake of each new connection is timed: tls_ms); its certificate is "
        "not verified, as the run made it. Not with --target: give an https:// URL there",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    run.add_argument("--no-report", action="store_true", help=NO_REPORT_HELP)
    run.add_argument(
        "--procs",
        type=int,
        default=1,
        help="client processes (rollouts split among them, histograms merged); the embedded "
        "server gets as many workers (default 1; see BENCHMARKS.md)",
    )
    add_live_options(run)
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    check_run_args(args)
    scenario = run_scenario_of(args)
    if not args.target:
        check_server_profiles(scenario, args.scenario)
    opts = run_options(args, scenario, run_id=args.run_id, render=not args.no_report)
    line = shaping_line(opts.client.shaping, opts.tokens)
    if line and not args.quiet:
        print(line, file=sys.stderr)
    if args.tls:
        # The run makes the certificate, so there is nothing to verify it against.
        opts.server_args = [*opts.server_args, "--tls-self-signed"]
        opts.client = replace(opts.client, verify_tls=False)
    refused = probe_for_run(
        args.target,
        opts.transports or scenario.transports,
        api_key=opts.client.api_key,
        verify_tls=opts.client.verify_tls,
        model=scenario.model,
        enabled=not args.no_probe,
        say=lambda m: print(m, file=sys.stderr),
        progress=None if args.quiet else lambda m: print(m, file=sys.stderr, flush=True),
        timeout_s=args.probe_timeout_s,
        compaction=scenario.rollout.compact_at_tokens is not None,
        shaping=opts.client.shaping,
    )
    if refused is not None:
        return refused
    for why in scenario_trace_gaps(scenario)[:1]:
        print(
            f"warning: rollout.trace {scenario.rollout.trace}: its recording missed exchanges "
            f"({why}); this run replays only what was recorded (summary: load.trace_lost)",
            file=sys.stderr,
        )
    # A live table on a terminal; plain lines every few seconds in logs.
    progress = make_progress(sys.stderr, quiet=args.quiet)
    sigterm_as_sigint()
    if args.procs > 1:
        result = run_procs(
            scenario, str(args.scenario), opts, args.procs, say=lambda m: print(m, file=sys.stderr)
        )
    else:
        with live_export(args) as opts.live:
            result = run_scenario(scenario, str(args.scenario), opts, progress=progress)
    return print_outcome(result.summary, result.run_dir)


def print_outcome(summary: dict[str, Any], run_dir: Path) -> int:
    """The console's account of a finished run (docs/reliability.md quotes its first line);
    returns the exit code."""
    code, line = run_outcome(summary)
    if code != ExitCode.OK:
        # a valid run's first line is the summary's verdict line
        print(line)
    print_summary(summary, run_dir, reasons_said=code == ExitCode.INVALID)
    for err in error_lines(summary):
        print(err)
    return code


def not_run_text(doc: Summary | Mapping[str, Any]) -> str:
    """``never ran: transport ws; rollouts http 3`` (empty when everything ran)."""
    summary = as_summary(doc)
    not_run = summary.not_run if summary is not None else None
    if not_run is None:
        return ""
    parts = []
    if not_run.transports:
        parts.append("transports " + ", ".join(not_run.transports))
    if not_run.rollouts:
        parts.append("rollouts " + ", ".join(f"{name} {n}" for name, n in not_run.rollouts.items()))
    text = "never ran: " + "; ".join(parts) if parts else ""
    if not_run.cancelled:
        cut = ", ".join(f"{name} {n}" for name, n in not_run.cancelled.items())
        text += ("; " if text else "") + f"cut off mid-rollout: {cut}"
    return text


def run_outcome(doc: Summary | Mapping[str, Any]) -> tuple[int, str]:
    """The exit code of a finished run and the console's first line, which says why.

    Interrupted beats invalid (an interrupted run is invalid too, and 130 is what a shell
    expects after Ctrl-C); an invalid run exits 3 so that a CI job re-measures.
    """
    summary = as_summary(doc)
    assert summary is not None
    if summary.interrupted:
        rest = not_run_text(summary)
        return ExitCode.INTERRUPTED, "run interrupted: partial results written" + (
            f"; {rest}" if rest else ""
        )
    if summary.valid is False:
        # every reason, here only: the summary after it does not repeat them
        reasons = summary.invalid_reasons
        return ExitCode.INVALID, "run INVALID: " + ("; ".join(reasons) or "no reason recorded")
    return ExitCode.OK, "run valid"
