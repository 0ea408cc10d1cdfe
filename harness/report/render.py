"""``report.md``, ``report.html`` and ``plots/*.png`` of a results folder, from its files alone
(so ``loopbench report RUN`` gives the report the run itself did)."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.metrics import definitions as D
from harness.metrics import slo
from harness.metrics.results_model import (
    CacheStats,
    Summary,
    TransportSummary,
    as_summary,
)
from harness.metrics.timeseries import AGGREGATE_BUCKET_NS
from harness.report import analysis as A
from harness.report.document import (
    Block,
    Document,
    Heading,
    Image,
    Paragraph,
    Table,
)
from harness.report.files import (
    COUNT_HEADERS,
    PLOTS_DIR,
    SPEEDUP_HEADERS,
    Rendered,
    count_cells,
    fmt,
    fmt_ci,
    speedup_cells,
    stat_cell,
    too_few_note,
    write_report,
)
from harness.report.results import SLICES, Run, load_run, write_table_gz
from harness.report.server_plots import server_section
from harness.report.sweep import is_sweep, render_sweep
from harness.report.verdict import verdict_kind, verdict_line
from harness.wire.plural import counted, plural
from harness.workload.records import BURST_WINDOW_NS


def _run_facts(run: Run) -> list[str]:
    m = run.manifest_model
    scenario = m.scenario_facts
    machine = m.machine
    seed = "?" if m.seed is None else m.seed
    return [
        f"Scenario {scenario.name or '?'}"
        + (f" — {scenario.description}" if scenario.description else ""),
        f"seed {seed}, transports {', '.join(m.transports)}, load {scenario.load_mode or '?'}"
        + (
            f" (concurrency {scenario.concurrency})"
            if scenario.load_mode == "closed"
            else f" (arrival {scenario.arrival})"
        ),
        (
            f"embedded reference server, API profile {scenario.api_profile}, engine "
            f"{scenario.engine_profile}"
            if m.embedded_server
            else f"target {m.target or '?'}"
        ),
        f"started {m.started_at or '?'}, git {(m.git_sha or '')[:10] or '?'}, "
        f"Python {machine.get('python', '?')}, {machine.get('cpu_count', '?')} CPUs",
    ]


def _metric_cells(
    t: TransportSummary | Mapping[str, Any],
    table: str,
    summary: Summary | Mapping[str, Any],
    rates: bool | None = None,
) -> list[str]:
    return [
        stat_cell(t, m.group, stat.key, digits)
        for m, stat, digits in _columns(table, summary, rates)
    ]


def _columns(
    table: str, summary: Summary | Mapping[str, Any], rates: bool | None = None
) -> list[tuple[D.Metric, D.Stat, int]]:
    """The table's columns; ``rates``: only those in tokens per second (True) or the others."""
    return [
        c
        for c in D.report_columns(table, summary)
        if rates is None or (c[0].unit == "tok/s") == rates
    ]


def _note(summary: Summary) -> str:
    note = too_few_note(summary)
    return f" {note}" if note else ""


def latency_table(doc: Summary | Mapping[str, Any]) -> Table:
    summary = as_summary(doc) or Summary()
    ordered = [
        (name, summary.transports[name]) for name in A.ordered_transports(summary.transports)
    ]
    rows = [[*count_cells(name, t), *_metric_cells(t, "latency", summary)] for name, t in ordered]
    return Table(
        [
            *COUNT_HEADERS,
            *(m.title(stat.key) for m, stat, _ in D.report_columns("latency", summary)),
        ],
        rows,
        caption="Milliseconds. Percentiles are nearest-rank: exact order statistics up to "
        "10,000 samples, HdrHistogram values (3 significant digits) beyond. Rollout latency is "
        "measured from the intended start. Turn errors: failed turns; rollout errors: rollouts "
        "that did not complete (a failed turn usually fails its rollout too)." + _note(summary),
    )


def throughput_tables(doc: Summary | Mapping[str, Any]) -> tuple[Table, Table]:
    """The tokens-per-second columns, then the measurement-quality ones: as one table of 14
    columns it ran off a 1,400-pixel page."""
    summary = as_summary(doc) or Summary()

    def table(rates: bool, caption: str) -> Table:
        rows = [
            [name, *_metric_cells(summary.transports[name], "throughput", summary, rates)]
            for name in A.ordered_transports(summary.transports)
        ]
        headers = [
            m.title(stat.key, with_unit=True)
            for m, stat, _ in _columns("throughput", summary, rates)
        ]
        return Table(["transport", *headers], rows, caption=caption + _note(summary))

    return (
        table(True, throughput_caption(summary)),
        table(
            False,
            "Schedule lag: a rollout's actual start minus its intended start. TTFT "
            "measured−modelled: the TTFT measured minus the one the server modelled "
            "(sim_timing.ttft, where the server reports it). docs/metrics.md.",
        ),
    )


def throughput_caption(summary: Summary) -> str:
    window = f"{BURST_WINDOW_NS / 1e6:g} ms"
    bucket = f"{AGGREGATE_BUCKET_NS / 1e9:g} s"
    excluded = sum(
        int(t.tps.stat("decode_excluded") or 0) if t.tps is not None else 0
        for t in summary.transports.values()
    )
    return (
        f"Tokens per second. Decode: per turn with a valid decode rate (at least 2 tokens over "
        f"{D.MIN_DECODE_SPAN_NS / 1e6:g} ms or more, first to last token, arriving in at least "
        f"{D.MIN_OUTPUT_ARRIVALS} pieces, a tool call's first fewer than "
        f"{D.RELEASED_BURST_MIN_TOKENS} tokens)"
        + (
            f"; {counted(excluded, 'turn')} with output {plural(excluded, 'was', 'were')} too "
            "short, came whole or in a burst (see the notes) and not counted"
            if excluded
            else ""
        )
        + f". Burst peak: the most tokens in any {window} window of a response that lasts the "
        f"window, / {window}, and at least the fastest decode rate, so no decode column exceeds "
        f"it; n/a when no response lasted {window}. Aggregate: all streams together, over the "
        f"active span (mean) and in {bucket} buckets, the buckets of the throughput plot (peak: "
        "the fullest bucket wholly inside the active span; n/a when the span holds none)."
    )


def comparison_table(run: Run) -> Table | None:
    comps = run.summary_model.comparisons if run.summary_model is not None else []
    if not comps:
        return None
    rows = []
    for c in comps:
        ttft = A.paired_ttft_speedup(run, c.baseline, c.candidate)
        ttft_lo, ttft_hi = ttft.ci95 if ttft is not None and ttft.ci95 is not None else (None, None)
        rows.append(
            [
                *speedup_cells(c, 3),
                fmt(ttft.median_ratio, 3, "×") if ttft else "-",
                fmt_ci(ttft_lo, ttft_hi, 3, ttft.ci_reason) if ttft else "-",
                "yes" if c.paired else "no",
            ]
        )
    return Table(
        [*SPEEDUP_HEADERS, "TTFT speedup (per turn)", "95 % CI", "paired"],
        rows,
        caption="Speedup = baseline latency / candidate latency on the same seeded rollouts: median "
        "of per-rollout ratios with a bootstrap 95 % confidence interval (ratio of medians when not "
        "every rollout completed on both). The TTFT speedup pairs turns by rollout and turn index.",
    )


def breakdown_doc_table(summary: Summary | Mapping[str, Any]) -> Table:
    table = A.breakdown_table(summary)
    headers = ["transport", *table.columns]
    rows = [[name, *(fmt(v, 1) for v in table.loc[name])] for name in table.index]
    return Table(
        headers,
        rows,
        caption="Mean milliseconds per turn. api_* / engine_queue / prefill / decode: the server's "
        "model (sim_timing); unmodelled: measured turn latency minus the server parts; tool, client, "
        "recovery: rollout time per turn.",
    )


def cache_line(doc: Summary | Mapping[str, Any]) -> str | None:
    """One sentence of the cached / input token ratio per transport; None when no transport's
    server reported input tokens."""
    summary = as_summary(doc) or Summary()
    parts = []
    for name in A.ordered_transports(summary.transports):
        group = summary.transports[name].cache or CacheStats()
        if group.cached_ratio is not None:
            parts.append(
                f"{name} {fmt(group.cached_ratio, 2)} ({group.cached_tokens:,} of "
                f"{group.input_tokens:,})"
            )
    if not parts:
        return None
    return (
        "Cached input tokens (cached / input, as the server reported them): "
        + ", ".join(parts)
        + "; by turn index in summary.json (cache.by_turn) and the plot below."
    )


def subagents_line(doc: Summary | Mapping[str, Any]) -> str | None:
    """One sentence on the rollouts that ran sub-agents, per transport; None without any."""
    summary = as_summary(doc) or Summary()
    forked = summary.subagents or {}
    parts = []
    for name in A.ordered_transports(summary.transports):
        group = forked.get(name)
        if not group:
            continue
        share, common = group.wait_share_p50, group.critical_path_common
        most = (
            f", most often {common} ({fmt((group.critical_path_common_share or 0) * 100, 0)} % "
            "of them)"
            if common
            else ""
        )
        parts.append(
            f"{name} {fmt(None if share is None else share * 100, 1)} % of the rollout waiting "
            f"on sub-agents, {fmt(group.critical_path_turns_p50, 1)} model turns on the "
            "critical path, through a sub-agent in "
            f"{fmt((group.critical_path_through_subagent or 0) * 100, 0)} % of "
            f"{counted(group.rollouts, 'rollout')}{most}"
        )
    if not parts:
        return None
    return (
        "Sub-agents (medians over the rollouts that forked; docs/metrics.md): "
        + "; ".join(parts)
        + "."
    )


def build_run_document(run: Run, plot_files: list[Any], extra: Sequence[Block] = ()) -> Document:
    """The report of one run; ``plot_files`` are :class:`~harness.report.plots.PlotFile` s.

    ``extra``: sections placed after the plots (the server-side metrics).
    """
    typed = run.summary_model or Summary()
    doc = Document(f"loopbench report — {run.run_id}")
    doc.add(Paragraph(verdict_line(run.summary_model), kind=verdict_kind(run.summary_model)))
    doc.add(Paragraph(" · ".join(_run_facts(run))))
    doc.add(*(Paragraph(line, kind="note") for line in typed.hint_ignored))
    # an unfinished run's verdict line says so
    if typed.valid is False:
        doc.add(Paragraph("Run INVALID: " + "; ".join(typed.invalid_reasons), kind="bad"))
    if typed.rebuilt:
        src = typed.rebuilt_from or {}
        doc.add(
            Paragraph(
                f"Rebuilt: the run did not finish (the harness was killed); loopbench report "
                f"rebuilt summary.json from the {src.get('turns', 0)} turn and "
                f"{src.get('rollouts', 0)} rollout rows on disk. Schedule lag and client health "
                "were never written and are absent.",
                kind="note",
            )
        )
    elif typed.partial:
        doc.add(
            Paragraph(
                "Partial run: interrupted before every rollout finished; figures cover what was "
                "measured.",
                kind="note",
            )
        )
    if typed.transports:
        doc.add(Heading("Latency"), latency_table(typed))
        doc.add(Heading("Throughput and measurement quality"), *throughput_tables(typed))
        cached = cache_line(typed)
        if cached is not None:
            doc.add(Paragraph(cached))
        forked = subagents_line(typed)
        if forked is not None:
            doc.add(Paragraph(forked))
        if slo_line := slo.line(typed):
            doc.add(
                Paragraph(
                    slo_line + " (a rollout is good when it succeeded, each turn met the "
                    "per-turn thresholds and it finished within rollout_ms; docs/metrics.md)."
                )
            )
        comp = comparison_table(run)
        if comp is not None:
            doc.add(Heading("Speedup between transports"), comp)
        doc.add(Heading("Latency breakdown"), breakdown_doc_table(typed))
        errors = [
            [name, kind, str(n)]
            for name in A.ordered_transports(typed.transports)
            for kind, n in typed.transports[name].errors_by_kind.items()
        ]
        if errors:
            doc.add(Heading("Errors"), Table(["transport", "kind", "count"], errors, align="llr"))
    if plot_files:
        doc.add(Heading("Plots"))
        for pf in plot_files:
            doc.add(
                Heading(pf.spec.title, level=3),
                Image(f"{PLOTS_DIR}/{pf.path.name}", pf.spec.title, pf.spec.caption),
            )
    doc.add(*extra)
    doc.add(
        Heading("Files"),
        Paragraph(
            "manifest.json (scenario, seed, versions, machine) · turns.csv.gz and rollouts.csv.gz "
            "(one row per record) · slices.csv.gz (per transport and time slice, from the turn "
            "rows) · histograms/*.hlog (HdrHistogram interval logs, µs) · "
            "summary.json · plots/*.png. Load them with harness.report.load_run(path)."
        ),
    )
    return doc


def render_run(
    run_dir: str | Path, server_series: Sequence[str] = (), slice_s: float | None = None
) -> Rendered:
    """Write ``slices.csv.gz``, ``plots/*.png``, ``report.md`` and ``report.html`` into ``run_dir``.

    A sweep folder (``sweep.json``) gets the combined sweep report instead.
    ``server_series``: the scraped series to plot (docs/server-metrics.md), else the known ones.
    ``slice_s``: the time slices' width (docs/metrics.md, "Time slices"), else the run's
    ``--slice-s``, else automatic.
    """
    from harness.report.plots import write_plots  # matplotlib: only when plotting

    if is_sweep(run_dir):
        return render_sweep(run_dir)
    run = load_run(run_dir)
    if slice_s is not None:
        # this rendering's width, for the table and the plot alike; manifest.json is not rewritten
        run.manifest["slice_s"] = slice_s
    write_table_gz(run.path / SLICES, A.slice_table(run))
    plot_files = write_plots(run, run.path / PLOTS_DIR)
    server = server_section(run, run.path / PLOTS_DIR, server_series)
    if server.plot is not None:
        plot_files.append(server.plot)
    doc = build_run_document(run, plot_files, server.blocks)
    md, page = write_report(doc, run.path)
    return Rendered(md, page, [p.path for p in plot_files])


def render_run_safely(run_dir: str | Path) -> Rendered | None:
    """:func:`render_run`, but a failure is printed to stderr instead of raised."""
    try:
        return render_run(run_dir)
    except Exception as exc:  # any plotting bug must not cost a measured run
        print(f"warning: {run_dir}: report not rendered: {exc!r}", file=sys.stderr)
        traceback.print_exc(limit=3, file=sys.stderr)
        return None
