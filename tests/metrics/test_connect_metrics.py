"""``connect_ms`` and ``tls_ms``: a new connection's TCP connect and TLS handshake, timed apart."""

from __future__ import annotations

from harness.metrics import definitions as D
from harness.workload.records import TurnRecord

MS = 1_000_000


def _metric(name: str) -> D.Metric:
    (found,) = [m for m in D.METRICS if m.name == name]
    return found


def test_a_new_tls_connection_gives_both_samples() -> None:
    rec = TurnRecord(
        "http", 0, 0, status="completed", connect_start_ns=10 * MS,
        tcp_connected_ns=11 * MS, tls_done_ns=14 * MS,
    )  # fmt: skip
    assert D.sample(_metric("connect_ms"), rec) == 1.0
    assert D.sample(_metric("tls_ms"), rec) == 3.0


def test_plain_and_reused_connections_give_no_tls_sample() -> None:
    plain = TurnRecord(
        "ws", 0, 0, status="completed", connect_start_ns=10 * MS, tcp_connected_ns=12 * MS
    )
    assert D.sample(_metric("connect_ms"), plain) == 2.0
    assert D.sample(_metric("tls_ms"), plain) is None
    reused = TurnRecord("http", 0, 1, status="completed")
    assert D.sample(_metric("connect_ms"), reused) is None
    assert D.sample(_metric("tls_ms"), reused) is None


def test_a_failed_turn_still_gives_its_connection_s_samples() -> None:
    failed = TurnRecord(
        "http", 0, 0, status="error", connect_start_ns=MS, tcp_connected_ns=2 * MS,
        tls_done_ns=5 * MS,
    )  # fmt: skip
    assert D.sample(_metric("tls_ms"), failed) == 3.0
