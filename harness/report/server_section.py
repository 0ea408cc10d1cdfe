"""The report's "Server-side metrics": its plot and the list of the series the run scraped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.metrics.results_model import ServerMetrics
from harness.report.document import Block, Heading, Paragraph, Table
from harness.report.plots import PlotFile, PlotSpec, plot_style, save_figure
from harness.report.results import Run
from harness.report.server_metrics import SERVER_METRICS, load_server_metrics
from harness.report.server_plots import CAPTION, plot_server_metrics, select, series_table
from harness.wire.plural import counted

PLOT_NAME = "server_metrics"


@dataclass(slots=True)
class ServerSection:
    plot: PlotFile | None = None
    blocks: list[Block] = field(default_factory=list)


def server_section(run: Run, plots_dir: Path, wanted: Sequence[str] = ()) -> ServerSection:
    """The plot (written into ``plots_dir``) and the report blocks; empty if nothing was scraped."""
    df = load_server_metrics(run.path)
    if df is None or df.empty:
        return ServerSection()
    sel = select(df, wanted)
    out = ServerSection()
    with plot_style():
        fig = plot_server_metrics(run, df, sel)
    if fig is not None:
        plots_dir.mkdir(parents=True, exist_ok=True)
        spec = PlotSpec(PLOT_NAME, "Server-side metrics", CAPTION, lambda _: None)
        out.plot = PlotFile(spec, save_figure(fig, plots_dir / f"{PLOT_NAME}.png"))
    block = (run.summary_model.server_metrics if run.summary_model else None) or ServerMetrics()
    scrapes = df["t_s"].nunique()
    where = (
        f"{block.url} every {'?' if block.interval_s is None else block.interval_s} s"
        if block.url
        else "the server"
    )
    text = (
        f"Scraped {where}: {counted(scrapes, 'scrape')}, "
        f"{counted(df['name'].nunique(), 'series name')} "
        f"({SERVER_METRICS}; docs/server-metrics.md)."
    )
    if block.failed_scrapes:
        text += f" {counted(block.failed_scrapes, 'scrape')} failed."
    plotted = ", ".join(name for name, _ in sel.series) or "none"
    text += f" Plotted: {plotted}."
    if sel.missing:
        text += f" Asked for but not scraped: {', '.join(sel.missing)}."
    out.blocks = [
        Heading("Server-side metrics"),
        Paragraph(text),
        Table(
            ["series", "kind", "label sets", "samples"],
            series_table(df),
            align="llrr",
            caption="Every series scraped during the run (histogram buckets are not kept).",
        ),
    ]
    return out
