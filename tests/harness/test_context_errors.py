"""A turn refused for the context window fails as context_length_exceeded, worded with its
numbers, and no transport retries it (under ``run`` and in a Locust worker's edge host)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from harness.client.options import TransportOptions
from harness.transports import make_transport
from harness.transports.rollout_loop import run_rollout
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import validate_scenario
from tests.server.conftest import configured_server
from tests.transports.locust_edge import drive_edge_host

WINDOW = 1500


@pytest.fixture(scope="module")
def small_window() -> Iterator[str]:
    with configured_server(
        "--set", f"engine.context_window_tokens={WINDOW}", "--set", "engine.max_output_tokens=500"
    ) as url:
        yield url


@pytest.fixture(scope="module")
def plan() -> RolloutPlan:
    # Turn 0 (~500 tokens) fits; turn 1 adds a 1,200-token tool output and does not.
    scenario = validate_scenario(
        {
            "name": "s",
            "rollout": {
                "count": 1,
                "system_tokens": 300,
                "tool_schema_tokens": 100,
                "user_prompt_tokens": 50,
                "tool_calls": 2,
                "tool_output_tokens": 1200,
                "tool_latency_ms": 1,
                "step_output_tokens": 20,
                "final_answer_tokens": 20,
            },
        }
    )
    return generate_rollouts(scenario)[0]


def check(roll: RolloutRecord, turns: list[TurnRecord], *, in_stream: bool = False) -> None:
    assert roll.status == "error" and roll.error_kind == "context_length_exceeded"
    assert [t.ok for t in turns] == [True, False]
    failed = turns[1]
    assert failed.error_kind == "context_length_exceeded"
    assert failed.recoveries == 0
    # An error response is prefixed with its kind and status; the append prototype's refusal
    # comes inside the stream (error + response.failed), worded the same after that.
    # (a WebSocket error event says so: no HTTP response was answered)
    where = "status 400 on the WebSocket" if failed.transport.startswith("ws") else "HTTP 400"
    prefix = "" if in_stream else f"context_length_exceeded ({where}): "
    assert failed.error_message.startswith(prefix + "the request's "), failed.error_message
    assert f"exceed the model's context window of {WINDOW:,} tokens" in failed.error_message


@pytest.mark.parametrize("name", ["http", "http-chained", "ws", "ws-store", "ws-append"])
def test_asyncio_edge(name: str, small_window: str, plan: RolloutPlan) -> None:
    async def go() -> tuple[RolloutRecord, list[TurnRecord]]:
        turns: list[TurnRecord] = []
        transport = make_transport(name, TransportOptions(small_window, request_timeout_s=30))
        try:
            roll = await run_rollout(
                transport, plan, intended_start_ns=time.perf_counter_ns(), on_turn=turns.append
            )
        finally:
            await transport.aclose()
        return roll, turns

    check(*asyncio.run(go()), in_stream=name == "ws-append")


@pytest.mark.parametrize("name", ["http", "ws"])
def test_locust_edge_host(name: str, small_window: str, plan: RolloutPlan) -> None:
    options = TransportOptions(small_window, request_timeout_s=30)
    turns, [roll], _ = drive_edge_host(options, [(name, plan)])
    check(roll, turns)
