"""The JUnit XML has the shape CI systems read; the Markdown summary says what failed and why.

The checks follow the JUnit schema as Jenkins, GitLab and the GitHub test-report
actions consume it (the Ant ``junit.xsd`` family): ``testsuites`` > ``testsuite``
(``name``, ``tests``, ``failures``, ``errors`` required; ``skipped``, ``time``,
``timestamp`` optional) > ``properties`` and ``testcase`` (``name``,
``classname``, ``time``) holding at most one of ``failure``/``error``/``skipped``
(``failure``/``error`` with ``message`` and ``type``) plus ``system-out``; the
counts must match the testcases.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np

from harness.gate.evaluate import evaluate
from harness.gate.junit import render_junit
from harness.gate.markdown import render_markdown
from harness.gate.outcome import GateReport
from harness.gate.rules import parse_rules_text
from harness.gate.samples import RunData, Samples
from harness.metrics.results_model import Manifest, Summary

_DECIMAL = re.compile(r"^\d+(\.\d+)?$")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")
_SUITE_REQUIRED = {"name", "tests", "failures", "errors"}
_SUITE_ALLOWED = _SUITE_REQUIRED | {"skipped", "time", "timestamp", "hostname", "id", "package"}
_OUTCOMES = {"failure", "error", "skipped"}


def validate_junit(text: str) -> ET.Element:
    """Assert the JUnit shape; returns the root."""
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == "testsuites"
    assert set(root.attrib) <= {"name", "tests", "failures", "errors", "skipped", "time"}
    suites = list(root)
    assert suites and all(s.tag == "testsuite" for s in suites)
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in suites:
        assert _SUITE_REQUIRED <= set(suite.attrib) <= _SUITE_ALLOWED, suite.attrib
        assert _TIMESTAMP.match(suite.attrib.get("timestamp", "2000-01-01T00:00:00"))
        assert _DECIMAL.match(suite.attrib.get("time", "0"))
        children = list(suite)
        cases = [c for c in children if c.tag == "testcase"]
        assert all(
            c.tag in ("properties", "testcase", "system-out", "system-err") for c in children
        )
        props = [c for c in children if c.tag == "properties"]
        assert len(props) <= 1 and (not props or children[0].tag == "properties")
        for prop in props[0] if props else []:
            assert prop.tag == "property" and set(prop.attrib) == {"name", "value"}
        counts = dict.fromkeys(("failures", "errors", "skipped"), 0)
        for case in cases:
            assert set(case.attrib) == {"name", "classname", "time"}
            assert case.attrib["name"] and case.attrib["classname"]
            assert _DECIMAL.match(case.attrib["time"])
            outcomes = [c for c in case if c.tag in _OUTCOMES]
            assert len(outcomes) <= 1
            assert all(c.tag in _OUTCOMES | {"system-out", "system-err"} for c in case)
            for o in outcomes:
                key = {"failure": "failures", "error": "errors", "skipped": "skipped"}[o.tag]
                counts[key] += 1
                if o.tag != "skipped":
                    assert o.attrib.get("message") and o.attrib.get("type")
        assert int(suite.attrib["tests"]) == len(cases)
        for key, n in counts.items():
            assert int(suite.attrib.get(key, "0")) == n, (key, n)
        totals["tests"] += len(cases)
        for key, n in counts.items():
            totals[key] += n
    for key, n in totals.items():
        assert int(root.attrib.get(key, "0")) == n
    return root


def _run(factor: float, *, name: str = "s", run_id: str = "r") -> RunData:
    rng = np.random.default_rng(1)
    base = rng.uniform(300, 900, 12)
    keys = [(0, i) for i in range(12)]
    values = base * factor * (1 + rng.normal(0, 0.01, 12))
    return RunData(
        run_id=run_id,
        manifest=Manifest.of({"scenario_name": name, "seed": 3, "scenario": {"name": name}}),
        summary=Summary.of(
            {
                "valid": True,
                "transports": {
                    "ws": {
                        "turns": {"count": 36, "errors": 0},
                        "rollouts": {"count": 12, "errors": 0},
                        "ttft_ms": {"p99": 120.0},
                    }
                },
            }
        ),
        samples={("ws", "rollout_ms"): Samples.of(keys, list(values))},
        rollouts={"ws": 12},
    )


RULES = parse_rules_text(
    "slo: ['ws.ttft_ms.p99 < 100']\nregression: ['*.rollout_ms.p50 +10%']", "gates.yaml"
)


def _report(factor: float, name: str = "s") -> GateReport:
    return evaluate(RULES, _run(factor, name=name, run_id="cand"), _run(1.0, run_id="base"))


def test_junit_for_failures() -> None:
    report = _report(1.4)
    root = validate_junit(render_junit(report, timestamp="2026-01-02T03:04:05", elapsed_s=1.25))
    suite = root[0]
    assert suite.attrib["failures"] == "2" and suite.attrib["errors"] == "0"
    assert suite.attrib["time"] == "1.250"
    by_name = {c.attrib["name"]: c for c in suite.iter("testcase")}
    slo = by_name["ws.ttft_ms.p99 < 100"]
    assert slo.attrib["classname"] == "loopbench.gate.slo"
    failure = slo.find("failure")
    assert failure is not None and failure.attrib["type"] == "slo"
    assert "breaches < 100" in failure.attrib["message"]
    props = {p.attrib["name"]: p.attrib["value"] for p in suite.iter("property")}
    assert props["exit_code"] == "2" and props["verdict"] == "SLO breach"
    assert props["rules"] == "gates.yaml" and props["baseline"] == "base"


def test_junit_for_an_invalid_comparison_has_errors_and_skips() -> None:
    report = _report(1.0, name="other")
    root = validate_junit(render_junit(report))
    suite = root[0]
    assert suite.attrib["errors"] == "1" and suite.attrib["failures"] == "0"
    assert suite.attrib["skipped"] == "2"
    (err,) = list(suite.iter("error"))
    assert "scenario_name: baseline 's', candidate 'other'" in err.attrib["message"]


def test_junit_escapes_rule_names() -> None:
    text = render_junit(_report(1.0))
    validate_junit(text)
    assert "ws.rollout_ms.p50 vs baseline &lt;= +10%" in text


def test_markdown_summary() -> None:
    md = render_markdown(_report(1.4))
    assert md.startswith("## loopbench gate: ❌ SLO breach (exit 2)\n")
    assert "candidate `cand` vs baseline `base`" in md
    row = next(
        line
        for line in md.splitlines()
        if "ws.rollout_ms.p50 vs baseline" in line and line.startswith("| ❌")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "regression"
    change = re.match(r"^\+(\d+\.\d)% \[\+(\d+\.\d)%, \+(\d+\.\d)%\]$", cells[5])
    assert change is not None, cells[5]  # the change with its CI
    mid, lo, hi = (float(x) for x in change.groups())
    assert 35 < mid < 45 and lo <= mid <= hi
    assert "### Failures" in md and "**ws.ttft_ms.p99 < 100**" in md
    relative_only = parse_rules_text("regression: ['*.rollout_ms.p50 +10%']")
    passing = render_markdown(evaluate(relative_only, _run(1.0), _run(1.0)))
    assert passing.startswith("## loopbench gate: ✅ pass (exit 0)")
    assert "Failures" not in passing
