"""``loopbench run`` end to end: a real embedded server on a free port, both transports.

The run is the session's ``tiny_run`` (tests/conftest.py), shared with the report tests.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_result_files_exist(tiny_run: tuple[Path, str]) -> None:
    run_dir, _ = tiny_run
    for name in ("manifest.json", "summary.json", "turns.csv.gz", "rollouts.csv.gz"):
        assert (run_dir / name).is_file(), name
    with gzip.open(run_dir / "turns.csv.gz", "rt") as fh:
        rows = fh.read().splitlines()
    assert len(rows) > 2


def test_every_turn_succeeded_and_ws_beats_http(tiny_run: tuple[Path, str]) -> None:
    run_dir, stdout = tiny_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["transports"]) == {"http", "ws"}
    for name, t in summary["transports"].items():
        assert t["turns"]["errors"] == 0, name
        assert t["rollouts"]["errors"] == 0, name
        assert t["turns"]["count"] > 0
    http, ws = summary["transports"]["http"], summary["transports"]["ws"]
    assert ws["rollout_ms"]["p50"] < http["rollout_ms"]["p50"]
    comp = summary["comparisons"][0]
    assert comp["baseline"] == "http" and comp["candidate"] == "ws"
    assert comp["rollout_speedup"] > 1.0
    assert "speedup" in stdout


def test_a_valid_run_opens_with_its_verdict_and_states_small_samples(
    tiny_run: tuple[Path, str],
) -> None:
    run_dir, stdout = tiny_run
    assert stdout.splitlines()[0].startswith("verdict: valid"), stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    notes = summary["sample_size_notes"]
    # tiny: 2 paired rollouts per transport, so no CI, and p99 from far fewer than 100 samples
    assert any("n=2: too few for a CI" in n for n in notes), notes
    assert any(n.startswith("ws: too few samples for p90") and "p99" in n for n in notes), notes
    assert summary["valid"] is True


def test_decode_tps_matches_configured_rate(tiny_run: tuple[Path, str]) -> None:
    run_dir, _ = tiny_run
    summary = json.loads((run_dir / "summary.json").read_text())
    for name, t in summary["transports"].items():
        assert t["tps"]["decode_p50"] == pytest.approx(1000, rel=0.10), name


def test_malformed_scenario_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "scenarios" / "tiny.yaml").read_text().replace("concurrency: ", "concurrency: -")
    )
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(bad), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 4  # a usage or input error (exit-code table)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(bad) in lines[0] and "load.concurrency" in lines[0]
