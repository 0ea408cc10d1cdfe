"""A real distributed run: a headless Locust master and two workers on loopback.

The master and the workers are separate ``locust`` processes (gevent stays
out of the test process).  The run is time-bounded (5 s) and stops
mid-rollout, which is the hard case for consistency: whatever a worker
measured must reach the master exactly once, as rows and as histograms.
"""

from __future__ import annotations

import csv
import math
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cli.locust import _free_port, stop_children, worker_command
from harness.metrics.hdr import Histogram
from harness.report.results import Run, load_run
from harness.transports.rx_socket import kernel_stamps_supported
from tests.hlog_reader import read_hlog
from tests.runs import locust_master_argv

RUN_TIME_S = 5
SCENARIO = """
name: distributed
seed: 21
transports: [http, ws]
rollout:
  count: 400
  system_tokens: 100
  tool_schema_tokens: 50
  user_prompt_tokens: 30
  tool_calls: 3
  tool_output_tokens: {dist: uniform, min: 40, max: 80}
  tool_latency_ms: {dist: uniform, min: 2, max: 5}
  step_output_tokens: {dist: uniform, min: 30, max: 50}
  final_answer_tokens: 60
load:
  mode: closed
  concurrency: 6
  order: interleaved
  rounds: 40
"""


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def distributed_run(
    server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, list[int]]]:
    tmp = tmp_path_factory.mktemp("locust")
    scenario = tmp / "distributed.yaml"
    scenario.write_text(SCENARIO)
    out = tmp / "results"
    port = _free_port("127.0.0.1")
    master_cmd = locust_master_argv(
        port,
        server_url,
        scenario,
        out,
        "dist",
        2,
        "--loopbench-run-time",
        str(RUN_TIME_S),
        "--csv",
        str(out / "dist" / "locust"),
    )
    logs = [open(tmp / f"{name}.log", "wb") for name in ("master", "worker1", "worker2")]  # noqa: SIM115
    procs = [subprocess.Popen(master_cmd, stdout=logs[0], stderr=subprocess.STDOUT)]
    try:
        for log in logs[1:]:
            procs.append(
                subprocess.Popen(
                    worker_command("127.0.0.1", port), stdout=log, stderr=subprocess.STDOUT
                )
            )
        # Every process must end by itself: the master when the run time is up and the
        # results are written, the workers when the master tells them to quit.
        codes = [procs[0].wait(timeout=RUN_TIME_S + 60)]
        codes += [p.wait(timeout=20) for p in procs[1:]]
    except subprocess.TimeoutExpired:
        stop_children(procs, grace_s=1.0)
        tails = [Path(log.name).read_text(errors="replace")[-2000:] for log in logs]
        pytest.fail("a locust process did not exit on its own:\n" + "\n---\n".join(tails))
    finally:
        stop_children(procs, grace_s=1.0)
        for log in logs:
            log.close()
    assert codes == [0, 0, 0], (tmp / "master.log").read_text(errors="replace")[-3000:]
    yield out / "dist", codes


@pytest.fixture(scope="module")
def run(distributed_run: tuple[Path, list[int]]) -> Run:
    """The master's merged results folder, loaded once for the tests that read it."""
    return load_run(distributed_run[0])


def _dist(h: Histogram) -> dict[str, float | None]:
    def r(x: float) -> float | None:
        return None if not math.isfinite(x) else round(x, 3)

    p50, p90, p99 = h.percentiles_ms((50, 90, 99))
    return {"p50": r(p50), "p90": r(p90), "p99": r(p99), "mean": r(h.mean / 1000)}


def _from_rows(rows: Any, start: str, end: str) -> Histogram:
    h = Histogram()
    for a, b in zip(rows[start], rows[end], strict=True):
        if a and b:
            h.record_ns(int(b) - int(a))
    return h


def test_the_results_folder_is_complete(run: Run) -> None:
    run_dir = run.path
    assert run.summary is not None and run.manifest["driver"] == "locust"
    for name in ("http", "ws"):
        for metric in ("ttft", "ttfb", "turn", "itl", "rollout"):
            assert (run_dir / "histograms" / f"{name}.{metric}.hlog").is_file(), (name, metric)
    assert (run_dir / "locust_stats.csv").is_file()
    assert (run_dir / "report.html").is_file() and (run_dir / "report.md").is_file()
    summary = run.summary
    assert set(summary["transports"]) == {"http", "ws"}
    assert [(c["baseline"], c["candidate"]) for c in summary["comparisons"]] == [("http", "ws")]
    # Time-bounded: the run is marked partial (and invalid) rather than silently short.
    assert summary["partial"] is True and not summary["valid"]
    assert any("stopped before every rollout" in r for r in summary["invalid_reasons"])


def test_merged_counts_equal_the_sum_of_the_workers(run: Run) -> None:
    run_dir = run.path
    assert run.summary is not None
    summary = run.summary
    workers = summary["locust"]["workers"]
    assert len(workers) == 2
    assert all(w["final"] and w["turns"] > 20 for w in workers.values()), workers
    merged_turns = sum(t["turns"]["count"] for t in summary["transports"].values())
    merged_rollouts = sum(t["rollouts"]["count"] for t in summary["transports"].values())
    assert merged_turns == sum(w["turns"] for w in workers.values())
    assert merged_rollouts == sum(w["rollouts"] for w in workers.values())
    # The rows took another path (row messages) and agree too.
    assert len(run.turns) == merged_turns and len(run.rollouts) == merged_rollouts
    # So did Locust's own statistics pipeline (request events aggregated by Locust).
    with open(run_dir / "locust_stats.csv", newline="") as fh:
        locust_counts = {row["Name"]: int(row["Request Count"]) for row in csv.DictReader(fh)}
    assert locust_counts["http turn"] + locust_counts["ws turn"] == merged_turns
    assert locust_counts["http rollout"] + locust_counts["ws rollout"] == merged_rollouts


def test_merged_percentiles_equal_one_histogram_of_all_samples(run: Run) -> None:
    run_dir = run.path
    assert run.summary is not None
    turns = run.turns[run.turns["status"].isin(["completed", "incomplete"])]
    rollouts = run.rollouts[run.rollouts["status"] == "completed"]
    for name, t in run.summary["transports"].items():
        rows = turns[turns["transport"] == name]
        for metric, start, end in (
            ("ttft", "sent_ns", "first_token_ns"),
            ("ttfb", "sent_ns", "first_event_ns"),
            ("turn", "sent_ns", "done_ns"),
        ):
            rebuilt = _from_rows(rows, start, end)
            assert rebuilt.count > 20
            assert t[f"{metric}_ms"] == _dist(rebuilt), (name, metric)
            _, series = read_hlog(run_dir / "histograms" / f"{name}.{metric}.hlog")
            assert series[f"{name}.{metric}"][0][2] == rebuilt, (name, metric)
        mine = rollouts[rollouts["transport"] == name]
        rebuilt = _from_rows(mine, "intended_start_ns", "end_ns")
        assert rebuilt.count == t["rollouts"]["count"] - t["rollouts"]["errors"] > 0
        assert t["rollout_ms"] == _dist(rebuilt), name
    # Workers on different processes stamp on one epoch-anchored origin.
    sent = run.turns["sent_ns"]
    assert sent.max() - sent.min() < (RUN_TIME_S + 10) * 1_000_000_000


def test_reads_are_stamped_as_loopbench_run_stamps_them(run: Run) -> None:
    # `run --rx-stamp auto`: the kernel's receive time where this machine has it (a user-space
    # stamp holds the edge host's wait for a core: milliseconds beside a busy worker)
    want = "kernel" if kernel_stamps_supported() else "user"
    done = run.turns[run.turns["status"] == "completed"]
    assert len(done) and set(done["rx_stamp"]) == {want}
