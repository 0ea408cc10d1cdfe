"""Reading the ``.hlog`` interval logs loopbench writes: the tests' oracle for
:func:`harness.metrics.hdr.write_hlog` (the product only writes them; HdrHistogram's log tools
read them)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.metrics.hdr import _SUFFIX_SEP, Histogram

_COUNTERS_RE = re.compile(
    r"#\[loopbench-counters: Tag=(?P<tag>[^,\]]*), unit=(?P<unit>\w+), below=(?P<below>\d+), "
    r"above=(?P<above>\d+), sum=(?P<sum>\d+)\]"
)
_START_RE = re.compile(r"#\[StartTime: *([\d.]+)")


def read_hlog(path: str | Path) -> tuple[float, dict[str, list[tuple[float, float, Histogram]]]]:
    """Read a log written by :func:`write_hlog` (or any tagged HdrHistogram log).

    Returns ``(start_time_s, {tag: [(start_s, end_s, histogram), ...]})``; the
    loopbench counter comments, when present, restore below/above/sum.  Untagged
    lines get the tag ``""``.
    """
    start_time_s = 0.0
    out: dict[str, list[tuple[float, float, Histogram]]] = {}
    pending: dict[str, str] | None = None
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line or line.startswith('"'):
            continue
        if line.startswith("#"):
            if m := _START_RE.match(line):
                start_time_s = float(m.group(1))
            elif m := _COUNTERS_RE.match(line):
                pending = m.groupdict()
            continue
        tag = ""
        body = line
        if line.startswith("Tag="):
            tag, _, body = line[4:].partition(",")
        parts = body.split(",", 3)
        if len(parts) != 4:
            raise ValueError(f"{path}:{lineno}: expected start,length,max,payload, got {line!r}")
        start_s, length_s = float(parts[0]), float(parts[1])
        encoded = parts[3]
        if pending is not None and pending["tag"] == tag:
            encoded += (
                f"{_SUFFIX_SEP}unit={pending['unit']};below={pending['below']};"
                f"above={pending['above']};sum={pending['sum']}"
            )
        pending = None
        out.setdefault(tag, []).append((start_s, start_s + length_s, Histogram.decode(encoded)))
    return start_time_s, out
