"""The four ways to measure a run write the same summary and judge it by the same rules.

``loopbench run``, ``run --procs 2``, ``gate --ab`` (both sides) and a real Locust
master with one worker run the same small open-loop scenario against one
reference server, twice: with a schedule-lag limit no hiccup reaches (every path
must call the run valid) and with one no client can meet (every path must call
it invalid, with the shared schedule-lag rule's reason for every transport
and, for every measuring process, the loop-lag rule's).
Their ``summary.json`` files must have the same keys, recursively, apart from
what is specific to a path (the per-process client block of multi-process runs,
Locust's own block), and agree on the figures that do not depend on timing.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.cli.locust import _free_port, stop_children, worker_command
from harness.gate.ab import ABOptions, Side, run_ab
from harness.report.results import load_run
from harness.run.procs import run_procs
from harness.run.runner import RunOptions, run_scenario
from harness.workload.scenario import load_scenario
from tests.runs import locust_master_argv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SCENARIO = """
name: lifecycle
seed: 5
transports: [http, ws]
rollout:
  count: 8
  system_tokens: 100
  tool_schema_tokens: 50
  user_prompt_tokens: 30
  tool_calls: 2
  tool_output_tokens: 40
  tool_latency_ms: 2
  step_output_tokens: 30
  final_answer_tokens: 40
load:
  mode: open
  arrival: {process: constant, rate: 10}
"""
#: load.max_schedule_lag_ms per case: nothing on a shared machine reaches 2 s; every
#: start is at least a microsecond late
LIMITS = {"valid": "2000", "overloaded": "0.001"}
PATHS = ("run", "procs", "ab-baseline", "ab-candidate", "locust")
#: keys only some paths have: the measuring processes one by one, and Locust's own figures
EXTRAS: dict[str, set[str]] = {
    "procs": {"client.procs", "client.per_process"},
    "locust": {"client.procs", "client.per_process", "locust"},
}
#: blocks whose keys are data (error kinds), not the format
#: keyed by what the data held: error kinds, and the statistics that had too few samples
#: (a withheld call's held_back_ms exists only where some output came whole, which timing decides)
DATA_KEYED = {"errors_by_kind", "errors", "too_few_samples"}
#: measuring processes per path, each judged on its own event loop (every one runs > 1 s)
PROCESSES = {"run": 1, "procs": 2, "ab-baseline": 1, "ab-candidate": 1, "locust": 1}
LOOP_STALL_REASON = re.compile(
    r"^(?:(?P<who>client process \d+|worker [^:]+): )?client event loop stalled: "
    r"wake-up lag p99 [\d.]+ ms exceeds load.max_schedule_lag_ms 0.001$"
)
SCHEDULE_LAG_REASON = re.compile(
    r"^(?P<transport>[\w-]+): schedule lag p99 [\d.]+ ms exceeds load.max_schedule_lag_ms "
    r"0.001: the load generator fell behind \(\d+ of \d+ starts late\)$"
)


class _Locust:
    """A real Locust master and one worker running a case in the background: they are
    processes of their own, so they run while the in-process paths of both cases do (their
    start-up, two interpreters importing gevent and Locust, was half of this fixture's wall)."""

    def __init__(self, scenario: Path, url: str, out: Path, run_id: str, limit: str) -> None:
        port = _free_port("127.0.0.1")
        master = locust_master_argv(
            port,
            url,
            scenario,
            out,
            run_id,
            1,
            "--loopbench-set",
            f"load.max_schedule_lag_ms={limit}",
            # as the in-process paths' render=False: the claim is the summary, and plots
            # cost the master seconds of CPU while the other paths measure
            "--loopbench-no-report",
        )
        self.run_dir = out / run_id
        self.logs = [open(out / f"{run_id}-{n}.log", "wb") for n in ("master", "worker")]  # noqa: SIM115
        self.procs = [subprocess.Popen(master, stdout=self.logs[0], stderr=subprocess.STDOUT)]
        self.procs.append(
            subprocess.Popen(
                worker_command("127.0.0.1", port), stdout=self.logs[1], stderr=subprocess.STDOUT
            )
        )

    def wait(self) -> Path:
        try:
            codes = [self.procs[0].wait(timeout=120), self.procs[1].wait(timeout=30)]
        finally:
            self.stop()
        assert codes == [0, 0], Path(self.logs[0].name).read_text(errors="replace")[-3000:]
        return self.run_dir

    def stop(self) -> None:
        stop_children(self.procs, grace_s=1.0)
        for log in self.logs:
            log.close()


@pytest.fixture(scope="module")
def summaries(
    server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, dict[str, dict[str, Any]]]]:
    """case -> path -> summary.json, every path measured against the same server.

    No verdict here reads timing (the limits are out of reach or impossible), so the paths
    need not run alone: both cases' Locust runs go on while the in-process paths run."""
    tmp = tmp_path_factory.mktemp("lifecycle")
    path = tmp / "lifecycle.yaml"
    path.write_text(SCENARIO)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    locust: dict[str, _Locust] = {}
    try:
        for case, limit in LIMITS.items():
            root = tmp / case
            root.mkdir()
            locust[case] = _Locust(path, server_url, root, "locust", limit)
        for case, limit in LIMITS.items():
            scenario = load_scenario(path, {"load.max_schedule_lag_ms": limit})
            root = tmp / case
            opts = RunOptions(target=server_url, results_root=root, progress=False, render=False)
            dirs = {
                "run": run_scenario(scenario, str(path), replace(opts, run_id="run")).run_dir,
                "procs": run_procs(scenario, str(path), replace(opts, run_id="procs"), 2).run_dir,
            }
            ab = run_ab(
                scenario,
                str(path),
                Side(target=server_url),
                Side(target=server_url),
                ABOptions(results_root=root, run_id="ab", rounds=2),
            )
            dirs["ab-baseline"], dirs["ab-candidate"] = ab.baseline.run_dir, ab.candidate.run_dir
            out[case] = {name: _summary(case, name, d) for name, d in dirs.items()}
        for case, background in locust.items():
            out[case]["locust"] = _summary(case, "locust", background.wait())
    finally:
        for background in locust.values():
            background.stop()
    yield out


def _summary(case: str, name: str, run_dir: Path) -> dict[str, Any]:
    summary = load_run(run_dir).summary
    assert summary is not None, f"{case} {name}: no summary.json in {run_dir}"
    return summary


def _keys(doc: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON document; list items and transport names are wildcards."""
    out: set[str] = set()
    if isinstance(doc, Mapping):
        for key, value in doc.items():
            here = f"{prefix}.{key}" if prefix else str(key)
            if prefix == "transports":
                here = "transports.*"
            out.add(here)
            if key not in DATA_KEYED:
                out |= _keys(value, here)
    elif isinstance(doc, list):
        for item in doc:
            out |= _keys(item, f"{prefix}[]")
    return out


def _strip(keys: set[str], extras: set[str]) -> set[str]:
    return {k for k in keys if not any(k == e or k.startswith((e + ".", e + "[")) for e in extras)}


@pytest.mark.parametrize("case", list(LIMITS))
def test_every_path_writes_the_same_summary_keys(
    summaries: dict[str, dict[str, dict[str, Any]]], case: str
) -> None:
    runs = summaries[case]
    reference = _keys(runs["run"])
    assert {"load", "client.loop_lag_ms.p99", "transports.*.schedule.intended"} <= reference
    for name in PATHS[1:]:
        extras = EXTRAS.get(name, set())
        keys = _keys(runs[name])
        assert extras <= keys, f"{name}: expected its own keys {sorted(extras - keys)}"
        stripped = _strip(keys, extras)
        assert stripped == reference, (
            f"{case}: {name} differs from run: "
            f"missing {sorted(reference - stripped)}, extra {sorted(stripped - reference)}"
        )


@pytest.mark.parametrize("case", list(LIMITS))
def test_every_path_agrees_on_what_does_not_depend_on_timing(
    summaries: dict[str, dict[str, dict[str, Any]]], case: str
) -> None:
    runs = summaries[case]
    ref = runs["run"]
    for name in PATHS[1:]:
        got = runs[name]
        assert got["load"] == ref["load"], name
        assert [(c["baseline"], c["candidate"]) for c in got["comparisons"]] == [("http", "ws")]
        for transport, t in ref["transports"].items():
            mine = got["transports"][transport]
            assert mine["rollouts"] == t["rollouts"] == {"count": 8, "errors": 0}, name
            assert mine["turns"] == t["turns"], name
            assert mine["schedule"]["intended"] == t["schedule"]["intended"] == 8, name
            assert mine["schedule"]["started"] == 8 and mine["schedule"]["dropped"] == 0, name


def test_every_path_calls_a_run_within_its_limits_valid(
    summaries: dict[str, dict[str, dict[str, Any]]],
) -> None:
    verdicts = {name: (s["valid"], s["invalid_reasons"]) for name, s in summaries["valid"].items()}
    assert all(valid for valid, _ in verdicts.values()), verdicts


def test_every_path_calls_an_overloaded_run_invalid_by_the_shared_rules(
    summaries: dict[str, dict[str, dict[str, Any]]],
) -> None:
    for name, summary in summaries["overloaded"].items():
        assert summary["valid"] is False and summary["partial"] is False, name
        late = {
            m["transport"]
            for r in summary["invalid_reasons"]
            if (m := SCHEDULE_LAG_REASON.match(r)) is not None
        }
        assert late == {"http", "ws"}, (name, summary["invalid_reasons"])
        stalled = [r for r in summary["invalid_reasons"] if LOOP_STALL_REASON.match(r)]
        assert len(stalled) == PROCESSES[name], (name, summary["invalid_reasons"])
