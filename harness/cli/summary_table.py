"""The end-of-run table every measuring command prints (``run``, ``run --procs``, ``locust``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from harness.metrics import definitions as D
from harness.report.files import fmt, fmt_ci, fmt_stat, too_few_note
from harness.run.progress import schedule_table, titled_table


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    # Piped output (CI logs, files) gets a fixed wide layout instead of an 80-column squeeze.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    table = titled_table(
        f"loopbench — {summary.get('run_id', '')}",
        "transport",
        "rollouts",
        "turns",
        "errors",
        *(m.title(stat.key, with_unit=True) for m, stat in D.cli_columns()),
    )
    for name, t in summary.get("transports", {}).items():
        table.add_row(
            name,
            str(t["rollouts"]["count"]),
            str(t["turns"]["count"]),
            str(t["turns"]["errors"] + t["rollouts"]["errors"]),
            *(
                fmt_stat(t, m.group, stat.key, 0 if m.unit == "tok/s" else 1)
                for m, stat in D.cli_columns()
            ),
        )
    console.print(table)
    if note := too_few_note(summary):
        console.print(note)
    comps = summary.get("comparisons", [])
    if comps:
        ct = titled_table(
            "speedup (paired on identical rollouts)",
            "candidate vs baseline",
            "rollout speedup",
            "95% CI",
            "rollout latency reduction",
            "TTFT p50 reduction",
        )
        for c in comps:
            lo, hi = c.get("rollout_speedup_ci95", [None, None])
            ct.add_row(
                f"{c['candidate']} vs {c['baseline']}",
                f"{fmt(c.get('rollout_speedup'), 2)}x",
                fmt_ci(lo, hi, 2, c.get("rollout_speedup_ci_reason")),
                f"{fmt(c.get('rollout_latency_reduction_pct'))} %",
                f"{fmt(c.get('ttft_p50_reduction_pct'))} %",
            )
        console.print(ct)
    sched = schedule_table(summary)
    if sched is not None:
        console.print(sched)
    for line in summary.get("warnings", []):
        console.print("[bold yellow]warning:[/] " + escape(line))
    if not summary.get("valid", True):
        console.print("[bold red]run INVALID:[/] " + "; ".join(summary.get("invalid_reasons", [])))
    console.print(f"results: {run_dir}")
    if (run_dir / "report.html").exists():
        console.print(f"report:  {run_dir / 'report.html'}")
