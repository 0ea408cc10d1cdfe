"""report.md, report.html and plots/*.png: rendered by the runner, re-rendered by ``loopbench report``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from PIL import Image

from harness.report.plots import PLOTS
from harness.report.render import render_run

# the run scrapes the embedded server's /metrics by default: its plot is one more
ALL_PLOTS = {f"{spec.name}.png" for spec in PLOTS} | {"server_metrics.png"}


def _check_png(path: Path) -> tuple[int, int]:
    assert path.stat().st_size > 5_000, f"{path}: suspiciously small"
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG"
        pixels = np.asarray(im.convert("L"), dtype=float)
        size: tuple[int, int] = im.size
    assert size[0] >= 600 and size[1] >= 300, f"{path}: {size}"
    assert pixels.std() > 5, f"{path}: blank image"
    return size


def test_runner_writes_report_and_every_plot(tiny_run_dir: Path) -> None:
    plots = {p.name for p in (tiny_run_dir / "plots").glob("*.png")}
    assert plots == ALL_PLOTS
    for name in sorted(plots):
        _check_png(tiny_run_dir / "plots" / name)
    md = (tiny_run_dir / "report.md").read_text()
    for name in ALL_PLOTS:
        assert f"(plots/{name})" in md
    assert "| ws vs http |" in md
    for heading in ("## Latency", "## Speedup between transports", "## Latency breakdown"):
        assert heading in md


def test_report_html_is_self_contained(tiny_run_dir: Path) -> None:
    page = (tiny_run_dir / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == len(ALL_PLOTS)
    # nothing is fetched: no relative image paths, no remote scripts, styles or fonts
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "<script" not in page


def test_report_command_rerenders_the_same_report(
    rerendered_tiny: tuple[Path, subprocess.CompletedProcess[str], Path],
) -> None:
    copy, proc, tiny_run_dir = rerendered_tiny
    assert str(copy / "report.html") in proc.stdout
    assert (copy / "report.md").read_text() == (tiny_run_dir / "report.md").read_text()
    assert {p.name for p in (copy / "plots").glob("*.png")} == ALL_PLOTS


def test_unfinished_run_renders_what_was_measured(tmp_path: Path, synthetic: ModuleType) -> None:
    run = synthetic.make_run(
        tmp_path / "cut", rollout_ms={"http": [400, 500, 450], "ws": [300, 350]}, finish=False
    )
    rendered = render_run(run)
    md = rendered.report_md.read_text()
    assert "did not finish" in md
    names = {p.name for p in rendered.plots}
    # row-based plots still render; the summary-based ones need summary.json
    assert {"ttft_cdf.png", "turn_latency_growth.png", "aggregate_tps.png"} <= names
    assert "latency_breakdown.png" not in names
    for p in rendered.plots:
        _check_png(p)


def test_run_without_rows_renders_without_plots(tmp_path: Path, synthetic: ModuleType) -> None:
    run = synthetic.make_run(tmp_path / "empty", rollout_ms={})
    rendered = render_run(run)
    assert rendered.plots == []
    assert "loopbench report" in rendered.report_html.read_text()


def test_report_html_in_headless_chromium(
    tiny_run_dir: Path, browser: ModuleType, tmp_path: Path
) -> None:
    chromium = browser.find_chromium()
    if chromium is None:
        pytest.skip("chromium not installed (apt-get install -y chromium; .ci/run installs it)")
    shot = tmp_path / "report.screenshot.png"
    page = browser.inspect_page(tiny_run_dir / "report.html", shot, chromium=chromium)
    assert page.console_errors == []
    assert page.title.startswith("loopbench report")
    assert len(page.images) == len(ALL_PLOTS)
    for img in page.images:
        assert img["complete"] and img["naturalWidth"] > 0 and img["naturalHeight"] > 0, img
    width, height = _check_png(shot)
    assert width == 1280 and height > 2000  # the whole page, not just the first screen
    # The throughput table of 14 columns, its "n/a (reason)" cells unbroken, ran off the page.
    assert page.wide_tables == [] and page.page_width <= 1280, (page.wide_tables, page.page_width)


def test_chromium_check_catches_a_broken_page(tmp_path: Path, browser: ModuleType) -> None:
    chromium = browser.find_chromium()
    if chromium is None:
        pytest.skip("chromium not installed (apt-get install -y chromium; .ci/run installs it)")
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"><title>bad</title></head>'
        '<body><img src="missing.png" alt="gone"><script>console.error("boom")</script></body></html>'
    )
    page = browser.inspect_page(bad, tmp_path / "bad.png", chromium=chromium)
    assert any("boom" in e for e in page.console_errors)
    assert page.images == [{"alt": "gone", "complete": True, "naturalWidth": 0, "naturalHeight": 0}]
