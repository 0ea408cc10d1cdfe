"""Truthful outcomes (issue 16): exit codes, validity that names the real cause, errors a user
can act on, interrupted runs that say what never ran.  Against foreign servers the tests start
themselves (tests/foreign_http.py) and a port where nothing listens."""

from __future__ import annotations

import csv
import gzip
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from harness.client.options import ClientSettings
from harness.metrics.validity import MIN_JUDGED_WALL_S
from harness.run.health import ClientHealth
from harness.run.runner import RunOptions, run_scenario
from harness.run.validity import validity_reasons
from harness.workload.scenario import load_scenario, validate_scenario
from tests.foreign_http import ANSWER_500, ANSWER_GARBAGE, ANSWER_JSON, closed_port, foreign_server
from tests.runs import TINY, loopbench, rows_flushed, started

#: what a message must never look like: an exception's repr (``ConnectionRefusedError(111, …``)
REPR = re.compile(r"\b[A-Z][A-Za-z]+(Error|Exception|Status|Response)\(")


def _run_target(tmp_path: Path, url: str, transports: list[str]) -> dict[str, Any]:
    opts = RunOptions(
        transports=transports,
        target=url,
        results_root=tmp_path,
        run_id="r",
        progress=False,
        render=False,
        client=ClientSettings(request_timeout_s=10),
    )
    result = run_scenario(load_scenario(str(TINY)), str(TINY), opts)
    return result.summary


def _turn_errors(tmp_path: Path) -> list[str]:
    with gzip.open(tmp_path / "r" / "turns.csv.gz", "rt") as fh:
        return [row["error_message"] for row in csv.DictReader(fh) if row["error_message"]]


def test_a_dead_target_exits_3_and_says_connection_refused(tmp_path: Path) -> None:
    # --no-probe: measured anyway, the run must end invalid for its errors (the probe's exit 4
    # before measuring is tests/run/test_probe.py::test_dead_target_run_refused_before_measuring)
    port = closed_port()
    proc = loopbench(
        "run",
        TINY,
        "--target",
        f"http://127.0.0.1:{port}/v1",
        "--no-probe",
        "--out",
        tmp_path,
        "--run-id",
        "r",
        "-q",
        report=False,
    )
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    first = proc.stdout.splitlines()[0]
    assert first.startswith("run INVALID: http: 100% of 2 turns failed, no turn succeeded"), first
    assert f"connection refused by 127.0.0.1:{port} (nothing listening?)" in first
    # The console's error summary: each kind once per transport, with its count and an example.
    assert "errors ws: 2 of 2 turns failed" in proc.stdout
    assert f"  connection x2: connection refused by 127.0.0.1:{port}" in proc.stdout
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["valid"] is False
    assert summary["errors"]["http"]["connection"] == {
        "count": 2,
        "example": f"connection refused by 127.0.0.1:{port} (nothing listening?)",
    }
    assert not any("CPU" in r or "event loop" in r for r in summary["invalid_reasons"])
    assert not REPR.search(proc.stdout), proc.stdout


def test_an_invalid_run_gives_its_reasons_once_in_its_first_line(tmp_path: Path) -> None:
    port = closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    proc = loopbench("run", TINY, "--target", url, "--no-probe", "--out", tmp_path, "--run-id", "r")
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    reasons = summary["invalid_reasons"]
    assert len(reasons) == 2, reasons  # one per transport: the line must hold more than one
    lines = proc.stdout.splitlines()
    assert lines[0] == "run INVALID: " + "; ".join(reasons)
    # the verdict below it keeps the speedup and the worst error, not the reasons again
    assert lines[1].startswith("verdict: INVALID · no speedup: "), lines[1]
    assert "worst error: connection x2 on http" in proc.stdout
    # counted with the console's line wrapping undone
    printed = " ".join((proc.stdout + proc.stderr).split())
    for reason in reasons:
        assert printed.count(" ".join(reason.split())) == 1, proc.stdout
    # the files still carry them: report.md's verdict names the first
    report = (tmp_path / "r" / "report.md").read_text()
    assert f"verdict: INVALID: {reasons[0]} (+1 more)" in report


def test_a_500_server_is_invalid_for_its_errors_not_for_a_missing_websocket_mode(
    tmp_path: Path,
) -> None:
    """A 500 to the upgrade is the server's error (``http_500``), not "no WebSocket mode"."""
    with foreign_server(ANSWER_500) as url:
        summary = _run_target(tmp_path, url, ["http", "ws"])
    port = url.split(":")[2].split("/")[0]
    reasons = summary["invalid_reasons"]
    assert summary["valid"] is False
    assert reasons[0].startswith("http: 100% of 2 turns failed, no turn succeeded (http_500 x2: ")
    assert reasons[1] == (
        "ws: 100% of 2 turns failed, no turn succeeded (http_500 x2: the WebSocket upgrade at "
        f"ws://127.0.0.1:{port}/v1/responses was answered with HTTP 500 with the body Internal "
        "Server Error (a server error, not an answer about WebSocket mode))"
    )
    assert not any("CPU" in r for r in reasons), reasons
    assert "Internal Server Error" in summary["errors"]["http"]["http_500"]["example"]
    for message in _turn_errors(tmp_path):
        assert not REPR.search(message), message


def test_a_json_answer_names_its_content_type(tmp_path: Path) -> None:
    with foreign_server(ANSWER_JSON) as url:
        summary = _run_target(tmp_path, url, ["http"])
    example = summary["errors"]["http"]["not_sse"]["example"]
    assert example.startswith(
        "expected an SSE stream (text/event-stream), got application/json: "
        '{"id": "resp_1", "object": "response"'
    ), example
    assert summary["invalid_reasons"][0].startswith("http: 100% of 2 turns failed")


def test_garbage_is_a_complete_human_message(tmp_path: Path) -> None:
    with foreign_server(ANSWER_GARBAGE) as url:
        summary = _run_target(tmp_path, url, ["http", "ws"])
    assert summary["valid"] is False
    messages = _turn_errors(tmp_path)
    assert messages
    for message in messages:
        assert not REPR.search(message), message
        assert "…" not in message or "more bytes" in message


def _health(cpu: float, wall_s: float) -> ClientHealth:
    return ClientHealth(cpu_share=cpu, wall_s=wall_s)


def _summary(turns: int, errors: int) -> dict[str, Any]:
    return {"transports": {"http": {"turns": {"count": turns, "errors": errors}}}}


def test_error_rate_reasons_come_first_and_cpu_needs_a_long_enough_window() -> None:
    load = validate_scenario(
        {"name": "x", "rollout": {"count": 1}, "load": {"max_error_rate": 0.1}}, "x"
    ).load
    errors = {"http": {"timeout": {"count": 3, "example": "no data for 1 s"}}}
    # 3 of 100 turns failed: under the limit; a busy CPU over a long run is a reason.
    assert validity_reasons(_summary(100, 3), {}, load, [_health(1.9, 10)], errors) == [
        "client CPU saturated: 190% of one core over the run"
    ]
    # 20 of 100: the error rate is named first, with its kinds, then the CPU.
    assert validity_reasons(_summary(100, 20), {}, load, [_health(1.9, 10)], errors) == [
        "http: 20% of 100 turns failed, above load.max_error_rate 10% (timeout x3: no data for 1 s)",
        "client CPU saturated: 190% of one core over the run",
    ]
    # Over a few milliseconds the CPU share is the interpreter starting, not a verdict.
    short = validity_reasons(_summary(100, 0), {}, load, [_health(1.9, MIN_JUDGED_WALL_S / 10)])
    assert short == []
    # Nor over a handful of completed turns.
    assert validity_reasons(_summary(5, 0), {}, load, [_health(1.9, 10)]) == []


def _sigint_after(args: list[Any], marker: str, report: bool = True) -> tuple[int, str, str]:
    """``loopbench ARGS`` sent SIGINT once a line of its stderr matches ``marker`` (a regex):
    (exit code, stdout, the rest of stderr)."""
    with started(*args, report=report) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            if re.search(marker, line):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_sigint_exits_130_and_lists_what_never_ran(tmp_path: Path) -> None:
    """A real process: the signal, its exit code and what it prints are the claim (the report
    of an interrupted run is tests/report/test_interrupt.py's, so none is rendered here)."""
    args = ["run", TINY, "--set", "rollout.count=40", "--set", "load.concurrency=1"]
    args += ["--transports", "http,ws", "--out", tmp_path, "--run-id", "int", "-q"]
    with started(*args, report=False) as proc:
        seen = rows_flushed(proc, tmp_path / "int" / "turns.csv.gz", 6)
        assert proc.poll() is None, f"run ended before the signal: {proc.communicate()[1]}"
        assert seen >= 6, "no rows flushed within 120 s"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, out, err)
    first = out.splitlines()[0]
    assert first.startswith("run interrupted: partial results written; never ran: transports ws"), (
        first
    )
    summary = json.loads((tmp_path / "int" / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["partial"] is True
    assert summary["not_run"]["transports"] == ["ws"]
    sched = summary["transports"]["http"]["schedule"]
    assert sched["intended"] == 40
    assert sched["intended"] == (
        sched["started"] + sched["cancelled"] + sched["dropped"] + sched["not_started"]
    ), sched
    # begun-but-cut-off rollouts are not "never ran": they are listed apart
    never = 40 - sched["started"] - sched["cancelled"]
    assert summary["not_run"]["rollouts"] == {"http": never, "ws": 40}
    if sched["cancelled"]:
        assert summary["not_run"]["cancelled"] == {"http": sched["cancelled"]}
        assert f"cut off mid-rollout: http {sched['cancelled']}" in first


def test_sigint_to_a_procs_run_exits_130_with_a_merged_partial_summary(tmp_path: Path) -> None:
    # A stop that reaches the client processes while they still start (signals ignored until
    # they take them) must not be lost: with 40 rollouts, most never start.
    args = ["run", TINY, "--set", "rollout.count=40", "--set", "load.concurrency=2"]
    args += ["--transports", "http,ws", "--procs", "2", "--out", tmp_path, "--run-id", "p"]
    # Printed once every client process started; the signal may come before or after they
    # measure anything: either way the run must end as an interrupted one.
    code, out, err = _sigint_after(args, "client processes", report=False)
    assert code == 130, (code, out, err)
    assert out.splitlines()[0].startswith("run interrupted: partial results written"), out
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["valid"] is False
    started = 0
    for t in summary["transports"].values():
        s = t["schedule"]
        assert s["intended"] == s["started"] + s["cancelled"] + s["dropped"] + s["not_started"]
        started += s["started"]
    assert started < 40 * 2, summary["transports"]  # 40 rollouts over each of two transports


@pytest.mark.slow
def test_sigint_to_gate_ab_exits_130_not_invalid(tmp_path: Path) -> None:
    args = ["gate", TINY, "--ab", "--set", "rollout.count=60", "--set", "load.concurrency=1"]
    args += ["--transports", "http", "--out", tmp_path, "--run-id", "ab"]
    # The first pass's progress line ("round 1 …"): measuring is under way.
    code, out, err = _sigint_after(args, "^round ")
    assert code == 130, (code, out, err)
