"""``server_metrics.csv.gz``: the server's Prometheus series scraped during a run, and its reader.

Long format, one row per sample per scrape; the columns are docs/server-metrics.md's. Written
once, when the run ends (so that nothing is parsed during the measurement).
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.wire.errors import ResultsError

if TYPE_CHECKING:
    import pandas as pd

SERVER_METRICS = "server_metrics.csv.gz"
COLUMNS = ("t_s", "name", "labels", "value")

#: one scraped sample: (t_s, name, labels, value)
Sample = tuple[float, str, str, float]


def write_server_metrics(run_dir: Path, samples: Iterable[Sample]) -> Path:
    """Write ``server_metrics.csv.gz`` into ``run_dir``; returns its path."""
    path = Path(run_dir) / SERVER_METRICS
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(COLUMNS)
    for t_s, name, labels, value in samples:
        out.writerow((f"{t_s:.6f}", name, labels, repr(value)))
    try:
        path.write_bytes(gzip.compress(buf.getvalue().encode("utf-8"), compresslevel=6, mtime=0))
    except OSError as exc:
        raise ResultsError(f"{path}: cannot write the scraped server metrics: {exc}") from exc
    return path


def load_server_metrics(run_dir: str | Path) -> pd.DataFrame | None:
    """The scraped samples of a run (columns as :data:`COLUMNS`), or None if it scraped none."""
    import pandas as pd  # pandas: only where results are analysed

    path = Path(run_dir) / SERVER_METRICS
    if not path.exists():
        return None
    try:
        df = pd.read_csv(
            path,
            dtype={"t_s": float, "name": str, "labels": str, "value": float},
            keep_default_na=False,
            na_values={"t_s": [""], "value": [""]},
        )
    except (OSError, ValueError, EOFError) as exc:
        raise ResultsError(f"{path}: unreadable: {exc}") from exc
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ResultsError(f"{path}: expected the columns {', '.join(COLUMNS)}, missing {missing}")
    return df
