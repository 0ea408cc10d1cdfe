"""The run's plots: matplotlib figures with one style, titled, axes labelled with units.

Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot), so this module
never touches the global backend: headless through Agg in :func:`write_plots`, inline in a
notebook.  A ``plot_*`` returns ``None`` when the run has nothing to draw for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from harness.metrics import definitions as D
from harness.metrics import slices as SL
from harness.metrics.results_model import CacheStats
from harness.metrics.timeseries import AGGREGATE_BUCKET_NS
from harness.report import analysis as A
from harness.report.files import na_reason
from harness.wire.transports import BY_NAME

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from harness.report.results import Run

#: for a transport the registry does not know (a results folder written by another version)
_FALLBACK_COLORS = ("#5d6d7e", "#b7950b", "#a04000", "#1e8449", "#6c3483")

COMPONENT_COLORS = {
    "api_pre": "#922b21",
    "api_queue": "#e6b0aa",
    "engine_queue": "#f5cba7",
    "prefill": "#d68910",
    "decode": "#2e86c1",
    "api_post": "#af7ac5",
    "unmodelled": "#99a3a4",
    "tool": "#27ae60",
    "client": "#a9dfbf",
    "recovery": "#8e44ad",
}
COMPONENT_LABELS = {
    "api_pre": "API pre-inference",
    "api_queue": "API queue",
    "engine_queue": "engine queue",
    "prefill": "prefill",
    "decode": "decode",
    "api_post": "API post (blocking)",
    "unmodelled": "network + client I/O (unmodelled)",
    "tool": "tool execution",
    "client": "client think/work",
    "recovery": "recovery",
}

STYLE: dict[str, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linestyle": "-",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "figure.titlesize": 13,
    "figure.titleweight": "bold",
}


def transport_color(name: str, index: int = 0) -> str:
    """The registry's colour of ``name``, the same in every plot and report."""
    spec = BY_NAME.get(name)
    return spec.colour if spec is not None else _FALLBACK_COLORS[index % len(_FALLBACK_COLORS)]


@contextmanager
def plot_style() -> Iterator[None]:
    """The report style, for figures built or saved inside the block."""
    import matplotlib  # matplotlib: only when plotting

    with matplotlib.rc_context(cast(Any, STYLE)):
        yield


def _figure(width: float, height: float, ncols: int = 1, **kw: Any) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure  # matplotlib: only when plotting

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False, **kw)[0]
    return fig, list(axes)


def _subtitle(run: Run) -> str:
    m = run.manifest_model
    facts = m.scenario_facts
    parts = [f"run {run.run_id}"]
    if facts.name:
        parts.append(f"scenario {facts.name}")
    if facts.api_profile and m.embedded_server:
        parts.append(f"API {facts.api_profile}, engine {facts.engine_profile or '?'}")
    return " · ".join(parts)


def _title(fig: Figure, run: Run, title: str) -> None:
    fig.suptitle(title)
    # supxlabel, unlike free text, gets its own row from the constrained layout
    fig.supxlabel(_subtitle(run), fontsize=8, color="#555555")


def _fmt_ms(v: float) -> str:
    return f"{v:,.0f} ms" if v >= 100 else f"{v:,.1f} ms"


def step_cdf(ax: Axes, values: Any, color: str, label: str, **style: Any) -> tuple[float, float]:
    """Draw the empirical CDF of ``values`` (one step per sample); returns their range."""
    v = np.sort(np.asarray(values, dtype=float))
    ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", color=color, label=label, **style)
    return float(v[0]), float(v[-1])


def finish_cdf(ax: Axes, lo_hi: Sequence[float], what: str) -> None:
    """A CDF's axes: a log x axis when the samples span more than 20x, the median line, 0–1."""
    if lo_hi and max(lo_hi) / max(min(lo_hi), 1e-3) > 20:
        ax.set_xscale("log")
    ax.axhline(0.5, color="#888888", lw=0.8, ls="--")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel(f"fraction of {what} ≤ x")


def mark_ci(
    ax: Axes,
    x: float,
    y: float,
    ci: Sequence[float] | None,
    color: str,
    *,
    along_x: bool,
    **style: Any,
) -> None:
    """A diamond at (x, y) with its 95 % CI as error bars (along x or y), or alone without one."""
    if ci is None:
        ax.plot(x, y, "D", color=color, ms=7, **style)
        return
    centre = x if along_x else y
    err = [[centre - ci[0]], [ci[1] - centre]]
    xerr, yerr = (err, None) if along_x else (None, err)
    ax.errorbar(x, y, yerr, xerr, fmt="D", color=color, capsize=6, ms=7, lw=2, **style)


def breakdown_bars(
    fig: Figure,
    ax: Axes,
    names: list[str],
    parts: Iterable[tuple[str, np.ndarray]],
    *,
    label_min: float | None = None,
) -> np.ndarray:
    """Bars of ``names`` stacked from ``parts`` (component, mean ms per name) in the breakdown's
    colours, each segment of at least ``label_min`` ms labelled; returns the bars' totals."""
    left = np.zeros(len(names))
    for comp, vals in parts:
        if not np.any(vals > 0):
            continue
        ax.barh(
            names,
            vals,
            left=left,
            color=COMPONENT_COLORS.get(comp, "#888888"),
            label=COMPONENT_LABELS.get(comp, comp),
            edgecolor="white",
            lw=0.6,
            height=0.6,
        )
        # dark text on the light segments
        text_color = "#333333" if comp in ("api_queue", "engine_queue", "client") else "white"
        for y, (x0, w) in enumerate(zip(left, vals, strict=True)):
            if label_min is not None and w >= label_min:
                ax.text(
                    x0 + w / 2,
                    y,
                    f"{w:.0f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color=text_color,
                )
        left += vals
    ax.set_xlim(0, left.max() * 1.15 if left.max() > 0 else 1)
    ax.set_xlabel("mean time per turn (ms)")
    ax.grid(axis="y", visible=False)
    # legend at the side: below the axes it would collide with the run line (supxlabel)
    fig.legend(loc="outside right upper", fontsize=8)
    return left


# -- the plots -----------------------------------------------------------------------------------


def plot_ttft_cdf(run: Run) -> Figure | None:
    """Empirical CDF of TTFT per transport, p50 marked; TTFOT dashed when the model reasoned."""
    turns = A.turn_table(run)
    # without reasoning TTFOT is TTFT: a second curve would only hide the first
    reasoned = bool((turns["reasoning_tokens"] > 0).any())
    fig, (ax,) = _figure(8.5, 4.8)
    lo_hi: list[float] = []
    for i, name in enumerate(A.run_transports(run)):
        v = turns.loc[(turns["transport"] == name) & turns["ttft_ms"].notna(), "ttft_ms"]
        if not len(v):
            continue
        color = transport_color(name, i)
        p50 = float(np.median(v))
        lo_hi += step_cdf(ax, v, color, f"{name}  (p50 {_fmt_ms(p50)}, n={len(v)})", lw=2)
        ax.axvline(p50, color=color, ls=":", lw=1)
        w = turns.loc[(turns["transport"] == name) & turns["ttfot_ms"].notna(), "ttfot_ms"]
        if reasoned and len(w):
            label = f"{name} TTFOT  (p50 {_fmt_ms(float(np.median(w)))})"
            lo_hi += step_cdf(ax, w, color, label, lw=1.5, ls="--")
    if not lo_hi:
        return None
    finish_cdf(ax, lo_hi, "turns")
    ax.set_xlabel(
        "time to first token, dashed: to first visible output token (ms)"
        if reasoned
        else "time to first token (ms)"
    )
    ax.legend(loc="lower right")
    _title(
        fig, run, "TTFT and TTFOT per transport" if reasoned else "TTFT distribution per transport"
    )
    return fig


def plot_turn_latency_growth(run: Run) -> Figure | None:
    """Turn latency and TTFT against turn index and history size, per transport."""
    turns = A.turn_table(run)
    ok = turns[turns["ok"] & turns["turn_ms"].notna()]
    if ok.empty:
        return None
    from matplotlib.ticker import MaxNLocator  # matplotlib: only when plotting

    fig, axes = _figure(12, 4.8, ncols=2, sharey=True)
    ax_idx, ax_hist = axes
    for i, name in enumerate(A.run_transports(run)):
        g = ok[ok["transport"] == name]
        if g.empty:
            continue
        color = transport_color(name, i)
        jitter = (np.random.default_rng(i).random(len(g)) - 0.5) * 0.3
        ax_idx.scatter(g["turn_index"] + jitter, g["turn_ms"], s=10, color=color, alpha=0.35, lw=0)
        styles: tuple[tuple[str, str, dict[str, Any]], ...] = (
            ("turn_ms", "turn latency", {"lw": 2, "marker": "o", "ms": 4}),
            ("ttft_ms", "TTFT", {"lw": 1.2, "ls": "--"}),
        )
        for column, what, style in styles:
            med = A.turn_index_medians(g, column)
            ax_idx.plot(
                med["turn_index"],
                med[column],
                color=color,
                label=f"{name} {what} (median)",
                **style,
            )
        ax_hist.scatter(
            g["history_tokens"] / 1000, g["turn_ms"], s=10, color=color, alpha=0.35, lw=0
        )
        bx, by = A.binned_medians(g["history_tokens"].to_numpy(float), g["turn_ms"].to_numpy(float))
        ax_hist.plot(bx / 1000, by, color=color, lw=2, label=f"{name} (binned median)")
        if len(g) >= 3 and g["history_tokens"].nunique() > 1:
            slope = np.polyfit(g["history_tokens"] / 1000, g["turn_ms"], 1)[0]
            ax_hist.plot([], [], " ", label=f"  slope {slope:+.1f} ms per 1k tokens")
    ax_idx.set_xlabel("turn index within the rollout")
    ax_idx.set_ylabel("latency (ms)")
    ax_idx.set_title("by turn index")
    ax_idx.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_idx.legend(loc="upper left", fontsize=8)
    ax_hist.set_xlabel("conversation history at the turn (thousand tokens)")
    ax_hist.set_title("turn latency by history size")
    ax_hist.legend(loc="upper left", fontsize=8)
    ax_idx.set_ylim(bottom=0)
    _title(fig, run, "Turn latency as the conversation grows")
    return fig


def plot_cache_ratio(run: Run) -> Figure | None:
    """Cached / input tokens by turn index, one line per transport (the summary's ``cache``)."""
    series = []
    for i, name in enumerate(A.run_transports(run)):
        cache = run.figures(name).cache or CacheStats()
        points = [
            (row.turn_index, row.cached_ratio)
            for row in cache.by_turn
            if row.cached_ratio is not None
        ]
        if points:
            series.append((i, name, cache.cached_ratio, points))
    if not series:
        return None
    from matplotlib.ticker import MaxNLocator  # matplotlib: only when plotting

    fig, (ax,) = _figure(9, 4.2)
    for i, name, overall, points in series:
        xs, ys = zip(*points, strict=True)
        label = f"{name} (all turns {overall:.2f})" if overall is not None else name
        ax.plot(xs, ys, color=transport_color(name, i), lw=2, marker="o", ms=4, label=label)
    ax.set_xlabel("turn index within the rollout")
    ax.set_ylabel("cached / input tokens")
    ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="lower right", fontsize=8)
    _title(fig, run, "Cached input tokens by turn index")
    return fig


def plot_latency_breakdown(run: Run) -> Figure | None:
    """Stacked mean time per turn by component, per transport."""
    table = A.breakdown_table(run.summary_model)
    if table.empty:
        return None
    fig, (ax,) = _figure(11.5, 2.8 + 0.6 * len(table))
    names = list(table.index)[::-1]
    parts = ((comp, table.loc[names, comp].to_numpy(float)) for comp in table.columns)
    totals = breakdown_bars(fig, ax, names, parts, label_min=0.06 * table.sum(axis=1).max())
    for y, total in enumerate(totals):
        ax.text(total, y, f"  {total:,.0f} ms", va="center", fontsize=9)
    _title(fig, run, "Where a turn's time goes (server model + client), per transport")
    return fig


def plot_decode_tps(run: Run) -> Figure | None:
    """Per-response decode TPS over time per transport: sustained rate and bursts."""
    turns = A.turn_table(run)
    names = [
        n
        for n in A.run_transports(run)
        if turns.loc[turns["transport"] == n, "decode_tps"].notna().any()
    ]
    if not names:
        return None
    # a panel needs ~5 in for its legend: five transports in 12 in collapsed the axes
    width = max(6 * min(len(names), 2), 4.8 * len(names)) + 0.5
    fig, axes = _figure(width, 4.6, ncols=len(names), sharey=True)
    for i, (ax, name) in enumerate(zip(axes, names, strict=True)):
        g = turns[(turns["transport"] == name) & turns["decode_tps"].notna()]
        color = transport_color(name, A.run_transports(run).index(name))
        sizes = 6 + 40 * g["output_tokens"] / max(1, g["output_tokens"].max())
        ax.scatter(
            g["t_s"],
            g["decode_tps"],
            s=sizes,
            color=color,
            alpha=0.6,
            lw=0,
            label="one response: (n−1)/(last−first)",
        )
        p50 = float(g["decode_tps"].median())
        ax.axhline(p50, color="#222222", lw=1.5, label=f"sustained (p50) {p50:,.0f} tok/s")
        peak = run.figures(name).stat("tps", "burst_peak")
        peak_reason = na_reason(run.figures(name), "tps", "burst_peak")
        if peak:
            ax.axhline(
                peak,
                color="#d35400",
                lw=1.5,
                ls="--",
                label=f"burst peak ({A.BURST_WINDOW_S * 1000:.0f} ms window) {peak:,.0f} tok/s",
            )
        elif peak_reason:
            # a legend entry without a line: the peak is not a number, and says why
            ax.plot(
                [],
                [],
                color="#d35400",
                lw=1.5,
                ls="--",
                label=f"burst peak n/a: {peak_reason}",
            )
        ax.set_title(name)
        ax.set_xlabel("time since the transport's first request (s)")
        if i == 0:
            ax.set_ylabel("decode rate (tokens/s)")
        ax.legend(loc="center right", fontsize=8, frameon=True, framealpha=0.85)
    # shared y: set once from every panel's data, or the first panel's range would win
    tops = [
        turns["decode_tps"].max(),
        *(run.figures(n).stat("tps", "burst_peak") or 0 for n in names),
    ]
    axes[0].set_ylim(0, float(np.nanmax(tops)) * 1.08)
    _title(fig, run, "Per-stream decode rate over time")
    return fig


def plot_aggregate_tps(run: Run) -> Figure | None:
    """Output tokens per second across all streams, per transport, over the run."""
    # the summary's buckets (its aggregate_peak is their top), on the summary's clock grid
    series = A.aggregate_tps(run, AGGREGATE_BUCKET_NS, grid_origin_ns=0)
    if series.empty:
        return None
    # finer buckets show the shape of a short run; drawn thin and labelled with their width
    fine = A.aggregate_tps(run)
    fine_ns = round(float(np.diff(fine["t_s"].iloc[:2]).item()) * 1e9) if len(fine) > 1 else 0
    fig, (ax,) = _figure(10, 4.4)
    bucket = f"{AGGREGATE_BUCKET_NS / 1e9:g} s"
    for i, name in enumerate(A.run_transports(run)):
        g = series[series["transport"] == name]
        if g.empty:
            continue
        color = transport_color(name, i)
        t = run.figures(name)
        mean, peak = t.stat("tps", "aggregate_mean"), t.stat("tps", "aggregate_peak")
        label = f"{name}, {bucket} buckets: peak " + (f"{peak:,.0f}" if peak is not None else "n/a")
        label += f", mean {mean:,.0f} tok/s" if mean else ""
        # the last step drawn to its bucket's end
        x = [*g["t_s"], float(g["t_s"].iloc[-1]) + AGGREGATE_BUCKET_NS / 1e9]
        y = [*g["tps"], float(g["tps"].iloc[-1])]
        ax.step(x, y, where="post", color=color, lw=1.6, label=label)
        ax.fill_between(x, y, step="post", color=color, alpha=0.12)
        if mean:
            ax.axhline(mean, color=color, ls=":", lw=1)
        f = fine[fine["transport"] == name]
        if 0 < fine_ns < AGGREGATE_BUCKET_NS and not f.empty:
            ax.step(
                f["t_s"],
                f["tps"],
                where="post",
                color=color,
                lw=0.8,
                alpha=0.6,
                label=f"{name}, {fine_ns / 1e6:g} ms buckets",
            )
    ax.set_xlabel(
        f"time since the transport's first request (s; {bucket} buckets as in the tables"
        + (f", thin: {fine_ns / 1e6:g} ms" if 0 < fine_ns < AGGREGATE_BUCKET_NS else "")
        + ")"
    )
    ax.set_ylabel("aggregate output (tokens/s)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right")
    _title(fig, run, "Aggregate token throughput over time")
    return fig


def plot_rollout_latency(run: Run) -> Figure | None:
    """Rollout latency distribution per transport and the paired speedup with its CI."""
    rollouts = A.rollout_table(run)
    ok = rollouts[rollouts["ok"]]
    names = [n for n in A.run_transports(run) if (ok["transport"] == n).any()]
    if not names:
        return None
    summary = run.summary_model
    comps = [c for c in (summary.comparisons if summary else []) if c.rollout_speedup]
    fig, axes = _figure(
        12 if comps else 7,
        4.8,
        ncols=2 if comps else 1,
        gridspec_kw={"width_ratios": [3, 2]} if comps else None,
    )
    ax = axes[0]
    data = [ok.loc[ok["transport"] == n, "latency_ms"].to_numpy(float) / 1000 for n in names]
    parts = ax.violinplot(data, showextrema=False, widths=0.8)
    for body, name in zip(list(cast(Any, parts["bodies"])), names, strict=True):
        body.set_facecolor(transport_color(name, names.index(name)))
        body.set_alpha(0.25)
    ax.boxplot(data, widths=0.25, showfliers=False, medianprops={"color": "#222222", "lw": 2})
    for j, (name, v) in enumerate(zip(names, data, strict=True)):
        x = j + 1 + (np.random.default_rng(j).random(len(v)) - 0.5) * 0.35
        ax.scatter(x, v, s=14, color=transport_color(name, j), alpha=0.8, lw=0, zorder=3)
        ax.text(j + 1.3, float(np.median(v)), f"p50 {np.median(v):,.2f} s", va="center", fontsize=8)
    ax.set_xticks(range(1, len(names) + 1), names)
    ax.set_ylabel("rollout latency (s, from intended start)")
    ax.set_title("rollout latency per transport")
    ax.set_ylim(bottom=0)
    if comps:
        ax2 = axes[1]
        pairs = A.paired_rollouts(run)
        labels = []
        for k, c in enumerate(comps):
            base, cand = c.baseline, c.candidate
            y = len(comps) - 1 - k
            if base in pairs.columns and cand in pairs.columns:
                r = (pairs[base] / pairs[cand]).to_numpy(float)
                ax2.scatter(
                    r,
                    y + (np.random.default_rng(k).random(len(r)) - 0.5) * 0.25,
                    s=14,
                    color=transport_color(cand, k),
                    alpha=0.6,
                    lw=0,
                    zorder=3,
                )
            lo, hi = (c.rollout_speedup_ci95 or [None, None])[:2]
            s = float(c.rollout_speedup or 0.0)
            ci = None if lo is None or hi is None else (float(lo), float(hi))
            # too few pairs for a CI: the point estimate alone, and the reason
            ci_text = f"[{lo:.2f}, {hi:.2f}]" if ci else c.rollout_speedup_ci_reason or "no CI"
            mark_ci(ax2, s, y, ci, "#222222", along_x=True, zorder=4)
            red = c.rollout_latency_reduction_pct
            ax2.text(
                s,
                y + 0.3,
                f"{s:.2f}× {ci_text}" + (f"  (−{red:.1f} %)" if red is not None else ""),
                ha="center",
                fontsize=9,
            )
            labels.append(f"{cand}\nvs {base}")
        ax2.axvline(1.0, color="#888888", lw=1, ls="--")
        ax2.set_yticks(range(len(comps)), labels[::-1])
        ax2.set_ylim(-0.6, len(comps) - 0.2)
        ax2.set_xlabel("speedup (baseline latency / candidate latency, ×)")
        paired = all(c.paired for c in comps)
        ax2.set_title(
            ("paired per rollout" if paired else "ratio of medians") + ": median, 95 % CI"
        )
        ax2.grid(axis="y", visible=False)
    _title(fig, run, "Rollout latency and speedup")
    return fig


#: the timeline's latency panels, by the live export's short names
_TIMELINE_LABELS = {"ttft": "TTFT", "ttfot": "TTFOT", "turn": "turn latency"}
#: the timeline's throughput panels: (slices column, axis label)
_TIMELINE_RATES = (
    ("turns_per_s", "turns/s"),
    ("output_tokens_per_s", "output tokens/s"),
    ("errors_per_s", "errors/s"),
)


def plot_timeline(run: Run) -> Figure | None:
    """Per-slice latency percentiles and throughput of each transport over its pass."""
    from matplotlib.figure import Figure  # matplotlib: only when plotting

    table = A.slice_table(run)
    if table.empty or not (table["turns"] + table["errors"]).any():
        return None
    width = float(table["end_s"].iloc[0] - table["start_s"].iloc[0])
    latency = [(short, _TIMELINE_LABELS.get(short, short)) for _, short in SL.LIVE_LATENCY]
    if not D.has_reasoning(run.summary):
        # without reasoning TTFOT is TTFT: a second identical panel says nothing
        latency = [(short, label) for short, label in latency if short != "ttfot"]
    panels = len(latency) + len(_TIMELINE_RATES)
    nrows = -(-panels // 2)
    fig = Figure(figsize=(12, 2.9 * nrows + 0.8), layout="constrained")
    grid = fig.subplots(nrows, 2, squeeze=False, sharex=True)
    axes = [ax for row in grid for ax in row]
    names = [n for n in A.run_transports(run) if (table["transport"] == n).any()]
    for i, name in enumerate(names):
        g = table[table["transport"] == name]
        color = transport_color(name, i)
        mid = (g["start_s"] + width / 2).to_numpy(float)
        for ax, (short, label) in zip(axes, latency, strict=False):
            for stat, style in (("p50", "-"), ("p99", "--")):
                y = g[f"{short}_{stat}_ms"].to_numpy(float)
                few = SL.too_few(g, short, stat).to_numpy(bool)
                # a statistic from too few samples is marked (hollow), never joined by the line
                ax.plot(
                    mid,
                    np.where(few, np.nan, y),
                    style,
                    color=color,
                    lw=1.6 if stat == "p50" else 1.0,
                    marker="o",
                    ms=3,
                    label=name if stat == "p50" else None,
                )
                ax.plot(mid[few], y[few], "o", mfc="none", color=color, ms=4, alpha=0.7)
            ax.set_ylabel(f"{label} (ms)")
            ax.set_title(f"{label}: p50 solid, p99 dashed, hollow: too few turns")
        for ax, (col, label) in zip(axes[len(latency) :], _TIMELINE_RATES, strict=False):
            x = [*g["start_s"], float(g["end_s"].iloc[-1])]
            y = [*g[col], float(g[col].iloc[-1])]
            ax.step(x, y, where="post", color=color, lw=1.4, label=name)
            ax.set_ylabel(label)
            ax.set_title(f"{label} per slice")
    for ax in axes[:panels]:
        # an all-zero panel (no errors) gets a readable 0-1 axis rather than matplotlib's ±0.05
        ax.set_ylim(0, max(1.0, ax.get_ylim()[1]))
        ax.legend(loc="upper right", fontsize=7)
    for ax in axes[panels:]:
        ax.set_visible(False)
    for ax in grid[-1]:
        ax.set_xlabel(f"time since the transport's first intended start (s; {width:g} s slices)")
    _title(fig, run, "Timeline: latency and throughput per time slice")
    return fig


@dataclass(frozen=True, slots=True)
class PlotText:
    """A plot's file name and the title and caption the report shows with it."""

    name: str
    title: str
    caption: str


@dataclass(frozen=True, slots=True)
class PlotSpec(PlotText):
    make: Callable[[Run], Figure | None]


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec(
        "ttft_cdf",
        "TTFT distribution",
        "Cumulative distribution of time to first token per "
        "transport (dotted: median). A curve further left is faster at every percentile. When "
        "the model reasoned, dashed: time to the first visible output token (TTFOT).",
        plot_ttft_cdf,
    ),
    PlotSpec(
        "turn_latency_growth",
        "Turn latency vs conversation length",
        "Left: turn latency (dots, solid median) and TTFT (dashed median) by turn index. Right: turn "
        "latency against the history the turn carries. Full-history transports pay for the whole "
        "conversation every turn, so their line climbs; cached transports stay flatter.",
        plot_turn_latency_growth,
    ),
    PlotSpec(
        "cache_ratio",
        "Cached input by turn index",
        "Share of each turn's input tokens the server reported as cached (usage), summed over the "
        "rollouts at each turn index: sum of cached tokens / sum of input tokens. A transport that "
        "keeps the conversation on the server, or a warm prefix cache, climbs towards 1 as the "
        "history grows; the legend gives the ratio over all turns.",
        plot_cache_ratio,
    ),
    PlotSpec(
        "latency_breakdown",
        "Latency breakdown",
        "Mean time per turn by component: the server's modelled API-tier and engine time "
        "(sim_timing), the measured remainder (network and client I/O), and the client-side tool, "
        "think and recovery time per turn.",
        plot_latency_breakdown,
    ),
    PlotSpec(
        "decode_tps",
        "Decode rate per stream",
        "Each dot is one response's decode rate, (output tokens − 1) / (last − first token), at the "
        "time its first token arrived (size: response length). The solid line is the sustained rate "
        "(median); dots far above it are responses decoded in a speculative burst. The dashed line is "
        "the burst peak: most tokens in any 100 ms window / 0.1 s over responses that last the window, "
        "and at least the fastest dot; n/a when no response lasted 100 ms.",
        plot_decode_tps,
    ),
    PlotSpec(
        "aggregate_tps",
        "Aggregate throughput",
        "Output tokens per second summed over all concurrent streams, each response's tokens spread "
        "evenly between its first and last token, in the tables' one-second buckets (the fullest "
        "bucket wholly inside the active span is the aggregate peak; a partly idle first or last "
        "bucket is not) and, thin, in finer buckets (dotted: mean over the active span).",
        plot_aggregate_tps,
    ),
    PlotSpec(
        "timeline",
        "Timeline",
        "Each transport's pass cut into time slices (loopbench run --slice-s, else about 60 "
        "slices; slices.csv.gz holds every number, p90 too). A turn counts in the slice it ended "
        "in. Latency panels: p50 (solid) and p99 (dashed) of the turns that ended in the slice; a "
        "hollow marker is a percentile of too few turns to say more than the slice's largest "
        "value (p50 needs 2, p99 100) and is not joined. Throughput panels: turns, output tokens "
        "(spread between each response's first and last token) and failed turns per second. A "
        "ramp, a burst or a storm shows where it happened.",
        plot_timeline,
    ),
    PlotSpec(
        "rollout_latency",
        "Rollout latency and speedup",
        "Left: end-to-end rollout latency per transport (violin, box, one dot per rollout). Right: the "
        "per-rollout speedup over the baseline on identical seeded rollouts (dots), the median "
        "(diamond) and its bootstrap 95 % confidence interval.",
        plot_rollout_latency,
    ),
)


@dataclass(frozen=True, slots=True)
class PlotFile:
    spec: PlotSpec
    path: Path


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as PNG through Agg (no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib: only when plotting

    FigureCanvasAgg(fig)
    with plot_style():
        fig.savefig(path, format="png")
    return path


def write_plots(run: Run, out_dir: Path, specs: Sequence[PlotSpec] = PLOTS) -> list[PlotFile]:
    """Render every plot that has data to ``out_dir/<name>.png``; returns what was written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in specs:
        with plot_style():
            fig = spec.make(run)
        if fig is None:
            continue
        written.append(PlotFile(spec, save_figure(fig, out_dir / f"{spec.name}.png")))
    return written
