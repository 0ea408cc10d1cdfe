"""The first line ``loopbench run`` prints, against the lines docs/reliability.md quotes.

The page quoted ``run valid`` for years after the program stopped printing it: these tests
read the quotes from the page and the lines from :func:`harness.cli.run.print_outcome`
(what ``run`` and ``locust`` print after a run), on summaries of each kind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.cli.run import print_outcome
from harness.wire.exit_codes import ExitCode
from tests.runs import ROOT

PAGE = ROOT / "docs" / "reliability.md"


def _quotes(after: str, count: int) -> list[str]:
    """The first ``count`` backquoted texts after ``after`` on the page, unwrapped."""
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    start = text.index(after) + len(after)
    return re.findall(r"`([^`]+)`", text[start:])[:count]


def _first_line(
    summary: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    code = print_outcome(summary, tmp_path)
    return code, capsys.readouterr().out.splitlines()[0]


def _summary(**changes: Any) -> dict[str, Any]:
    summary = json.loads((ROOT / "results" / "baseline" / "summary.json").read_text())
    return {**summary, **changes}


def test_the_first_lines_the_page_quotes_are_the_ones_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    valid, invalid, interrupted = _quotes("Its first console line says which:", 3)
    code, line = _first_line(_summary(valid=True, invalid_reasons=[]), tmp_path, capsys)
    assert code == ExitCode.OK
    assert line.startswith(valid.removesuffix("…").rstrip()), (valid, line)
    reasons = ["ws: 100% of 2 turns failed", "client CPU saturated"]
    code, line = _first_line(_summary(valid=False, invalid_reasons=reasons), tmp_path, capsys)
    assert code == ExitCode.INVALID
    assert invalid == "run INVALID: <every reason, once>"
    assert line == "run INVALID: " + "; ".join(reasons)
    stopped = _summary(
        valid=False,
        interrupted=True,
        partial=True,
        not_run={"transports": ["ws"], "rollouts": {"http": 31}, "cancelled": {}},
    )
    code, line = _first_line(stopped, tmp_path, capsys)
    assert code == ExitCode.INTERRUPTED
    assert line.startswith(interrupted.removesuffix("…").rstrip()), (interrupted, line)
    # The Interruption paragraph quotes the whole line of this very summary.
    (whole,) = _quotes("The console's first line is", 1)
    assert line == whole
