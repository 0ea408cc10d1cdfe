"""bench/peers/ws_upgrade.py: the server CPU it reads per upgrade, and its busy verdict."""

from __future__ import annotations

import os
import time

import pytest

from bench.peers import ws_upgrade
from bench.selfbench.busy import Busy


def test_process_cpu_is_read_in_nanoseconds_across_threads() -> None:
    before = ws_upgrade.process_cpu_ns(os.getpid())
    end = time.process_time() + 0.02
    while time.process_time() < end:  # 20 ms on the CPU: 2 clock ticks, 20,000,000 ns
        pass
    used = ws_upgrade.process_cpu_ns(os.getpid()) - before
    assert 15_000_000 <= used < 2_000_000_000


def test_a_round_that_stays_busy_leaves_the_figure_not_judged(monkeypatch: object) -> None:
    """The figures are kept, and the verdict is "not judged", never a number alone."""
    calls: list[str] = []

    def fake_measure(kind: str, baseline: object, connections: int) -> float:
        calls.append(kind)
        return {"reference": 0.2, "baseline": 0.25, "bare": 0.05}[kind]

    def busy_always(step, say, attempts):  # type: ignore[no-untyped-def]
        return step(), Busy(0.9, 0.0, 1.0)

    monkeypatch.setattr(ws_upgrade, "measure", fake_measure)  # type: ignore[attr-defined]
    monkeypatch.setattr(ws_upgrade, "until_quiet", busy_always)  # type: ignore[attr-defined]
    doc = ws_upgrade.run(["reference", "baseline", "bare"], None, 10, 2, lambda _: None)
    assert calls == ["reference", "baseline", "bare"] * 2
    assert doc["median_ms"] == {"reference": 0.2, "baseline": 0.25, "bare": 0.05}
    assert doc["reference_over_baseline"] == 0.8
    assert doc["not_judged"] == "not judged: the machine was busy (others used 90 % of a core)"


def test_the_bare_floor_is_measured_against_a_real_server() -> None:
    """End to end (only a real server and sockets show the CPU is read from the server's
    process, not this one): the bare server's handshakes cost it some CPU, well under 5 ms each."""
    ms = ws_upgrade.measure("bare", None, 20)
    assert 0 < ms < 5


def test_a_stall_of_no_upgrades_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_:
        ws_upgrade.main(["--stall", "0"])
    assert exit_.value.code == 4
