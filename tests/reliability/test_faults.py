"""Fault injection: the spec and the seeded draw (pure), then each kind as the harness sees it."""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.report.results import Run
from reference_server.cli import add_server_arguments, config_from_args
from reference_server.core.faults import Fault, FaultInjector, FaultSpecError, parse_fault_spec
from tests.runs import NO_MODELLED_WAITS, run_tiny
from tools.soak import server_process

# -- the spec ------------------------------------------------------------------------------------


def test_spec_accepts_dotted_and_nested_error_rates() -> None:
    a = parse_fault_spec({"error_rate.503": "0.1", "stall_rate": 0.2, "seed": "4"})
    b = parse_fault_spec({"error_rate": {503: 0.1}, "stall_rate": "0.2", "seed": 4})
    assert a == b and a.error_rate == {503: 0.1} and a.seed == 4
    assert a.enabled and abs(a.total_rate - 0.3) < 1e-9
    assert not parse_fault_spec({}).enabled
    assert parse_fault_spec({"lifetime_s": 5}).enabled


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"stall": 0.1}, "fault stall: unknown field (did you mean 'stall_s'?)"),
        (
            {"error_rate.418": 0.1},
            "fault error_rate.418: expected one of 429, 500, 502, 503, 504, got 418",
        ),
        ({"disconnect_rate": 1.5}, "fault disconnect_rate: expected a number ≤ 1, got 1.5"),
        ({"spike_ms": -1}, "fault spike_ms: expected a number > 0, got -1"),
        ({"stall_rate": "x"}, "fault stall_rate: expected a number, got 'x'"),
        ({"stall_rate": 0.6, "evict_rate": 0.6}, "rates add up to 1.2; expected at most 1"),
        # a file's empty ``error_rate:`` beside ``--fault error_rate.503=…``: one line, no TypeError
        (
            {"error_rate": None, "error_rate.503": "0.1"},
            "fault error_rate: expected a mapping of status to rate, got nothing",
        ),
    ],
)
def test_spec_errors_name_the_key_and_what_was_expected(
    entries: dict[str, Any], message: str
) -> None:
    with pytest.raises(FaultSpecError, match=re.escape(message)):
        parse_fault_spec(entries)


def test_cuts_and_stalls_count_where_they_took_effect_not_when_drawn() -> None:
    # The soak compares these counts with the errors clients recorded, kind by kind: a stall
    # drawn for a request refused before its first delta changed nothing and must not count.
    inj = FaultInjector(parse_fault_spec({"seed": 1, "stall_rate": 0.5, "disconnect_rate": 0.5}))
    drawn = [inj.draw(websocket=False) for _ in range(50)]
    assert {f.kind for f in drawn} == {"stall", "disconnect"} and inj.counts == {}
    stall, cut = Fault("stall"), Fault("disconnect")
    inj.applied(stall, websocket=False)
    inj.applied(stall, websocket=True)
    inj.applied(cut, websocket=False)
    assert inj.counts == {"stall": 1, "stall_websocket": 1, "disconnect": 1}


def test_draws_are_seeded_and_follow_the_rates() -> None:
    spec = parse_fault_spec(
        {"seed": 9, "error_rate.500": 0.1, "disconnect_rate": 0.2, "evict_rate": 0.3}
    )
    one, two = FaultInjector(spec), FaultInjector(spec)
    seq = [one.draw(websocket=True) for _ in range(20_000)]
    assert seq == [two.draw(websocket=True) for _ in range(20_000)]
    kinds = Counter(f.kind for f in seq)
    for kind, rate in (("error", 0.1), ("disconnect", 0.2), ("evict", 0.3), ("", 0.4)):
        assert abs(kinds[kind] / len(seq) - rate) < 0.02, (kind, kinds)
    # a disconnect counts when it cuts a stream (FaultInjector.applied), not when drawn
    assert one.counts == {"error_500": kinds["error"], "evict": kinds["evict"]}
    # A cache eviction means nothing over HTTP: no fault instead.
    http = FaultInjector(parse_fault_spec({"evict_rate": 1.0}))
    assert not any(http.draw(websocket=False) for _ in range(100))


def test_command_line_and_file_make_one_spec(tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text("faults:\n  seed: 3\n  error_rate: {429: 0.2}\n  lifetime_s: 30\n")
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    args = parser.parse_args(["--faults-file", str(path), "--fault", "lifetime_s=7"])
    cfg = config_from_args(args)
    assert cfg.faults.seed == 3 and cfg.faults.error_rate == {429: 0.2}
    assert cfg.faults.lifetime_s == 7  # --fault wins over the file
    assert cfg.ws_lifetime_s == 7  # the short lifetime applies to WebSockets
    with pytest.raises(SystemExit, match="fault nope: unknown field"):
        config_from_args(parser.parse_args(["--fault", "nope=1"]))


# -- each kind, as the harness records it --------------------------------------------------------


def faulted_run(
    tmp: Path,
    faults: list[str],
    transports: str,
    *,
    count: int = 3,
    timeout_s: float = 120.0,
    concurrency: int = 1,
    modelled_waits: bool = False,
) -> Run:
    """tiny.yaml against a server injecting ``faults``; without the modelled TTFT, decode and
    API times unless ``modelled_waits`` (a test whose claim needs time to pass)."""
    server_args = ["--store", ":memory:", "--drain-timeout-s", "1"]
    if not modelled_waits:
        server_args += NO_MODELLED_WAITS
    for item in faults:
        server_args += ["--fault", item]
    sets = {"rollout.count": str(count), "load.concurrency": str(concurrency)}
    run = run_tiny(
        tmp, transports.split(","), sets, request_timeout_s=timeout_s, server_args=server_args
    )
    assert run.summary is not None and run.summary["partial"] is False
    for name in transports.split(","):
        assert run.summary["transports"][name]["rollouts"]["count"] == count, name
    return run


def _kinds(run: Run, name: str) -> dict[str, int]:
    assert run.summary is not None
    return dict(run.summary["transports"][name]["errors_by_kind"])


def test_injected_errors_are_counted_by_status_code_and_transport(tmp_path: Path) -> None:
    run = faulted_run(tmp_path, ["error_rate.503=0.5", "error_rate.429=0.5"], "http,ws")
    for name in ("http", "ws"):
        kinds = _kinds(run, name)
        # Every rollout fails on its first request, with one of the two injected codes.
        assert set(kinds) <= {"service_unavailable", "rate_limit_exceeded"}, kinds
        assert sum(kinds.values()) == 3, kinds


def test_mid_stream_disconnects_fail_http_and_are_recovered_over_ws(tmp_path: Path) -> None:
    run = faulted_run(tmp_path, ["disconnect_rate=0.3", "seed=5"], "http,ws")
    # The server closed the connection inside the chunked body: an error, not a hang.
    http_errors = run.turns[(run.turns["transport"] == "http") & (run.turns["status"] == "error")]
    assert len(http_errors) >= 1
    assert http_errors["error_message"].str.contains("closed|disconnect", case=False).all(), list(
        http_errors["error_message"]
    )
    ws_turns = run.turns[run.turns["transport"] == "ws"]
    assert ws_turns["recoveries"].sum() >= 1
    # A cut WebSocket response is retried on a new connection; only three cuts in a row fail.
    assert set(_kinds(run, "ws")) <= {"recovery_exhausted"}, _kinds(run, "ws")
    recovered = ws_turns[(ws_turns["recoveries"] > 0) & (ws_turns["status"] == "completed")]
    assert len(recovered) >= 1 and recovered["new_connection"].all()


def test_stalled_streams_time_out_as_errors_of_kind_timeout(tmp_path: Path) -> None:
    run = faulted_run(
        tmp_path,
        ["stall_rate=1", "stall_s=60"],
        "http,ws,ws-append",
        count=2,
        # every request stalls, so every turn times out whatever the limit
        timeout_s=0.3,
        concurrency=2,
    )
    for name in ("http", "ws", "ws-append"):
        assert _kinds(run, name) == {"timeout": 2}, (name, _kinds(run, name))
    # Each stalled turn ended at the timeout, not at the end of the stall.
    failed = run.turns[run.turns["status"] == "error"]
    assert ((failed["done_ns"] - failed["sent_ns"]) / 1e9 < 30).all()


def test_latency_spikes_show_in_time_to_first_token(tmp_path: Path) -> None:
    run = faulted_run(
        tmp_path, ["spike_rate=1", "spike_ms=150"], "http,ws", count=1, modelled_waits=True
    )
    assert run.summary is not None
    for name in ("http", "ws"):
        t = run.summary["transports"][name]
        assert t["turns"]["errors"] == 0
        assert t["ttft_ms"]["p50"] >= 150, t["ttft_ms"]


def test_cache_evictions_are_recovered_by_resending_or_by_the_store(tmp_path: Path) -> None:
    run = faulted_run(tmp_path, ["evict_rate=1"], "ws,ws-store", count=2)
    assert _kinds(run, "ws") == {} and _kinds(run, "ws-store") == {}
    ws = run.turns[(run.turns["transport"] == "ws") & (run.turns["turn_index"] > 0)]
    assert (ws["recoveries"] == 1).all()  # previous_response_not_found -> full context
    store = run.turns[(run.turns["transport"] == "ws-store") & (run.turns["turn_index"] > 0)]
    assert (store["recoveries"] == 0).all() and set(store["sim_cache"]) == {"store"}


def test_short_connection_lifetimes_reconnect_without_errors(tmp_path: Path) -> None:
    # connections must outlive 0.2 s: the modelled times make a rollout last that long
    run = faulted_run(tmp_path, ["lifetime_s=0.2"], "http,ws", count=2, modelled_waits=True)
    assert _kinds(run, "http") == {} and _kinds(run, "ws") == {}
    ws = run.turns[run.turns["transport"] == "ws"]
    assert ws["recoveries"].sum() >= 1 and ws["new_connection"].sum() > 2


def test_http_keep_alive_connections_are_closed_after_the_lifetime() -> None:
    with (
        server_process(["--store", ":memory:", "--fault", "lifetime_s=0.2"]) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        body = {"model": "m", "input": "hi", "tool_choice": "none", "max_output_tokens": 300}
        first = client.post("/responses", json=body)
        # 300 tokens at 1,000 TPS outlive 0.2 s: the connection is older than its lifetime now.
        second = client.post("/responses", json=body)
        third = client.post("/responses", json=body)
    assert first.status_code == second.status_code == third.status_code == 200
    assert first.headers.get("connection") != "close"
    assert second.headers.get("connection") == "close"
    assert third.headers.get("connection") != "close"  # a fresh connection


def test_health_counts_a_cut_only_when_a_stream_was_cut() -> None:
    # End to end because the count moves from the draw to the send path: a drawn disconnect
    # on a request refused before any output (invalid JSON) changes nothing, nor does one
    # on a background create (answered at once; its run goes on without the fault). Only
    # the streamed create is cut, at its first delta.
    with (
        server_process(["--store", ":memory:", "--fault", "disconnect_rate=1"]) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        assert client.post("/responses", content=b"{not json").status_code == 400
        body = {"model": "m", "input": "hi", "stream": True, "max_output_tokens": 20}
        with pytest.raises(httpx.HTTPError):
            client.post("/responses", json=body).read()
        queued = client.post("/responses", json={**body, "stream": False, "background": True})
        assert queued.status_code == 200
        run_id = queued.json()["id"]
        # until the run has ended: 20 tokens of a longer answer end it "incomplete" (waiting
        # for "completed" polled the full 10 s)
        for _ in range(200):
            status = client.get(f"/responses/{run_id}").json()["status"]
            if status not in ("queued", "in_progress"):
                break
            time.sleep(0.05)
        counts = server.health()["faults_injected"]
    assert status in ("completed", "incomplete"), status
    assert counts == {"disconnect": 1}


def test_a_non_streamed_answer_is_cut_not_answered_500() -> None:
    # End to end (the ASGI server answers 500 to an exception before any response): the soak
    # counted these cuts as 500s, so injected disconnects outnumbered recorded cuts.
    with (
        server_process(["--store", ":memory:", "--fault", "disconnect_rate=1"]) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        body = {"model": "m", "input": "hi", "max_output_tokens": 20}
        with pytest.raises(httpx.HTTPError) as cut:
            client.post("/responses", json=body)
        counts = server.health()["faults_injected"]
    assert not isinstance(cut.value, httpx.HTTPStatusError)
    assert counts == {"disconnect": 1}
