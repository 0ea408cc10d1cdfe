"""Starting loopbench from tests: its CLI in a subprocess, tiny.yaml in this process, or a
run's lifecycle fed synthetic records."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from harness.cli.locust import LOCUSTFILE
from harness.client.options import ClientSettings, TransportOptions
from harness.metrics.hdr import Histogram
from harness.report.results import Run, load_run, read_csv_gz
from harness.run.health import ClientHealth
from harness.run.locust_options import locust_argv
from harness.run.measurement import Measurement
from harness.run.runner import RunOptions, run_scenario
from harness.transports import Transport, make_transport
from harness.transports.rollout_loop import run_rollout
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.scenario import load_scenario, validate_scenario
from tests.without_reports import no_reports, own_flag

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "tiny.yaml"
#: reference-server options: decode at 200,000 tokens/s (an answer streams in about a millisecond)
FAST_DECODE = ("--set", "engine.sustained_tps=200000", "--set", "engine.burst_tps=200000")
#: ... and no modelled connection, per-token, hop, prefill, TTFT or post-response time either: for
#: tests whose claim is what was sent and recorded, not when (the modelled waits are most of
#: their wall)
NO_MODELLED_WAITS = (
    *FAST_DECODE,
    *("--set", "engine.prefill_tps=1000000000"),
    *(
        arg
        for key in (
            "api.connect_ms",
            "api.fixed_ms",
            "api.fixed_resolved_ms",
            "api.hop_ms",
            "api.post_ms",
            "api.per_token_us",
            "engine.base_ttft_ms",
        )
        for arg in ("--set", f"{key}=0")
    ),
)


def _argv(args: tuple[str | Path, ...], *, report: bool = True) -> list[str]:
    """The command line of ``loopbench ARGS``; ``report=False``: the same command without
    rendering reports (its own ``--no-report``, else :mod:`tests.without_reports`)."""
    argv = [str(a) for a in args]
    if report:
        return [sys.executable, "-m", "harness", *argv]
    if (flagged := own_flag(argv)) is not None:
        return [sys.executable, "-m", "harness", *flagged]
    return [sys.executable, "-m", "tests.without_reports", *argv]


def loopbench(
    *args: str | Path, timeout: float = 60, report: bool = True
) -> subprocess.CompletedProcess[str]:
    """``loopbench ARGS`` in a subprocess of this interpreter, from the repository root;
    ``report=False``: without run reports (:func:`_argv`)."""
    return subprocess.run(
        _argv(args, report=report), capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def server_exit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m reference_server ARGS`` in a subprocess of this interpreter, to its exit: for
    start-up refusals (a server that does start runs until ``timeout``)."""
    return subprocess.run(
        [sys.executable, "-m", "reference_server", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def bench_doc(
    module: str, out: Path, *args: str | Path, code: int = 0, timeout: float
) -> tuple[dict[str, Any], str]:
    """``python -m MODULE ARGS --out OUT -q`` from the repository root, which must exit with
    ``code``; the JSON document it wrote to ``out``, and what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", module, *map(str, args), "--out", str(out), "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == code, done.stderr[-2000:]
    return json.loads(out.read_text()), done.stdout


def run_cli(
    *args: str | Path, timeout: float = 240, report: bool = True
) -> subprocess.CompletedProcess[str]:
    """:func:`loopbench`, failing the test on a non-zero exit."""
    proc = loopbench(*args, timeout=timeout, report=report)
    shown = " ".join(map(str, args))
    assert proc.returncode == 0, f"loopbench {shown}: {proc.stderr}\n{proc.stdout}"
    return proc


def in_process(*args: str | Path, report: bool = True) -> tuple[int, str]:
    """``loopbench ARGS`` through ``main`` in this process, from the repository root as
    :func:`loopbench` runs it: (exit code, stdout + stderr).

    For tests of what a command does, not of the process around it.  ``report=False``
    leaves out the rendering of run and sweep reports (the plots are most of a tiny run's
    CPU) where the test reads only the files a run writes.
    """
    from harness.cli.main import main

    out = io.StringIO()
    argv: list[str] | None = [str(a) for a in args]
    with contextlib.ExitStack() as stack:
        if not report:
            argv = stack.enter_context(no_reports(argv))
        stack.enter_context(contextlib.chdir(ROOT))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(out))
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
    assert isinstance(code, int), code
    return code, out.getvalue()


@contextlib.contextmanager
def loopbench_process() -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """One ``loopbench`` process, without reports, that runs commands one after another
    (:func:`tests.without_reports.serve_commands`), as ``run(*ARGS, timeout=S)``: each command
    ends with the exit code, stdout and stderr a process of its own would have, without an
    interpreter start and the imports per command (~0.6 s of CPU each).  For many runs whose
    claim is a process's outcome; a command that kills the process fails its test and the
    ones after it."""
    read, write = os.pipe()
    # anything written past the redirections (a crash's last words) lands in the log
    with tempfile.TemporaryFile("w+") as log, os.fdopen(read) as results:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.without_reports", "--commands-to-fd", str(write)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            text=True,
            cwd=ROOT,
            pass_fds=(write,),
        )
        os.close(write)
        assert proc.stdin is not None
        stdin = proc.stdin

        def run(*args: str | Path, timeout: float) -> subprocess.CompletedProcess[str]:
            argv = [str(a) for a in args]
            stdin.write(json.dumps(argv) + "\n")
            stdin.flush()
            ready, _, _ = select.select([results], [], [], timeout)
            line = results.readline() if ready else ""
            if not line:
                proc.kill()
                log.seek(0)
                raise AssertionError(
                    f"loopbench {' '.join(argv)}: no answer in {timeout} s, its process exited"
                    f" {proc.wait(timeout=30)}: {log.read()[-3000:]}"
                )
            code, out, err = json.loads(line)
            return subprocess.CompletedProcess(argv, code, out, err)

        try:
            yield run
        finally:
            with contextlib.suppress(BrokenPipeError):
                stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def run_tiny(out: Path, transports: list[str], sets: dict[str, str], **options: Any) -> Run:
    """tiny.yaml with ``--set``-style ``sets``, run in this process, loaded back.

    The embedded server, no progress display, no report; ``options`` are further
    :class:`RunOptions` (``run_id`` is ``r`` unless given).
    """
    return run_file(TINY, out, sets, transports=transports, **options)


def run_options(**options: Any) -> RunOptions:
    """:class:`RunOptions` with the :class:`ClientSettings` among ``options`` given flat, as the
    run's flags give them (``keepalive=False``)."""
    names = {f.name for f in fields(ClientSettings)}
    client = ClientSettings(**{k: v for k, v in options.items() if k in names})
    return RunOptions(client=client, **{k: v for k, v in options.items() if k not in names})


def run_file(
    scenario: Path | str, out: Path, sets: dict[str, str] | None = None, **options: Any
) -> Run:
    """A scenario file run in this process as ``loopbench run FILE --out OUT`` runs it, but
    without the interpreter start and the report (for tests that read only the rows and the
    summary); :func:`run_tiny`'s defaults."""
    options.setdefault("run_id", "r")
    opts = run_options(results_root=out, progress=False, render=False, **options)
    loaded = load_scenario(str(scenario), sets)
    return load_run(run_scenario(loaded, str(scenario), opts).run_dir)


async def run_plans(
    transport: Transport, plans: Iterable[RolloutPlan], on_turn: Callable[[TurnRecord], None]
) -> None:
    """``plans`` one after the other over ``transport`` (the client core's rollout loop), which
    is closed after them."""
    try:
        for plan in plans:
            await run_rollout(
                transport, plan, intended_start_ns=time.perf_counter_ns(), on_turn=on_turn
            )
    finally:
        await transport.aclose()


def asyncio_edge(
    url: str, transports: Iterable[str], plans: list[RolloutPlan], **options: Any
) -> list[dict[str, Any]]:
    """The turn records (as dicts) of ``plans`` run over each of ``transports`` in turn by the
    asyncio client core against ``url``; ``options``: further :class:`TransportOptions`."""
    turns: list[TurnRecord] = []

    async def main() -> None:
        for name in transports:
            transport = make_transport(name, TransportOptions(url, **options))
            await run_plans(transport, plans, turns.append)

    asyncio.run(asyncio.wait_for(main(), 120))
    return [asdict(t) for t in turns]


def rows_flushed(proc: subprocess.Popen[str], turns: Path, at_least: int) -> int:
    """Rows in a running ``loopbench run``'s turns file once it has ``at_least`` (or 120 s pass).

    Rows reach the file in blocks (every 0.5 s) and there is no event to await from another
    process, so the file is polled, bounded; returns early if the run ends first.
    """
    deadline = time.monotonic() + 120
    seen = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if turns.exists():
            seen = len(read_csv_gz(turns))
            if seen >= at_least:
                break
        time.sleep(0.1)
    return seen


def _ignore_sigint() -> None:
    # in the child before it runs the program: what `sh` does for `COMMAND &`
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def started(
    *args: str | Path, background: bool = False, report: bool = True
) -> Iterator[subprocess.Popen[str]]:
    """``loopbench ARGS`` running, its output piped, killed on the way out if still running;
    ``background``: with SIGINT ignored, as a shell without job control starts
    ``loopbench … &`` (a script, a CI step); ``report=False``: it renders no report."""
    proc = subprocess.Popen(
        _argv(args, report=report),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=_ignore_sigint if background else None,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def interrupt_run(
    out: Path,
    run_id: str,
    transport: str,
    rollouts: int,
    sig: signal.Signals,
    *,
    again_after_s: tuple[float, ...] = (),
    background: bool = False,
    report: bool = True,
) -> tuple[int, int, str]:
    """``loopbench run`` of tiny.yaml, one rollout at a time, sent ``sig`` once 6 rows are on disk
    (and once more after each delay of ``again_after_s``, as an impatient user or
    ``timeout -s INT`` does).  ``background``: started with SIGINT ignored, as a shell
    without job control starts ``loopbench run … &`` (a script, a CI step).  ``report=False``:
    the run renders no report.

    Fails the test if the run ends first.  Returns the rows seen before the signal, the
    exit code and stderr.
    """
    args: list[str | Path] = [
        "run",
        TINY,
        "--set",
        f"rollout.count={rollouts}",
        "--set",
        "load.concurrency=1",
    ]
    args += ["--transports", transport, "--out", out, "--run-id", run_id, "-q"]
    with started(*args, background=background, report=report) as proc:
        seen = rows_flushed(proc, out / run_id / "turns.csv.gz", 6)
        assert proc.poll() is None, (
            f"run ended before it could be interrupted: {proc.communicate()[1]}"
        )
        assert seen >= 6, "no rows flushed within 120 s"
        proc.send_signal(sig)
        for delay in again_after_s:
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    return seen, proc.returncode, err


def locust_master_argv(
    port: int, url: str, scenario: Path, out: Path, run_id: str, workers: int, *extra: str
) -> list[str]:
    """A headless Locust master on loopback running ``scenario`` into ``out/run_id``."""
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--master",
        "--headless",
        "--expect-workers",
        str(workers),
        "--expect-workers-max-wait",
        "60",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
        "-H",
        url,
        "--scenario",
        str(scenario),
        *locust_argv({"out": out, "run_id": run_id}),
        *extra,
        "--only-summary",
    ]


MS = 1_000_000
MEASURED_DOC: dict[str, Any] = {
    "name": "agree",
    "seed": 7,
    "transports": ["http"],
    "rollout": {"count": 25, "tool_calls": 1},
    "load": {"mode": "closed", "concurrency": 1},
}


def measured_folder(
    root: Path,
    name: str,
    *,
    rollouts: int = 25,
    turns: int = 4,
    failed: int = 0,
    fail_last: bool = False,
    late_ms: float = 0.0,
    scenario: dict[str, Any] | None = None,
    history_shift: int = 0,
) -> Path:
    """A results folder written by the run's lifecycle (:class:`Measurement`: the summary, its
    verdict, the rows) from synthetic records, without a server: a finished run of
    ``rollouts`` x ``turns`` turns: the first ``failed`` turns fail (or,
    ``fail_last``, every rollout's last turn), each start ``late_ms`` behind its schedule,
    every history ``history_shift`` tokens longer (as if the rollout generator changed)."""
    sc = validate_scenario({**MEASURED_DOC, **(scenario or {})}, name)
    manifest = {
        "run_id": name,
        "scenario": sc.model_dump(mode="json"),
        "scenario_name": sc.name,
        "seed": sc.seed,
        "transports": ["http"],
    }
    m = Measurement(sc, root / name, manifest, ["http"], planned=rollouts)
    clock = 10_000 * MS
    to_fail = failed
    for rid in range(rollouts):
        start = clock
        bad = 0
        for k in range(turns):
            sent = start + k * 100 * MS
            fail = to_fail > 0 or (fail_last and k == turns - 1)
            to_fail -= to_fail > 0
            bad += fail
            m.add_turn(
                TurnRecord(
                    transport="http",
                    rollout_id=rid,
                    turn_index=k,
                    sent_ns=sent,
                    first_token_ns=sent + 40 * MS,
                    last_token_ns=sent + 80 * MS,
                    done_ns=sent + 81 * MS,
                    status="error" if fail else "completed",
                    error_kind="server_error" if fail else "",
                    error_message="HTTP 500: injected" if fail else "",
                    history_tokens=1000 * (k + 1) + history_shift,
                    output_tokens=40,
                )
            )
        roll = RolloutRecord(
            transport="http",
            rollout_id=rid,
            intended_start_ns=start - round(late_ms * MS),
            start_ns=start,
            end_ns=start + turns * 100 * MS,
            turns=turns,
            errors=bad,
            status="error" if bad else "completed",
        )
        m.schedules["http"].intended += 1
        m.schedules["http"].observe(roll, m.late_ns)
        m.add_rollout(roll)
        clock = roll.end_ns + MS
    # a quiet client: 10 % of a core, wake-ups 1 ms late
    lag = Histogram()
    for _ in range(100):
        lag.record_ns(MS)
    m.clients.append(ClientHealth(cpu_share=0.1, wall_s=5.0, loop_lag=lag))
    m.finish()
    return root / name
