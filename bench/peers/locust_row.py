"""The Locust row of the peer bench: the same Chat Completions workload through ``loopbench
locust`` with one local worker (its rollouts run in the worker's edge host, the asyncio edge of
``loopbench run``), read and matched like loopbench's own row."""

from __future__ import annotations

from pathlib import Path

from bench.peers.commands import loopbench_argv
from bench.peers.figures import LOCUST_ROW

#: the row's tool name in peers.json and the table (the precision target reads it too)
TOOL = LOCUST_ROW


def locust_argv(
    python: str, scenario: Path, base_url: str, transport: str, out_dir: Path, run_id: str
) -> list[str]:
    """``loopbench_argv`` with ``locust`` for ``run``, one local worker (and no probe flag:
    ``locust`` has no probe to skip)."""
    argv = loopbench_argv(python, scenario, base_url, transport, out_dir, run_id)
    assert argv[3] == "run", argv
    argv[3] = "locust"
    argv.remove("--no-probe")
    return [*argv, "--workers", "1"]
