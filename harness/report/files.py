"""What every report writes: file names, the number format of a table cell, atomic writes.

Shared by the run report (:mod:`.render`) and the sweep report (:mod:`.sweep`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


@dataclass(frozen=True, slots=True)
class Rendered:
    report_md: Path
    report_html: Path
    plots: list[Path]


def fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    """A number for a table cell: thousands separators, ``-`` for missing/NaN."""
    if value is None:
        return "-"
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if f != f:
        return "-"
    return f"{f:,.{digits}f}{suffix}"


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
