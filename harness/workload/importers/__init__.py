"""Recorded agent sessions → loopbench traces (``loopbench import FORMAT PATH... -o FILE``).

Each importer turns one tool's session files, or one public request-trace format, into
:class:`~harness.workload.trace.TraceRollout` objects; this module names them
(:data:`IMPORTERS`), finds the files, writes the generic JSONL trace (docs/traces.md) and
reports what it wrote.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.wire.errors import UsageError
from harness.wire.plural import counted
from harness.workload.importers.azure import import_azure_files
from harness.workload.importers.codex import import_codex_files
from harness.workload.importers.common import SessionImportError
from harness.workload.importers.mooncake import BLOCK_TOKENS, import_mooncake_files
from harness.workload.importers.otel import import_otel_files
from harness.workload.trace import TRACE_VERSION, TraceHeader, TraceRollout, dump_trace


@dataclass(frozen=True, slots=True)
class Importer:
    """One source format: what it is, which files a folder holds, and how to read them."""

    description: str
    patterns: tuple[str, ...]  # files searched for in a folder
    read: Callable[[Sequence[str]], list[TraceRollout]]


IMPORTERS: dict[str, Importer] = {
    "codex": Importer("Codex CLI session rollouts", ("*.jsonl",), import_codex_files),
    "mooncake": Importer(
        "Mooncake request traces (JSONL: timestamp, input_length, output_length, hash_ids)",
        ("*.jsonl",),
        import_mooncake_files,
    ),
    "azure": Importer(
        "Azure LLM inference traces (CSV: TIMESTAMP, ContextTokens, GeneratedTokens)",
        ("*.csv",),
        import_azure_files,
    ),
    "otel": Importer(
        "OpenTelemetry GenAI spans (OTLP JSON: chat, execute_tool and invoke_agent spans)",
        ("*.json", "*.jsonl"),
        import_otel_files,
    ),
}
FORMATS = tuple(IMPORTERS)


def find_session_files(paths: Sequence[str], patterns: Sequence[str] = ("*.jsonl",)) -> list[str]:
    """Files as given, and every file matching ``patterns`` under each folder (sorted)."""
    out: list[str] = []
    for raw in paths:
        path = Path(os.path.expanduser(raw))
        if path.is_dir():
            found = sorted(
                {str(p) for pattern in patterns for p in path.rglob(pattern) if p.is_file()}
            )
            if not found:
                shown = ", ".join(patterns)
                raise UsageError(f"{raw}: expected files ({shown}) in this folder, got none")
            out += found
        elif path.is_file():
            out.append(str(path))
        else:
            raise UsageError(f"{raw}: expected a session file or folder, got nothing at that path")
    return out


def _describe(rollouts: Sequence[TraceRollout], files: int, output: str) -> str:
    calls = sum(r.tool_call_count for r in rollouts)
    turns = sum(len(r.turns) for r in rollouts)
    history = max(r.final_history_tokens for r in rollouts)
    return (
        f"wrote {counted(len(rollouts), 'rollout')} ({counted(turns, 'turn')}, "
        f"{counted(calls, 'tool call')}, history up to {history:,} tokens) from "
        f"{counted(files, 'file')} to {output}"
    )


def import_sessions(
    fmt: str, paths: Sequence[str], output: str, block_tokens: int | None = None
) -> str:
    """Import sessions of format ``fmt`` into the trace file ``output``; returns a one-line report.

    ``block_tokens``: tokens per Mooncake hash id (default :data:`BLOCK_TOKENS`).
    """
    if fmt not in FORMATS:
        raise UsageError(f"import: unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if block_tokens is not None and fmt != "mooncake":
        raise UsageError(f"import: --block-size applies to mooncake traces only, not {fmt}")
    if block_tokens is not None and block_tokens < 1:
        raise UsageError(
            f"import: --block-size: expected tokens per hash id ≥ 1, got {block_tokens}"
        )
    importer = IMPORTERS[fmt]
    files = find_session_files(paths, importer.patterns)
    meta: dict[str, object] = {"files": [os.path.basename(f) for f in files]}
    if fmt == "mooncake":
        blocks = block_tokens or BLOCK_TOKENS
        meta["block_tokens"] = blocks
        rollouts = import_mooncake_files(files, blocks)
    else:
        rollouts = importer.read(files)
    if not rollouts:
        what = "task (a user prompt the model answered)" if fmt == "codex" else "request"
        raise SessionImportError(f"{', '.join(paths)}: expected at least one {what}, got none")
    header = TraceHeader(
        type="trace",
        version=TRACE_VERSION,
        source=fmt,
        meta=meta,
    )
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(dump_trace(rollouts, header), encoding="utf-8")
    os.replace(tmp, out)
    return _describe(rollouts, len(files), output)
