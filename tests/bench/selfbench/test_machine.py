"""bench/selfbench/machine.py: the head the peer bench's (and selfbench's) JSON starts with."""

from __future__ import annotations

import time

from bench.selfbench.machine import run_header


def test_the_header_names_the_command_its_time_and_the_machine_in_a_fixed_order() -> None:
    head = run_header("python -m bench.x", 0.0, time.perf_counter() - 2.0, None, [1.5, 1.0, 0.5])
    assert list(head) == ["command", "started_at", "seconds", "machine"]
    assert head["command"].startswith("python -m bench.x")
    assert head["started_at"] == "1970-01-01T00:00:00Z" and head["seconds"] >= 2.0
    assert list(head["machine"]) == [
        "hostname",
        "cpu_count",
        "load_average_at_start",
        "load_average",
        "cpu_steal_pct",
        "platform",
        "python",
    ]
    assert head["machine"]["load_average_at_start"] == [1.5, 1.0, 0.5]
    assert head["machine"]["cpu_steal_pct"] is None  # nothing to compare with
    assert "load_average_at_start" not in run_header("c", 0.0, 0.0, None)["machine"]
