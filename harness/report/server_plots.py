"""The report's "Server-side metrics": the latency timeline with the scraped series under it,
and the list of the series the run scraped.

One time axis for both: seconds after the run's first request, on the clock both
``turns.csv`` and ``server_metrics.csv.gz`` are stamped with. Gauges are drawn as
sampled; counters (``*_total``, a histogram's ``_sum`` / ``_count``) as per-second
rates between scrapes. Which series: ``--server-series NAME`` (``loopbench report``),
else those of :data:`~harness.metrics.server_series.KNOWN_SERIES` the run has.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.metrics.results_model import ServerMetrics
from harness.metrics.server_series import default_series, is_counter, pick_series, rates
from harness.report import analysis as A
from harness.report.document import Block, Heading, Paragraph, Table
from harness.report.plots import (
    PlotFile,
    PlotSpec,
    _subtitle,
    plot_style,
    save_figure,
    transport_color,
)
from harness.report.server_metrics import SERVER_METRICS, load_server_metrics
from harness.wire.plural import counted

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from harness.report.results import Run

_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
#: label sets drawn per series at most (the largest last values); the rest are named as omitted
MAX_LINES = 8
CAPTION = (
    "Top: TTFT of every turn at the time it was sent, per transport. Below, on the same time "
    "axis: the server's own metrics scraped during the run (--server-metrics; the embedded "
    "server's /metrics by default, every --server-metrics-interval). A scrape sees only its "
    "own instant: a gauge is drawn as its value at each scrape (a dot, held until the next), "
    "so a request shorter than the interval shows only if a scrape fell inside it and a busy "
    "server can read as 0 between scrapes; a counter is its mean per-second rate over each "
    "interval between scrapes (a modelled-seconds rate is the mean number of responses in that "
    "component). Series chosen with loopbench report --server-series NAME; "
    "docs/server-metrics.md."
)


def sampling_note(stamps: Sequence[float]) -> str:
    """How often the series were scraped, in the figure: its gaps are the scrape's, not the
    server's, and a reader of the image alone (without the caption) must be told."""
    if len(stamps) < 2:
        return f"{counted(len(stamps), 'scrape')}: no interval to draw a rate over"
    step = float(np.median(np.diff(np.asarray(stamps, float))))
    return (
        f"scraped every {step:.2g} s ({counted(len(stamps), 'scrape')}): a gauge is seen only at its dots, "
        "a counter as its mean rate between scrapes"
    )


@dataclass(frozen=True, slots=True)
class Selection:
    series: list[tuple[str, str]]  # (name, title) plotted
    missing: list[str]  # asked for, not scraped


def select(df: pd.DataFrame, wanted: Sequence[str] = ()) -> Selection:
    names = df["name"].unique().tolist()
    if not wanted:
        return Selection(default_series(names), [])
    found, missing = pick_series(names, wanted)
    return Selection([(n, n) for n in found], missing)


def _legend_labels(labels: Sequence[str]) -> list[str]:
    """Each label set without the ``k="v"`` pairs every set of the series shares."""
    parsed = [_PAIR.findall(s) for s in labels]
    common = set.intersection(*(set(p) for p in parsed)) if parsed else set()
    return [",".join(f'{k}="{v}"' for k, v in p if (k, v) not in common) for p in parsed]


def plot_server_metrics(run: Run, df: pd.DataFrame, sel: Selection) -> Figure | None:
    """The figure, or None when the run has no turns or none of the chosen series."""
    if not sel.series:
        return None
    from matplotlib.figure import Figure  # matplotlib: only when plotting

    turns = A.turn_table(run)
    sent = turns["sent_ns"][turns["sent_ns"] > 0]
    if sent.empty:
        return None
    origin_s = float(sent.min()) / 1e9
    n = len(sel.series) + 1
    fig = Figure(figsize=(10, 2.0 * n + 0.8), layout="constrained")
    axes = list(fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0])
    ax = axes[0]
    for i, name in enumerate(A.run_transports(run)):
        g = turns[(turns["transport"] == name) & turns["ttft_ms"].notna()]
        if not g.empty:
            x = g["sent_ns"].to_numpy(float) / 1e9 - origin_s
            ax.scatter(x, g["ttft_ms"], s=10, color=transport_color(name, i), label=name, lw=0)
    ax.set_ylabel("TTFT (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("latency timeline: TTFT per turn, at its send time")
    ax.legend(loc="upper right", ncols=4)
    stamps = np.unique(df["t_s"].to_numpy(float))
    # half the usual interval: shorter ones (the run's final scrape) join the next
    min_dt = float(np.median(np.diff(stamps))) / 2 if len(stamps) > 2 else 0.0
    for ax, (name, title) in zip(axes[1:], sel.series, strict=True):
        rows = df[df["name"] == name]
        counter = is_counter(name)
        groups = sorted(
            rows.groupby("labels", sort=False),
            key=lambda kv: -float(kv[1]["value"].iloc[-1]),
        )
        shown = groups[:MAX_LINES]
        names = _legend_labels([str(k) for k, _ in shown])
        for (_, g), label in zip(shown, names, strict=True):
            g = g.sort_values("t_s")
            t = (g["t_s"].to_numpy(float) - origin_s).tolist()
            v = g["value"].to_numpy(float).tolist()
            if counter:
                start = t[0] if t else 0.0
                t, v = rates(t, v, min_dt)
                # A rate belongs to its whole interval, the first one too (from the first scrape).
                t, v = ([start, *t], [v[0], *v]) if t else (t, v)
                if t:
                    ax.step(t, v, where="pre", lw=1.4, label=label or None)
            elif t:
                # a dot per scrape: what was seen; the step only holds it until the next one
                ax.step(t, v, where="post", lw=1.4, marker="o", ms=2.5, label=label or None)
        more = len(groups) - len(shown)
        heading = f"{title} — rate per second" if counter else title
        if title != name:
            heading += f"  ({name})"
        ax.set_title(heading + (f"  (+{more} more label sets)" if more else ""), fontsize=9)
        ax.set_ylim(bottom=0)
        if any(names):
            ax.legend(loc="upper right", fontsize=7, ncols=2)
    axes[-1].set_xlabel("time since the run's first request (s)")
    span = [0.0, max(1.0, float(np.nanmax(turns["done_ns"].to_numpy(float))) / 1e9 - origin_s)]
    axes[-1].set_xlim(span[0] - 0.02 * span[1], span[1] * 1.02)
    fig.suptitle(
        "Server-side metrics under the latency timeline\n" + sampling_note(stamps.tolist()),
        fontsize=10,
    )
    fig.supxlabel(_subtitle(run), fontsize=8, color="#555555")
    return fig


def series_table(df: pd.DataFrame) -> list[list[str]]:
    """Per scraped name: label sets, samples, and gauge or counter (the report's list)."""
    out = []
    for name, g in df.groupby("name", sort=True):
        kind = "counter (rate)" if is_counter(str(name)) else "gauge"
        out.append([str(name), kind, str(g["labels"].nunique()), str(len(g))])
    return out


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
