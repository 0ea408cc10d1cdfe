"""The self-benchmark's verdicts, table and JSON document (pure)."""

from __future__ import annotations

import math

from bench.selfbench.figures import (
    at_least,
    at_most,
    document,
    figure,
    render_table,
    verdict,
)


def test_a_figure_passes_or_fails_its_target() -> None:
    assert figure("r", "ratio", 0.62, "", at_least(0.5, ">= 0.5")).passed is True
    assert figure("r", "ratio", 0.41, "", at_least(0.5, ">= 0.5")).passed is False
    assert figure("t", "ttft", 1.2, "ms", at_most(1.0, "<= 1 ms")).passed is False


def test_a_missing_or_non_finite_value_fails_and_an_informational_one_has_no_verdict() -> None:
    assert figure("r", "ratio", None, "", at_least(0.5, ">= 0.5")).passed is False
    assert figure("r", "ratio", math.nan, "", at_least(0.5, ">= 0.5")).passed is False
    info = figure("raw", "ceiling", 35_000.4, "msg/s", digits=0)
    assert info.passed is None and info.value == 35_000


def test_the_verdict_ignores_informational_figures() -> None:
    ok = figure("a", "a", 2.0, "", at_least(1, ">= 1"))
    info = figure("b", "b", -5.0, "")
    bad = figure("c", "c", 0.0, "", at_least(1, ">= 1"))
    assert verdict([ok, info]) is True
    assert verdict([ok, info, bad]) is False


def test_table_has_one_row_per_figure_with_its_result() -> None:
    figs = [
        figure("a", "pipeline / ceiling, ws", 0.8, "", at_least(0.5, ">= 0.5")),
        figure("b", "raw loopback ceiling, SSE", 41_234.0, "msg/s", digits=0),
        figure("c", "TTFT overhead p50", 3.0, "ms", at_most(1.0, "<= 1 ms")),
    ]
    lines = render_table(figs).splitlines()
    assert len(lines) == 2 + len(figs)
    assert "PASS" in lines[2] and "41,234 msg/s" in lines[3] and "info" in lines[3]
    assert "FAIL" in lines[4] and "<= 1 ms" in lines[4]
    assert len({len(line) for line in lines}) == 1  # aligned columns


def test_document_carries_figures_meta_and_overall_verdict() -> None:
    figs = [figure("a", "a", 0.8, "", at_least(0.5, ">= 0.5"))]
    doc = document(figs, {"command": "python -m bench.selfbench"}, {"raw": [1]})
    assert doc["passed"] is True and doc["format_version"] == 1
    assert doc["figures"][0] == {
        "key": "a",
        "label": "a",
        "value": 0.8,
        "unit": "",
        "target": ">= 0.5",
        "passed": True,
        "note": None,
        "not_judged": None,
    }
    assert doc["not_judged"] == 0
    assert doc["command"] == "python -m bench.selfbench" and doc["details"] == {"raw": [1]}


def test_notes_are_printed_once_under_the_table() -> None:
    note = "every trial was disturbed"
    figs = [
        figure("a", "TTFT overhead p50", 0.8, "ms", at_most(1.0, "<= 1 ms"), note=note),
        figure("b", "TTFT overhead p99", 4.0, "ms", at_most(5.0, "<= 5 ms"), note=note),
    ]
    table = render_table(figs)
    assert table.count(f"note: {note}") == 1
    assert table.splitlines()[-1] == f"note: {note}"
