"""Metrics: HDR histograms (µs / tokens/s), run summaries and speedup statistics."""

from harness.metrics.hdr import Histogram, SignedHistogram, read_hlog, write_hlog
from harness.metrics.stats import (
    PairedResult,
    bootstrap_ratio_of_medians,
    mann_whitney_u,
    paired_speedup,
    unpaired_speedup,
)
from harness.metrics.summary import Accumulator
from harness.metrics.timeseries import token_rate_series

__all__ = [
    "Accumulator",
    "Histogram",
    "PairedResult",
    "SignedHistogram",
    "bootstrap_ratio_of_medians",
    "mann_whitney_u",
    "paired_speedup",
    "read_hlog",
    "token_rate_series",
    "unpaired_speedup",
    "write_hlog",
]
