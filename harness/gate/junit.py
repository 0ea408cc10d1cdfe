"""JUnit XML for a gate report: one ``<testcase>`` per rule.

The shape is the one CI systems read (Jenkins, GitLab ``artifacts:reports:junit``,
GitHub test-report actions): ``<testsuites>`` holding one ``<testsuite>`` whose
``tests``/``failures``/``errors``/``skipped`` attributes count its testcases.  A
broken rule is a ``<failure>``; a run that failed validity is an ``<error>``
(the measurement itself could not be judged); rules not evaluated are
``<skipped>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.gate.outcome import GateReport, RuleResult

SUITE_NAME = "loopbench gate"


def _case(parent: ET.Element, r: RuleResult) -> None:
    case = ET.SubElement(
        parent, "testcase", {"classname": f"loopbench.gate.{r.kind}", "name": r.name, "time": "0"}
    )
    if r.status == "fail":
        tag = "error" if r.kind == "validity" else "failure"
        ET.SubElement(case, tag, {"message": r.message, "type": r.kind}).text = r.message
    elif r.status == "skip":
        ET.SubElement(case, "skipped", {"message": r.message})
    else:
        ET.SubElement(case, "system-out").text = r.message


def render_junit(report: GateReport, *, timestamp: str = "", elapsed_s: float = 0.0) -> str:
    """The XML document as text (UTF-8 declaration included)."""
    failures = sum(1 for r in report.results if r.failed and r.kind != "validity")
    errors = sum(1 for r in report.results if r.failed and r.kind == "validity")
    counts = {
        "tests": str(len(report.results)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(report.count("skip")),
        "time": f"{elapsed_s:.3f}",
    }
    root = ET.Element("testsuites", {"name": SUITE_NAME, **counts})
    suite_attrs = {"name": f"{SUITE_NAME}: {report.candidate_id}", **counts}
    if timestamp:
        suite_attrs["timestamp"] = timestamp
    suite = ET.SubElement(root, "testsuite", suite_attrs)
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("candidate", report.candidate_id),
        ("baseline", report.baseline_id or ""),
        ("scenario", report.scenario),
        ("seed", "" if report.seed is None else str(report.seed)),
        ("rules", report.rules_source),
        ("alpha", f"{report.alpha:g}"),
        ("verdict", report.verdict),
        ("exit_code", str(report.exit_code)),
    ):
        ET.SubElement(props, "property", {"name": key, "value": value})
    for r in report.results:
        _case(suite, r)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
