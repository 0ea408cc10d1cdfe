"""``--procs N``: rollouts split across client processes, server workers, merged results."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.report.results import load_run
from harness.report.server_metrics import load_server_metrics
from harness.run.procs import partition, split_concurrency
from harness.workload.plan import RolloutPlan
from tests.runs import TINY, in_process, server_exit

ROOT = Path(__file__).resolve().parents[2]


def _plan(i: int, offset: int) -> RolloutPlan:
    return RolloutPlan(i, i, 1, 1, 1, (), start_offset_ns=offset)


def test_partition_is_round_robin_in_start_order_and_loses_nothing() -> None:
    plans = [_plan(i, off) for i, off in enumerate([50, 10, 40, 20, 30])]
    parts = partition(plans, 2)
    assert [[p.rollout_id for p in part] for part in parts] == [[1, 4, 0], [3, 2]]
    assert partition(plans, 7)[5:] == [[], []]


def test_concurrency_is_split_as_evenly_as_possible() -> None:
    assert split_concurrency(5, 2) == [3, 2]
    assert split_concurrency(1, 3) == [1, 0, 0]
    assert sum(split_concurrency(16, 3)) == 16


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_client_processes_and_two_server_workers_merge_into_one_run(tmp_path: Path) -> None:
    # main() in this process, --no-report: the two client processes and the server's two
    # workers are still processes; SIGINT to a --procs run from outside is test_outcomes'
    code, out = in_process(
        "run", TINY, "--procs", "2", "--out", tmp_path, "--run-id", "procs", "-q", "--no-report"
    )
    assert code == 0, out[:3000]
    # --no-report: the results without report.md, report.html and plots/, and the console
    # says how to render them
    assert not [p.name for p in (tmp_path / "procs").glob("report.*")]
    assert not (tmp_path / "procs" / "plots").exists()
    # (the console wraps long lines at its width, inside a long path too: compared without
    # the white space)
    said = f"report: none; `loopbench report {tmp_path / 'procs'}` renders it"
    assert "".join(said.split()) in "".join(out.split())
    run = load_run(tmp_path / "procs")
    assert run.manifest["procs"] == 2
    summary = run.summary
    assert summary is not None and summary["valid"], summary and summary["invalid_reasons"]
    assert summary["client"]["procs"] == 2 and len(summary["client"]["per_process"]) == 2
    # tiny.yaml: 2 rollouts x 4 turns per transport, each rollout in its own process.
    for name in ("http", "ws"):
        t = summary["transports"][name]
        assert t["turns"] == {"count": 8, "errors": 0}
        assert t["schedule"]["started"] == 2
    assert len(run.turns) == 16 and len(run.rollouts) == 4
    # The server's first-token lateness survives the copy into the merged row file.
    assert run.turns["server_late_ms"].notna().all()
    assert summary["transports"]["http"]["client_error_ms"]["p50"] is not None
    assert sorted(set(run.rollouts["rollout_id"])) == [0, 1]
    # The paired comparison survives the split (both transports ran every rollout).
    assert summary["comparisons"][0]["paired"] is True
    assert json.loads((tmp_path / "procs" / "summary.json").read_text())["client"]["procs"] == 2
    # The parent scraped the server's /metrics (the children did not): each scrape answered by
    # one of the two workers, which its worker label says.
    scraped = load_server_metrics(tmp_path / "procs")
    assert scraped is not None and summary["server_metrics"]["scrapes"] >= 2
    info = scraped[scraped["name"] == "loopbench_server_info"]
    assert set(info["t_s"]) == set(scraped["t_s"])
    assert {re.search(r'worker="(\d)"', s).group(1) for s in info["labels"]} <= {"0", "1"}  # type: ignore[union-attr]


def test_server_workers_refuse_a_private_in_memory_store() -> None:
    done = server_exit("--workers", "2", "--store", ":memory:")
    assert done.returncode != 0
    assert "--workers 2: --store :memory: is private to one process" in done.stderr
