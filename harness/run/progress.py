"""Progress of a run while it runs: a rich live table on a terminal, plain lines in logs.

The runner hands a :class:`PassProgress` snapshot (one per transport pass of a
round) to a :class:`ProgressSink` a few times a second; sinks decide how often
to draw.  Nothing here measures: the numbers are the runner's cheap live
counters, and the summary is computed separately from the records.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any, Protocol

from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from harness.metrics.results_model import Schedule, Summary, as_summary


@dataclass(frozen=True, slots=True)
class PassProgress:
    """One transport's pass over one round of rollouts, as of now."""

    transport: str
    round: int
    rounds: int
    done: int
    total: int
    turns: int
    errors: int
    dropped: int
    late: int
    ttft_p50_ms: float | None
    elapsed_s: float
    finished: bool = False
    # Open loop: seconds until the last intended start (the schedule bounds the ETA).
    schedule_left_s: float | None = None

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        if self.finished:
            return 0.0
        by_rate = (
            self.elapsed_s / self.done * (self.total - self.done - self.dropped)
            if self.done
            else None
        )
        if self.schedule_left_s is not None:
            return max(self.schedule_left_s, by_rate or 0.0)
        return by_rate


class ProgressSink(Protocol):
    def update(self, progress: PassProgress) -> None: ...

    def close(self) -> None: ...


def _num(value: float | None, fmt: str) -> str:
    if value is None or not math.isfinite(value):
        width = fmt.split(".")[0]
        return format("-", ">" + width) if width else "-"
    return format(value, fmt)


def _pass_name(p: PassProgress) -> str:
    return p.transport if p.rounds == 1 else f"{p.transport} r{p.round + 1}/{p.rounds}"


def format_line(p: PassProgress) -> str:
    """One plain-text progress line (logs, CI)."""
    extra = ""
    if p.dropped or p.late:
        extra = f"  late {p.late}  dropped {p.dropped}"
    return (
        f"{_pass_name(p):<16} {p.done}/{p.total} rollouts  {p.turns_per_s:6.1f} turns/s  "
        f"TTFT p50 {_num(p.ttft_p50_ms, '7.1f')} ms  errors {p.errors}{extra}  "
        f"{p.elapsed_s:6.1f}s elapsed  ETA {_num(p.eta_s, '6.1f')}s"
    )


class LineProgress:
    """Plain periodic lines: one every ``interval_s`` per pass, and one when a pass ends."""

    def __init__(
        self,
        write: Callable[[str], None],
        interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write = write
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[tuple[int, str], float] = {}

    def update(self, progress: PassProgress) -> None:
        key = (progress.round, progress.transport)
        now = self.clock()
        last = self._last.get(key)
        if progress.finished or last is None or now - last >= self.interval_s:
            self._last[key] = now
            if last is None and not progress.finished and progress.done == 0:
                return  # nothing worth a line yet; the first one comes after interval_s
            self.write(format_line(progress))

    def close(self) -> None:
        return None


class RichProgress:
    """A live table (one row per pass, finished rows stay) redrawn in place on a terminal."""

    def __init__(self, file: IO[str] | None = None, width: int | None = None) -> None:
        self.console = Console(file=file or sys.stderr, width=width)
        self._rows: dict[tuple[int, str], PassProgress] = {}
        self._live = Live(
            self._render(), console=self.console, refresh_per_second=4, transient=False
        )
        self._live.start()

    def _render(self) -> Any:
        table = Table(box=None, pad_edge=False, header_style="bold")
        for name, justify in (
            ("transport", "left"),
            ("", "left"),
            ("rollouts", "right"),
            ("turns/s", "right"),
            ("TTFT p50 ms", "right"),
            ("errors", "right"),
            ("late/dropped", "right"),
            ("elapsed", "right"),
            ("ETA", "right"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for p in self._rows.values():
            table.add_row(
                _pass_name(p),
                ProgressBar(total=max(1, p.total), completed=p.done + p.dropped, width=24),
                f"{p.done}/{p.total}",
                f"{p.turns_per_s:.1f}",
                _num(p.ttft_p50_ms, ".1f"),
                f"[red]{p.errors}[/]" if p.errors else "0",
                f"{p.late}/{p.dropped}",
                f"{p.elapsed_s:.1f}s",
                "done" if p.finished else f"{_num(p.eta_s, '.1f')}s",
            )
        return table

    def update(self, progress: PassProgress) -> None:
        self._rows[(progress.round, progress.transport)] = progress
        self._live.update(self._render())

    def close(self) -> None:
        self._live.stop()


def make_progress(
    stream: IO[str] | None = None, *, quiet: bool = False, interval_s: float = 5.0
) -> ProgressSink | None:
    """A rich live display when ``stream`` (default stderr) is a terminal, else plain lines."""
    if quiet:
        return None
    out = stream or sys.stderr
    if out.isatty():
        return RichProgress(out)

    def write(line: str) -> None:
        print(line, file=out, flush=True)

    return LineProgress(write, interval_s)


def titled_table(title: str, first: str, *rest: str) -> Table:
    """A table of end-of-run figures: the first column names the row (left), numbers follow (right)."""
    table = Table(title=title, title_justify="left")
    table.add_column(first, justify="left")
    for name in rest:
        table.add_column(name, justify="right")
    return table


#: the schedule's counts of starts: intended = started + cancelled + dropped + not started
_START_COUNTS = ("intended", "started", "late", "dropped", "cancelled", "not_started")


def schedule_table(doc: Summary | Mapping[str, Any]) -> Any:
    """The load generator's own figures (intended vs actual starts), or None for a closed loop.

    Shown after a scheduled run so that a reader sees how far the client fell
    behind before trusting the latencies above it.
    """
    summary = as_summary(doc) or Summary()
    if (summary.load.mode if summary.load is not None else None) in (None, "closed"):
        return None
    table = titled_table(
        "load generator (intended vs actual starts)",
        "transport",
        *(key.replace("_", " ") for key in _START_COUNTS),
        "lag p50 ms",
        "lag p99 ms",
        "lag max ms",
        "rollout p50 ms",
        "uncorrected p50 ms",
    )
    for name, t in summary.transports.items():
        sched = t.schedule

        def count(key: str, sched: Schedule | None = sched) -> str:
            # "-": a summary written before the field (or without a schedule block)
            return str(getattr(sched, key)) if sched and key in sched.model_fields_set else "-"

        table.add_row(
            name,
            *map(count, _START_COUNTS),
            _num(t.stat("schedule_lag_ms", "p50"), ".2f"),
            _num(t.stat("schedule_lag_ms", "p99"), ".2f"),
            _num(sched.lag_max_ms if sched else None, ".2f"),
            _num(t.stat("rollout_ms", "p50"), ".1f"),
            _num(t.stat("rollout_uncorrected_ms", "p50"), ".1f"),
        )
    return table
