"""Metrics: HDR histograms (µs / tokens/s), run summaries and speedup statistics."""
