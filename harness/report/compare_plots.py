"""Plots of ``loopbench compare``: several runs overlaid, one set of figures per transport.

Within one transport's figures a colour is a run (A, the reference, first), not a transport.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.report import analysis as A
from harness.report.plots import (
    PlotText,
    _figure,
    breakdown_bars,
    finish_cdf,
    mark_ci,
    plot_style,
    save_figure,
    step_cdf,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from harness.report.results import Run

#: one colour per run, reference first (distinct from the transport colours of run reports)
RUN_COLORS = ("#1b2631", "#c0392b", "#2471a3", "#229954", "#d68910", "#7d3c98", "#17a589")


def run_color(index: int) -> str:
    return RUN_COLORS[index % len(RUN_COLORS)]


@dataclass(frozen=True, slots=True)
class PlotRun:
    """A run as the compare plots need it: label, the run, its turn and rollout tables."""

    label: str
    run: Run
    turns: pd.DataFrame
    rollouts: pd.DataFrame

    @property
    def name(self) -> str:
        return f"{self.label} {self.run.run_id}"


#: per run label: (median, its 95 % CI or None, n) of the rollout latency in ms
RolloutCIs = Mapping[str, tuple[float, tuple[float, float] | None, int] | None]
#: per candidate label: (ratio B/A of median rollout latency, its 95 % CI or None)
RatioCIs = Mapping[str, tuple[float | None, tuple[float, float] | None]]


def _finish(fig: Figure, title: str, transport: str) -> None:
    fig.suptitle(f"{title} — {transport}")


def _cdf(ax: Axes, runs: Sequence[PlotRun], transport: str, column: str, unit: str) -> bool:
    lo_hi: list[float] = []
    for i, r in enumerate(runs):
        v = A.ok_samples(r.turns, transport, column)
        if not len(v):
            ax.plot([], [], " ", label=f"{r.name}: no samples")
            continue
        p50 = float(np.median(v))
        label = f"{r.name} (p50 {p50:,.1f} {unit}, n={len(v)})"
        lo_hi += step_cdf(ax, v, run_color(i), label, lw=2)
        ax.axvline(p50, color=run_color(i), ls=":", lw=1)
    finish_cdf(ax, lo_hi, "turns")
    ax.legend(loc="lower right", fontsize=8)
    return bool(lo_hi)


def plot_ttft_cdfs(runs: Sequence[PlotRun], transport: str) -> Figure | None:
    """TTFT CDF of each run, overlaid (dotted: medians)."""
    fig, (ax,) = _figure(9, 4.6)
    if not _cdf(ax, runs, transport, "ttft_ms", "ms"):
        return None
    ax.set_xlabel("time to first token (ms)")
    _finish(fig, "TTFT distribution per run", transport)
    return fig


def plot_rollout_cis(
    runs: Sequence[PlotRun], transport: str, medians: RolloutCIs, ratios: RatioCIs
) -> Figure | None:
    """Rollout latency per run (dots, median with 95 % CI) and each candidate's ratio to A."""
    data = [A.ok_samples(r.rollouts, transport, "latency_ms") / 1000 for r in runs]
    if not any(len(v) for v in data):
        return None
    fig, (ax, ax2) = _figure(12, 4.6, ncols=2, gridspec_kw={"width_ratios": [3, 2]})
    for j, (r, v) in enumerate(zip(runs, data, strict=True)):
        color = run_color(j)
        x = j + (np.random.default_rng(j).random(len(v)) - 0.5) * 0.3
        ax.scatter(x, v, s=14, color=color, alpha=0.5, lw=0, zorder=3)
        stat = medians.get(r.label)
        if stat is None:
            ax.text(j, 0, "no completed rollouts", ha="center", va="bottom", fontsize=8)
            continue
        med, ci, n = stat
        med_s = med / 1000
        ci_s = (ci[0] / 1000, ci[1] / 1000) if ci is not None else None
        mark_ci(ax, j + 0.3, med_s, ci_s, color, along_x=False, zorder=4)
        text = f"[{ci_s[0]:,.2f}, {ci_s[1]:,.2f}]" if ci_s else f"n={n}: too few for a CI"
        ax.text(j + 0.4, med_s, f"p50 {med_s:,.2f} s\n{text}", va="center", fontsize=8)
    ax.set_xticks(range(len(runs)), [r.label for r in runs])
    ax.set_xlim(-0.5, len(runs) - 0.1)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("rollout latency (s, from intended start)")
    ax.set_title("per run: rollouts, median and bootstrap 95 % CI")
    cands = runs[1:]
    for k, r in enumerate(cands):
        y = len(cands) - 1 - k
        ratio, ci = ratios.get(r.label, (None, None))
        if ratio is None:
            ax2.text(1.0, y, "no value", ha="center", fontsize=8)
            continue
        mark_ci(ax2, ratio, y, ci, run_color(k + 1), along_x=True)
        label = f"{ratio:.3f} " + (f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "(too few for a CI)")
        ax2.text(ratio, y + 0.25, label, ha="center", fontsize=8)
    ax2.axvline(1.0, color="#888888", lw=1, ls="--")
    ax2.set_yticks(range(len(cands)), [f"{r.label} / {runs[0].label}" for r in cands][::-1])
    ax2.set_ylim(-0.6, len(cands) - 0.2)
    ax2.set_xlabel(f"median rollout latency ratio (< 1: faster than {runs[0].label})")
    ax2.set_title("ratio of medians, bootstrap 95 % CI")
    ax2.grid(axis="y", visible=False)
    _finish(fig, "Rollout latency", transport)
    return fig


def plot_tps(runs: Sequence[PlotRun], transport: str) -> Figure | None:
    """Decode-rate CDF per run (left) and aggregate tokens/s over time per run (right)."""
    fig, (ax, ax2) = _figure(13, 4.6, ncols=2)
    drawn = _cdf(ax, runs, transport, "decode_tps", "tok/s")
    ax.set_xlabel("decode rate per response (tokens/s)")
    ax.set_title("decode TPS")
    for i, r in enumerate(runs):
        series = A.aggregate_tps(r.run)
        g = series[series["transport"] == transport] if not series.empty else series
        if g.empty:
            continue
        drawn = True
        mean = r.run.figures(transport).stat("tps", "aggregate_mean")
        label = r.name + (f" (mean {mean:,.0f} tok/s)" if mean else "")
        ax2.step(g["t_s"], g["tps"], where="post", color=run_color(i), lw=1.6, label=label)
        if mean:
            ax2.axhline(mean, color=run_color(i), ls=":", lw=1)
    if not drawn:
        return None
    ax2.set_xlabel("time since the transport's first request (s)")
    ax2.set_ylabel("aggregate output (tokens/s)")
    ax2.set_ylim(bottom=0)
    ax2.set_title("aggregate TPS (dotted: mean)")
    ax2.legend(loc="upper right", fontsize=8)
    _finish(fig, "Token throughput", transport)
    return fig


def plot_breakdowns(runs: Sequence[PlotRun], transport: str) -> Figure | None:
    """Mean time per turn by component, one bar per run, side by side."""
    rows: list[tuple[str, pd.Series]] = []
    for r in runs:
        table = A.breakdown_table(r.run.summary_model)
        if transport in table.index:
            rows.append((r.name, table.loc[transport]))
    if not rows:
        return None
    fig, (ax,) = _figure(11.5, 2.4 + 0.6 * len(rows))
    names = [n for n, _ in rows][::-1]
    values = dict(rows)
    parts = (
        (comp, np.array([float(values[n].get(comp) or 0.0) for n in names]))
        for comp in rows[0][1].index
    )
    for y, total in enumerate(breakdown_bars(fig, ax, names, parts)):
        text = f"  {total:,.0f} ms" if total > 0 else "  no successful turns"
        ax.text(total, y, text, va="center", fontsize=9)
    _finish(fig, "Where a turn's time goes, per run", transport)
    return fig


PLOTS: tuple[PlotText, ...] = (
    PlotText(
        "ttft_cdf",
        "TTFT distribution",
        "Cumulative distribution of time to first token per run (dotted: median). A curve further "
        "left is faster at every percentile.",
    ),
    PlotText(
        "rollout_latency",
        "Rollout latency with confidence intervals",
        "Left: one dot per completed rollout, the median (diamond) and its bootstrap 95 % CI per "
        "run. Right: each run's median over the reference's, with the bootstrap 95 % CI of that "
        "ratio (the Δ % of the rollout p50 row). No CI with fewer than 5 rollouts.",
    ),
    PlotText(
        "tps",
        "Decode and aggregate TPS",
        "Left: cumulative distribution of each response's decode rate (output tokens − 1) / "
        "(last − first token). Right: output tokens per second summed over all streams.",
    ),
    PlotText(
        "breakdown",
        "Latency breakdown side by side",
        "Mean time per turn by component (server model, unmodelled network and client I/O, tool, "
        "think and recovery time), one bar per run.",
    ),
)


def write_compare_plots(
    runs: Sequence[PlotRun],
    transport: str,
    out_dir: Path,
    medians: RolloutCIs,
    ratios: RatioCIs,
) -> list[tuple[PlotText, Path]]:
    """Render this transport's plots that have data to ``out_dir/<transport>-<name>.png``."""
    makers: dict[str, Callable[[], Any]] = {
        "ttft_cdf": lambda: plot_ttft_cdfs(runs, transport),
        "rollout_latency": lambda: plot_rollout_cis(runs, transport, medians, ratios),
        "tps": lambda: plot_tps(runs, transport),
        "breakdown": lambda: plot_breakdowns(runs, transport),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in PLOTS:
        with plot_style():
            fig = makers[spec.name]()
        if fig is None:
            continue
        written.append((spec, save_figure(fig, out_dir / f"{transport}-{spec.name}.png")))
    return written
