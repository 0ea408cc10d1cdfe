"""The Locust driver's blocking transports against a real reference server (no gevent here).

The sessions are plain blocking socket code; gevent makes them cooperative in
a Locust worker, but they run as they are in this process.
"""

from __future__ import annotations

import time

import pytest

from harness.client.options import TransportOptions
from harness.locust_driver.net import Endpoint, now_ns
from harness.locust_driver.sessions import ApiHttpSession, HttpSession, WsSession, make_session
from harness.wire.errors import APIError, UsageError
from harness.wire.transports import transport_spec
from harness.workload.agent import Transcript
from harness.workload.plan import RolloutPlan
from harness.workload.records import TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import validate_scenario
from tests.server.conftest import configured_server
from tests.transports.gevent_replay import replay


@pytest.fixture(scope="module")
def plans() -> list[RolloutPlan]:
    scenario = validate_scenario(
        {
            "name": "s",
            "seed": 11,
            "rollout": {
                "count": 2,
                "system_tokens": 60,
                "tool_schema_tokens": 40,
                "user_prompt_tokens": 20,
                "tool_calls": 2,
                "tool_output_tokens": 30,
                "tool_latency_ms": 1,
                "step_output_tokens": 20,
                "final_answer_tokens": 30,
            },
        }
    )
    return generate_rollouts(scenario)


def _run(name: str, url: str, plans: list[RolloutPlan], **opts: bool) -> list[TurnRecord]:
    turns: list[TurnRecord] = []
    for plan, roll in replay(name, TransportOptions(url, **opts), plans, turns.append, time.sleep):
        assert roll.status == "completed", (roll.error_kind, turns[-1].error_message)
        assert roll.turns == len(plan.turns) == 3
        assert roll.start_ns <= roll.end_ns and roll.tool_ns >= 2 * 1_000_000
    return turns


@pytest.mark.parametrize("name", ["http", "http-chained", "ws", "ws-store", "chat", "messages"])
def test_every_transport_completes_rollouts_with_ordered_timestamps(
    name: str, server_url: str, plans: list[RolloutPlan]
) -> None:
    turns = _run(name, server_url, plans)
    assert len(turns) == 6
    for rec in turns:
        assert rec.ok and rec.transport == name and rec.output_tokens > 0
        assert rec.sent_ns < rec.first_event_ns <= rec.first_token_ns <= rec.last_token_ns
        assert rec.last_token_ns <= rec.done_ns
        assert rec.sim_ttft_ms >= 0 and rec.itl_ns
    if name.startswith("ws"):
        # One WebSocket per rollout, chained by id on the same connection after turn 0.
        assert [r.new_connection for r in turns] == [True, False, False] * 2
        assert [r.sim_cache for r in turns][1:3] == ["hit", "hit"]
    else:
        # One keep-alive connection for the user, across rollouts.
        assert [r.new_connection for r in turns] == [True] + [False] * 5


@pytest.mark.parametrize("name", ["http", "ws"])
def test_over_tls_a_new_connection_times_its_connect_and_handshake(
    name: str, plans: list[RolloutPlan]
) -> None:
    with configured_server("--tls-self-signed") as https_url:
        turns = _run(name, https_url, plans[:1], verify_tls=False)
    new = [r for r in turns if r.new_connection]
    reused = [r for r in turns if not r.new_connection]
    assert len(new) == 1 and len(reused) == 2
    for r in new:
        assert 0 < r.connect_start_ns < r.tcp_connected_ns < r.tls_done_ns <= r.connected_ns
    for r in reused:
        assert r.connect_start_ns == r.tcp_connected_ns == r.tls_done_ns == 0


def test_without_keepalive_every_request_opens_a_connection(
    server_url: str, plans: list[RolloutPlan]
) -> None:
    turns = _run("http", server_url, plans[:1], keepalive=False)
    assert [r.new_connection for r in turns] == [True, True, True]
    # The connection is opened inside the request, so its cost is part of TTFT, as for the
    # asyncio driver (docs/metrics.md §1: `sent` precedes `connected`).
    assert all(r.sent_ns < r.connected_ns < r.first_event_ns for r in turns)


def test_ws_cache_miss_recovers_by_resending_the_context(
    server_url: str, plans: list[RolloutPlan]
) -> None:
    session = WsSession(transport_spec("ws"), TransportOptions(server_url))
    transcript = Transcript(plans[0])
    try:
        first = TurnRecord("ws", 0, 0)
        stream = session.turn(transcript.next_input(0), first)
        stream.fill(first)
        jobs = transcript.record_output(0, stream.function_calls)
        transcript.add_tool_outputs(0, jobs)
        session.conv.previous_response_id = "resp_never_issued"
        second = TurnRecord("ws", 0, 1)
        sent_before = now_ns()
        stream = session.turn(transcript.next_input(1), second)
        stream.fill(second)
    finally:
        session.close()
    assert first.ok and second.ok
    assert second.recoveries == 1 and second.recovery_ns > 0
    assert second.sent_ns >= sent_before and second.done_ns > second.sent_ns


def test_http_errors_come_back_as_api_errors(server_url: str, plans: list[RolloutPlan]) -> None:
    session = HttpSession(transport_spec("http-chained"), TransportOptions(server_url))
    session.conv.previous_response_id = "resp_never_issued"
    try:
        transcript = Transcript(plans[0])
        with pytest.raises(APIError) as err:
            session.turn(transcript.next_input(0), TurnRecord("http-chained", 0, 0))
        assert err.value.status == 404 or err.value.status == 400
        assert err.value.code == "previous_response_not_found"
        # The connection stays usable after an error response.
        session.conv.previous_response_id = None
        rec = TurnRecord("http-chained", 0, 0)
        session.turn(transcript.next_input(0), rec).fill(rec)
        assert rec.ok
    finally:
        session.close()


def test_the_registry_decides_what_runs_under_locust() -> None:
    url = "http://127.0.0.1:9/v1"
    assert isinstance(make_session("ws-store", TransportOptions(url)), WsSession)
    assert isinstance(make_session("http-chained", TransportOptions(url)), HttpSession)
    for name in ("chat", "messages"):
        assert isinstance(make_session(name, TransportOptions(url)), ApiHttpSession)
    with pytest.raises(UsageError, match="not available under Locust"):
        make_session("ws-append", TransportOptions(url))
    with pytest.raises(UsageError, match="unknown transport 'carrier-pigeon'"):
        make_session("carrier-pigeon", TransportOptions(url))


def test_endpoints_and_clock() -> None:
    ep = Endpoint.from_url("https://api.example.test/v1/")
    assert (ep.tls, ep.port, ep.base_path, ep.host_header) == (True, 443, "/v1", "api.example.test")
    assert ep.ws_url("/responses") == "wss://api.example.test/v1/responses"
    assert Endpoint.from_url("http://[::1]:8000/v1").host_header == "[::1]:8000"
    with pytest.raises(Exception, match="expected http"):
        Endpoint.from_url("ftp://x/v1")
    # Epoch-anchored: records of workers on different machines share an origin.
    assert abs(now_ns() - time.time_ns()) < 1_000_000_000
