"""Client fuzz: ``loopbench run --target`` against a hostile endpoint never crashes.

Each mode of :mod:`tests.hostile_server` breaks the protocol one way (malformed SSE,
events that are not JSON, out-of-order events, oversized lines and frames, slowloris
streams, resets, bad HTTP, bad WebSocket frames and close codes).  For each, a real
``loopbench run`` in a process apart from the test's (``--no-probe``: the probe would refuse
these endpoints; a 2 s idle timeout; no report rendered, see :mod:`tests.without_reports`)
must exit 3 (an invalid run, not a crash), write its results folder, and record every turn
as an error of the kind the mode deserves (``harness/client/api_errors.py:error_kind``).

One module fixture runs them in a few lanes side by side: each run waits mostly on its
server or its idle timeout, so the lanes overlap the waits.  A lane is one ``loopbench``
process running its modes one after another (:func:`tests.runs.loopbench_process`: each
run's exit code, stdout and stderr as from a process of its own, without 35 interpreter
starts, which were most of this module's CPU); each mode still has its own server, run,
results folder and test.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.report.results import read_csv_gz
from tests.hostile_server import HTTP_ACTS, HTTP_MODES, WS_ACTS, WS_MODES, hostile_server
from tests.runs import TINY, loopbench_process

WS_CLOSED = {"recovery_exhausted", "connection_closed", "connection"}
#: mode -> the error kinds its turns may end with
EXPECTED: dict[str, set[str]] = {
    # no event ever completes and the server holds the connection: the idle timeout
    "malformed_sse": {"timeout"},
    "invalid_json": {"invalid_event"},
    "not_an_object": {"invalid_event"},
    "delta_before_created": {"out_of_order_event"},
    "completed_twice": {"out_of_order_event"},
    "events_after_completed": {"out_of_order_event"},
    # unknown event types are skipped (forward compatibility): nothing ends the turn
    "unknown_event_only": {"timeout"},
    "terminal_without_created": {"out_of_order_event"},
    "bad_chunk_size": {"invalid_http"},
    "not_http": {"invalid_http"},
    "huge_head": {"invalid_http"},
    "truncated_after_created": {"timeout"},
    "error_body_not_json": {"http_400"},
    "oversized_line": {"invalid_sse"},
    # a byte every 0.2 s: only an idle timeout counted in events ends it
    "slowloris": {"timeout"},
    "reset_mid_stream": {"connection"},
    "silent_after_head": {"timeout"},
    "ws_invalid_json": {"invalid_event"},
    "ws_not_an_object": {"invalid_event"},
    "ws_binary": {"invalid_event"},
    "ws_delta_before_created": {"out_of_order_event"},
    # over WebSocket a turn ends at its terminal event: the extra event fails the next turn
    "ws_completed_twice": {"out_of_order_event", "completed"},
    "ws_events_after_completed": {"out_of_order_event", "completed"},
    "ws_close_1011": WS_CLOSED,
    "ws_close_invalid_code": WS_CLOSED,
    "ws_close_reason_not_utf8": WS_CLOSED,
    "ws_reserved_opcode": WS_CLOSED,
    "ws_rsv_bits": WS_CLOSED,
    "ws_stray_continuation": WS_CLOSED,
    "ws_fragmented_control": WS_CLOSED,
    "ws_invalid_utf8_text": WS_CLOSED,
    # the client refuses the frame at its header (close 1009); the peer never answers the close
    "ws_oversized_frame": WS_CLOSED | {"timeout"},
    "ws_slowloris": {"timeout"},
    "ws_reset_mid_stream": WS_CLOSED,
}


def test_every_mode_has_an_expectation() -> None:
    assert set(EXPECTED) == {*HTTP_MODES, *HTTP_ACTS, *WS_MODES, *WS_ACTS}


#: lanes (runs at once): enough to overlap the idle timeouts, few enough that the 2 s timeout
#: is never reached by a client merely waiting for a core
PARALLEL = 4


def _run_lane(modes: Sequence[str], out: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each of ``modes`` against its own hostile server, one after another in one process."""
    done = {}
    with loopbench_process() as run:
        for mode in modes:
            transport = "ws" if mode.startswith("ws_") else "http"
            with hostile_server(mode) as url:
                args = ["run", str(TINY), "--target", url, "--no-probe", "--transports", transport]
                args += ["--set", "rollout.count=1", "--set", "load.concurrency=1"]
                args += ["--request-timeout-s", "2", "--out", str(out), "--run-id", mode, "-q"]
                # without the report (loopbench_process renders none): 35 renderings of
                # error-only runs were most of this module's CPU; an error-only run's report is
                # test_outcomes' (dead and invalid targets)
                done[mode] = run(*args, timeout=120)
    return done


@pytest.fixture(scope="module")
def hostile_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, subprocess.CompletedProcess[str]]]:
    """Each selected mode's finished ``loopbench run`` and the folder its results are in."""
    out = tmp_path_factory.mktemp("hostile")
    modes = [
        item.callspec.params["mode"]
        for item in request.session.items
        if item.module is request.module
        and getattr(item, "originalname", "") == "test_the_harness_survives_a_hostile_endpoint"
    ]
    lanes = [modes[i::PARALLEL] for i in range(PARALLEL)]
    procs: dict[str, subprocess.CompletedProcess[str]] = {}
    with ThreadPoolExecutor(PARALLEL) as pool:
        for done in pool.map(lambda lane: _run_lane(lane, out), lanes):
            procs.update(done)
    return out, procs


# the first test's time includes the fixture's 35 runs: the budget of all of them
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", list(EXPECTED))
def test_the_harness_survives_a_hostile_endpoint(
    mode: str, hostile_runs: tuple[Path, dict[str, subprocess.CompletedProcess[str]]]
) -> None:
    transport = "ws" if mode.startswith("ws_") else "http"
    out, procs = hostile_runs
    proc = procs[mode]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    run_dir = out / mode
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["valid"] is False
    rows = read_csv_gz(run_dir / "turns.csv.gz")
    assert len(rows) >= 1
    kinds = {k or s for s, k in zip(rows["status"], rows["error_kind"], strict=True)}
    assert kinds <= EXPECTED[mode], (kinds, list(rows["error_message"])[:2])
    assert kinds - {"completed"}, "no turn failed"
    # every failed turn carries a sentence, not a repr
    for msg in rows["error_message"][rows["status"] != "completed"]:
        assert msg and "Traceback" not in msg and not msg.startswith("<"), msg
    assert summary["errors"][transport], summary["errors"]


def test_a_lane_still_sees_what_a_process_would_show_as_it_ended() -> None:
    """The lanes run their modes in one process: what only the end of a process of its own
    would show (a finaliser that raises, a thread that keeps the process alive) is checked
    after every command instead."""
    import contextlib
    import io
    import threading

    from tests.without_reports import LEFT_RUNNING, _as_at_exit

    class RaisesWhenFreed:
        def __del__(self) -> None:
            raise RuntimeError("freed badly")

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        holder = [RaisesWhenFreed()]
        holder.append(holder)  # a cycle: freed only by the collector, as at a process's end
        del holder
        assert _as_at_exit(3, err) == 3
    assert "Exception ignored" in err.getvalue() and "freed badly" in err.getvalue()

    release = threading.Event()
    stuck = threading.Thread(target=release.wait, name="never-joined")
    stuck.start()
    try:
        err = io.StringIO()
        assert _as_at_exit(3, err) == LEFT_RUNNING
        assert "never-joined" in err.getvalue()
    finally:
        release.set()
        stuck.join()
    assert _as_at_exit(3, io.StringIO()) == 3
