"""Sub-agents end to end against the embedded server: every conversation runs, the parent
waits for its sub-agents, the rollout spans the tree; over HTTP, WebSocket connections and
WebSocket lanes (docs/metrics.md §1.7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.report.results import Run
from tests.runs import run_file

SCENARIO = """\
name: subagents-tiny
seed: 3
transports: [http, ws, chat, messages]
rollout:
  count: 2
  system_tokens: 100
  tool_schema_tokens: 50
  user_prompt_tokens: 30
  tool_calls: 3
  parallel_calls: 2
  tool_output_tokens: 60
  tool_latency_ms: 3
  step_output_tokens: 40
  final_answer_tokens: 60
  subagents:
    count: 2
    turns: [0]
    join: wait
    result_tokens: 50
    system_tokens: 80
    tool_schema_tokens: 40
    user_prompt_tokens: 30
    tool_calls: 1
    tool_output_tokens: 50
    tool_latency_ms: 2
    step_output_tokens: 30
    final_answer_tokens: 40
load:
  mode: closed
  concurrency: 2
"""
# the plan: root turns [2 calls (both sub-agents), 1 call, final]; each sub-agent [1 call, final]
ROOT_TURNS, SUB_TURNS = 3, 2


def _run(tmp: Path, run_id: str, transports: list[str], **kw: Any) -> Run:
    path = tmp / "subagents-tiny.yaml"
    path.write_text(SCENARIO)
    return run_file(
        path, tmp, transports=transports, run_id=run_id, server_args=["--store", ":memory:"], **kw
    )


@pytest.fixture(scope="module")
def connections(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(tmp_path_factory.mktemp("results"), "conn", ["http", "ws", "chat", "messages"])


@pytest.fixture(scope="module")
def lanes(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(tmp_path_factory.mktemp("results"), "lanes", ["ws"], ws_subagents="lanes")


def _check_tree(run: Run, transport: str) -> None:
    turns = run.turns[run.turns["transport"] == transport]
    rollouts = run.rollouts[run.rollouts["transport"] == transport]
    assert len(rollouts) == 2
    assert (rollouts["status"] == "completed").all(), rollouts
    for rid, roll in rollouts.groupby("rollout_id"):
        mine = turns[turns["rollout_id"] == rid]
        by_conv = mine.groupby("conversation").size().to_dict()
        assert by_conv == {0: ROOT_TURNS, 1: SUB_TURNS, 2: SUB_TURNS}, (transport, rid)
        assert set(mine[mine["conversation"] > 0]["parent_conversation"]) == {0}
        assert set(mine[mine["conversation"] == 0]["parent_conversation"]) == {-1}
        assert (mine["status"] == "completed").all()
        root = mine[mine["conversation"] == 0].set_index("turn_index")
        subs = mine[mine["conversation"] > 0]
        # forked after the root's turn 0 answered; the root's turn 1 waited for both
        assert subs["sent_ns"].min() >= root.loc[0, "done_ns"]
        assert root.loc[1, "sent_ns"] >= subs["done_ns"].max()
        (r,) = roll.to_dict("records")
        # the rollout spans the whole tree, and counts every conversation's turns
        assert r["start_ns"] <= mine["sent_ns"].min()
        assert r["end_ns"] >= mine["done_ns"].max()
        assert r["turns"] == ROOT_TURNS + 2 * SUB_TURNS
        assert r["conversations"] == 3
        assert 0 < r["subagent_wait_ns"] < r["end_ns"] - r["start_ns"]
        # the slower sub-agent outlasted the root's (zero-latency) other tools
        assert r["critical_path"] in ("0>1>0", "0>2>0")
        assert r["critical_path_turns"] == ROOT_TURNS + SUB_TURNS


@pytest.mark.parametrize("transport", ["http", "ws", "chat", "messages"])
def test_subagents_run_as_concurrent_conversations(connections: Run, transport: str) -> None:
    _check_tree(connections, transport)
    assert connections.summary is not None
    figures = connections.summary["subagents"][transport]
    assert figures["rollouts"] == 2
    assert 0 < figures["wait_share_p50"] < 1
    assert figures["critical_path_through_subagent"] == 1.0
    # two rollouts: both through the same sub-agent (1.0) or one each (0.5, ties by name)
    assert figures["critical_path_common"] in ("0>1>0", "0>2>0")
    assert figures["critical_path_common_share"] in (0.5, 1.0)


def _new_connections(run: Run, transport: str) -> pd.Series:
    turns = run.turns[run.turns["transport"] == transport]
    return turns.groupby("rollout_id")["new_connection"].sum()


def test_ws_opens_a_connection_per_conversation(connections: Run) -> None:
    assert (_new_connections(connections, "ws") == 3).all()
    ws = connections.rollouts[connections.rollouts["transport"] == "ws"]
    assert (ws["connections"] == 3).all()


def test_ws_lanes_share_the_rollouts_connection(lanes: Run) -> None:
    _check_tree(lanes, "ws")
    assert (_new_connections(lanes, "ws") == 1).all()
    assert (lanes.rollouts["connections"] == 1).all()
    # each lane kept its own chain in the connection's cache: later turns hit it
    later = lanes.turns[lanes.turns["turn_index"] > 0]
    assert set(later["sim_cache"]) == {"hit"}
