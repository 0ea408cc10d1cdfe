"""``loopbench locust``: a Locust master and workers as subprocesses (docs/distributed.md).

Importing locust monkey-patches the importing process with gevent, so this command only
builds command lines and supervises the children (never gevent in this process).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.cli.common import (
    SCENARIO_HELP,
    add_command,
    epilog,
    examples,
    scenario_overrides,
    transports_epilog,
)
from harness.cli.run import print_outcome
from harness.cli.run_args import add_target_options, scenario_sets, target_flags
from harness.report.results import check_writable, load_run, new_run_id
from harness.run.embedded import scenario_server
from harness.run.locust_options import LOCUST_OPTIONS, locust_argv, locust_transports
from harness.run.orphans import watched_env
from harness.run.target import SHAPING_ENV, resolve_target, target_flags_to_json
from harness.wire.errors import ResultsError, UsageError
from harness.wire.exit_codes import ExitCode
from harness.wire.transports import TRANSPORTS
from harness.workload.scenario import Scenario, load_scenario

#: the locustfile, located without importing it (importing it would import locust)
LOCUSTFILE = Path(__file__).resolve().parents[1] / "locust_driver" / "locustfile.py"
DEFAULT_MASTER_PORT = 5557
#: how long children get to exit on their own once the master is done
EXIT_GRACE_S = 20.0
#: after Ctrl-C: how long the master gets to collect final reports and write the results
STOP_WAIT_S = 60.0


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "locust",
        description="Run a scenario through Locust's master/worker mode: the master hands out the "
        "scenario's rollouts, workers run them and ship HDR histograms back, and the master writes "
        "the same results folder as `loopbench run`. Without --target an embedded reference server "
        "is started. With --worker, only start workers that join a master elsewhere.",
        epilog=epilog(
            examples(
                "loopbench locust quickstart --workers 2",
                "loopbench locust quickstart --workers 2 --web",
                "loopbench locust SCENARIO --workers 4 --target http://10.0.0.7:8000/v1 --run-time 600",
                "loopbench locust --worker --master-host 10.0.0.5 --workers 4",
            ),
            transports_epilog(
                (t for t in TRANSPORTS if t.locust), "transports available under Locust"
            ),
        ),
    )
    p.add_argument("scenario", nargs="?", help=f"{SCENARIO_HELP} (master only)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local worker processes (default: 1; 0 with --remote-workers)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--headless", action="store_true", help="no web UI; run and exit (default)")
    mode.add_argument("--web", action="store_true", help="serve Locust's web UI; start from there")
    p.add_argument("--web-host", default="127.0.0.1", help="web UI address (default: 127.0.0.1)")
    p.add_argument("--web-port", type=int, default=8089, help="web UI port (default: 8089)")
    p.add_argument(
        "--target",
        help="base URL of the endpoint (Responses, Chat Completions or Anthropic Messages, as "
        "the transports need), e.g. http://10.0.0.7:8000/v1",
    )
    for opt in LOCUST_OPTIONS:
        if opt.public:
            p.add_argument(f"--{opt.name}", **opt.command_kwargs())
    p.add_argument(
        "--remote-workers",
        type=int,
        default=0,
        help="also wait for this many workers from other machines (binds --master-bind-host)",
    )
    p.add_argument("--worker", action="store_true", help="only start workers joining --master-host")
    p.add_argument("--master-host", default="127.0.0.1", help="the master to join (with --worker)")
    p.add_argument(
        "--master-bind-host",
        default=None,
        help="master address (default: 127.0.0.1, or * with --remote-workers)",
    )
    p.add_argument(
        "--master-port",
        type=int,
        default=None,
        help=f"master port (default: a free port, or {DEFAULT_MASTER_PORT} with --remote-workers/--worker)",
    )
    p.add_argument(
        "--locust-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument passed to the locust master, e.g. --locust-arg=--stop-timeout=10",
    )
    add_target_options(p)
    p.add_argument(
        "-q", "--quiet", action="store_true", help="only Locust's final summary and warnings"
    )
    p.set_defaults(func=cmd_locust)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _locust(*args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args]


def worker_command(master_host: str, master_port: int, *, quiet: bool = False) -> list[str]:
    cmd = _locust("--worker", "--master-host", master_host, "--master-port", str(master_port))
    if quiet:
        cmd += ["--loglevel", "WARNING"]
    return cmd


def master_command(
    args: argparse.Namespace,
    *,
    target: str,
    embedded: bool,
    bind_host: str,
    port: int,
    expect_workers: int,
    run_dir: Path,
    stop_file: Path | None = None,
) -> list[str]:
    cmd = _locust(
        "--master",
        "--master-bind-host",
        bind_host,
        "--master-bind-port",
        str(port),
        "--expect-workers",
        str(expect_workers),
        "-H",
        target,
        "--scenario",
        str(args.scenario),
        # Locust's own statistics land next to loopbench's (ms resolution; see docs).
        "--csv",
        str(run_dir / "locust"),
        "--html",
        str(run_dir / "locust.html"),
    )
    if args.web:
        cmd += ["--web-host", args.web_host, "--web-port", str(args.web_port)]
    else:
        cmd += ["--headless", "--expect-workers-max-wait", "120"]
    cmd += locust_argv(
        {
            **vars(args),
            "set": scenario_sets(args),
            "out": run_dir.parent,
            "run_id": run_dir.name,
            "embedded": embedded,
            "stop_file": stop_file,
        }
    )
    if args.quiet:
        cmd += ["--only-summary", "--loglevel", "WARNING"]
    cmd += list(args.locust_arg)
    return cmd


@contextlib.contextmanager
def _children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every child started inside is stopped on the way out (after a grace period: SIGTERM, SIGKILL)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        stop_children(procs)


def stop_children(procs: Sequence[subprocess.Popen[bytes]], grace_s: float = EXIT_GRACE_S) -> None:
    deadline = time.monotonic() + grace_s
    # SIGTERM, not SIGINT: children started from a non-interactive shell ignore SIGINT, and
    # Locust treats SIGTERM as a graceful quit (the master still writes the results).
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            return
        if sig is not None:
            for p in alive:
                p.send_signal(sig)
            deadline = time.monotonic() + 5.0
        for p in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))


def _interrupt(signum: int, frame: object) -> None:
    # A SIGTERM to `loopbench locust` ends the run like Ctrl-C does.
    raise KeyboardInterrupt


def cmd_locust(args: argparse.Namespace) -> int:
    if args.worker:
        return _run_workers(args)
    return _run_master(args)


def _run_workers(args: argparse.Namespace) -> int:
    if args.scenario:
        raise UsageError("loopbench locust --worker: the scenario is read by the master; drop it")
    n = 1 if args.workers is None else args.workers
    if n < 1:
        raise UsageError(f"--workers: expected at least 1 with --worker, got {n}")
    port = args.master_port or DEFAULT_MASTER_PORT
    with _children() as procs:
        for _ in range(n):
            procs.append(
                subprocess.Popen(
                    worker_command(args.master_host, port, quiet=args.quiet), env=watched_env()
                )
            )
        try:
            codes = [p.wait() for p in procs]
        except KeyboardInterrupt:
            # The workers got the same Ctrl-C and quit by themselves (telling the master).
            stop_children(procs, grace_s=10.0)
            return ExitCode.INTERRUPTED
    return max(codes, default=0)


def _check_scenario(args: argparse.Namespace) -> Scenario:
    if not args.scenario:
        raise UsageError(
            "loopbench locust: a scenario (a YAML file or a built-in name) is required, or --worker"
        )
    scenario = load_scenario(args.scenario, scenario_overrides(scenario_sets(args)))
    locust_transports(args.transports, scenario)
    if scenario.rollout.compact_at_tokens is not None:
        raise UsageError(
            f"{scenario.source}: rollout.compact_at_tokens: compaction runs under loopbench run "
            "only (the Locust edge does not compact); remove it or use loopbench run"
        )
    if scenario.rollout.subagents is not None:
        raise UsageError(
            f"{scenario.source}: rollout.subagents: sub-agents run under loopbench run only (the "
            "Locust edge runs one conversation per rollout); remove the section or use "
            "loopbench run"
        )
    return scenario


def _run_master(args: argparse.Namespace) -> int:
    scenario = _check_scenario(args)
    flags = target_flags(args)
    # Checked (and the tokenizer found) here, so a mistake exits 4 before Locust starts.
    resolve_target(scenario, flags)
    local = (0 if args.remote_workers else 1) if args.workers is None else args.workers
    if local < 0 or args.remote_workers < 0:
        raise UsageError("--workers/--remote-workers: expected non-negative counts")
    if local + args.remote_workers < 1:
        raise UsageError("--workers: expected at least one worker (local or --remote-workers)")
    if args.remote_workers and not args.target:
        raise UsageError(
            "--remote-workers: remote workers cannot reach an embedded loopback server; give --target"
        )
    bind_host = args.master_bind_host or ("*" if args.remote_workers else "127.0.0.1")
    port = args.master_port or (
        DEFAULT_MASTER_PORT if args.remote_workers else _free_port("127.0.0.1")
    )
    run_dir = Path(args.out) / (args.run_id or new_run_id(scenario.name, time.time()))
    if (run_dir / "manifest.json").exists():
        raise UsageError(f"{run_dir}: already holds a run; choose another --run-id")
    # Before the load, as `loopbench run` does: not a master traceback after it.
    check_writable(run_dir)

    with contextlib.ExitStack() as stack:
        if args.target:
            target, embedded = args.target, False
        else:
            target = stack.enter_context(scenario_server(scenario))
            embedded = True
        stop_file = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "stop"
        procs = stack.enter_context(_children())
        # Own sessions: a Ctrl-C in the terminal reaches this process only, which then ends
        # the run gracefully through the stop file (the master still writes the results).
        master = subprocess.Popen(
            master_command(
                args,
                target=target,
                embedded=embedded,
                bind_host=bind_host,
                port=port,
                expect_workers=local + args.remote_workers,
                run_dir=run_dir,
                stop_file=stop_file,
            ),
            start_new_session=True,
            # The shaping flags in the master's environment, not on its command line: a
            # header value may be a credential (a command line is readable by every user).
            env=watched_env({**os.environ, SHAPING_ENV: target_flags_to_json(flags)}),
        )
        procs.append(master)
        connect = "127.0.0.1" if bind_host in ("*", "0.0.0.0") else bind_host
        for _ in range(local):
            procs.append(
                subprocess.Popen(
                    worker_command(connect, port, quiet=args.quiet),
                    start_new_session=True,
                    env=watched_env(),
                )
            )
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            code = master.wait()
        except KeyboardInterrupt:
            print("stopping: waiting for the workers' final reports…", file=sys.stderr)
            stop_file.touch()
            with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
                master.wait(STOP_WAIT_S)
            code = ExitCode.INTERRUPTED
        finally:
            signal.signal(signal.SIGTERM, previous)
    return _report(run_dir, code)


def _report(run_dir: Path, code: int) -> int:
    if code == ExitCode.USAGE:
        return code  # the master said why in one line (a bad option, a results file unwritable)
    try:
        run = load_run(run_dir)
    except ResultsError as exc:
        print(f"error: no results: {exc}", file=sys.stderr)
        return code or ExitCode.INVALID
    if run.summary is None:
        print(f"error: {run_dir}: the run did not finish (no summary.json)", file=sys.stderr)
        return code or ExitCode.INVALID
    outcome = print_outcome(run.summary, run_dir)
    # Locust exits 1 when any request failed; loopbench reports errors in the summary instead,
    # and judges the run as `loopbench run` does. Locust's other codes are not the table's
    # (its own 2 would read as an SLO breach to CI).
    if code in (0, 1):
        return outcome
    return ExitCode.INTERRUPTED if code == ExitCode.INTERRUPTED else ExitCode.INVALID
