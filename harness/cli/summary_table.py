"""The end-of-run table every measuring command prints (``run``, ``run --procs``, ``locust``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.metrics import definitions as D
from harness.run.progress import schedule_table


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if f != f:
        return "-"
    return f"{f:,.{digits}f}"


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    # Piped output (CI logs, files) gets a fixed wide layout instead of an 80-column squeeze.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    table = Table(title=f"loopbench — {summary.get('run_id', '')}", title_justify="left")
    cols = [
        ("transport", "left"),
        ("rollouts", "right"),
        ("turns", "right"),
        ("errors", "right"),
        *((m.title(stat.key, with_unit=True), "right") for m, stat in D.cli_columns()),
    ]
    for name, justify in cols:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for name, t in summary.get("transports", {}).items():
        table.add_row(
            name,
            str(t["rollouts"]["count"]),
            str(t["turns"]["count"]),
            str(t["turns"]["errors"] + t["rollouts"]["errors"]),
            *(
                _fmt((t.get(m.group) or {}).get(stat.key), 0 if m.unit == "tok/s" else 1)
                for m, stat in D.cli_columns()
            ),
        )
    console.print(table)
    comps = summary.get("comparisons", [])
    if comps:
        ct = Table(title="speedup (paired on identical rollouts)", title_justify="left")
        for name in (
            "candidate vs baseline",
            "rollout speedup",
            "95% CI",
            "rollout latency reduction",
            "TTFT p50 reduction",
        ):
            ct.add_column(name, justify="right" if name != "candidate vs baseline" else "left")
        for c in comps:
            lo, hi = c.get("rollout_speedup_ci95", [None, None])
            ct.add_row(
                f"{c['candidate']} vs {c['baseline']}",
                f"{_fmt(c.get('rollout_speedup'), 2)}x",
                f"[{_fmt(lo, 2)}, {_fmt(hi, 2)}]",
                f"{_fmt(c.get('rollout_latency_reduction_pct'))} %",
                f"{_fmt(c.get('ttft_p50_reduction_pct'))} %",
            )
        console.print(ct)
    sched = schedule_table(summary)
    if sched is not None:
        console.print(sched)
    if not summary.get("valid", True):
        console.print("[bold red]run INVALID:[/] " + "; ".join(summary.get("invalid_reasons", [])))
    console.print(f"results: {run_dir}")
    if (run_dir / "report.html").exists():
        console.print(f"report:  {run_dir / 'report.html'}")
