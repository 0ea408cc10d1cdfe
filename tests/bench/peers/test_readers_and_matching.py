"""Each tool's per-request output, the server's timing log and the matching (pure parts).

The files in data/ were captured from one real run (``python -m bench.peers
--quick`` with guidellm 0.8.1 and aiperf 0.13.0 installed), at one stream, then trimmed:
four requests per tool (the first is the warm-up), the server's log lines of them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.peers.match import (
    BY_ARRIVAL,
    BY_REQUEST_ID,
    BY_RESPONSE_ID,
    BY_TAG,
    match_requests,
)
from bench.peers.readers import (
    Measured,
    ToolOutputError,
    read_aiperf,
    read_guidellm,
    read_loopbench,
    without_warmup,
)
from bench.peers.timing_log import TimingLogError, parse_timing_log

DATA = Path(__file__).parent / "data"


def _log() -> list:
    return parse_timing_log(
        (DATA / "server-timing.jsonl").read_text().splitlines(), "server-timing.jsonl"
    )


def _guidellm() -> list[Measured]:
    return read_guidellm(json.loads((DATA / "guidellm-0.8.1-benchmarks.json").read_text()))


def _aiperf() -> list[Measured]:
    return read_aiperf((DATA / "aiperf-0.13.0-profile_export.jsonl").read_text().splitlines())


def _loopbench(warmup: int = 1) -> list[Measured]:
    return read_loopbench((DATA / "loopbench-turns.csv").read_text(), "chat", warmup)


def test_the_timing_log_gives_ids_tags_arrival_and_the_modelled_ttft_in_ms() -> None:
    entries = _log()
    assert len(entries) == 12
    assert {e.api for e in entries} == {"chat"}
    assert all(e.id.startswith("chatcmpl-") for e in entries)
    # The modelled TTFT of these short requests is tens of ms (sim_timing is in ms).
    assert all(30.0 < (e.modelled_ttft_ms or 0) < 100.0 for e in entries)
    assert all(e.late_ms is not None and abs(e.late_ms) < 50 for e in entries)
    assert sum(1 for e in entries if e.tag) == 8  # the peers' prompts carry lbq- tags
    assert sum(1 for e in entries if e.request_id) == 4  # aiperf sends X-Request-ID


def test_a_torn_last_line_is_no_entry_but_a_bad_line_elsewhere_is_an_error() -> None:
    lines = (DATA / "server-timing.jsonl").read_text().splitlines()
    assert len(parse_timing_log([*lines, lines[0][:40]])) == len(lines)
    with pytest.raises(TimingLogError, match="line 2: not JSON"):
        parse_timing_log([lines[0], "{oops", lines[1]])
    with pytest.raises(TimingLogError, match="'arrived_unix_ns' must be an integer"):
        parse_timing_log(['{"id": "x", "arrived_unix_ns": "soon"}'])


def test_guidellm_reader_takes_ids_tags_start_ttft_and_decode_from_benchmarks_json() -> None:
    got = _guidellm()
    assert len(got) == 4 and all(m.ok for m in got)
    assert all(m.response_id and m.response_id.startswith("chatcmpl-") for m in got)
    assert all(m.tag and m.tag.startswith("lbq-") for m in got)
    assert len({m.tag for m in got}) == 4
    raw = json.loads((DATA / "guidellm-0.8.1-benchmarks.json").read_text())
    first = raw["benchmarks"][0]["requests"]["successful"][0]
    assert got[0].ttft_ms == pytest.approx(first["time_to_first_token_ms"])
    assert got[0].start_unix_ns == round(first["info"]["timings"]["request_start"] * 1e9)
    # 200 tokens at the modelled 1,000 tokens/s.
    assert all(800 < (m.decode_tps or 0) < 1100 for m in got)


def test_aiperf_reader_takes_request_ids_and_leaves_out_warmup_records() -> None:
    got = _aiperf()
    assert len(got) == 4 and all(m.ok for m in got)
    assert all(m.request_id for m in got) and all(m.start_unix_ns for m in got)
    assert all(m.ttft_ms and 20 < m.ttft_ms < 200 for m in got)
    assert all(800 < (m.decode_tps or 0) < 1100 for m in got)
    lines = (DATA / "aiperf-0.13.0-profile_export.jsonl").read_text().splitlines()
    warm = json.loads(lines[0])
    warm["metadata"]["benchmark_phase"] = "warmup"
    failed = json.loads(lines[1])
    failed["error"] = {"code": 500, "message": "boom"}
    del failed["metrics"]["time_to_first_token"]
    got = read_aiperf([json.dumps(warm), json.dumps(failed), *lines[2:]])
    assert len(got) == 3 and [m.ok for m in got] == [False, True, True]
    with pytest.raises(ToolOutputError, match="line 1: expected 'metadata' and 'metrics'"):
        read_aiperf(['{"records": []}'])


def test_loopbench_reader_leaves_out_warmup_rollouts_and_other_transports() -> None:
    assert len(_loopbench(warmup=0)) == 4
    got = _loopbench(warmup=1)
    assert len(got) == 3 and all(m.ok and m.response_id for m in got)
    assert all(800 < (m.decode_tps or 0) < 1100 for m in got)
    text = (DATA / "loopbench-turns.csv").read_text()
    assert read_loopbench(text, "ws", 0) == []
    with pytest.raises(ToolOutputError, match="missing columns"):
        read_loopbench("transport,rollout_id\nchat,0\n", "chat", 0)


def test_every_request_of_every_tool_is_matched_by_its_best_key() -> None:
    entries = _log()
    for measured, method in (
        (_guidellm(), BY_RESPONSE_ID),
        (_aiperf(), BY_REQUEST_ID),
        (_loopbench(), BY_RESPONSE_ID),
    ):
        result = match_requests(measured, entries, api="chat")
        assert len(result.pairs) == len(measured) and not result.unmatched
        assert result.by_method == {method: len(measured)}
        for p in result.pairs:
            # What the tool measured is the modelled TTFT plus a little: the same request.
            assert 0 < p.measured.ttft_ms - p.entry.modelled_ttft_ms < 30  # type: ignore[operator]


def test_without_ids_the_prompt_tag_and_then_the_arrival_time_match() -> None:
    entries = _log()
    by_tag = [dataclasses.replace(m, response_id=None) for m in _guidellm()]
    result = match_requests(by_tag, entries, api="chat")
    assert result.by_method == {BY_TAG: 4}
    assert [p.entry.tag for p in result.pairs] == [m.tag for m in by_tag]
    # aiperf with neither id nor tag: its request start against the server's arrival.
    bare = [dataclasses.replace(m, request_id=None) for m in _aiperf()]
    result = match_requests(bare, entries, api="chat")
    assert result.by_method == {BY_ARRIVAL: 4}
    truth = {m.start_unix_ns: m.request_id for m in _aiperf()}
    assert all(p.entry.request_id == truth[p.measured.start_unix_ns] for p in result.pairs)


def test_an_entry_is_matched_once_and_other_apis_are_not_candidates() -> None:
    entries = _log()
    twice = [*_loopbench(0), *_loopbench(0)]
    result = match_requests(twice, entries, api="chat")
    assert len(result.pairs) == 4 and len(result.unmatched) == 4
    assert not match_requests(_loopbench(), entries, api="responses").pairs
    far = [dataclasses.replace(m, request_id=None, start_unix_ns=1) for m in _aiperf()]
    assert len(match_requests(far, entries).unmatched) == 4


def test_without_warmup_drops_the_earliest_starts() -> None:
    ms = [Measured(True, 1.0, start_unix_ns=t) for t in (30, 10, 20, 40)]
    assert [m.start_unix_ns for m in without_warmup(ms, 2)] == [30, 40]
    assert without_warmup(ms, 0) == ms


def test_loopbench_reader_keeps_the_server_read_delay_where_the_turn_knows_it() -> None:
    # The fixture predates the column: no server read delay, nothing invented.
    assert all(m.server_read_ms is None for m in _loopbench(warmup=0))
    head = "transport,rollout_id,response_id,sent_ns,first_token_ns,status,server_read_ms\n"
    text = (
        head
        + "ws,0,resp_a,1000000,41000000,completed,0.25\nws,1,resp_b,1000000,41000000,completed,\n"
    )
    got = read_loopbench(text, "ws", 0)
    assert [m.server_read_ms for m in got] == [0.25, None]
    assert got[0].ttft_ms == 40.0


def test_loopbench_reader_gives_the_decode_span_and_whether_the_last_token_shared_a_read() -> None:
    """The last token stamped with the terminal event (last_token_ns == done_ns: one read) is
    what made the ws row's decode p1 low (docs/peers.md); a later terminal event is not."""
    head = "transport,rollout_id,response_id,sent_ns,first_token_ns,last_token_ns,done_ns,status\n"
    text = head + (
        "ws,0,resp_a,1000000,41000000,241500000,241500000,completed\n"
        "ws,1,resp_b,1000000,41000000,240000000,260000000,completed\n"
        "ws,2,resp_c,1000000,41000000,,,failed\n"
    )
    got = read_loopbench(text, "ws", 0)
    assert [m.decode_ms for m in got] == [200.5, 199.0, None]
    assert [m.last_with_terminal for m in got] == [True, False, None]


def test_loopbench_reader_gives_the_deltas_sharing_the_first_tokens_stamp() -> None:
    """first_arrival_deltas (docs/metrics.md §1.9): over 1, the first token carries a later
    delta's arrival; -1 (a row written before the count) and a missing column are not known."""
    head = "transport,rollout_id,response_id,sent_ns,first_token_ns,status,first_arrival_deltas\n"
    text = head + (
        "ws,0,a,1000000,41000000,completed,1\n"
        "ws,1,b,1000000,41000000,completed,3\n"
        "ws,2,c,1000000,41000000,completed,-1\n"
    )
    assert [m.first_read_deltas for m in read_loopbench(text, "ws", 0)] == [1, 3, None]
    assert all(m.first_read_deltas is None for m in _loopbench(warmup=0))


def test_the_timing_log_gives_the_modelled_decode_and_the_last_tokens_lateness() -> None:
    line = (
        '{"id":"resp_a","arrived_unix_ns":1,"sim_timing":{"ttft":61.0,"decode":199.0,'
        '"first_token_late_ms":0.25,"last_token_late_ms":2.5}}\n{"id":"resp_b","arrived_unix_ns":2}'
    )
    a, b = parse_timing_log(line.splitlines())
    assert (a.decode_ms, a.late_ms, a.last_late_ms) == (199.0, 0.25, 2.5)
    assert (b.decode_ms, b.last_late_ms) == (None, None)
