"""The ``loopbench`` command line.  Thin: parse, call, print; heavy imports inside subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.cli.summary_table import print_summary
from harness.wire.errors import LoopbenchError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 4


def cmd_run(args: argparse.Namespace) -> int:
    import os

    from harness.run.runner import RunOptions, run_scenario
    from harness.wire.transports import TRANSPORT_NAMES
    from harness.workload.scenario import load_scenario

    overrides = dict(_parse_sets(args.set))
    scenario = load_scenario(args.scenario, overrides or None)
    transports = [t.strip() for t in args.transports.split(",")] if args.transports else None
    for t in transports or []:
        if t not in TRANSPORT_NAMES:
            raise LoopbenchError(
                f"--transports: unknown transport {t!r}; expected some of {', '.join(TRANSPORT_NAMES)}"
            )
    if not args.request_timeout_s > 0:
        raise LoopbenchError(
            f"--request-timeout-s: expected a positive number of seconds, got {args.request_timeout_s}"
        )
    api_key = "sk-loopbench"
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env, "")
        if not api_key:
            raise LoopbenchError(
                f"--api-key-env: environment variable {args.api_key_env} is not set or empty"
            )
    opts = RunOptions(
        transports=transports,
        target=args.target,
        api_key=api_key,
        results_root=Path(args.out),
        run_id=args.run_id,
        keepalive=not args.no_keepalive,
        verify_tls=not args.insecure,
        baseline=args.baseline,
        hints=not args.no_hints,
        request_timeout_s=args.request_timeout_s,
    )
    from harness.run.progress import make_progress

    # A live table on a terminal; plain lines every few seconds in logs.
    progress = make_progress(sys.stderr, quiet=args.quiet)
    _sigterm_as_sigint()
    if args.procs > 1:
        from harness.run.procs import run_procs

        result = run_procs(
            scenario, str(args.scenario), opts, args.procs, say=lambda m: print(m, file=sys.stderr)
        )
    else:
        result = run_scenario(scenario, str(args.scenario), opts, progress=progress)
    print_summary(result.summary, result.run_dir)
    return EXIT_OK


def _sigterm_as_sigint() -> None:
    """SIGTERM stops a run the way Ctrl-C does: records flushed, summary marked partial."""
    import signal

    # asyncio's runner turns SIGINT into a cancellation of the run, which the runner
    # catches to finish writing; without this SIGTERM would kill the process mid-write.
    signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))


def _parse_sets(items: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LoopbenchError(f"--set {item!r}: expected KEY=VALUE, e.g. load.concurrency=4")
        out.append((key.strip(), value.strip()))
    return out


def cmd_serve(args: argparse.Namespace) -> int:
    from reference_server.serve import config_from_args, serve

    serve(config_from_args(args))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from harness.workload.rollout import load_scenario_trace
    from harness.workload.scenario import load_scenario

    failed = 0
    for path in args.files:
        try:
            # A replayed trace is part of the scenario: check it resolves and parses too.
            load_scenario_trace(load_scenario(path))
            print(f"{path}: ok")
        except LoopbenchError as exc:
            failed += 1
            print(str(exc), file=sys.stderr)
    return EXIT_ERROR if failed else EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from harness.workload.scenario import scenario_json_schema

    print(json.dumps(scenario_json_schema(), indent=2))
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from harness.workload.importers import import_sessions

    report = import_sessions(args.format, args.paths, args.output)
    print(report)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    from reference_server.serve import add_server_arguments

    parser = argparse.ArgumentParser(
        prog="loopbench",
        description="Latency benchmarking and load testing for agentic LLM workloads over the Responses API "
        "(HTTP+SSE vs WebSocket mode).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="replay a scenario's rollouts over each transport and report",
        description="Replay the same seeded rollouts over each transport. Without --target, an embedded "
        "reference server is started on a free loopback port and stopped afterwards.",
    )
    run.add_argument("scenario", help="scenario YAML file (see scenarios/)")
    run.add_argument(
        "--transports", help="comma-separated transports (default: the scenario's), e.g. http,ws"
    )
    run.add_argument(
        "--target", help="base URL of a Responses endpoint, e.g. http://127.0.0.1:8000/v1"
    )
    run.add_argument(
        "--api-key-env", help="name of the environment variable holding the API key for --target"
    )
    run.add_argument("--out", default="results", help="results root folder (default: results/)")
    run.add_argument("--run-id", help="name of the run folder (default: timestamp-scenario)")
    run.add_argument("--baseline", help="transport the others are compared with (default: http)")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. load.concurrency=4",
    )
    run.add_argument(
        "--no-keepalive", action="store_true", help="HTTP: open a new connection for every request"
    )
    run.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    run.add_argument(
        "--no-hints",
        action="store_true",
        help="send no loopbench.* metadata hints (as a real endpoint would be driven; output "
        "length is then bounded by max_output_tokens only)",
    )
    run.add_argument(
        "--request-timeout-s",
        type=float,
        default=120.0,
        help="a response silent for this long is abandoned as an error of kind timeout",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    run.add_argument(
        "--procs",
        type=int,
        default=1,
        help="client processes (rollouts split among them, histograms merged); the embedded "
        "server gets as many workers (default 1; see BENCHMARKS.md)",
    )
    run.set_defaults(func=cmd_run)

    serve = sub.add_parser(
        "serve",
        help="run the reference server in the foreground",
        description="Run the reference Responses API server (HTTP+SSE and WebSocket on /v1/responses).",
    )
    add_server_arguments(serve)
    serve.set_defaults(func=cmd_serve)

    val = sub.add_parser("validate", help="check scenario files and print precise errors")
    val.add_argument("files", nargs="+")
    val.set_defaults(func=cmd_validate)

    schema = sub.add_parser("schema", help="print the scenario JSON Schema (for editor completion)")
    schema.set_defaults(func=cmd_schema)

    from harness.cli.gate import add_gate_parser

    add_gate_parser(sub)

    imp = sub.add_parser(
        "import",
        help="turn recorded agent sessions into a replayable trace (docs/traces.md)",
        description="Read recorded sessions and write a loopbench JSONL trace that a scenario "
        "replays with `rollout.trace: FILE`.",
    )
    imp.add_argument("format", choices=["codex"], help="session format: codex (Codex CLI rollouts)")
    imp.add_argument(
        "paths",
        nargs="+",
        help="session files, or folders searched for *.jsonl (e.g. ~/.codex/sessions)",
    )
    imp.add_argument(
        "-o",
        "--output",
        required=True,
        help="trace file to write, e.g. scenarios/traces/NAME.jsonl",
    )
    imp.set_defaults(func=cmd_import)

    from harness.cli.report import add_report_commands

    add_report_commands(sub)

    from harness.cli.model import add_model_commands

    add_model_commands(sub)

    from harness.cli.locust import add_locust_parser

    add_locust_parser(sub)

    from harness.cli.selfbench import add_selfbench_parser

    add_selfbench_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        sys.exit(EXIT_USAGE)
    try:
        code = args.func(args)
    except LoopbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
