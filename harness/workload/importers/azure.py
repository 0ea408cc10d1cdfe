"""Azure LLM inference traces → loopbench trace rollouts.

The Azure public LLM inference traces (2023 and 2024; replayed by inference-perf) are CSV,
one request per row: ``TIMESTAMP`` (the 2024 files add a UTC offset), ``ContextTokens``,
``GeneratedTokens``.  The rows carry no session key, so each request is a one-turn
rollout; its arrival (ms after the file's first row) stays in ``meta``: the replay's
``load:`` section decides arrivals.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from harness.workload.importers.common import (
    Request,
    SessionImportError,
    bad_field,
    chain_rollout,
    import_files,
    whole_field,
)
from harness.workload.trace import TraceRollout

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _timestamp_s(raw: str | None, source: str, line: int) -> float:
    text = (raw or "").strip()
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise bad_field(
            source, line, "TIMESTAMP", "a date and time like 2023-11-16 18:15:46.680590", text
        ) from None
    # The files' times are UTC; a naive one read as local time would move across DST.
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def parse_azure(lines: Iterable[str], source: str = "<azure>") -> list[TraceRollout]:
    """The one-turn rollouts of one Azure LLM inference trace file (its lines, in order)."""
    reader = csv.DictReader(iter(lines))
    header = [name.strip() for name in (reader.fieldnames or [])]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise SessionImportError(
            f"{source}: line 1: expected a header with the columns {', '.join(COLUMNS)}, "
            f"got {', '.join(header) or 'an empty file'} (missing {', '.join(missing)})"
        )
    reader.fieldnames = header
    label = os.path.basename(source)
    rollouts: list[TraceRollout] = []
    t0: float | None = None
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise SessionImportError(
                f"{source}: line {reader.line_num}: expected a CSV row, got one that is not ({exc})"
            ) from None
        line = reader.line_num
        if not any((value or "").strip() for value in row.values() if isinstance(value, str)):
            continue
        t = _timestamp_s(row.get("TIMESTAMP"), source, line)
        t0 = t if t0 is None else t0
        req = Request(
            line=line,
            input_tokens=whole_field(row, "ContextTokens", source, line) or 0,
            output_tokens=whole_field(row, "GeneratedTokens", source, line) or 0,
            arrival_ms=round((t - t0) * 1000.0, 3),
        )
        meta = {"source": "azure", "file": label, "timestamp": (row["TIMESTAMP"] or "").strip()}
        rollouts.append(chain_rollout([req], f"{label}:{line}", 0, meta))
    return rollouts


def import_azure_files(paths: Sequence[str]) -> list[TraceRollout]:
    """Every row of every file as a one-turn rollout, in file order."""
    return import_files(paths, parse_azure, "CSV text", newline="")
