"""The Locust row of the peer bench: the same Chat Completions workload through ``loopbench
locust`` with one local worker (its rollouts run in the worker's edge host, the asyncio edge of
``loopbench run``), read and matched like loopbench's own row."""

from __future__ import annotations

from pathlib import Path

#: the row's tool name in peers.json and the table
TOOL = "loopbench-locust"


def locust_argv(
    python: str, scenario: Path, base_url: str, transport: str, out_dir: Path, run_id: str
) -> list[str]:
    return [
        python,
        "-m",
        "harness",
        "locust",
        str(scenario),
        "--target",
        base_url + "/v1",
        "--transports",
        transport,
        "--workers",
        "1",
        "--out",
        str(out_dir),
        "--run-id",
        run_id,
        "--quiet",
    ]
