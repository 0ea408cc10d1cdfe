"""What the side-by-side comparisons (:mod:`tools.real_engine.delivery`,
:mod:`tools.real_engine.scrape_cost`) share: their command line, one chat window of
loopbench read back beside vLLM's own figures over it, and the outcome written.  Each
compares several settings window by window; only the settings and what is counted differ."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.cli_args import names_of
from harness.wire.exit_codes import UsageParser
from tools.real_engine.compare import ClientFigures, Row, compare
from tools.real_engine.engine import Engine
from tools.real_engine.engine_metrics import TTFT, Snapshot
from tools.real_engine.run import (
    Options,
    Prepared,
    _loopbench_window,
    _read_turns,
    machine,
    window_id,
    write_outcome,
)


@dataclass(frozen=True)
class ChatWindow:
    folder: Path  # the loopbench run's folder (turns.csv.gz, server_metrics.csv.gz)
    turns: list[dict[str, str]]  # [] when loopbench wrote none
    rows: list[Row]  # loopbench's figures beside vLLM's; [] when loopbench measured nothing
    engine_p99_ms: float | None  # vLLM's own TTFT p99 over the window
    note: str  # why loopbench's run failed, "" when it did not


def read_window(
    folder: Path, figures: ClientFigures | None, delta: Snapshot, note: str
) -> ChatWindow:
    """The window ``folder`` holds, with vLLM's scrapes before and after it (``delta``)."""
    turns = _read_turns(folder / "turns.csv.gz") if (folder / "turns.csv.gz").exists() else []
    hist = delta.histograms.get(TTFT)
    p99 = hist.quantile(0.99) if hist is not None else None
    rows = compare(figures, delta) if figures is not None else []
    return ChatWindow(folder, turns, rows, None if p99 is None else p99[0] * 1000, note)


def chat_window(opts: Options, engine: Engine, ready: Prepared, label: str) -> ChatWindow:
    """loopbench's chat window over ``ready``'s text scenario (targets checked), read back."""
    figures, delta, note = _loopbench_window(
        opts, engine, ready.text, "chat", ready.tokenizer, print, checked=True, label=label
    )
    return read_window(opts.out / "runs" / window_id(label), figures, delta, note)


def parser(
    prog: str, doc: str | None, out: str, settings: Sequence[str], rounds: int, requests: int
) -> UsageParser:
    """The options every side-by-side comparison takes (``bench.options.options_from`` turns
    them into :class:`Options`); ``--settings`` names some of ``settings``, what it compares."""
    p = UsageParser(prog=prog, description=doc)
    p.add_argument("--out", type=Path, default=Path(out))
    p.add_argument("--engine-venv", type=Path, default=Path(".venv-engine"))
    p.add_argument(
        "--settings",
        type=names_of(settings),
        default=tuple(settings),
        help=f"of {', '.join(settings)}",
    )
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument(
        "--requests", type=int, default=requests, help=f"per window (default {requests})"
    )
    return p


def started() -> tuple[float, tuple[float, float, float]]:
    """When the comparison started and the load then (for :func:`finish`)."""
    return time.perf_counter(), os.getloadavg()


def finish(
    opts: Options,
    name: str,
    since: tuple[float, tuple[float, float, float]],
    found: Mapping[str, object],
    table: str,
) -> None:
    """``found`` with the machine's figures as ``name`` and the table in ``opts.out``; the
    table and the load printed."""
    doc = {**machine(*since), **found}
    write_outcome(opts.out, name, doc, table)
    print(f"\n{table}\n\nload average {doc['load_average_at_start']} -> {doc['load_average']}")
