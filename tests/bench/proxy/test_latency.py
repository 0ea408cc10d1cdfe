"""``python -m bench.proxy``: the latency the recording proxy adds, paired, and its floor, the
bare relay (bench/proxy/).

Real sockets on 127.0.0.1, upstreams started here on port 0; no wall-clock thresholds.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import Counter

import orjson
import pytest

from bench.proxy import latency as bench_module
from bench.proxy.__main__ import main
from bench.proxy.bare_relay import serve as serve_bare_relay
from bench.proxy.latency import (
    BARE_RELAY,
    THIS_PROXY,
    ArmResult,
    BenchProcessError,
    BenchResult,
    _upstream_times,
    orders,
    run_bench,
)
from harness.record.proxy import Upstream
from harness.transports.rx_socket import kernel_stamps_supported
from harness.wire.exit_codes import ExitCode
from tests.record.test_relay import (
    BIG,
    _alive,
    _big_digest,
    _big_upstream,
    _descendants,
    _read_chunked_digest,
)
from tests.runs import ROOT

pytestmark = pytest.mark.timeout(120)


def test_bench_measures_paired_trials_through_a_proxy_process(server_url: str) -> None:
    """``run_bench``: as many trials as asked, each with a direct, a proxied and a control
    turn (the figures themselves are the machine's, not checked)."""
    result = run_bench(server_url, 4)
    assert result.pairs == 4 and result.streams == 1
    [arm] = result.arms
    assert arm.ttft_ms[0] > 0 and result.direct_ttft_ms[0] > 0
    text = "\n".join(result.lines())
    assert "4 paired trials" in text and "added TTFT (proxied − direct)" in text
    assert 0 <= arm.over_target_pct <= 100 and "control TTFT > 1 ms" in text
    assert arm.cpu_us_per_turn is not None and arm.cpu_us_per_turn >= 0
    # The reference server reports its own timing, on this host's clock: the upstream's time
    # comes out of both sides, split at its arrival stamp.
    assert arm.added_path_ms is not None and result.control_path_ms is not None
    assert arm.added_request_ms is not None and arm.added_response_ms is not None
    assert "added, upstream's time out" in text and "response side" in text
    assert result.kernel_stamps == kernel_stamps_supported()
    # The p99 shift of each side against the direct one: told, but with no CI at 4 trials.
    for shift in (
        arm.p99_shift_ms,
        arm.path_p99_shift_ms,
        result.control_p99_shift_ms,
        result.control_path_p99_shift_ms,
    ):
        assert shift is not None and shift[1] is None
    assert "p99 shift (p99 − p99 direct)" in text and "control p99 shift" in text
    assert text.count("no CI (under 1,000 trials)") == 4


@pytest.mark.parametrize("k", [2, 3, 4])
def test_bench_orders_balance_who_goes_first_and_who_goes_after_whom(k: int) -> None:
    cycle = orders(k)
    assert all(sorted(order) == list(range(k)) for order in cycle)
    # every side at every position equally often (first among them)
    places = Counter((i, side) for order in cycle for i, side in enumerate(order))
    assert len(places) == k * k and set(places.values()) == {len(cycle) // k}
    # the turns as a stream reads them, trial after trial, the cycle wrapping around: each
    # side right after each other side equally often, and after itself equally often
    turns = [side for order in cycle for side in order]
    follows = Counter(zip(turns, turns[1:] + turns[:1], strict=True))
    others = {follows[(a, b)] for a in range(k) for b in range(k) if a != b}
    itself = {follows[(a, a)] for a in range(k)}
    assert len(others) == 1 and others != {0} and len(itself) == 1


def test_a_rotation_does_not_balance_who_goes_after_whom() -> None:
    """What the check above catches: the old rotating order (the control always after the
    proxy, the direct side after the control)."""
    rotation = [(0, 1, 2), (1, 2, 0), (2, 0, 1)]
    within = Counter(pair for order in rotation for pair in itertools.pairwise(order))
    assert within[(1, 2)] == 2 and within[(2, 1)] == 0
    turns = [side for order in rotation for side in order]
    follows = Counter(zip(turns, turns[1:] + turns[:1], strict=True))
    assert len({follows[(a, b)] for a in range(3) for b in range(3) if a != b}) > 1


def test_bench_orders_beyond_four_sides_rotate() -> None:
    cycle = orders(6)
    assert len(cycle) == 6 and Counter(order[0] for order in cycle) == Counter(range(6))


def test_bench_lines_give_the_p99_shift_with_its_ci() -> None:
    arm = ArmResult(
        "proxy", (40.0, 45.0), (0.2, 1.5), (0.3, 1.8), 2.0, 300.0, p99_shift_ms=(0.25, (0.1, 0.4))
    )
    result = BenchResult(
        pairs=1000,
        streams=4,
        history=200,
        direct_ttft_ms=(40.0, 44.0),
        arms=(arm,),
        control_ttft_ms=(0.0, 1.2),
        control_total_ms=(0.0, 1.4),
        control_over_target_pct=1.5,
        seconds=60.0,
        control_p99_shift_ms=(-0.05, (-0.2, 0.1)),
    )
    text = "\n".join(result.lines())
    [line] = [ln for ln in text.splitlines() if "p99 shift (p99 − p99 direct)" in ln]
    assert line.split()[-7:] == ["+0.250", "ms", "95", "%", "CI", "[0.100,", "0.400]"]
    assert "control p99 shift" in text and "-0.050 ms   95 % CI [-0.200, 0.100]" in text
    assert "no CI" not in text


def test_upstream_times_take_the_servers_own_time_out_and_split_at_its_arrival() -> None:
    """TTFT 50 ms, of which the server modelled 40 and was 2 ms late: 8 ms beyond it, 3 before
    the server read the request and 5 after it wrote the token."""
    t0 = 1_000_000_000
    timing = {"ttft": 40.0, "first_token_late_ms": 2.0, "arrived_clock_ns": t0 + 3_000_000}
    body = (
        b"event: response.output_text.delta\ndata: {}\n\n"
        b"event: response.completed\ndata: "
        + orjson.dumps({"type": "response.completed", "response": {"sim_timing": timing}})
        + b"\n\n"
    )
    assert _upstream_times(t0, t0 + 50_000_000, body) == (8_000_000, 3_000_000, 5_000_000)
    # an arrival stamp on another clock: the split is not told, the rest is
    other = dict(timing, arrived_clock_ns=5)
    body2 = body.replace(orjson.dumps(timing), orjson.dumps(other))
    assert _upstream_times(t0, t0 + 50_000_000, body2) == (8_000_000, None, None)
    # a server that reports nothing of its own time
    assert _upstream_times(t0, t0 + 50_000_000, b"event: response.completed\ndata: {}\n\n") == (
        None,
        None,
        None,
    )
    assert _upstream_times(t0, t0 + 1, b"") == (None, None, None)


def test_bench_command_reports_the_machine(server_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.proxy", "--upstream", server_url, "--trials", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == 0, out.stderr
    assert "2 paired trials" in out.stdout
    assert "load average" in out.stdout and "CPU steal" in out.stdout


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc")
def test_a_bench_stopped_by_sigterm_stops_the_processes_it_started() -> None:
    """By default SIGTERM ends a process at once: the proxy and the bare relay were left
    running (the embedded server watches its parent; they do not)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.proxy", "--trials", "100000"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kids: dict[int, str] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # bounded: the relays are up within seconds
            kids = _descendants(proc.pid)
            if any("bare_relay" in c for c in kids.values()) and any(
                "harness record" in c for c in kids.values()
            ):
                break
            time.sleep(0.1)
        assert any("bare_relay" in c for c in kids.values()), kids
        time.sleep(1.0)  # into the trials
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "interrupted", err
    deadline = time.monotonic() + 10  # the server notices its parent's end within 0.5 s
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    left = {k: c for k, c in kids.items() if _alive(k)}
    assert not left, left


def test_the_bare_relay_forwards_a_large_response_whole_and_touches_nothing() -> None:
    """The bench's floor relays as the proxy does, flow control included, and rewrites
    nothing: the upstream sees the client's own request head."""
    heads: list[bytes] = []

    async def main() -> tuple[bytes, list[int]]:
        server = await _big_upstream(heads)
        port = server.sockets[0].getsockname()[1]
        stop = asyncio.Event()
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        clients: set = set()
        task = asyncio.ensure_future(
            serve_bare_relay(
                Upstream.parse(f"http://127.0.0.1:{port}/v1"),
                "127.0.0.1",
                0,
                stop,
                ready.set_result,
                clients,
            )
        )
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", await ready)
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: the-client's\r\n\r\n")
            await asyncio.sleep(0.5)  # not reading: the relay must stop reading upstream
            buffered = [c.transport.get_write_buffer_size() for c in clients if c.transport]
            got = await _read_chunked_digest(reader)
            writer.close()
        finally:
            stop.set()
            await task
            server.close()
        return got, buffered

    got, buffered = asyncio.run(asyncio.wait_for(main(), 90))
    assert got == _big_digest()
    assert buffered and max(buffered) < BIG // 4
    assert heads == [b"GET /v1/models HTTP/1.1\r\nHost: the-client's\r\n\r\n"]


def test_a_long_bench_says_how_far_it_got(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every PROGRESS_S (shortened here) the trials done so far, never more than asked, and
    never going back; a bench shorter than PROGRESS_S says nothing."""
    monkeypatch.setattr(bench_module, "PROGRESS_S", 0.02)
    told: list[tuple[int, int, float]] = []
    # 8 trials of a few hundred ms each: a hundred intervals and more
    trials = 8
    result = run_bench(
        server_url,
        trials,
        streams=2,
        progress=lambda *a: told.append(a),  # type: ignore[arg-type]
    )
    assert result.pairs == trials
    assert len(told) >= 2, "no progress in a bench far longer than its interval"
    assert {total for _, total, _ in told} == {trials}
    dones = [done for done, _, _ in told]
    assert dones == sorted(dones) and dones[0] >= 0 and dones[-1] <= trials
    assert all(b >= a for (_, _, a), (_, _, b) in itertools.pairwise(told))
    monkeypatch.setattr(bench_module, "PROGRESS_S", 600.0)
    told.clear()
    run_bench(server_url, 2, progress=lambda *a: told.append(a))  # type: ignore[arg-type]
    assert told == []


def test_bench_measures_the_proxy_over_the_bare_relay_in_the_same_trials(server_url: str) -> None:
    """With the floor as one more side, each trial has four turns, and the proxy's p99 shift
    over the bare relay is told (without a CI at 4 trials); the floor has none of its own."""
    result = run_bench(server_url, 4, proxies=(THIS_PROXY, BARE_RELAY))
    proxy, floor = result.arms
    assert (proxy.label, floor.label) == ("proxy", "bare relay")
    assert floor.ttft_ms[0] > 0 and floor.cpu_us_per_turn is not None
    assert proxy.over_floor_p99_shift_ms is not None and proxy.over_floor_p99_shift_ms[1] is None
    assert proxy.over_floor_path_p99_shift_ms is not None
    assert floor.over_floor_p99_shift_ms is None and floor.over_floor_path_p99_shift_ms is None
    text = "\n".join(result.lines())
    assert "p99 shift over the bare relay [proxy]" in text
    assert "added TTFT (proxied − direct) [bare relay]" in text
    assert "over the bare relay [bare relay]" not in text
    assert "what recording adds beyond one more process" in text


def test_a_relay_process_that_does_not_start_is_named_with_its_reason() -> None:
    # The bare relay forwards plain TCP only: given an https upstream it exits at once. The
    # error names it and says why, not "`loopbench record` did not start".
    with pytest.raises(BenchProcessError) as info:
        run_bench("https://127.0.0.1:9/v1", 2, proxies=(BARE_RELAY,))
    message = str(info.value)
    assert message.startswith(
        f"bare relay did not start: `{shlex.join(BARE_RELAY.argv)}` exited with code "
    ), message
    assert message.endswith("the bare relay forwards plain TCP only (http://)"), message
    assert "loopbench record" not in message


def test_the_bare_relay_runs_as_the_bench_starts_it(server_url: str) -> None:
    """``python -m bench.proxy.bare_relay``: the listening line, a relayed request, and a
    clean exit on SIGTERM; an https upstream is refused with a usage error."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.proxy.bare_relay", "--upstream", server_url, "--out", "x"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("loopbench record listening on http://127.0.0.1:")
        port = int(line.split()[4].rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200")
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0
    refused = subprocess.run(
        [sys.executable, "-m", "bench.proxy.bare_relay", "--upstream", "https://127.0.0.1:1/v1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == ExitCode.USAGE and "plain TCP only" in refused.stderr


@pytest.mark.parametrize(
    "argv", [["--trials", "0"], ["--streams", "0"], ["--history", "-1"], ["--bench", "5"]]
)
def test_a_bad_argument_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before any process starts; ``--bench`` (the flag of ``loopbench record`` this
    bench was) is unknown here."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == ExitCode.USAGE
    assert capsys.readouterr().err.splitlines()[-1].startswith("python -m bench.proxy: error: ")
