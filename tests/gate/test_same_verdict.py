"""``run``, ``gate`` and ``compare`` reach the same verdict on the same results folders.

Each folder is written by the run's own lifecycle (:func:`tests.runs.measured_folder`:
:class:`Measurement`, which ``run``, ``run --procs``, ``gate --ab``, Locust and every
``sweep`` point finish through) from synthetic records, then read back by the gate's validity checks and by ``compare``.  Before
the rules lived in one module the three disagreed: the gate failed any error (0.0 over
turns + rollouts), compare only warned about a run the run had marked invalid (schedule
lag), and only compare let two runs differ by their ``slo`` block.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.gate.rules import parse_rules_text
from harness.gate.samples import run_data
from harness.gate.validity import check_validity
from harness.report import load_run
from harness.report.compare import compare, run_reasons, sides
from tests.runs import measured_folder

#: the gate's defaults: no limit of its own, only the shared rules
GATE = parse_rules_text("regression: ['*.rollout_ms.p50 +10%']")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("verdicts")
    return {
        "good": measured_folder(root, "good"),
        # 6 of 100 turns failed: above the scenario's default 5 %
        "errors_6pct": measured_folder(root, "errors_6pct", failed=6),
        # 3 of 100: within it (the gate used to fail any error)
        "errors_3pct": measured_folder(root, "errors_3pct", failed=3),
        # 1 failed turn of 20, the last: 5 % of turns, but not one rollout completed
        "too_few": measured_folder(root, "too_few", rollouts=1, turns=20, fail_last=True),
        # every start 500 ms behind a 100 ms max_schedule_lag_ms
        "late": measured_folder(root, "late", late_ms=500.0),
        "other_slo": measured_folder(root, "other_slo", scenario={"slo": {"ttft_ms": 500}}),
        # same scenario and seed, other rollouts: the generator changed between the runs
        "other_rollouts": measured_folder(root, "other_rollouts", history_shift=100),
        "other_workload": measured_folder(
            root, "other_workload", scenario={"rollout": {"count": 25, "tool_calls": 2}}
        ),
    }


def _run_counts(folder: Path) -> bool:
    summary = load_run(folder).summary
    assert summary is not None
    return bool(summary["valid"])


def _gate_counts(folder: Path) -> bool:
    results = check_validity(GATE, run_data(load_run(folder)), None)
    return not any(r.failed for r in results)


def _compare_counts(folder: Path) -> bool:
    (side,) = sides([load_run(folder)])
    return not run_reasons(side)


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("good", True),
        ("errors_6pct", False),
        ("errors_3pct", True),
        ("too_few", False),
        ("late", False),
        ("other_slo", True),
        ("other_workload", True),
    ],
)
def test_run_gate_and_compare_agree_whether_a_run_counts(
    folders: dict[str, Path], name: str, counts: bool
) -> None:
    verdicts = {
        "run": _run_counts(folders[name]),
        "gate": _gate_counts(folders[name]),
        "compare": _compare_counts(folders[name]),
    }
    assert verdicts == dict.fromkeys(verdicts, counts), load_run(folders[name]).summary


@pytest.mark.parametrize(
    ("name", "comparable"),
    [("good", True), ("other_slo", True), ("other_workload", False), ("other_rollouts", False)],
)
def test_gate_and_compare_agree_whether_two_runs_compare(
    folders: dict[str, Path], name: str, comparable: bool
) -> None:
    ref, cand = load_run(folders["good"]), load_run(folders[name])
    (gate,) = [
        r
        for r in check_validity(GATE, run_data(cand), run_data(ref))
        if r.name.startswith("comparable")
    ]
    cmp = compare([ref, cand], n_boot=200)
    assert (gate.status == "pass", cmp.comparable) == (comparable, comparable), (
        gate.message,
        cmp.reasons,
    )
    if name == "other_rollouts":
        why = "rollout 0 (round 0): first-turn history 1000 tokens in {}, 1100 in {}: the runs"
        assert "http " + why.format("the baseline", "the candidate") in gate.message
        assert cmp.reasons[0].startswith("B: http " + why.format("A", "B"))
    elif not comparable:
        assert "scenario.rollout.tool_calls.value: baseline 1.0, candidate 2.0" in gate.message
        assert cmp.reasons == [
            "B: scenario content differs from A: rollout.tool_calls.value 1.0 vs 2.0 (A first)"
        ]


def test_the_reasons_are_the_rules_sentences(folders: dict[str, Path]) -> None:
    """The run's reason is what gate and compare print: one sentence per cause."""
    summary = load_run(folders["errors_6pct"]).summary
    assert summary is not None
    assert summary["invalid_reasons"] == [
        "http: 6% of 100 turns failed, above load.max_error_rate 5% "
        "(server_error x6: HTTP 500: injected)"
    ]
    (side,) = sides([load_run(folders["errors_6pct"])])
    assert run_reasons(side) == ["A: " + summary["invalid_reasons"][0]]
    too_few = load_run(folders["too_few"]).summary
    assert too_few is not None
    assert too_few["invalid_reasons"] == ["http: 0 completed rollouts, at least 1 needed"]
