"""``loopbench gate`` end to end on real results folders: exit codes, reports, usage errors."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baseline"


def gate(*argv: str) -> int:
    with pytest.raises(SystemExit) as info:
        main(["gate", *argv])
    code = info.value.code
    assert isinstance(code, int)
    return code


def _copy(tmp_path: Path, name: str = "cand") -> Path:
    dst = tmp_path / name
    shutil.copytree(BASELINE, dst)
    return dst


def _edit_manifest(run: Path, **changes: object) -> None:
    path = run / "manifest.json"
    doc = json.loads(path.read_text())
    for key, value in changes.items():
        if key == "rollout_count":
            doc["scenario"]["rollout"]["count"] = value
        else:
            doc[key] = value
    path.write_text(json.dumps(doc))


def test_a_run_against_itself_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junit, md = tmp_path / "out" / "gate.xml", tmp_path / "out" / "gate.md"
    assert (
        gate(
            str(BASELINE), "--baseline", str(BASELINE), "--junit", str(junit), "--markdown", str(md)
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "gate: PASS (exit 0)" in out
    assert "PASS  regression http.rollout_ms.p50 vs baseline <= +20%" in out
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.attrib["failures"] == "0"
    assert md.read_text().startswith("## loopbench gate: ✅ pass (exit 0)")


def test_slo_breach_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "slo.yaml"
    rules.write_text("slo:\n  - ws.ttft_ms.p50 < 1\n  - http.turns.errors <= 0\n")
    junit = tmp_path / "gate.xml"
    assert (
        gate(
            str(BASELINE), "--baseline", str(BASELINE), "--rules", str(rules), "--junit", str(junit)
        )
        == 2
    )
    out = capsys.readouterr().out
    assert (
        "FAIL  slo        ws.ttft_ms.p50 < 1" in out
        and "PASS  slo        http.turns.errors <= 0" in out
    )
    assert "gate: SLO BREACH (exit 2)" in out
    (failure,) = ET.parse(junit).getroot().iter("failure")
    assert failure.attrib["type"] == "slo"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"scenario_name": "quickstart"},
            "scenario_name: baseline 'ci-gate', candidate 'quickstart'",
        ),
        ({"seed": 6}, "seed: baseline 5, candidate 6"),
        ({"rollout_count": 10}, "scenario.rollout.count: baseline 9, candidate 10"),
    ],
)
def test_mismatched_scenario_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object], expected: str
) -> None:
    cand = _copy(tmp_path)
    _edit_manifest(cand, **changes)
    md = tmp_path / "gate.md"
    assert gate(str(cand), "--baseline", str(BASELINE), "--markdown", str(md)) == 3
    out = capsys.readouterr().out
    assert expected in out and "gate: INVALID OR NOT COMPARABLE (exit 3)" in out
    assert "SKIP  regression" in out
    assert md.read_text().startswith("## loopbench gate: ❌ invalid or not comparable (exit 3)")


def test_unfinished_run_exits_3_missing_folder_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = _copy(tmp_path)
    (cand / "summary.json").unlink()
    assert gate(str(cand), "--baseline", str(BASELINE)) == 3
    assert f"candidate {cand}: no summary.json (run did not finish)" in capsys.readouterr().out
    # A mistyped path is the user's to fix: re-measuring (3) would loop in gate.sh.
    assert gate(str(tmp_path / "nothing"), "--baseline", str(BASELINE)) == 4
    assert "expected a results folder, got nothing" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert gate(str(tmp_path / "empty"), "--baseline", str(BASELINE)) == 4
    assert "manifest.json: missing (not a results folder)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([str(BASELINE)], "--baseline: required"),
        (
            [str(BASELINE), "--baseline", str(BASELINE), "--bogus"],
            "unrecognized arguments: --bogus",
        ),
        ([str(BASELINE), "--baseline", str(BASELINE), "--rounds", "3"], "--rounds: only with --ab"),
        ([str(BASELINE), "--baseline", str(BASELINE), "--base", "x"], "unrecognized arguments"),
        (
            ["--ab", "examples/ci/scenario.yaml", "--baseline", str(BASELINE)],
            "in --ab mode use --baseline-target",
        ),
        (["--ab", "nope.yaml"], "no scenario file or built-in named 'nope.yaml'"),
        (
            [
                "--ab",
                str(ROOT / "examples/ci/scenario.yaml"),
                "--candidate-server-set",
                "api.nope=1",
            ],
            "candidate server: --set: api.nope: unknown field",
        ),
        (
            [str(BASELINE), "--baseline", str(BASELINE), "--rules", "missing.yaml"],
            "missing.yaml: file not found",
        ),
        ([], "the following arguments are required"),
    ],
)
def test_usage_errors_exit_4(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gate(*argv) == 4
    assert message in capsys.readouterr().err


def test_broken_rules_file_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "g.yaml"
    rules.write_text("regression:\n  - {metric: ws.rollout_ms.p50, max_increase_pct: -1}\n")
    assert gate(str(BASELINE), "--baseline", str(BASELINE), "--rules", str(rules)) == 4
    err = capsys.readouterr().err
    assert f"{rules}: regression[0].max_increase_pct: expected a number ≥ 0, got -1" in err
