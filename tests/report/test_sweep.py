"""``loopbench sweep``: value parsing, the knee, and a real two-value sweep."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.report.render import render_run
from harness.report.sweep import find_knee, parse_sweep_sets, split_values, sweep_table
from harness.wire.errors import LoopbenchError

ROOT = Path(__file__).resolve().parents[2]


def test_split_values_keeps_lists_whole() -> None:
    assert split_values("1,2, 4") == ["1", "2", "4"]
    assert split_values("[http,ws],[ws]") == ["[http,ws]", "[ws]"]
    assert split_values("{a: 1, b: 2},x") == ["{a: 1, b: 2}", "x"]


def test_parse_sweep_sets() -> None:
    key, values, fixed = parse_sweep_sets(["load.concurrency=1,2,4", "transports=[ws]"])
    assert (key, values, fixed) == ("load.concurrency", ["1", "2", "4"], {"transports": "[ws]"})
    with pytest.raises(LoopbenchError, match="exactly one KEY"):
        parse_sweep_sets(["a=1,2", "b=3,4"])
    with pytest.raises(LoopbenchError, match="exactly one KEY"):
        parse_sweep_sets(["a=1"])
    with pytest.raises(LoopbenchError, match="non-empty"):
        parse_sweep_sets(["a=1,,2"])
    with pytest.raises(LoopbenchError, match="KEY=V1,V2"):
        parse_sweep_sets(["novalue"])


def test_knee_of_a_hockey_stick() -> None:
    load = [1, 2, 4, 8, 16, 32]
    latency = [100, 101, 103, 108, 300, 900]  # flat until 8, then queueing
    assert find_knee(load, latency) == 3
    # order of the input does not matter; the index refers to the input
    assert find_knee(load[::-1], latency[::-1]) == 2


def test_no_knee_without_a_bend() -> None:
    assert find_knee([1, 2, 3, 4], [10, 20, 30, 40]) is None  # linear
    assert find_knee([1, 2, 3, 4], [10, 30, 35, 37]) is None  # saturating, not a knee
    assert find_knee([1, 2, 3], [5, 5, 5]) is None  # flat
    assert find_knee([1, 2], [1, 100]) is None  # too few points


def test_sweep_command_runs_each_value_and_renders(tmp_path: Path, cli: Callable[..., Any]) -> None:
    out = cli(
        "sweep",
        str(ROOT / "scenarios" / "tiny.yaml"),
        "--set",
        "load.concurrency=1,2",
        "--set",
        "transports=[ws]",
        "--set",
        "rollout.count=1",
        "--out",
        str(tmp_path),
        "--sweep-id",
        "sw",
        "-q",
    ).stdout
    root = tmp_path / "sw"
    doc = json.loads((root / "sweep.json").read_text())
    assert doc["key"] == "load.concurrency" and doc["values"] == ["1", "2"]
    assert [r["run_id"] for r in doc["runs"]] == ["00-concurrency-1", "01-concurrency-2"]
    for r in doc["runs"]:
        assert (root / r["run_id"] / "report.html").is_file()
        manifest = json.loads((root / r["run_id"] / "manifest.json").read_text())
        assert manifest["scenario"]["load"]["concurrency"] == int(r["run_id"][-1])
        assert manifest["transports"] == ["ws"]
    table = sweep_table(root)
    assert table["value"].tolist() == ["1", "2"] and set(table["transport"]) == {"ws"}
    assert (table["rollout_p50_ms"] > 0).all()
    assert (root / "plots" / "latency_vs_load.png").stat().st_size > 5_000
    html = (root / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 1
    assert str(root / "report.html") in out
    # re-rendering a sweep folder (what `loopbench report` calls) rebuilds the combined report
    (root / "report.md").unlink()
    rendered = render_run(root)
    assert rendered.plots == [root / "plots" / "latency_vs_load.png"]
    assert "load.concurrency" in (root / "report.md").read_text()
