"""The Mooncake and Azure LLM inference importers on small files written in those formats.

``data/mooncake-toolagent.jsonl`` is a Mooncake request trace (timestamp, input_length,
output_length, hash_ids; 512-token blocks) with two agent conversations sharing a system
prompt block (``0``), a request forked from the first conversation's history, a request of
its own and a blank line; ``data/mooncake-sessions.jsonl`` uses aiperf's multi-turn fields
(session_id, delay, text_input); ``data/azure-conv.csv`` has the Azure columns (TIMESTAMP,
ContextTokens, GeneratedTokens).  The expected values are worked out by hand in comments.
"""

from __future__ import annotations

import json
import random
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from harness.report.results import load_run
from harness.wire.errors import UsageError
from harness.workload.importers import IMPORTERS, find_session_files, import_sessions
from harness.workload.importers.azure import import_azure_files, parse_azure
from harness.workload.importers.codex import SessionImportError
from harness.workload.importers.common import split_tokens
from harness.workload.importers.mooncake import import_mooncake_files, parse_mooncake
from harness.workload.importers.otel import import_otel_files, parse_otel
from harness.workload.trace import TraceRollout, TraceTurn, read_trace
from tests.runs import run_cli, run_file

DATA = Path(__file__).parent / "data"
TOOLAGENT = DATA / "mooncake-toolagent.jsonl"
SESSIONS = DATA / "mooncake-sessions.jsonl"
AZURE = DATA / "azure-conv.csv"


def _shape(r: TraceRollout) -> list[tuple[int, list[tuple[float, int]]]]:
    return [
        (t.output_tokens, [(c.latency_ms, c.output_tokens) for c in t.tool_calls]) for t in r.turns
    ]


def test_mooncake_conversations_from_hash_id_prefixes() -> None:
    a, b, fork, alone = import_mooncake_files([str(TOOLAGENT)])
    # Lines 1, 3, 5: each one's hash_ids start with all full blocks of the one before
    # (1300 // 512 = 2 blocks [0, 1]; then 1560 // 512 = 3 blocks [0, 1, 3]).
    assert a.id == "mooncake-toolagent.jsonl:1" and a.meta["lines"] == [1, 3, 5]
    # The first request of the file shares nothing with an earlier one: all of it is prompt.
    assert (a.system_tokens, a.user_prompt_tokens) == (0, 1300)
    # Tool output = next input - this input - this output: 1560-1300-60, 2090-1560-80.
    # Tool time = the arrival gap: 1500-0, 2600-1500 ms.
    assert _shape(a) == [(60, [(1500.0, 200)]), (80, [(1100.0, 450)]), (120, [])]
    # Each request's whole context, in the v2 per-turn field (not meta).
    assert [t.input_tokens for t in a.turns] == [1300, 1560, 2090]
    assert "turn_input_tokens" not in a.meta and a.uses_v2
    assert a.meta["tool_time_includes_model_time"] is True
    # Lines 2, 4, 9 (line 8 is blank): block 0 is the system prompt line 1 already had.
    assert b.meta["lines"] == [2, 4, 9]
    assert (b.system_tokens, b.user_prompt_tokens) == (512, 588)
    # 1440-1100-40 = 300; 1470-1440-30 = 0 (a tool that returned nothing new).
    assert _shape(b) == [(40, [(1900.0, 300)]), (30, [(1500.0, 0)]), (25, [])]
    # Line 7 starts with the three blocks of line 3, but conversation A had already moved on
    # to line 5: a fork of A's history, one turn whose context is the inherited 3 blocks.
    assert fork.id == "mooncake-toolagent.jsonl:7"
    assert (fork.system_tokens, fork.user_prompt_tokens) == (1536, 164)
    assert _shape(fork) == [(50, [])]
    # Line 6 (arrives after line 7, listed before it) shares nothing: one turn.
    assert alone.id == "mooncake-toolagent.jsonl:6" and _shape(alone) == [(20, [])]
    assert (alone.system_tokens, alone.user_prompt_tokens) == (0, 400)


def test_a_shared_system_prompt_alone_starts_no_conversation() -> None:
    lines = [
        # Lines 1 and 2 hold one full block each, the system prompt [0] both read: neither
        # has history of its own in its full blocks, so line 3 continues neither.
        '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}',
        '{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]}',
        '{"timestamp": 900, "input_length": 2000, "output_length": 5, "hash_ids": [0, 3, 4, 5]}',
    ]
    rollouts = parse_mooncake(lines, "t.jsonl")
    assert [r.meta["lines"] for r in rollouts] == [[1], [2], [3]]
    # A request that re-reads less than its predecessor is not its next turn either.
    retry = [
        '{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}',
        '{"timestamp": 9, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 3]}',
    ]
    assert [r.meta["lines"] for r in parse_mooncake(retry, "t.jsonl")] == [[1], [2]]
    # Without hash_ids every request is its own one-turn rollout.
    plain = ['{"timestamp": 0, "input_length": 10, "output_length": 5}'] * 2
    assert [len(r.turns) for r in parse_mooncake(plain, "t.jsonl")] == [1, 1]


def test_mooncake_sessions_add_each_turn_input() -> None:
    s1, s2 = import_mooncake_files([str(SESSIONS)])
    assert (s1.id, s1.meta["lines"], s1.meta["grouped_by"]) == ("s1", [1, 3, 4], "session_id")
    # Each later line's input is what that turn adds (the tool's output); delay is tool time.
    # text_input of 40 characters is 10 tokens.
    assert _shape(s1) == [(50, [(250.0, 120)]), (40, [(0.0, 10)]), (70, [])]
    assert (s1.system_tokens, s1.user_prompt_tokens) == (0, 800)
    assert s1.meta["turn_new_input_tokens"] == [800, 120, 10]
    # Not the turn's whole context: nothing for the v2 field.
    assert [t.input_tokens for t in s1.turns] == [None, None, None]
    assert "tool_time_includes_model_time" not in s1.meta
    # s2 shares block 0 with s1's first line; its output_length 0 is replayed as 1 token.
    assert (s2.system_tokens, s2.user_prompt_tokens) == (512, 188)
    assert _shape(s2) == [(30, [(1200.5, 300)]), (1, [])]
    assert s2.meta["empty_output_turns"] == [1]


def test_mooncake_recovers_interleaved_conversations() -> None:
    """Conversations written the way Mooncake hashes them come back exactly.

    300 conversations share a 3-block system prompt and arrive interleaved; each turn's
    context grows by its answer and a tool output, often by less than a block, and the
    partial last block gets a new id each time (its content changed).
    """
    rng = random.Random(7)
    next_id, t = 100, 0
    lines: list[dict[str, object]] = []
    expected: dict[int, list[tuple[int, int]]] = {}  # first line's timestamp -> (out, tool)
    for _ in range(300):
        t += rng.randint(1, 300)
        # At least one block of its own: a start inside the system prompt is ambiguous.
        blocks, context, at, turns = [0, 1, 2], 2048 + rng.randint(0, 3000), t, []
        for _turn in range(rng.randint(1, 8)):
            full = context // 512
            while len(blocks) < full:
                blocks.append(next_id)
                next_id += 1
            ids = blocks[:full] + ([next_id] if context % 512 else [])
            next_id += 1
            out, tool = rng.randint(1, 400), rng.randint(0, 1500)
            lines.append(
                {"timestamp": at, "input_length": context, "output_length": out, "hash_ids": ids}
            )
            turns.append((out, tool))
            context += out + tool
            at += rng.randint(200, 9000)
        expected[t] = turns
    lines.sort(key=lambda d: d["timestamp"])  # type: ignore[arg-type, return-value]
    rollouts = parse_mooncake([json.dumps(d) for d in lines], "big.jsonl")
    got = {
        int(r.meta["arrival_ms"]): [
            (turn.output_tokens, turn.tool_calls[0].output_tokens if turn.tool_calls else -1)
            for turn in r.turns
        ]
        for r in rollouts
    }
    assert len(rollouts) == 300
    assert got == {k: [(o, c) for o, c in v[:-1]] + [(v[-1][0], -1)] for k, v in expected.items()}
    assert {r.system_tokens for r in rollouts if r.meta["lines"][0] > 1} == {1536}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{oops", r"^m.jsonl: line 2: invalid JSON"),
        ("[1, 2]", r"^m.jsonl: line 2: expected a \{timestamp, input_length"),
        (
            '{"timestamp": 1, "output_length": 3}',
            r"^m.jsonl: line 2: input_length: expected an integer ≥ 0, got "
            r"'nothing'$",
        ),
        (
            '{"timestamp": 1, "input_length": -4, "output_length": 3}',
            r"^m.jsonl: line 2: input_length: expected an integer ≥ 0, got -4$",
        ),
        (
            '{"timestamp": 1, "input_length": 4, "output_length": 2.5}',
            r"^m.jsonl: line 2: output_length: expected an integer ≥ 0, got 2.5$",
        ),
        (
            '{"timestamp": "soon", "input_length": 4, "output_length": 2}',
            r"^m.jsonl: line 2: timestamp: expected a number of milliseconds ≥ 0, got 'soon'$",
        ),
        (
            '{"timestamp": 1, "input_length": 4, "output_length": 2, "hash_ids": [1, "a"]}',
            r"^m.jsonl: line 2: hash_ids: expected a list of integer block ids, got \[1, 'a'\]$",
        ),
        (
            '{"session_id": true, "input_length": 4, "output_length": 2}',
            r"^m.jsonl: line 2: session_id: expected a string, got True$",
        ),
    ],
)
def test_bad_mooncake_lines(line: str, message: str) -> None:
    good = '{"timestamp": 0, "input_length": 4, "output_length": 2}'
    with pytest.raises(SessionImportError, match=message):
        parse_mooncake([good, line], "m.jsonl")


def test_azure_rows_are_one_turn_rollouts() -> None:
    rollouts = import_azure_files([str(AZURE)])
    # Line 5 is blank; the header is line 1.
    assert [r.id for r in rollouts] == [f"azure-conv.csv:{n}" for n in (2, 3, 4, 6)]
    assert [(r.system_tokens, r.user_prompt_tokens) for r in rollouts] == [
        (0, 374),
        (0, 396),
        (0, 879),
        (0, 1980),
    ]
    assert [_shape(r) for r in rollouts] == [[(44, [])], [(109, [])], [(1, [])], [(12, [])]]
    assert rollouts[2].meta["empty_output_turns"] == [0]
    # Arrivals after the first row, from 7-digit fractional seconds.
    assert [r.meta["arrival_ms"] for r in rollouts] == [0.0, 4314.579, 4319.41, 5690.644]


def test_azure_2024_timestamps_with_an_offset() -> None:
    rows = [
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2024-05-10 00:00:00.009930+00:00,2048,28",
        "2024-05-10 00:00:00.509930+00:00,17,310",
    ]
    rollouts = parse_azure(rows, "a.csv")
    assert [r.meta["arrival_ms"] for r in rollouts] == [0.0, 500.0]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            ["time,in,out", "1,2,3"],
            r"^a.csv: line 1: expected a header with the columns TIMESTAMP, ContextTokens, "
            r"GeneratedTokens, got time, in, out \(missing TIMESTAMP, ContextTokens, "
            r"GeneratedTokens\)$",
        ),
        ([], r"^a.csv: line 1: expected a header .* got an empty file"),
        (
            ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46,12,x"],
            r"^a.csv: line 2: GeneratedTokens: expected an integer ≥ 0, got 'x'$",
        ),
        (
            ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46,,4"],
            r"^a.csv: line 2: ContextTokens: expected an integer ≥ 0, got 'nothing'",
        ),
        (
            ["TIMESTAMP,ContextTokens,GeneratedTokens", "yesterday,1,4"],
            r"^a.csv: line 2: TIMESTAMP: expected a date and time like 2023-11-16 "
            r"18:15:46.680590, got 'yesterday'$",
        ),
    ],
)
def test_bad_azure_rows(rows: list[str], message: str) -> None:
    with pytest.raises(SessionImportError, match=message):
        parse_azure(rows, "a.csv")


def test_import_writes_each_format(tmp_path: Path) -> None:
    assert {"codex", "mooncake", "azure", "otel"} <= set(IMPORTERS)
    out = tmp_path / "m.jsonl"
    report = import_sessions("mooncake", [str(TOOLAGENT)], str(out))
    assert report.startswith("wrote 4 rollouts (8 turns, 4 tool calls, history up to ")
    assert read_trace(out) == import_mooncake_files([str(TOOLAGENT)])
    header = json.loads(out.read_text().splitlines()[0])
    assert header["source"] == "mooncake" and header["meta"]["block_tokens"] == 512
    assert header["version"] == 2
    # With 1024-token blocks line 1 (1300 tokens) has one full block, [0], which line 2 reads
    # too: common context, so line 3 no longer continues it.
    import_sessions("mooncake", [str(TOOLAGENT)], str(out), block_tokens=1024)
    assert [r.meta["lines"][0] for r in read_trace(out)][:3] == [1, 2, 3]
    with pytest.raises(UsageError, match="--block-size applies to mooncake traces only"):
        import_sessions("azure", [str(AZURE)], str(out), block_tokens=64)
    with pytest.raises(UsageError, match="expected tokens per hash id ≥ 1, got 0"):
        import_sessions("mooncake", [str(TOOLAGENT)], str(out), block_tokens=0)
    # A folder is searched for the format's files: *.csv for azure.
    (tmp_path / "azure").mkdir()
    (tmp_path / "azure" / "code.csv").write_text(AZURE.read_text())
    (tmp_path / "azure" / "notes.jsonl").write_text("not a trace\n")
    assert find_session_files([str(tmp_path / "azure")], ("*.csv",)) == [
        str(tmp_path / "azure" / "code.csv")
    ]
    report = import_sessions("azure", [str(tmp_path / "azure")], str(tmp_path / "a.jsonl"))
    assert report.startswith("wrote 4 rollouts (4 turns, 0 tool calls")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(SessionImportError, match="expected at least one request, got none"):
        import_sessions("mooncake", [str(empty)], str(tmp_path / "e.jsonl"))


@pytest.mark.parametrize(
    ("fmt", "source", "rollouts", "turns", "subagent_turns"),
    [("mooncake", TOOLAGENT, 4, 8, 0), ("otel", DATA / "otel-agent.json", 2, 5, 2)],
)
def test_cli_import_and_replay(
    fmt: str, source: Path, rollouts: int, turns: int, subagent_turns: int, tmp_path: Path
) -> None:
    """An imported trace replays through ``loopbench run`` on the embedded server; an OTel
    sub-agent replays as a conversation inside its parent's rollout, its load offered once."""
    trace = tmp_path / "traces" / "agent.jsonl"
    proc = run_cli("import", fmt, source, "-o", trace, timeout=60)
    assert f"wrote {rollouts} rollouts ({turns} turns" in proc.stdout
    # Tool and think times divided down so the replay is short; the token counts stay.
    header, *rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert header["version"] == 2

    def shorten(turns: list[dict[str, Any]]) -> None:
        for turn in turns:
            turn["think_ms"] /= 100
            for call in turn["tool_calls"]:
                call["latency_ms"] /= 100
            for sub in turn.get("subagents", []):
                shorten(sub["turns"])

    for row in rows:
        shorten(row["turns"])
    trace.write_text("".join(json.dumps(obj) + "\n" for obj in [header, *rows]))
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(
        f"name: {fmt}-replay\nseed: 1\ntransports: [http]\n"
        "rollout:\n  trace: traces/agent.jsonl\nload:\n  mode: closed\n  concurrency: 2\n"
    )
    out = tmp_path / "results"
    run_file(scenario, out)  # as `loopbench run FILE --run-id r`, in this process, no report
    summary = json.loads((out / "r" / "summary.json").read_text())
    http = summary["transports"]["http"]
    assert http["turns"]["errors"] == 0
    assert http["rollouts"]["count"] == rollouts
    assert http["turns"]["count"] == turns + subagent_turns
    served = load_run(out / "r").turns.sort_values(["rollout_id", "conversation", "turn_index"])
    assert int((served.conversation > 0).sum()) == subagent_turns
    # The server read the recorded context sizes: each turn's input is the recorded one plus
    # the agent's framing (under 100 tokens: instructions, tool definition) and a fixed size
    # per tool call item (plus, after a turn with reasoning, the reasoning item the replay
    # carries in the history); a sub-agent's turns likewise.
    firsts, per_call, reasoned = set(), set(), []

    def check(got: list[int], recorded: list[TraceTurn]) -> None:
        excess = [s - (t.input_tokens or 0) for s, t in zip(got, recorded, strict=True)]
        firsts.add(excess[0])
        for turn, (a, b) in zip(recorded, pairwise(excess), strict=False):
            if turn.subagents:
                # the call a sub-agent answers carries its replayed final answer, as agent SDKs
                # pass it on: as long as the sub-agent's last turn, not the recorded result
                continue
            if turn.reasoning_tokens:
                reasoned.append((b - a, len(turn.tool_calls), turn.reasoning_tokens))
            else:
                per_call.add((b - a) / len(turn.tool_calls))

    for i, r in enumerate(read_trace(trace)):
        mine = served[served.rollout_id == i]
        check(mine[mine.conversation == 0].input_tokens.tolist(), r.turns)
        subs = [s for t in r.turns for s in t.subagents]
        for c, sub in enumerate(subs, start=1):
            check(mine[mine.conversation == c].input_tokens.tolist(), sub.turns)
    assert all(0 <= e < 100 for e in firsts), firsts
    assert len(per_call) == 1 and per_call.pop() >= 0, per_call
    # otel: turn 0 of the coder reported 20 reasoning tokens.
    assert len(reasoned) == (1 if fmt == "otel" else 0)
    assert all(grown >= reasoning for grown, _, reasoning in reasoned), reasoned


OTEL = DATA / "otel-agent.json"


def test_otel_agent_turns_tools_and_subagent() -> None:
    coder, chat = import_otel_files([str(OTEL)])
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    # The model calls under the invoke_agent span "coder", in start order.
    assert coder.id == f"{trace_id}:a000000000000001" and coder.meta["agent"] == "coder"
    assert coder.user_prompt_tokens == 1000 and coder.system_tokens == 0
    # Turn 0: two parallel execute_tool spans (200 and 500 ms) share 1350-1000-50 = 300
    # tokens; turn 1: the "task" tool (2000 ms) gets 1510-1350-40 = 120.
    assert _shape(coder) == [
        (50, [(200.0, 150), (500.0, 150)]),
        (40, [(2000.0, 120)]),
        (200, []),
    ]
    # Client time between the last tool's end and the next call: 1400-1330, 4050-4010 ms.
    assert [t.think_ms for t in coder.turns] == [0.0, 70.0, 40.0]
    # What each model span reported, in the v2 per-turn fields.
    assert [t.input_tokens for t in coder.turns] == [1000, 1350, 1510]
    assert [t.cached_tokens for t in coder.turns] == [0, 1000, None]
    assert [t.reasoning_tokens for t in coder.turns] == [20, 0, 0]
    assert not {"turn_input_tokens", "turn_cached_tokens", "turn_reasoning_tokens"} & set(
        coder.meta
    )
    assert coder.meta["model"] == "gpt-5-mini" and coder.meta["usage"] is True
    # The invoke_agent under the "task" tool span is a v2 sub-agent of turn 1, named by the
    # call it answered, whose 120 tokens are its result; not a rollout of its own.
    fork = coder.turns[1]
    assert [c.subagent for c in fork.tool_calls] == [0]
    assert coder.subagent_count == 1 and coder.uses_v2
    (explorer,) = fork.subagents
    assert explorer.id == f"{trace_id}:a000000000000002" and explorer.meta["agent"] == "explorer"
    assert (explorer.result_tokens, explorer.join) == (120, "wait")
    assert explorer.user_prompt_tokens == 600 and explorer.system_tokens == 0
    assert [
        (t.output_tokens, [(c.latency_ms, c.output_tokens) for c in t.tool_calls])
        for t in explorer.turns
    ] == [(30, [(100.0, 80)]), (90, [])]
    assert [t.think_ms for t in explorer.turns] == [0.0, 40.0]
    assert [t.input_tokens for t in explorer.turns] == [600, 710]
    # Two traces, one request each, joined by gen_ai.conversation.id; older usage names;
    # no tool span in between: one call for the gap (11300-10300 ms), 260-200-10 tokens.
    assert chat.id == "conv-7" and chat.meta["tool_calls_from_gaps"] == 1
    assert _shape(chat) == [(10, [(1000.0, 50)]), (20, [])]


def test_otel_one_export_per_line_is_the_same() -> None:
    doc = json.loads(OTEL.read_text())
    lines = [json.dumps({"resourceSpans": [r]}) for r in doc["resourceSpans"]]
    assert parse_otel("\n".join(lines) + "\n", str(OTEL)) == import_otel_files([str(OTEL)])


def test_otel_a_trace_ending_on_a_tool_call_is_closed() -> None:
    doc = json.loads(OTEL.read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[:] = [s for s in spans if s["spanId"] != "c000000000000003"]
    coder = parse_otel(json.dumps(doc), "o.json")[0]
    assert coder.meta["truncated"] is True
    assert _shape(coder)[-2:] == [(40, [(2000.0, 0)]), (1, [])]


def _otel_error(mutate: str, value: object) -> str:
    doc = json.loads(OTEL.read_text())
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][2]
    span[mutate] = value
    with pytest.raises(SessionImportError) as exc:
        parse_otel(json.dumps(doc), "o.json")
    return str(exc.value)


def test_bad_otel_input() -> None:
    where = "o.json: resourceSpans[0].scopeSpans[0].spans[2]"
    assert _otel_error("startTimeUnixNano", "noon") == (
        f"{where}.startTimeUnixNano: expected nanoseconds since the epoch, got 'noon'"
    )
    assert _otel_error("endTimeUnixNano", "5") == (
        f"{where}.endTimeUnixNano: expected a time at or after startTimeUnixNano "
        "(1764000002510000000), got 5"
    )
    assert _otel_error("spanId", 7) == f"{where}.spanId: expected a hex id string, got 7"
    with pytest.raises(SessionImportError, match=r"^o.json: invalid JSON"):
        parse_otel('{"resourceSpans": [', "o.json")
    with pytest.raises(
        SessionImportError,
        match=r"^o.json: expected an OTLP JSON object with resourceSpans, got \{\"spans\"",
    ):
        parse_otel('{"spans": []}', "o.json")
    with pytest.raises(SessionImportError, match=r"^o.json: line 2: invalid JSON"):
        parse_otel('{"resourceSpans": []}\n{oops\n', "o.json")
    with pytest.raises(SessionImportError, match=r"^o.json: line 2: expected an OTLP JSON"):
        parse_otel('{"resourceSpans": []}\n[1]\n', "o.json")


def test_split_tokens_is_proportional_exact_and_even_without_weights() -> None:
    # the codex importer splits by text weight, otel evenly: one largest-remainder split
    assert split_tokens(10, [1, 1, 2]) == [3, 2, 5]
    assert split_tokens(5, [0, 0, 0]) == [2, 2, 1]
    assert split_tokens(7, [3]) == [7]
