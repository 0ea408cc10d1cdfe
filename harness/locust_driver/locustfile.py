"""The loopbench locustfile: agents that replay scenario rollouts, plus the scenario's load shape.

Run it through ``loopbench locust`` (which starts the master, the workers and,
without ``--host``, the reference server), or directly::

    locust -f harness/locust_driver/locustfile.py --master --headless \\
        --scenario quickstart -H http://127.0.0.1:8000/v1
    locust -f harness/locust_driver/locustfile.py --worker --master-host 10.0.0.5

Importing this module imports locust, which monkey-patches the process with
gevent: nothing in loopbench imports it (tests/test_architecture.py checks).
"""

from __future__ import annotations

import logging
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

import gevent
import locust
from locust import LoadTestShape, User, argument_parser, constant, events, task
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, Runner, WorkerRunner

from harness.client.options import ClientSettings
from harness.locust_driver.clock import now_ns
from harness.locust_driver.edge import EdgeChild, EdgeGone
from harness.locust_driver.master import QUIT_WAIT_S, MasterOptions, MasterSide
from harness.locust_driver.protocol import (
    MSG_CLAIM,
    MSG_FINAL,
    MSG_HELLO,
    MSG_ROWS,
    MSG_WORK,
    RUN_OPTION,
    VersionMismatch,
)
from harness.locust_driver.worker import WorkerSide
from harness.metrics.results_model import as_summary
from harness.run.locust_options import LOCUST_OPTIONS, locust_transports
from harness.run.orphans import watched_parent
from harness.run.target import (
    SHAPING_ENV,
    resolve_target,
    target_flags_from_json,
    tokenizer_file,
)
from harness.wire.errors import LoopbenchError, UsageError
from harness.wire.exit_codes import ExitCode
from harness.wire.pairs import parse_key_values
from harness.workload.records import RolloutRecord
from harness.workload.scenario import load_scenario

log = logging.getLogger("loopbench.locust")

_master: MasterSide | None = None
_worker: WorkerSide | None = None
#: a worker's edge host, started while this process still imports and connects: the child
#: imports the asyncio edge meanwhile (seconds on a busy machine) instead of after.  Not with
#: Locust's --processes, whose forked workers would share its pipes: each starts its own.
_early_edge = (
    EdgeChild()
    if "--worker" in sys.argv and not any("--processes" in a for a in sys.argv)
    else None
)
#: how often the master looks for missing workers, and every process for a dead parent
WATCH_INTERVAL_S = 0.25
#: an orphaned master exits by itself this long after its results are written
ORPHAN_EXIT_S = 5.0
#: a worker that refuses the master's version quits this long after saying so to it
REFUSE_QUIT_S = 1.0


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--scenario",
        env_var="LOOPBENCH_SCENARIO",
        default="",
        help="loopbench scenario YAML (read by the master only)",
    )
    for opt in LOCUST_OPTIONS:
        parser.add_argument(opt.flag, **opt.locust_kwargs())


def _fail(message: str) -> NoReturn:
    # The same code as loopbench's own usage errors: under Locust's own CLI, 2 would read as an
    # SLO breach to a CI script.
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(ExitCode.USAGE)


def _master_options(environment: Environment) -> MasterOptions:
    opts = environment.parsed_options
    assert opts is not None
    if not opts.scenario:
        _fail("--scenario (or LOOPBENCH_SCENARIO): a scenario file is required on the master")
    if not environment.host:
        _fail("--host: the target base URL is required, e.g. http://127.0.0.1:8000/v1")
    try:
        overrides = parse_key_values(
            opts.loopbench_set,
            lambda item: UsageError(
                f"--loopbench-set {item!r}: expected KEY=VALUE, e.g. load.concurrency=4"
            ),
        )
        scenario = load_scenario(opts.scenario, overrides or None)
        transports = locust_transports(opts.transports, scenario)
        flags = target_flags_from_json(os.environ.get(SHAPING_ENV, ""))
        shaping, _ = resolve_target(scenario, flags)
        tokenizer = tokenizer_file(scenario, flags)
    except LoopbenchError as exc:
        _fail(str(exc))
    return MasterOptions(
        scenario=scenario,
        scenario_path=str(opts.scenario),
        transports=transports,
        target=str(environment.host),
        embedded=bool(opts.loopbench_embedded),
        results_root=Path(opts.loopbench_out),
        run_id=opts.loopbench_run_id or None,
        time_limit_s=opts.loopbench_run_time or None,
        client=ClientSettings(
            keepalive=not opts.loopbench_no_keepalive,
            verify_tls=not opts.loopbench_insecure,
            hints=not opts.loopbench_no_hints,
            shaping=shaping,
        ),
        api_key_env=opts.loopbench_api_key_env,
        render=not opts.loopbench_no_report,
        tokenizer=str(tokenizer[1]) if tokenizer is not None else "",
        extra_manifest={
            "version": locust.__version__,
            "expect_workers": getattr(opts, "expect_workers", None),
        },
    )


@events.init.add_listener
def _on_init(environment: Environment, **_kw: Any) -> None:
    global _master, _worker
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        # Locust 2.47's worker evaluates default_args_dict() - a whole argument parser built
        # from scratch - once per option of every spawn message: 0.3-0.5 s with the event loop
        # blocked, which delays every timer and read of the worker (schedule lag, inflated
        # tool time).  Its result is constant within a process, so it is computed once.
        argument_parser.default_args_dict = cache(argument_parser.default_args_dict)
    if isinstance(runner, WorkerRunner | LocalRunner):
        worker = _worker = WorkerSide(runner.send_message, environment.events.request.fire)
        edge = worker.edge = _early_edge or EdgeChild()
        edge.on_turn, edge.on_gone = worker.on_turn, _edge_gone
        runner.register_message(MSG_WORK, lambda environment, msg, **kw: worker.on_work(msg.data))
    if isinstance(runner, MasterRunner | LocalRunner):
        master = _master = MasterSide(_master_options(environment), runner.send_message)
        runner.register_message(
            MSG_HELLO, lambda environment, msg, **kw: master.on_hello(msg.node_id, msg.data)
        )
        runner.register_message(
            MSG_CLAIM, lambda environment, msg, **kw: master.on_claim(msg.node_id, msg.data)
        )
        runner.register_message(
            MSG_ROWS, lambda environment, msg, **kw: master.on_rows(msg.node_id, msg.data)
        )
        runner.register_message(
            MSG_FINAL, lambda environment, msg, **kw: master.on_final(msg.node_id, msg.data)
        )
        stop_file = getattr(environment.parsed_options, "loopbench_stop_file", "")
        if stop_file:
            gevent.spawn(_watch_stop_file, runner, master, Path(stop_file))
        if isinstance(runner, MasterRunner):
            gevent.spawn(_watch_workers, runner, master)
    parent = watched_parent()
    if parent is not None and runner is not None:
        gevent.spawn(_watch_parent, runner, parent)


def _edge_gone(why: str) -> None:
    if why == "closed":
        return
    # Without its edge this worker measures nothing: it quits as a killed worker would, and
    # the master releases what it held (harness/locust_driver/master.py, worker_lost).
    log.error("loopbench: this worker cannot go on (%s); it quits", why)
    os._exit(ExitCode.INVALID)


def _headless(runner: Runner) -> bool:
    options = runner.environment.parsed_options
    return bool(options is not None and options.headless)


def _end_run(runner: Runner, master: MasterSide) -> None:
    """Stop the users, wait for every worker's final report, write the results."""
    master.mark_stopping()
    runner.stop()
    # Headless: plots wait until the workers are gone (rendered when the master quits).
    master.finalize(render=not _headless(runner))


def _watch_stop_file(runner: Runner, master: MasterSide, path: Path) -> None:
    # Signals are a poor channel here: in headless shape mode Locust installs its SIGTERM
    # handler only after the run, and SIGINT is ignored by children of non-interactive
    # shells.  `loopbench locust` asks for a graceful stop by creating this file.
    while not path.exists():
        gevent.sleep(0.25)
    log.warning("loopbench: %s appeared, ending the run", path)
    if master.run is not None and not master.run.stopping:
        master.interrupt()
        _end_run(runner, master)
    _quit(runner)


def _watch_workers(runner: MasterRunner, master: MasterSide) -> None:
    # Locust marks a worker missing after HEARTBEAT_LIVENESS missed heartbeats (~4 s) and
    # hands its users to the others; what it had claimed is loopbench's to release.
    while True:
        gevent.sleep(WATCH_INTERVAL_S)
        for node in runner.clients.missing:
            master.worker_lost(node.id, "no heartbeat for 3 s: killed, or its host is gone")
        if master.write_failed or master.refused:
            # The line is said; the table's code for a results file that cannot be written,
            # or a worker of another loopbench version.
            runner.environment.process_exit_code = ExitCode.USAGE
            # Locust's own HTML report would meet the same disk: a traceback after the line.
            if runner.environment.parsed_options is not None:
                runner.environment.parsed_options.html_file = None
            _quit(runner)
            return


def _watch_parent(runner: Runner, parent_pid: int) -> None:
    # `loopbench locust` starts masters and workers in sessions of their own (a terminal's
    # Ctrl-C reaches it alone), so they outlive it unless they notice it died: re-parented,
    # their parent pid changes.  Polled rather than a prctl parent-death signal: it works on
    # macOS too, and the master gets to write a summary that says what happened.
    while os.getppid() == parent_pid:
        gevent.sleep(WATCH_INTERVAL_S)
    why = f"the loopbench locust process (pid {parent_pid}) that started it died"
    master = _master
    if master is None:
        log.error("loopbench: %s; this worker quits", why)
        # Nothing to hand over: the master was started by the same process and ends too.
        os._exit(ExitCode.INTERRUPTED)
    log.error("loopbench: %s; ending the run as orphaned", why)
    # Whatever Locust still does on the way out, this process is not left running.
    gevent.spawn_later(ORPHAN_EXIT_S, os._exit, ExitCode.INTERRUPTED)
    master.orphan(why)
    if master.run is not None and not master.run.stopping:
        # Not runner.stop(): it waits until the (dead) workers report zero users.
        master.mark_stopping()
        master.finalize(render=False)
    _quit(runner)


def _quit(runner: Runner) -> None:
    runner.quit()
    # With the web UI, Locust's main greenlet is the web server, not the runner: quitting
    # the runner alone leaves an idle master serving until `loopbench locust` kills it.
    web_ui = runner.environment.web_ui
    if web_ui is not None:
        web_ui.stop()


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_kw: Any) -> None:
    if _worker is None:
        return
    wire = getattr(environment.parsed_options, RUN_OPTION, None)
    if not wire:
        log.error("loopbench: the master sent no run settings; is it running this locustfile?")
        return
    try:
        config = _worker.read_config(wire)
    except VersionMismatch as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        runner = environment.runner
        assert runner is not None
        environment.process_exit_code = ExitCode.USAGE
        # Not at once: the hello saying this worker's versions is still on its way.
        gevent.spawn_later(REFUSE_QUIT_S, runner.quit)
        return
    _worker.begin(config)


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_kw: Any) -> None:
    if _worker is not None:
        _worker.end()
    master = _master
    if master is not None and master.run is not None and not master.run.stopping:
        # Stopped from the web UI (or by Locust itself): finish the results in the background.
        master.mark_stopping()
        gevent.spawn(master.finalize)


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_kw: Any) -> None:
    master = _master
    if master is not None and master.run is not None:
        master.mark_stopping()
        master.finalize(wait_s=QUIT_WAIT_S, render=False)
    if master is not None:
        master.render_pending()
    if _worker is not None and _worker.edge is not None:
        _worker.edge.close()
    summary = as_summary(master.last_summary) if master is not None else None
    if summary is not None and summary.valid is False:
        log.warning("loopbench run INVALID: %s", "; ".join(summary.invalid_reasons))


class ScenarioShape(LoadTestShape):
    """The scenario's load as Locust users over time (docs/distributed.md, "Load shapes").

    Closed loop: ``load.concurrency`` users.  Open loop: a pool that grows with
    the rollouts in flight and due within the next two seconds, so ramps
    (``stages``) and ``bursts`` raise it just ahead of time; the starts
    themselves follow the schedule exactly.  The test ends when every rollout
    has run on every transport, or at ``--loopbench-run-time``.
    """

    def tick(self) -> tuple[int, float] | None:
        master = _master
        if master is None:
            return None
        if master.run is None:
            config = master.begin()
            if config is None:
                return None
            assert self.runner is not None
            setattr(self.runner.environment.parsed_options, RUN_OPTION, config.to_wire())
        if master.should_stop():
            assert self.runner is not None
            _end_run(self.runner, master)
            return None
        users = master.target_users()
        return users, float(min(max(users, 1), 1000))


class LoopbenchAgent(User):
    """One agent: claims a rollout from the master, has the edge host run it, repeats."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self._finished: tuple[int, int] | None = None
        self._idle = False

    @task
    def rollout(self) -> None:
        side = _worker
        if side is None or side.run is None or self._idle:
            gevent.sleep(1.0)
            return
        claim = side.claim(self._finished)
        self._finished = None
        plan = claim.plan
        if claim.kind != "run" or plan is None:
            self._idle = True
            return
        try:
            record = side.run_claim(claim)
        except EdgeGone:
            return  # this worker quits (_edge_gone); the master counts the rollout lost
        except Exception as exc:  # a driver bug must not stall the phase: report and move on
            log.exception(
                "rollout %d over %s failed in the driver", plan.rollout_id, claim.transport
            )
            at = now_ns()
            record = RolloutRecord.driver_failed(
                claim.transport, plan.rollout_id, claim.round, at, at, exc
            )
        side.on_rollout(record)
        self._finished = (claim.phase, plan.rollout_id)
