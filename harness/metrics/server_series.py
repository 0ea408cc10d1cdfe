"""Server-side metrics scraped during a run: the Prometheus text parsed, and which series matter.

Pure: text in, rows out (``harness/run/server_scrape.py`` does the polling,
``harness/report/server_metrics.py`` the file). A row is ``(name, labels, value)``
with ``labels`` in the exposition's own form, sorted by key (``model="m",route="/x"``),
so one series is one ``(name, labels)`` pair whatever order the server printed them in.

Histogram buckets and ``_created`` stamps are dropped: a vLLM scrape is mostly buckets
(tens per histogram and label set), which would multiply the file for no plot; a
histogram's ``_sum`` and ``_count`` stay, and their rates give its mean. docs/server-metrics.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Row = tuple[str, str, float]

#: sample name suffixes of monotonic counters (plotted as per-second rates)
COUNTER_SUFFIXES = ("_total", "_count", "_sum")
_DROPPED_SUFFIXES = ("_bucket", "_created")


class NotPrometheusText(ValueError):
    """The answer was not in the Prometheus text format."""


def format_labels(labels: dict[str, str]) -> str:
    """``k="v",...`` sorted by key, escaped as the exposition format escapes values."""
    return ",".join(f'{k}="{_escape(labels[k])}"' for k in sorted(labels))


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def parse_exposition(text: str) -> list[Row]:
    """Every sample of a Prometheus text exposition but buckets and ``_created`` stamps.

    Raises :class:`NotPrometheusText` with the parser's complaint for anything else
    (an HTML page, JSON), and for an answer with no sample at all.
    """
    rows: list[Row] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith(_DROPPED_SUFFIXES):
                    continue
                rows.append((s.name, format_labels(s.labels), float(s.value)))
    except ValueError as exc:
        raise NotPrometheusText(f"not the Prometheus text format ({exc})") from None
    if not rows:
        raise NotPrometheusText("no metric samples in the answer")
    return rows


def is_counter(name: str) -> bool:
    """A sample that only grows (``*_total``, a histogram's ``_sum``/``_count``): plot its rate."""
    return name.endswith(COUNTER_SUFFIXES)


@dataclass(frozen=True, slots=True)
class KnownSeries:
    """A series that explains latency, under the name its server exposes it."""

    names: tuple[str, ...]  # alternatives: the first one the run has is plotted
    title: str


#: plotted by default when the run scraped them (vLLM, SGLang, the reference server)
KNOWN_SERIES: tuple[KnownSeries, ...] = (
    KnownSeries(
        (
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "loopbench_server_engine_running_streams",
        ),
        "running requests",
    ),
    KnownSeries(
        (
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
            "loopbench_server_engine_queue_depth",
        ),
        "waiting requests (engine queue)",
    ),
    KnownSeries(("loopbench_server_api_queue_depth",), "API-tier queue depth"),
    KnownSeries(
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
        "KV-cache usage (fraction)",
    ),
    KnownSeries(
        (
            "vllm:prefix_cache_hits_total",
            "vllm:prefix_cache_hits",
            "loopbench_server_prefix_cache_hits_total",
        ),
        "prefix-cache hits",
    ),
    KnownSeries(
        ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"),
        "prefix-cache queries (tokens)",
    ),
    KnownSeries(("sglang:cache_hit_rate",), "prefix-cache hit rate"),
    KnownSeries(("loopbench_server_prefix_cache_misses_total",), "prefix-cache misses"),
    KnownSeries(("loopbench_server_websocket_connections",), "open WebSocket connections"),
    KnownSeries(("loopbench_server_modelled_seconds_total",), "modelled time by component"),
)


def default_series(available: Iterable[str]) -> list[tuple[str, str]]:
    """``(name, title)`` of the known series the run has, the first alternative of each."""
    have = set(available)
    found = ((next((n for n in k.names if n in have), None), k.title) for k in KNOWN_SERIES)
    return [(name, title) for name, title in found if name is not None]


def pick_series(available: Iterable[str], wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(found, missing)`` of the names asked for (``--server-series``), in the order asked.

    A name may be given without its ``_total`` suffix, as Prometheus' own ``TYPE`` lines
    (and vLLM's documentation) name counters.
    """
    have = set(available)
    found, missing = [], []
    for name in wanted:
        for candidate in (name, f"{name}_total"):
            if candidate in have:
                found.append(candidate)
                break
        else:
            missing.append(name)
    return found, missing


def rates(
    t_s: Sequence[float], values: Sequence[float], min_dt: float = 0.0
) -> tuple[list[float], list[float]]:
    """Per-second rates of a counter between samples, at each interval's end.

    An interval shorter than ``min_dt`` is joined to the next (the last scrape of a run
    comes moments after the previous one, and a rate over a sliver is mostly noise).
    A drop (the server restarted, or another ``--workers`` process answered) is a reset:
    the interval's rate is the new value over the interval, as Prometheus' ``rate()`` takes it.
    """
    xs, ys = [], []
    k = 0  # the sample the interval starts at
    for i in range(1, len(t_s)):
        dt = t_s[i] - t_s[k]
        if dt <= 0 or dt < min_dt:
            continue
        dv = values[i] - values[k]
        xs.append(t_s[i])
        ys.append((dv if dv >= 0 else values[i]) / dt)
        k = i
    return xs, ys
