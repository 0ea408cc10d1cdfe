"""Self-benchmark: how fast the harness is, measured against this machine (issue #10).

``python -m bench.selfbench`` (``make bench``) runs :func:`~bench.selfbench.bench.run_selfbench`;
BENCHMARKS.md explains every figure.
"""
