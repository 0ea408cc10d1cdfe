"""Time slices end to end: ``run --slice-s`` writes slices.csv.gz and the timeline plot against the
embedded server, ``report`` rebuilds them from the rows, ``--procs`` rows slice as one run, and a
burst scenario's slices show the burst (docs/metrics.md, "Time slices")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd

from harness.metrics import slices as SL
from harness.report.results import SLICES
from tests.runs import TINY, in_process, loopbench, run_cli


def _cli(*args: str | Path) -> None:
    """``loopbench ARGS`` through ``main`` in this process: the slices and the plot are what is
    tested, not the process (its flags' refusals below go through a real one)."""
    code, out = in_process(*args)
    assert code == 0, out


def _slices(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / SLICES, keep_default_na=True)


def _turns_by_transport(run_dir: Path) -> dict[str, tuple[int, int]]:
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        t: (v["turns"]["count"], v["turns"]["errors"]) for t, v in summary["transports"].items()
    }


def _check_slices(run_dir: Path, width_s: float) -> pd.DataFrame:
    table = _slices(run_dir)
    assert list(table.columns) == SL.columns()
    assert ((table["end_s"] - table["start_s"]).round(9) == width_s).all()
    # every measured turn is in exactly one slice
    counted = table.groupby("transport")[["turns", "errors"]].sum()
    for name, (turns, errors) in _turns_by_transport(run_dir).items():
        assert (counted.loc[name, "turns"], counted.loc[name, "errors"]) == (turns, errors)
    assert (run_dir / "plots" / "timeline.png").stat().st_size > 10_000
    return table


def test_run_slice_s_writes_slices_and_the_plot_and_report_rebuilds_them(tmp_path: Path) -> None:
    _cli("run", TINY, "--slice-s", "0.5", "--out", tmp_path, "--run-id", "s", "-q")
    run_dir = tmp_path / "s"
    assert json.loads((run_dir / "manifest.json").read_text())["slice_s"] == 0.5
    first = _check_slices(run_dir, 0.5)
    assert set(first["transport"]) == {"http", "ws"}
    assert (first["ttft_n"] > 0).any() and first["ttft_p50_ms"].dropna().gt(0).all()

    # the report rebuilds both from the rows alone, with the run's width
    (run_dir / SLICES).unlink()
    (run_dir / "plots" / "timeline.png").unlink()
    _cli("report", run_dir)
    pd.testing.assert_frame_equal(_check_slices(run_dir, 0.5), first)

    # and re-slices on request
    _cli("report", run_dir, "--slice-s", "0.1")
    _check_slices(run_dir, 0.1)


def test_slice_s_must_be_positive(tmp_path: Path) -> None:
    proc = loopbench("run", TINY, "--slice-s", "0", "--out", tmp_path, "-q")
    assert proc.returncode != 0
    assert "--slice-s: expected a positive number of seconds, got 0" in proc.stderr
    assert not any(tmp_path.iterdir())


def test_report_slice_s_refuses_a_sweep_folder(tmp_path: Path) -> None:
    # the sweep report does not re-render its runs: a width there would go unused
    (tmp_path / "sweep.json").write_text("{}")
    proc = loopbench("report", tmp_path, "--slice-s", "1")
    assert proc.returncode != 0
    assert "is a sweep folder; give one of its runs' folders instead" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.json"]


def test_procs_rows_are_sliced_as_one_run(tmp_path: Path) -> None:
    # the claim is the slicing, not timing: a loaded machine's loop stall must not make it exit 3
    lifted = ("--set", "load.max_schedule_lag_ms=10000")
    run_cli(
        "run",
        TINY,
        "--procs",
        "2",
        "--slice-s",
        "0.2",
        *lifted,
        "--out",
        tmp_path,
        "--run-id",
        "p",
        "-q",
    )
    table = _check_slices(tmp_path / "p", 0.2)
    assert set(table["transport"]) == {"http", "ws"}


def test_a_burst_shows_in_its_slices(tmp_path: Path) -> None:
    # burst-storm cut short: a Poisson trickle of 1 agent/s, and 20 agents at once at 2 s
    _cli(
        "run",
        "burst-storm",
        "--transports",
        "http",
        "--slice-s",
        "0.5",
        "--set",
        "load.duration_s=4",
        "--set",
        "load.arrival.rate=1",
        "--set",
        "load.bursts=[{at_s: 2, extra: 20, over_s: 0.1}]",
        "--set",
        "load.max_schedule_lag_ms=10000",
        "--set",
        "rollout.tool_calls=1",
        "--set",
        "rollout.tool_latency_ms=5",
        "--out",
        tmp_path,
        "--run-id",
        "b",
        "-q",
    )
    table = _check_slices(tmp_path / "b", 0.5)
    before = table[table["end_s"] <= 2.0]
    assert len(before) == 4 and len(table[(table["start_s"] >= 2.0) & (table["end_s"] <= 3.0)]) == 2
    # From 2 s to the end, not only the second after it: the burst's 40 turns all end after
    # 2 s however long a busy machine stretches them, while how many end within that second
    # is the machine's doing (the trickle before holds a few turns, Poisson at 1 agent/s).
    burst = table[table["start_s"] >= 2.0]
    assert burst["turns"].sum() >= 40 > before["turns"].sum(), table.to_string()
    # 20 rollouts of 2 turns start at 2 s: their slices hold more turns/s than any slice before
    assert burst["turns_per_s"].max() > before["turns_per_s"].max(), table.to_string()
    assert burst["output_tokens_per_s"].max() > before["output_tokens_per_s"].max()


def test_report_on_a_copy_without_slice_s_picks_a_width(
    rerendered_tiny: tuple[Path, subprocess.CompletedProcess[str], Path],
) -> None:
    copy = rerendered_tiny[0]
    table = _slices(copy)
    width = (table["end_s"] - table["start_s"]).round(9)
    assert width.nunique() == 1 and width.iloc[0] >= SL.AUTO_MIN_NS / 1e9
