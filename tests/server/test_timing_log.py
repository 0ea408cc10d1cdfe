"""``--timing-log``: one JSON line per finished response, matched to what real clients saw.

Real reference servers on port 0 (docs/server.md "Timing log"): the official ``openai`` SDK
for Chat Completions (an ``X-Request-ID`` extra header, a tagged prompt), raw HTTP for
Messages, loopbench's own ``http`` and ``ws`` transports for the Responses API; and a
``loopbench serve`` subprocess stopped with SIGTERM or SIGINT while streams are open, whose file must
then hold every line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from harness.client.options import TransportOptions
from harness.transports import make_transport
from harness.transports.rollout_loop import run_rollout
from harness.workload.records import TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import validate_scenario
from reference_server.process import READY_PREFIX
from reference_server.timing_log import find_tag
from tests.server.conftest import configured_server

HINTS = {"loopbench.output_tokens": "12", "loopbench.reasoning_tokens": "0"}
SIM_KEYS = {"api_pre", "api_queue", "engine_queue", "prefill", "decode", "ttft"}


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_line(line: dict[str, Any], started_ns: int, ended_ns: int) -> None:
    """What every completed streamed response's line must hold, whatever its API."""
    assert line["status"] == "completed", line
    timing = line["sim_timing"]
    assert timing.keys() >= SIM_KEYS, timing
    assert started_ns <= line["arrived_unix_ns"] <= ended_ns
    assert line["arrived_unix_ns"] < line["first_token_unix_ns"] <= ended_ns
    # The first token is written no earlier than arrival + modelled TTFT (ms, as sim_timing says).
    first_after_ms = (line["first_token_unix_ns"] - line["arrived_unix_ns"]) / 1e6
    assert timing["first_token_late_ms"] >= -0.5  # the timer's early-release window at most
    assert abs(first_after_ms - timing["ttft"] - timing["first_token_late_ms"]) < 0.05


def rollouts(count: int) -> Any:
    scenario = validate_scenario(
        {
            "name": "timing-log",
            "seed": 5,
            "rollout": {
                "count": count,
                "system_tokens": 30,
                "user_prompt_tokens": 10,
                "tool_calls": 1,
                "tool_output_tokens": 10,
                "tool_latency_ms": 1,
                "step_output_tokens": 8,
                "final_answer_tokens": 8,
            },
        }
    )
    return generate_rollouts(scenario)


def loopbench_turns(url: str, transport_name: str, request_id: str) -> list[TurnRecord]:
    turns: list[TurnRecord] = []

    async def main() -> None:
        options = TransportOptions(url, extra_headers={"X-Request-ID": request_id})
        transport = make_transport(transport_name, options)
        try:
            for plan in rollouts(2):
                await run_rollout(
                    transport, plan, intended_start_ns=time.perf_counter_ns(), on_turn=turns.append
                )
        finally:
            await transport.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))
    return turns


def test_every_api_gets_a_line_with_the_ids_tags_and_times_its_client_saw(tmp_path: Path) -> None:
    log = tmp_path / "timing.jsonl"
    started = time.time_ns()
    chat_seen: dict[str, str] = {}
    with configured_server("--timing-log", str(log)) as url:
        with OpenAI(api_key="sk-x", base_url=url, max_retries=0) as client:
            for i in range(3):
                stream = client.chat.completions.create(
                    model="sim",
                    messages=[
                        {"role": "system", "content": "Be brief. lbq-notthisone"},
                        {"role": "user", "content": f"Summarise lbq-chat{i} please."},
                    ],
                    metadata=HINTS,
                    stream=True,
                    extra_headers={"X-Request-ID": f"rid-chat-{i}"},
                )
                ids = {chunk.id for chunk in stream}
                assert len(ids) == 1
                chat_seen[ids.pop()] = f"rid-chat-{i}"
        messages_seen: dict[str, str] = {}
        with httpx.Client(base_url=url, timeout=30) as http:
            body = {
                "model": "sim",
                "max_tokens": 50,
                "stream": True,
                "messages": [{"role": "user", "content": "hi lbq-msg7 there"}],
                # the hint keeps the answer inside max_tokens (a drawn one may be cut)
                "metadata": {"user_id": "u", **HINTS},
            }
            with http.stream(
                "POST", "/messages", json=body, headers={"x-request-id": "rid-msg"}
            ) as resp:
                for raw in resp.iter_lines():
                    if raw.startswith("data: "):
                        event = json.loads(raw[6:])
                        if event["type"] == "message_start":
                            messages_seen[event["message"]["id"]] = "rid-msg"
        http_turns = loopbench_turns(url, "http", "rid-http")
        ws_turns = loopbench_turns(url, "ws", "rid-ws")
        ended = time.time_ns()
    lines = read_lines(log)  # the server has stopped: every line is on disk
    by_id = {line["id"]: line for line in lines}
    assert len(by_id) == len(lines)
    for line in lines:
        check_line(line, started, ended)

    for response_id, request_id in chat_seen.items():
        line = by_id[response_id]
        assert line["api"] == "chat" and line["request_id"] == request_id
        # The last user message's tag, not the system prompt's.
        assert line["tag"] == "lbq-chat" + request_id[-1]
    (msg_id,) = messages_seen
    assert by_id[msg_id]["api"] == "messages" and by_id[msg_id]["tag"] == "lbq-msg7"
    assert by_id[msg_id]["request_id"] == "rid-msg"
    for turns, request_id in ((http_turns, "rid-http"), (ws_turns, "rid-ws")):
        assert turns and all(t.status == "completed" for t in turns)
        for turn in turns:
            line = by_id[turn.response_id]
            assert line["api"] == "responses" and line["request_id"] == request_id
            assert line["tag"] is None  # loopbench's synthetic prompts carry none
            # The same modelled TTFT the client recorded from the stream's sim_timing.
            assert line["sim_timing"]["ttft"] == turn.sim_ttft_ms
    assert len(lines) == len(chat_seen) + 1 + len(http_turns) + len(ws_turns)


@pytest.mark.parametrize(
    ("sig", "workers"), [(signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGTERM, 2)]
)
def test_the_file_is_complete_after_a_stop_signal_with_streams_open(
    tmp_path: Path, sig: signal.Signals, workers: int
) -> None:
    log = tmp_path / "timing.jsonl"
    log.write_text("a line of an earlier run\n")
    # --workers N: N processes append to the one file the supervisor emptied.
    store = ":memory:" if workers == 1 else str(tmp_path / "store.sqlite3")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "serve",
            "--port",
            "0",
            "--store",
            store,
            "--workers",
            str(workers),
            "--timing-log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith(READY_PREFIX), ready
        url = ready[len(READY_PREFIX) :].strip()
        count = 12
        first_deltas = threading.Semaphore(0)
        results: list[str] = []

        def stream(i: int) -> None:
            body = {
                "model": "sim",
                "stream": True,
                "input": f"question lbq-q{i}",
                "metadata": {"loopbench.output_tokens": "400"},  # ~0.4 s: open at SIGTERM
            }
            with (
                httpx.Client(base_url=url, timeout=30) as http,
                http.stream("POST", "/responses", json=body) as resp,
            ):
                signalled = False
                for raw in resp.iter_lines():
                    if raw.startswith("data: ") and not signalled and ".delta" in raw:
                        signalled = True
                        first_deltas.release()
                    if '"response.completed"' in raw:
                        results.append(json.loads(raw[6:])["response"]["id"])

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for _ in range(count):
            assert first_deltas.acquire(timeout=30)
        os.kill(proc.pid, sig)  # every stream is mid-response: the drain lets them finish
        for t in threads:
            t.join(timeout=30)
        # stopped, after the drain, as every loopbench command is (the exit-code table)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    lines = read_lines(log)  # started empty: the earlier run's line is gone
    assert sorted(results) == sorted(line["id"] for line in lines) and len(results) == count
    assert sorted(line["tag"] for line in lines) == sorted(f"lbq-q{i}" for i in range(count))
    assert all(line["status"] == "completed" for line in lines)


def test_the_tag_is_the_last_user_messages_else_the_first_in_the_input() -> None:
    def user(text: str) -> dict[str, Any]:
        return {"type": "message", "role": "user", "content": text}

    assert find_tag([user("lbq-a1"), user("x lbq-b2 lbq-c3")]) == "lbq-b2"
    assert find_tag([user("lbq-a1"), user("nothing")]) == "lbq-a1"
    assert find_tag([{"type": "function_call_output", "call_id": "c", "output": "lbq-out9"}]) == (
        "lbq-out9"
    )
    assert find_tag([user("LBQ-UPPER lbq-")]) is None
