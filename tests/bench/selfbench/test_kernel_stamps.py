"""What the kernel-stamp figures read from a run's summary (bench/selfbench/kernel_stamps.py)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.selfbench import timing
from bench.selfbench.kernel_stamps import client_error, decode_error_pct, single_turn_run


def test_the_client_error_is_preferred_and_the_total_error_is_the_fallback() -> None:
    total = {"p50": 2.0, "p99": 9.0}
    client = {"p50": 0.2, "p99": 0.8}
    assert client_error({"measurement_error_ms": total, "client_error_ms": client}) == (
        client,
        "client_error_ms",
    )
    assert client_error({"measurement_error_ms": total}) == (total, "measurement_error_ms")
    # a server that reports no lateness leaves the client error without samples
    empty = {"p50": None, "p99": None}
    assert client_error({"measurement_error_ms": total, "client_error_ms": empty})[1] == (
        "measurement_error_ms"
    )


def test_the_decode_error_is_the_larger_of_the_median_and_mean_deviation() -> None:
    assert decode_error_pct({"decode_p50": 995.0, "decode_mean": 1020.0}) == pytest.approx(2.0)
    assert decode_error_pct({"decode_p50": 1000.0}) == 0.0
    assert decode_error_pct({}) is None


def test_the_kstamp_and_overhead_runs_measure_after_one_unmeasured_wave_per_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, dict[str, Any], dict[str, Any], str]] = []

    def fake(
        base_url: str, name: str, transports: Any, rollout: Any, load: Any, *, rx_stamp: str
    ) -> Any:
        calls.append((name, rollout, load, rx_stamp))

    monkeypatch.setattr(timing, "run_once", fake)
    single_turn_run("http://x", ["ws"], 4, 10, "kernel")
    timing.overhead_run("http://x", ["ws"], 4, 10)
    for _name, rollout, load, _stamp in calls:
        assert rollout["count"] == 4 * 11
        assert load == {"mode": "closed", "concurrency": 4, "warmup_rollouts": 4}
    assert [(c[0], c[3]) for c in calls] == [
        ("selfbench-kstamp-kernel-4", "kernel"),
        ("selfbench-overhead-4", "auto"),
    ]
    assert calls[0][1]["tool_calls"] == 0 and calls[1][1]["tool_calls"] == 3
