"""The fuzzer of ``make fuzz`` (tools/fuzz.py): a bounded run is clean, and it sees a defect.

The full run (10,000 cases, about a minute) is ``make fuzz``; here a few thousand
cases against a server the tool starts, and a server that answers 500 to
everything, which the tool must report.
"""

from __future__ import annotations

import random

import pytest

from harness.wire.exit_codes import ExitCode
from tests.foreign_http import ANSWER_500, foreign_server
from tools import fuzz


def test_a_bounded_fuzz_run_finds_no_5xx_no_hang_and_bounded_memory() -> None:
    res = fuzz.run(cases=2000, seed=5, warmup=200, quiet=True)
    doc = res.to_json()
    assert doc["problems"] == [], fuzz.summary_text(res)
    assert doc["cases"] == 2000
    # every family ran, and the answers include both refusals and started responses
    assert set(doc["cases_by_family"]) == {"http_body", "http_header", "ws", "socket"}
    assert doc["server_5xx"] == 0 and doc["hangs"] == 0
    assert any(k.startswith("http_body 400 ") for k in doc["answers"])
    assert doc["answers"].get("http_body 200", 0) > 0
    assert any(k.startswith("ws response.") for k in doc["answers"])
    assert doc["rss_before_mib"] is not None and doc["rss_after_mib"] is not None


def test_the_fuzzer_reports_a_server_that_answers_500() -> None:
    with foreign_server(ANSWER_500) as url:
        res = fuzz.run(cases=200, seed=1, warmup=0, target=url, concurrency=4, quiet=True)
    doc = res.to_json()
    assert not doc["ok"]
    assert doc["server_5xx"] > 100, fuzz.summary_text(res)
    assert any("cases failed" in p for p in doc["problems"])
    assert any("a valid request after the fuzz" in p for p in doc["problems"])


def test_the_cases_are_seeded() -> None:
    a = [fuzz.fuzz_body(random.Random(9)) for _ in range(3)]
    b = [fuzz.fuzz_body(random.Random(9)) for _ in range(3)]
    assert a == b


def test_a_bad_count_or_timeout_is_a_usage_error_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    refused = {
        "--cases=0": "argument --cases: expected a whole number >= 1, got '0'",
        "--concurrency=x": "argument --concurrency: expected a whole number >= 1",
        "--hang-s=nan": "--hang-s: expected a positive number of seconds, got nan",
    }
    for arg, said in refused.items():
        with pytest.raises(SystemExit) as info:
            fuzz.main([arg])
        assert info.value.code == ExitCode.USAGE
        assert said in capsys.readouterr().err
