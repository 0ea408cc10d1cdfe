"""Results folders: the only code that writes ``results/<run-id>/`` (docs/metrics.md §3), and its reader.

Crash safety: rows are buffered and written as **one complete gzip member per
block** (every ``flush_rows`` rows or ``flush_interval_s`` seconds, and on
:meth:`ResultsWriter.flush`).  A multi-member gzip file is a valid gzip file,
so after a SIGINT or SIGKILL between blocks every flushed row is readable by
``gzip.open`` and ``pandas.read_csv``.  A kill *during* a block write leaves a
truncated last member, which those readers reject; :func:`read_csv_gz` keeps
every complete member and drops only that tail, i.e. exactly the rows that
were never flushed.  Blocks go to the kernel with ``flush()`` (SIGKILL of the
process does not lose them); ``fsync`` happens only on close, since durability
against power loss is not worth a disk sync per block on the measurement path.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import os
import re
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import orjson

from harness.metrics.hdr import Histogram, write_hlog
from harness.metrics.results_model import (
    FORMAT_VERSION,
    Manifest,
    ResultsFormatError,
    Summary,
    TransportSummary,
)
from harness.report.files import write_text_atomic
from harness.wire.errors import NotAResultsFolder, ResultsError, ResultsWriteError
from harness.workload.records import RolloutRecord, TurnRecord, csv_fields

if TYPE_CHECKING:
    import pandas as pd


MANIFEST = "manifest.json"
SUMMARY = "summary.json"
TURNS = "turns.csv.gz"
ROLLOUTS = "rollouts.csv.gz"
#: per transport and time slice (docs/metrics.md, "Time slices"): derived from TURNS by the report
SLICES = "slices.csv.gz"
HISTOGRAMS = "histograms"

#: text columns of the record CSVs (read as strings, empty stays "")
_TEXT_COLUMNS = frozenset(
    ("transport", "status", "error_kind", "error_message", "response_id", "sim_cache", "rx_stamp")
)
#: optional numbers of the record CSVs (a record field that may be None, written as an empty
#: cell): read as floats, NaN where empty (keep_default_na=False would otherwise leave strings)
_NULLABLE_COLUMNS = ("rx_user_minus_kernel_us", "server_late_ms", "server_read_ms")

#: a histogram for the whole run, or its ``(start_s, end_s, histogram)`` intervals
HistogramSeries = Histogram | Sequence[tuple[float, float, Histogram]]


class _CsvGzAppender:
    """Appends CSV rows to a gzip file, one complete gzip member per flushed block."""

    def __init__(
        self,
        path: Path,
        columns: Sequence[str],
        *,
        flush_rows: int,
        flush_interval_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.path = path
        try:
            self._file: BinaryIO = open(path, "xb")  # noqa: SIM115 - closed in close()
        except FileExistsError:
            raise ResultsError(
                f"{path}: already exists; a results folder is written once"
            ) from None
        self._row = attrgetter(*columns)
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf, lineterminator="\n")
        self._flush_rows = flush_rows
        self._flush_interval_s = flush_interval_s
        self._clock = clock
        self._pending = 0
        self.rows = 0
        self.broken = False
        # The header is a member of its own, so even a file killed before the
        # first block reads as an empty table with the right columns.
        self._csv.writerow(columns)
        self.flush()

    def add(self, rec: object) -> None:
        if self.broken:
            return  # said once already; nothing more reaches the file
        self._csv.writerow(self._row(rec))
        self._pending += 1
        if self._pending >= self._flush_rows or (
            self._clock() - self._last_flush >= self._flush_interval_s
        ):
            self.flush()

    def flush(self) -> None:
        self._last_flush = self._clock()
        data = self._buf.getvalue()
        if not data or self.broken:
            return
        try:
            self._file.write(gzip.compress(data.encode("utf-8"), compresslevel=6, mtime=0))
            self._file.flush()
        except OSError as exc:
            # A block cut short is skipped by the reader (complete gzip members only).
            self.broken = True
            raise write_error(self.path, exc, self.path.parent) from None
        self.rows += self._pending
        self._pending = 0
        self._buf.seek(0)
        self._buf.truncate()

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self.flush()
            if not self.broken:
                os.fsync(self._file.fileno())
        finally:
            with contextlib.suppress(OSError):  # the buffered bytes of a full disk: lost
                self._file.close()


def write_error(path: Path, exc: OSError, run_dir: Path) -> ResultsWriteError:
    """The one line a failed write of a results file ends the run with."""
    return ResultsWriteError(
        f"{path}: cannot write: {exc.strerror or exc}; the rows written before are kept "
        f"(`loopbench report {run_dir}` rebuilds the summary once there is room)"
    )


def _write_json_atomic(path: Path, doc: Any) -> None:
    options = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    write_text_atomic(path, orjson.dumps(doc, option=options) + b"\n")


def write_index(root: str | Path, name: str, doc: Any, text: str | None = None) -> Path:
    """Write ``<root>/<name>.json`` (and ``<name>.md`` from ``text``), a document that spans
    several runs; returns the JSON path."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.json"
    _write_json_atomic(path, doc)
    if text is not None:
        write_text_atomic(root / f"{name}.md", text)
    return path


def check_writable(folder: Path) -> None:
    """Create ``folder`` and write a file in it, or say why not (before any load is applied)."""
    probe = folder / ".loopbench-write-check"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise ResultsError(
            f"{folder}: cannot write the results folder: {exc.strerror or exc}"
        ) from None


class ResultsWriter:
    """Writes one results folder: manifest first, rows as they come, summary at the end.

    Use as a context manager (or call :meth:`close`) so buffered rows are written
    on every exit path; :meth:`finish` closes too.
    """

    def __init__(
        self,
        out_dir: str | Path,
        manifest: Mapping[str, Any],
        *,
        flush_rows: int = 256,
        flush_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(out_dir)
        if (self.path / MANIFEST).exists():
            raise ResultsError(f"{self.path}: already holds a run ({MANIFEST} exists)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ResultsError(f"{self.path}: cannot create results folder: {exc}") from exc
        self._created_wall_s = time.time()
        self.manifest = {**manifest, "format_version": FORMAT_VERSION}
        _write_json_atomic(self.path / MANIFEST, self.manifest)
        self._turns, self._rollouts = (
            _CsvGzAppender(
                self.path / name,
                csv_fields(cls),
                flush_rows=flush_rows,
                flush_interval_s=flush_interval_s,
                clock=clock,
            )
            for name, cls in ((TURNS, TurnRecord), (ROLLOUTS, RolloutRecord))
        )

    @property
    def turns_written(self) -> int:
        """Turn rows already flushed to the file."""
        return self._turns.rows

    def add_turn(self, rec: TurnRecord) -> None:
        self._turns.add(rec)

    def add_rollout(self, rec: RolloutRecord) -> None:
        self._rollouts.add(rec)

    def flush(self) -> None:
        """Write every buffered row now (one gzip member per file)."""
        self._turns.flush()
        self._rollouts.flush()

    def close(self) -> None:
        self._turns.close()
        self._rollouts.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def finish(
        self,
        summary: Mapping[str, Any],
        histograms: Mapping[tuple[str, str], HistogramSeries],
        *,
        start_time_s: float | None = None,
        end_time_s: float | None = None,
    ) -> None:
        """Close the row files and :func:`write_summary`; ``start_time_s`` (wall clock) defaults
        to when the writer was created."""
        self.close()
        start = self._created_wall_s if start_time_s is None else start_time_s
        write_summary(self.path, summary, histograms, start_time_s=start, end_time_s=end_time_s)


def write_summary(
    path: Path,
    summary: Mapping[str, Any],
    histograms: Mapping[tuple[str, str], HistogramSeries],
    *,
    start_time_s: float | None = None,
    end_time_s: float | None = None,
) -> None:
    """Write ``histograms/<transport>.<metric>.hlog`` and, last and atomically, ``summary.json``
    (its presence marks a finished run) into ``path``. A whole-run :class:`Histogram` is one
    interval from ``start_time_s`` to ``end_time_s`` (wall clock; default: now); an empty one
    writes no file."""
    end = time.time() if end_time_s is None else end_time_s
    start = end if start_time_s is None else start_time_s
    hist_dir = path / HISTOGRAMS
    hist_dir.mkdir(exist_ok=True)
    for (transport, metric), series in histograms.items():
        if isinstance(series, Histogram) and not (series.count or series.below or series.above):
            continue  # a metric that never occurred (e.g. no sim_timing): no file
        tag = f"{transport}.{metric}"
        if "/" in tag or "\\" in tag:
            raise ResultsError(
                f"{hist_dir}: histogram name: expected no path separator, got {tag!r}"
            )
        intervals = (
            [(0.0, max(0.0, end - start), series)]
            if isinstance(series, Histogram)
            else list(series)
        )
        target = hist_dir / f"{tag}.hlog"
        try:
            write_hlog(target, {tag: intervals}, start)
        except OSError as exc:
            raise write_error(target, exc, path) from None
    try:
        _write_json_atomic(path / SUMMARY, dict(summary))
    except OSError as exc:
        raise write_error(path / SUMMARY, exc, path) from None


def write_table_gz(path: Path, table: pd.DataFrame) -> Path:
    """Write a derived table (``slices.csv.gz``) atomically: a reader never sees half of it."""
    text = table.to_csv(index=False, float_format="%.10g", lineterminator="\n")
    write_text_atomic(path, gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0))
    return path


# -- reading -------------------------------------------------------------------------------------


def _complete_gzip_members(path: Path) -> bytes:
    """Decompressed content of every complete gzip member; a truncated tail is dropped."""
    done: list[bytes] = []
    member: list[bytes] = []
    d = zlib.decompressobj(wbits=31)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            data = chunk
            while data:
                try:
                    member.append(d.decompress(data))
                except zlib.error:
                    return b"".join(done)
                if not d.eof:
                    break
                done.extend(member)
                member = []
                data = d.unused_data
                d = zlib.decompressobj(wbits=31)
    return b"".join(done)


def read_csv_gz(path: str | Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Read a row file written by :class:`ResultsWriter`, tolerating a truncated last block.

    ``columns`` names the table's columns when the file holds no header at all.
    """
    import pandas as pd  # pandas: only when a results folder is read back

    path = Path(path)
    try:
        raw = _complete_gzip_members(path)
    except OSError as exc:
        raise ResultsError(f"{path}: unreadable: {exc}") from exc
    if not raw.strip():
        return pd.DataFrame({c: pd.Series(dtype="object") for c in (columns or ())})
    header = raw.split(b"\n", 1)[0].decode("utf-8").split(",")
    try:
        table = pd.read_csv(
            io.BytesIO(raw),
            dtype={c: str for c in header if c in _TEXT_COLUMNS},
            keep_default_na=False,
            na_values={c: [""] for c in _NULLABLE_COLUMNS if c in header},
        )
    except (ValueError, pd.errors.ParserError) as exc:
        raise ResultsError(f"{path}: not a loopbench CSV: {exc}") from exc
    return table


@dataclass
class Run:
    """A results folder loaded for analysis; ``summary`` is None if the run did not finish.

    ``summary`` and ``manifest`` are the JSON objects; ``*_model`` the same documents typed.
    """

    path: Path
    manifest: dict[str, Any]
    summary: dict[str, Any] | None
    turns: pd.DataFrame
    rollouts: pd.DataFrame

    @cached_property
    def summary_model(self) -> Summary | None:
        return None if self.summary is None else typed(Summary, self.summary, self.path / SUMMARY)

    @cached_property
    def manifest_model(self) -> Manifest:
        return typed(Manifest, self.manifest, self.path / MANIFEST)

    def figures(self, transport: str) -> TransportSummary:
        """A transport's figures in ``summary.json`` (an empty block: unfinished, or not run)."""
        found = self.summary_model.transport(transport) if self.summary_model else None
        return found if found is not None else TransportSummary()

    @property
    def run_id(self) -> str:
        rid = (self.summary or {}).get("run_id") or self.manifest.get("run_id")
        return str(rid) if rid else self.path.name

    @property
    def finished(self) -> bool:
        return self.summary is not None


def read_versioned_json(path: Path) -> dict[str, Any]:
    """A JSON object written by this version of loopbench (it carries ``format_version``)."""
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: unreadable: {exc}") from exc
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    if "format_version" not in doc:
        raise ResultsError(f"{path}: format_version: missing (expected {FORMAT_VERSION})")
    if doc["format_version"] != FORMAT_VERSION:
        raise ResultsError(
            f"{path}: format_version: expected {FORMAT_VERSION}, got {doc['format_version']!r}"
        )
    return doc


_Doc = TypeVar("_Doc", Summary, Manifest)


def typed(model: type[_Doc], doc: Mapping[str, Any], where: Path) -> _Doc:
    """``doc`` read into its model; a document this version cannot read is a ResultsError."""
    try:
        return model.from_json({"format_version": FORMAT_VERSION, **doc}, str(where))
    except ResultsFormatError as exc:
        raise ResultsError(str(exc)) from None


def load_run(path: str | Path) -> Run:
    """Load ``manifest.json``, ``summary.json`` (if present) and the row files of a run."""
    path = Path(path)
    if not path.is_dir():
        raise NotAResultsFolder(
            f"{path}: expected a results folder, got {'a file' if path.exists() else 'nothing'}"
        )
    if not (path / MANIFEST).exists():
        # A run writes its manifest before anything else, so this folder never held one.
        raise NotAResultsFolder(f"{path / MANIFEST}: missing (not a results folder)")
    manifest = read_versioned_json(path / MANIFEST)
    summary = read_versioned_json(path / SUMMARY) if (path / SUMMARY).exists() else None
    tables = []
    for name, cls in ((TURNS, TurnRecord), (ROLLOUTS, RolloutRecord)):
        if not (path / name).exists():
            raise ResultsError(f"{path / name}: missing")
        table = read_csv_gz(path / name, csv_fields(cls))
        # A column added to the records since the run was written reads as its default.
        for f in fields(cls):
            if f.name != "itl_ns" and f.name not in table.columns and len(table.columns):
                table[f.name] = float("nan") if f.default is None else f.default
        tables.append(table)
    run = Run(path=path, manifest=manifest, summary=summary, turns=tables[0], rollouts=tables[1])
    # read into the models now: a document this version cannot read fails here, named
    _ = run.manifest_model, run.summary_model
    return run


_SLUG_RE = re.compile(r"[^A-Za-z0-9._-]+")


def new_run_id(scenario_name: str, wall_time_s: float) -> str:
    """``YYYYmmdd-HHMMSS-<scenario>`` in UTC, e.g. ``20261202-110203-quickstart``.

    UTC so the id of a run does not depend on the machine's time zone; the
    scenario name is reduced to a file-name-safe slug.
    """
    name = Path(scenario_name).name.removesuffix(".yaml").removesuffix(".yml")
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(wall_time_s))}-{slug(name, 'run')}"


def slug(text: str, empty: str) -> str:
    """``text`` as a file-name-safe part of a folder name (``empty`` when nothing is left)."""
    return _SLUG_RE.sub("-", text).strip("-.") or empty
