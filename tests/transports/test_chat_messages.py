"""The ``chat`` and ``messages`` transports as ``run`` and as a Locust worker drive them, against a canned server that
speaks the two APIs as the wire contract writes them (tests/foreign_chat.py).

Real sockets on 127.0.0.1: the asyncio edge in this process, and in a Locust worker's
edge host (tests/transports/locust_edge.py), each against its own fresh server, so the
parity check compares what each put on the wire, headers included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.workload.plan import RolloutPlan
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import validate_scenario
from tests.foreign_chat import SIM_TIMING, foreign_chat_server
from tests.runs import TINY, asyncio_edge, in_process
from tests.transports.test_parity import RECORD_FIELDS, locust_edge

APIS = ("chat", "messages")


def plans(count: int = 2, reasoning: int = 0) -> list[RolloutPlan]:
    scenario = validate_scenario(
        {
            "name": "chat-messages",
            "seed": 31,
            "rollout": {
                "count": count,
                "system_tokens": 60,
                "tool_schema_tokens": 40,
                "user_prompt_tokens": 20,
                "tool_calls": 4,
                "parallel_calls": 2,
                "tool_output_tokens": 30,
                "tool_latency_ms": 1,
                "step_output_tokens": 20,
                "final_answer_tokens": 30,
                "reasoning_tokens": reasoning,
            },
        }
    )
    return generate_rollouts(scenario)


def test_a_tool_loop_with_parallel_calls_over_both_apis() -> None:
    rollouts = plans()
    with foreign_chat_server() as (url, requests):
        turns = asyncio_edge(url, APIS, rollouts, extra_headers={"X-Extra": "on"})
    assert {t["transport"] for t in turns} == set(APIS)
    assert all(t["status"] == "completed" for t in turns), turns
    per_api = {name: [t for t in turns if t["transport"] == name] for name in APIS}
    # the same seeded rollouts, turn for turn, over both: a paired comparison
    assert [(t["rollout_id"], t["turn_index"]) for t in per_api["chat"]] == [
        (t["rollout_id"], t["turn_index"]) for t in per_api["messages"]
    ]
    for t in turns:
        assert t["sent_ns"] < t["first_event_ns"] <= t["first_token_ns"] <= t["first_output_ns"]
        assert t["sim_ttft_ms"] == SIM_TIMING["ttft"] and t["sim_cache"] == "hit"
        assert t["input_tokens"] > 0 and t["output_tokens"] > 0
    chat = [r for r in requests if r["path"] == "/v1/chat/completions"]
    msgs = [r for r in requests if r["path"] == "/v1/messages"]
    assert len(chat) == len(per_api["chat"]) and len(msgs) == len(per_api["messages"])
    assert all(r["headers"]["authorization"] == "Bearer sk-loopbench" for r in chat)
    assert all(
        r["headers"]["x-api-key"] == "sk-loopbench"
        and r["headers"]["anthropic-version"] == "2023-06-01"
        and "authorization" not in r["headers"]
        for r in msgs
    )
    assert all(r["headers"]["x-extra"] == "on" for r in requests)
    # the second turn of a rollout echoes both parallel calls and sends both outputs
    second = chat[1]["body"]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert len(second[2]["tool_calls"]) == 2
    assert {m["tool_call_id"] for m in second[3:]} == {c["id"] for c in second[2]["tool_calls"]}
    blocks = msgs[1]["body"]["messages"]
    assert [m["role"] for m in blocks] == ["user", "assistant", "user"]
    assert [b["type"] for b in blocks[2]["content"]] == ["tool_result", "tool_result"]
    # prompt caching: every later turn of a rollout reads what the turn before wrote
    later = [t for t in per_api["messages"] if t["turn_index"] > 0]
    assert later and all(0 < t["cached_tokens"] < t["input_tokens"] for t in later)
    assert all(t["cached_tokens"] == 0 for t in per_api["chat"])


def test_reasoning_goes_back_as_thinking_for_messages_and_is_dropped_for_chat() -> None:
    with foreign_chat_server() as (url, requests):
        turns = asyncio_edge(url, APIS, plans(count=1, reasoning=12))
    assert all(t["status"] == "completed" and t["reasoning_tokens"] == 12 for t in turns), turns
    # one read may carry both (no pacing): never in the wrong order
    assert all(t["first_output_ns"] >= t["first_token_ns"] > t["sent_ns"] for t in turns)
    last_chat = next(r for r in reversed(requests) if r["path"].endswith("/chat/completions"))
    assert "reasoning" not in str(last_chat["body"]["messages"])
    last_msgs = requests[-1]["body"]
    thinking = [b for m in last_msgs["messages"] for b in m["content"] if b["type"] == "thinking"]
    # every earlier turn's thinking block, with its signature, first in its assistant message
    earlier = len([t for t in turns if t["transport"] == "messages"]) - 1
    assert len(thinking) == earlier > 0 and all(b["signature"].startswith("sig") for b in thinking)
    assert all(m["content"][0]["type"] == "thinking" for m in last_msgs["messages"][1::2])
    assert last_msgs["thinking"] == {"type": "enabled", "budget_tokens": 1024}


@pytest.mark.parametrize(
    ("mode", "kinds"),
    [
        ("error_status", {"chat": "server_error", "messages": "overloaded_error"}),
        ("midstream_error", {"chat": "server_error", "messages": "overloaded_error"}),
        ("truncate", {"chat": "truncated_stream", "messages": "truncated_stream"}),
        ("no_finish", {"chat": "truncated_stream", "messages": None}),
    ],
)
def test_failures_get_the_right_error_kind(mode: str, kinds: dict[str, str | None]) -> None:
    with foreign_chat_server(mode) as (url, _):
        turns = asyncio_edge(url, APIS, plans(count=1))
    for name, kind in kinds.items():
        mine = [t for t in turns if t["transport"] == name]
        if kind is None:
            assert all(t["status"] == "completed" for t in mine), mine
            continue
        # the rollout ends at its first failed turn
        assert [(t["status"], t["error_kind"]) for t in mine] == [("error", kind)], mine
        assert mine[0]["error_message"]
    if mode == "error_status":
        overloaded = next(t for t in turns if t["transport"] == "messages")
        assert overloaded["error_message"] == "overloaded_error (HTTP 529): Overloaded"


def test_both_edges_send_the_same_bytes_for_chat_and_messages() -> None:
    rollouts = plans(reasoning=8)
    runs = {}
    for edge, drive in (("asyncio", asyncio_edge), ("locust", locust_edge)):
        with foreign_chat_server() as (url, requests):
            turns = drive(url, APIS, rollouts)
            runs[edge] = (list(requests), [tuple(t[f] for f in RECORD_FIELDS) for t in turns])
    (a_requests, a_turns), (g_requests, g_turns) = runs["asyncio"], runs["locust"]
    assert len(a_requests) == len(g_requests) > 0
    for i, (a, g) in enumerate(zip(a_requests, g_requests, strict=True)):
        assert a == g, f"request {i} differs between the edges"
    assert a_turns == g_turns
    assert {t[0] for t in a_turns} == set(APIS)


@pytest.mark.parametrize(
    ("placement", "marked"),
    [("none", (0, 0, 0)), ("system", (1, 1, 0)), ("conversation", (1, 1, 1))],
)
def test_cache_control_flag_of_loopbench_run(
    tmp_path: Path, placement: str, marked: tuple[int, int, int]
) -> None:
    """``run --target URL --cache-control X``: the breakpoints each messages body carries
    (system, tools, messages), and the manifest records a placement other than the default."""
    with foreign_chat_server() as (url, requests):
        code, out = in_process(
            "run", TINY, "--target", url, "--no-probe", "--transports", "messages",
            "--set", "rollout.count=1", "--cache-control", placement,
            "--out", tmp_path, "--run-id", "cc", "-q", report=False,
        )  # fmt: skip
    assert code == 0, out
    assert requests
    for r in requests:
        body = r["body"]
        found = (
            sum("cache_control" in b for b in body["system"]),
            sum("cache_control" in t for t in body["tools"]),
            sum("cache_control" in b for m in body["messages"] for b in m["content"]),
        )
        assert found == marked, (placement, found)
    manifest = json.loads((tmp_path / "cc" / "manifest.json").read_text())
    assert manifest["client_options"].get("cache_control", "conversation") == placement
    if placement == "conversation":
        assert "cache_control" not in manifest["client_options"]
