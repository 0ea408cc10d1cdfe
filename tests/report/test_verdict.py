"""The one-line verdict a run report opens with (console, report.md, report.html)."""

from __future__ import annotations

import io
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

from harness.cli.summary_table import print_summary
from harness.report import load_run
from harness.report.render import render_run
from harness.report.verdict import verdict_kind, verdict_line, worst_error


def _summary(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "valid": True,
        "invalid_reasons": [],
        "transports": {
            "http": {"errors_by_kind": {}},
            "ws": {"errors_by_kind": {}},
        },
        "comparisons": [
            {
                "baseline": "http",
                "candidate": "ws",
                "rollout_speedup": 1.3512,
                "rollout_speedup_ci95": [1.3011, 1.4102],
            }
        ],
    }
    base.update(kw)
    return base


def test_valid_run() -> None:
    assert verdict_line(_summary()) == (
        "verdict: valid · ws vs http 1.35× (95 % CI 1.30–1.41) · no errors"
    )


def test_invalid_run_names_its_first_reason() -> None:
    line = verdict_line(
        _summary(
            valid=False,
            invalid_reasons=[
                "http: turn error rate 100 % exceeds max_error_rate 5 %",
                "client CPU saturated: 193% of one core over the run",
            ],
        )
    )
    assert line.startswith(
        "verdict: INVALID: http: turn error rate 100 % exceeds max_error_rate 5 % (+1 more) · "
    )
    assert "CPU" not in line
    # the console's verdict, after a first line that gave the reasons, does not repeat them
    bare = verdict_line(_summary(valid=False, invalid_reasons=["a reason"]), reasons=False)
    assert bare.startswith("verdict: INVALID · ws vs http 1.35×"), bare
    assert "a reason" not in bare


def test_honesty_warnings_reach_the_verdict() -> None:
    warning = (
        "http-chained: the server reported 180 input tokens on average on 4 of 8 turns whose "
        "history held ~416: it appears to ignore previous_response_id"
    )
    line = verdict_line(_summary(warnings=[warning, "another"]))
    assert line.endswith(f" · 2 warnings: {warning}"), line
    assert verdict_kind(_summary(warnings=[warning])) == "note"
    assert verdict_kind(_summary()) == "ok"


def test_run_with_errors_names_the_worst() -> None:
    s = _summary()
    s["transports"]["http"]["errors_by_kind"] = {"connection_refused": 4, "timeout": 1}
    s["transports"]["ws"]["errors_by_kind"] = {"rollout:stream": 2}
    assert worst_error(s) == ("http", "connection_refused", 4)
    assert verdict_line(s).endswith(" · worst error: connection_refused x4 on http")


def test_no_ci_renders_the_summary_reason_and_no_comparison_says_why() -> None:
    s = _summary()
    s["comparisons"][0]["rollout_speedup_ci95"] = [None, None]
    s["comparisons"][0]["rollout_speedup_ci_reason"] = "n=2: too few for a CI"
    assert "ws vs http 1.35× (n=2: too few for a CI)" in verdict_line(s)
    one = _summary(transports={"http": {}}, comparisons=[])
    assert "no speedup: one transport" in verdict_line(one)
    assert verdict_line(None) == "verdict: no result: the run did not finish (no summary.json)"


def test_console_and_reports_open_with_the_same_line(tmp_path: Path, synthetic: ModuleType) -> None:
    path = synthetic.make_run(
        tmp_path / "r", rollout_ms={"http": [600.0, 630.0, 720.0], "ws": [300.0, 330.0, 360.0]}
    )
    rendered = render_run(path)
    summary = load_run(path).summary
    assert summary is not None
    line = verdict_line(summary)
    assert line.startswith("verdict: valid · ws vs http ")
    out = io.StringIO()
    print_summary(summary, path, Console(file=out, width=120))
    assert out.getvalue().splitlines()[0] == line
    md = rendered.report_md.read_text().splitlines()
    # the title, then the verdict before anything else
    assert [x for x in md if x][1] == "> " + line
    page = rendered.report_html.read_text()
    assert page.index(line) < page.index("<table")
