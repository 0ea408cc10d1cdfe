"""What delivery and scrape_cost share (pure): one window read back from its folder beside
vLLM's own TTFT p99 over it, and the command line both take."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from bench.options import options_from
from harness.wire.exit_codes import ExitCode
from tools.real_engine.engine_metrics import TTFT, Histogram, Snapshot
from tools.real_engine.run import Options
from tools.real_engine.side_by_side import parser, read_window


def test_a_window_is_read_back_with_vllms_ttft_p99_in_ms(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "turns.csv.gz", "wt", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, ["sent_ns", "first_token_ns"])
        w.writeheader()
        w.writerows([{"sent_ns": "1", "first_token_ns": "2"}] * 3)
    # 100 requests, all between 4 and 6 ms: the p99 lies in that bucket
    delta = Snapshot({TTFT: Histogram({0.004: 0, 0.006: 100, float("inf"): 100}, 0.5, 100)})
    window = read_window(tmp_path, None, delta, "loopbench over chat: exit 3")
    assert len(window.turns) == 3 and window.folder == tmp_path
    assert window.engine_p99_ms is not None and 4.0 < window.engine_p99_ms <= 6.0
    # without loopbench's figures there is nothing to set beside vLLM's
    assert window.rows == [] and window.note == "loopbench over chat: exit 3"


def test_a_window_loopbench_wrote_no_turns_for_reads_empty(tmp_path: Path) -> None:
    window = read_window(tmp_path, None, Snapshot(), "")
    assert (window.turns, window.engine_p99_ms) == ([], None)


def test_the_settings_named_are_checked_against_the_comparisons_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = ("every-1s", "ends-only")
    p = parser("prog", None, str(tmp_path / "out"), settings, rounds=3, requests=60)
    args = p.parse_args(["--settings", "ends-only", "--requests", "5"])
    opts = options_from(Options, args)
    assert args.settings == ("ends-only",)
    assert (opts.out, opts.requests) == (tmp_path / "out", 5)
    assert p.parse_args([]).settings == settings
    with pytest.raises(SystemExit) as stop:
        p.parse_args(["--settings", "every-1s,hourly"])
    # a usage error, as every tool make runs says it (2 would read as an SLO breach)
    assert stop.value.code == ExitCode.USAGE
    assert "expected one or more of every-1s, ends-only, got 'every-1s,hourly'" in (
        capsys.readouterr().err
    )
