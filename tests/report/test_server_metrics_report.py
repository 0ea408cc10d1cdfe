"""The report's server-side metrics: the plot under the latency timeline and the series list."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from harness.report.render import render_run
from harness.report.results import load_run
from harness.report.server_metrics import SERVER_METRICS, write_server_metrics


def test_the_run_report_plots_and_lists_the_scraped_series(tiny_run_dir: Path) -> None:
    assert (tiny_run_dir / SERVER_METRICS).exists()
    png = tiny_run_dir / "plots" / "server_metrics.png"
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[1] > im.size[0]  # one panel per series, stacked
    md = (tiny_run_dir / "report.md").read_text()
    assert "(plots/server_metrics.png)" in md
    assert "## Server-side metrics" in md
    for name in (
        "loopbench_server_engine_running_streams",
        "loopbench_server_modelled_seconds_total",
        "loopbench_server_http_requests_total",
    ):
        assert f"| {name} |" in md, name
    assert "Plotted: loopbench_server_engine_running_streams" in md


def test_report_server_series_picks_by_name(
    tiny_run_dir: Path, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run_dir, copy)
    out = cli(
        "report", copy, "--server-series", "loopbench_server_output_tokens",
        "--server-series", "vllm:num_requests_waiting",
    )  # fmt: skip
    assert "server_metrics.png" in out.stdout
    md = (copy / "report.md").read_text()
    # the counter found without its _total; the vLLM name is not in this run
    assert "Plotted: loopbench_server_output_tokens_total." in md
    assert "Asked for but not scraped: vllm:num_requests_waiting." in md


def test_vllm_and_sglang_names_are_plotted_by_default(tiny_run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run_dir, copy)
    run = load_run(copy)
    t0 = float(run.turns["sent_ns"].min()) / 1e9
    samples = []
    for i in range(6):
        t = t0 + 0.2 * i
        samples += [
            (t, "vllm:num_requests_running", 'model_name="m"', float(i % 3)),
            (t, "vllm:num_requests_waiting", 'model_name="m"', float(i % 2)),
            (t, "vllm:kv_cache_usage_perc", 'model_name="m"', 0.1 * i),
            (t, "vllm:prefix_cache_hits_total", 'model_name="m"', 100.0 * i),
            (t, "vllm:prefix_cache_queries_total", 'model_name="m"', 150.0 * i),
            (t, "sglang:cache_hit_rate", "", 0.5),
        ]
    (copy / SERVER_METRICS).unlink()
    write_server_metrics(copy, samples)
    render_run(copy)
    md = (copy / "report.md").read_text()
    assert (
        "Plotted: vllm:num_requests_running, vllm:num_requests_waiting, "
        "vllm:kv_cache_usage_perc, vllm:prefix_cache_hits_total, "
        "vllm:prefix_cache_queries_total, sglang:cache_hit_rate." in md
    )
    assert "| vllm:prefix_cache_hits_total | counter (rate) | 1 | 6 |" in md
    assert (copy / "plots" / "server_metrics.png").exists()


def test_the_figure_says_a_scrape_sees_only_its_instant(tiny_run_dir: Path, tmp_path: Path) -> None:
    """A 1-s scrape of a gauge that is mostly 0 between short requests drew as gaps that
    read as an idle server: the figure now says how often it was scraped and marks each
    scrape; a counter's rate covers its first interval too (it was drawn from the second)."""
    from harness.report.server_metrics import load_server_metrics
    from harness.report.server_plots import plot_server_metrics, select

    copy = tmp_path / "copy"
    shutil.copytree(tiny_run_dir, copy)
    run = load_run(copy)
    t0 = float(run.turns["sent_ns"].min()) / 1e9
    gauge, counter = (
        "loopbench_server_engine_running_streams",
        "loopbench_server_output_tokens_total",
    )
    samples = []
    for i in range(5):
        samples += [(t0 + i, gauge, "", float(i % 2)), (t0 + i, counter, "", 10.0 * i)]
    (copy / SERVER_METRICS).unlink()
    write_server_metrics(copy, samples)
    df = load_server_metrics(copy)
    assert df is not None
    fig = plot_server_metrics(run, df, select(df, [gauge, counter]))
    assert fig is not None
    assert fig._suptitle is not None
    assert (
        "scraped every 1 s (5 scrapes): a gauge is seen only at its dots"
        in fig._suptitle.get_text()
    )
    _, gauge_ax, counter_ax = fig.axes[:3]
    (dots,) = gauge_ax.get_lines()
    assert dots.get_marker() == "o"
    assert list(dots.get_xdata()) == pytest.approx([0, 1, 2, 3, 4], abs=1e-3)
    (rate,) = counter_ax.get_lines()
    xs = rate.get_xdata()
    assert xs[0] == pytest.approx(0, abs=1e-3)  # from the first scrape on
    assert set(rate.get_ydata()) == {10.0}
