from __future__ import annotations

import calendar
import gzip
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pandas as pd
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from harness.metrics.hdr import Histogram
from harness.metrics.summary import Accumulator
from harness.report import ResultsWriter, load_run, new_run_id, read_csv_gz
from harness.wire.errors import ResultsError
from harness.workload.records import RolloutRecord, TurnRecord, csv_fields
from tests.hlog_reader import read_hlog

ROOT = Path(__file__).resolve().parents[2]


def _turn(i: int, transport: str = "http") -> TurnRecord:
    return TurnRecord(
        transport=transport,
        rollout_id=i // 3,
        turn_index=i % 3,
        sent_ns=1_000_000 * i + 1,
        first_token_ns=1_000_000 * i + 500_000,
        last_token_ns=1_000_000 * i + 900_000,
        done_ns=1_000_000 * i + 950_000,
        status="completed" if i % 7 else "failed",
        error_kind="" if i % 7 else "server_error",
        error_message="" if i % 7 else 'boom, "quoted"\nsecond line',
        output_tokens=10 + i,
        new_connection=i % 2 == 0,
        sim_prefill_ms=1.5,
    )


def _rollout(i: int, transport: str = "http") -> RolloutRecord:
    return RolloutRecord(
        transport=transport,
        rollout_id=i,
        intended_start_ns=i * 10,
        start_ns=i * 10 + 1,
        end_ns=i * 10 + 1000,
        turns=3,
        status="completed",
    )


def test_round_trip(tmp_path: Path) -> None:
    run_dir = tmp_path / "results" / "20261202-110203-quickstart"
    acc = Accumulator()
    with ResultsWriter(run_dir, {"scenario": "quickstart", "seed": 7}, flush_rows=4) as writer:
        for i in range(10):
            rec = _turn(i)
            writer.add_turn(rec)
            acc.add_turn(rec)
        for i in range(3):
            writer.add_rollout(_rollout(i))
            acc.add_rollout(_rollout(i))
        summary = acc.summary("20261202-110203-quickstart")
        writer.finish(
            summary, acc.histograms(), start_time_s=1_700_000_000.0, end_time_s=1_700_000_012.5
        )

    run = load_run(run_dir)
    assert run.manifest == {"scenario": "quickstart", "seed": 7, "format_version": 1}
    assert run.summary == summary
    assert run.finished
    assert run.run_id == "20261202-110203-quickstart"
    assert list(run.turns.columns) == csv_fields(TurnRecord)
    assert list(run.rollouts.columns) == csv_fields(RolloutRecord)
    assert len(run.turns) == 10 and len(run.rollouts) == 3
    assert run.turns["sent_ns"].tolist() == [_turn(i).sent_ns for i in range(10)]
    assert run.turns["error_message"].tolist()[0] == 'boom, "quoted"\nsecond line'
    assert run.turns["error_kind"].tolist()[1] == ""
    assert run.turns["new_connection"].tolist()[:2] == [True, False]
    assert run.turns["sim_prefill_ms"].tolist()[0] == 1.5

    # the files are plain gzip CSV for any other tool
    assert len(pd.read_csv(run_dir / "turns.csv.gz")) == 10

    hlog = run_dir / "histograms" / "http.ttft.hlog"
    assert hlog.exists()
    start, tagged = read_hlog(hlog)
    assert start == 1_700_000_000.0
    ((s, e, h),) = tagged["http.ttft"]
    assert (s, e) == (0.0, 12.5)
    assert h == acc.histograms()["http", "ttft"]
    reader = HistogramLogReader(str(hlog), HdrHistogram(1, 3_600_000_000, 3))
    try:
        assert reader.get_next_interval_histogram().get_total_count() == h.count
    finally:
        reader.close()


def test_finish_accepts_interval_series(tmp_path: Path) -> None:
    h1, h2 = Histogram(), Histogram()
    h1.record_ns(5_000_000)
    h2.record_ns(7_000_000)
    writer = ResultsWriter(tmp_path / "run", {})
    writer.finish(
        {"format_version": 1, "run_id": "run"}, {("ws", "ttft"): [(0.0, 1.0, h1), (1.0, 2.0, h2)]}
    )
    _, tagged = read_hlog(tmp_path / "run" / "histograms" / "ws.ttft.hlog")
    assert [h for _, _, h in tagged["ws.ttft"]] == [h1, h2]


def test_writer_refuses_an_existing_run(tmp_path: Path) -> None:
    ResultsWriter(tmp_path / "run", {}).close()
    with pytest.raises(ResultsError, match="already holds a run"):
        ResultsWriter(tmp_path / "run", {})


_CHILD = textwrap.dedent(
    """
    import sys
    from harness.workload.records import TurnRecord
    from harness.report.results import ResultsWriter

    w = ResultsWriter(sys.argv[1], {"scenario": "crash"}, flush_rows=100, flush_interval_s=3600)
    for i in range(1000):
        w.add_turn(TurnRecord(transport="ws", rollout_id=i, turn_index=0, sent_ns=i,
                              status="completed", error_message="a,b"))
    for i in range(1000, 1050):  # 50 more rows: buffered, never flushed
        w.add_turn(TurnRecord(transport="ws", rollout_id=i, turn_index=0, sent_ns=i))
    print(w.turns_written, flush=True)
    sys.stdin.read()  # block until killed
    """
)


def test_rows_flushed_before_sigkill_are_readable(tmp_path: Path) -> None:
    run_dir = tmp_path / "crash"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "1000"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        if child.stdin:
            child.stdin.close()
        if child.stdout:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    path = run_dir / "turns.csv.gz"
    with gzip.open(path, "rt", newline="") as f:
        lines = f.read().splitlines()
    assert lines[0].split(",") == csv_fields(TurnRecord)
    assert len(lines) == 1001
    frame = pd.read_csv(path)
    assert frame["rollout_id"].tolist() == list(range(1000))
    robust = read_csv_gz(path)
    assert robust["rollout_id"].tolist() == list(range(1000))
    assert set(robust["error_message"]) == {"a,b"}

    run = load_run(run_dir)  # an unfinished run loads, without a summary
    assert run.summary is None and not run.finished
    assert len(run.turns) == 1000 and len(run.rollouts) == 0
    assert list(run.rollouts.columns) == csv_fields(RolloutRecord)


def test_truncated_last_block_is_dropped_not_fatal(tmp_path: Path) -> None:
    writer = ResultsWriter(tmp_path / "run", {}, flush_rows=10)
    for i in range(25):
        writer.add_turn(_turn(i))
    writer.close()
    path = tmp_path / "run" / "turns.csv.gz"
    # a kill in the middle of writing the next block: half a gzip member
    tail = gzip.compress(b"".join(b"ws,%d,0\n" % i for i in range(100)))
    with open(path, "ab") as f:
        f.write(tail[: len(tail) // 2])
    with pytest.raises(EOFError), gzip.open(path) as f:
        f.read()
    frame = read_csv_gz(path)
    assert frame["sent_ns"].tolist() == [_turn(i).sent_ns for i in range(25)]


def test_read_csv_gz_of_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "x.csv.gz"
    path.write_bytes(b"")
    frame = read_csv_gz(path, ["a", "b"])
    assert list(frame.columns) == ["a", "b"] and len(frame) == 0


def _write_manifest(run_dir: Path, doc: object) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_bytes(orjson.dumps(doc))


def test_load_run_errors(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="expected a results folder, got nothing"):
        load_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match=r"manifest\.json: missing"):
        load_run(tmp_path / "empty")
    _write_manifest(tmp_path / "old", {"scenario": "x"})
    with pytest.raises(ResultsError, match="format_version: missing"):
        load_run(tmp_path / "old")
    _write_manifest(tmp_path / "future", {"format_version": 7})
    with pytest.raises(ResultsError, match="format_version: expected 1, got 7"):
        load_run(tmp_path / "future")
    _write_manifest(tmp_path / "norows", {"format_version": 1})
    with pytest.raises(ResultsError, match=r"turns\.csv\.gz: missing"):
        load_run(tmp_path / "norows")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{not json")
    with pytest.raises(ResultsError, match="unreadable"):
        load_run(tmp_path / "bad")


def test_load_run_rejects_unknown_summary_version(tmp_path: Path) -> None:
    ResultsWriter(tmp_path / "run", {}).finish({"format_version": 2}, {})
    with pytest.raises(ResultsError, match=r"summary\.json: format_version: expected 1, got 2"):
        load_run(tmp_path / "run")


def test_new_run_id() -> None:
    t = calendar.timegm((2026, 12, 2, 11, 2, 3, 0, 0, 0)) + 0.75
    assert new_run_id("quickstart", t) == "20261202-110203-quickstart"
    assert new_run_id("scenarios/codex style.yaml", t) == "20261202-110203-codex-style"
    assert new_run_id("///", t) == "20261202-110203-run"
