"""Self-benchmark: how fast the harness is, measured against this machine (issue #10).

``loopbench selfbench`` runs :func:`~harness.tools.selfbench.bench.run_selfbench`;
BENCHMARKS.md explains every figure.
"""
