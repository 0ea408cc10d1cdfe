"""``loopbench compare`` on real runs of tiny.yaml: comparability, exit codes, compare.html."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from harness.report import load_run
from harness.report.compare import compare
from harness.wire.exit_codes import ExitCode
from tests.runs import NO_MODELLED_WAITS, in_process, loopbench, run_tiny

SIX = {"rollout.count": "6"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real runs on the embedded server: two alike, another scenario, one that always fails.

    The verdicts and pages are the claim, not the latencies: the server models no waits
    (a run's client still uses ~20 % of a core, far from the saturation rule)."""
    root = tmp_path_factory.mktemp("compare-real")
    fast = list(NO_MODELLED_WAITS)
    made = {
        "base": run_tiny(root, ["http", "ws"], SIX, run_id="base", server_args=fast),
        "same": run_tiny(root, ["http", "ws"], SIX, run_id="same", server_args=fast),
        "other": run_tiny(
            root, ["http", "ws"], {**SIX, "name": "other"}, run_id="other", server_args=fast
        ),
        "failing": run_tiny(
            root,
            ["http", "ws"],
            SIX,
            run_id="failing",
            server_args=[*fast, "--fault", "error_rate.500=1"],
        ),
    }
    return {name: run.path for name, run in made.items()}


def test_runs_of_different_scenarios_exit_3_with_the_reason(runs: dict[str, Path]) -> None:
    proc = loopbench("compare", runs["base"], runs["other"], "--no-html")
    assert proc.returncode == ExitCode.INVALID, proc.stderr
    assert "not comparable: re-measure, or pass --force" in proc.stderr
    assert "B: scenario 'other', A has 'tiny'" in proc.stderr
    # (1 reason, or more if the shared machine also made a run invalid: a stalled client)
    assert proc.stdout.startswith("Verdict: NOT COMPARABLE (")
    assert "rollout p50" not in proc.stdout.split("\n", 1)[1], "no table without --force"

    forced = loopbench("compare", runs["base"], runs["other"], "--no-html", "--force")
    assert forced.returncode == ExitCode.OK, forced.stderr
    assert "warning: not comparable (compared anyway: --force)" in forced.stderr
    assert "B: scenario 'other', A has 'tiny'" in forced.stderr
    assert "rollout p50 (ms)" in forced.stdout


def test_runs_of_one_scenario_are_comparable(runs: dict[str, Path]) -> None:
    proc = loopbench("compare", runs["base"], runs["same"], "--no-html")
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert proc.stdout.startswith("Verdict: comparable · B vs A: rollout p50 (http) ")
    assert "no errors" in proc.stdout.splitlines()[0]


def test_a_transport_without_successful_turns_keeps_its_rows(runs: dict[str, Path]) -> None:
    cmp = compare([load_run(runs["base"]), load_run(runs["failing"])])
    for name in ("http", "ws"):
        assert any(
            r.startswith(f"B: {name}: 100% of 6 turns failed, no turn succeeded (server_error x6")
            for r in cmp.reasons
        ), cmp.reasons
        rows = [d for d in cmp.deltas["B"] if d.transport == name]
        assert len(rows) == 11  # every compare row of the metric table
        assert all(d.note == "B: no successful turns (server_error x6)" for d in rows)
        # A's own figures are still shown next to the missing B
        rollout = next(d for d in rows if d.metric == "rollout p50")
        assert rollout.a is not None and rollout.b is None

    proc = loopbench("compare", runs["base"], runs["failing"], "--force", "--no-html")
    assert proc.returncode == ExitCode.OK, proc.stderr
    table = proc.stdout.split("\n", 1)[1]
    assert table.count("│ B: no successful turns (server_error x6)") == 22
    assert "worst error: B http: 6 of 6 turns failed (server_error x6)" in proc.stdout

    plain = loopbench("compare", runs["base"], runs["failing"], "--no-html")
    assert plain.returncode == ExitCode.INVALID


def test_a_missing_run_folder_is_a_usage_error(runs: dict[str, Path], tmp_path: Path) -> None:
    # refusals before any work: through main in this process (no interpreter start each)
    code, out = in_process("compare", runs["base"], tmp_path / "nope")
    assert code == ExitCode.USAGE
    assert f"error: compare: {tmp_path / 'nope'}: no such folder; expected a results folder" in out
    code, out = in_process("compare", runs["base"])
    assert code == ExitCode.USAGE
    assert "expected at least two results folders" in out
    code, out = in_process("compare", "--help")
    assert code == ExitCode.OK and "Always exits 0" not in out
    code, out = in_process("compare", runs["base"], runs["same"], "--n-boot", "0")
    assert code == ExitCode.USAGE
    assert "--n-boot: expected a positive integer, got 0" in out


def test_compare_html_is_self_contained_with_a_section_per_transport(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "cmp"
    proc = loopbench(
        "compare", runs["base"], runs["same"], runs["failing"], "--force", "--out", out
    )
    assert proc.returncode == ExitCode.OK, proc.stderr
    page = (out / "compare.html").read_text()
    assert f"report: {out / 'compare.html'}" in proc.stdout
    # opens with the verdict
    body = page.split("<body>", 1)[1]
    assert re.match(r"\s*<h1>[^<]*</h1>\s*<p class=\"bad\">Verdict: NOT COMPARABLE", body)
    # no file or URL is loaded: every src/href is inline data
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", page)
    assert refs and all(r.startswith("data:") for r in refs), [r[:40] for r in refs]
    assert "url(" not in page and "@import" not in page
    for name in ("http", "ws"):
        section = page.split(f"<h2>Transport {name}</h2>", 1)[1].split("<h2>", 1)[0]
        assert section.count('<img src="data:image/png;base64,') >= 3, name
        assert "TTFT distribution" in section and "Rollout latency with confidence" in section
        # a one-line verdict per metric and candidate
        assert (
            f"B vs A: rollout p50 ({name})" in section and f"C vs A: TTFT p50 ({name})" in section
        )
        assert "C: no successful turns" in section
    assert (out / "compare.md").exists() and (out / "compare.json").exists()


@pytest.fixture(scope="module")
def default_compare(runs: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    """``compare base same`` without ``--out``: rendered once, read by the page checks below."""
    return loopbench("compare", runs["base"], runs["same"])


def test_compare_html_defaults_to_a_folder_beside_the_first_run(
    runs: dict[str, Path], default_compare: subprocess.CompletedProcess[str]
) -> None:
    proc = default_compare
    assert proc.returncode == ExitCode.OK, proc.stderr
    folder = runs["base"].parent / "compare-base-vs-same"
    assert (folder / "compare.html").exists()
    assert f"report: {folder / 'compare.html'}" in proc.stdout


def test_compare_html_in_headless_chromium(
    runs: dict[str, Path],
    default_compare: subprocess.CompletedProcess[str],
    browser: ModuleType,
    tmp_path: Path,
) -> None:
    chromium = browser.find_chromium()
    if chromium is None:
        pytest.skip("chromium not installed (apt-get install -y chromium; .ci/run installs it)")
    proc = default_compare
    assert proc.returncode == ExitCode.OK, proc.stderr
    page_path = runs["base"].parent / "compare-base-vs-same" / "compare.html"
    page = browser.inspect_page(page_path, tmp_path / "shot.png", chromium=chromium)
    assert page.console_errors == []
    assert page.title.startswith("loopbench compare")
    assert len(page.images) == 8  # four plots for each of http and ws
    for img in page.images:
        assert img["complete"] and img["naturalWidth"] > 0 and img["naturalHeight"] > 0, img
