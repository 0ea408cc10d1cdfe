"""The https/wss paths time a new connection's TCP connect and TLS handshake apart.

A real reference server speaking TLS (``--tls-self-signed``); ``loopbench run --target
https://… --insecure`` over ``http`` (keep-alive pool) and ``ws`` (one connection per
rollout). Each new connection's record holds the three stamps in order, a reused one none,
and the summary's ``tls_ms`` (and ``connect_ms``) come from exactly those connections.
Over plain http the handshake is absent and only ``connect_ms`` is measured.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from harness.metrics import definitions as D
from harness.report.results import load_run
from tests.runs import TINY, loopbench, run_cli, run_tiny
from tests.server.conftest import configured_server

TRANSPORTS = ("http", "ws")


@pytest.fixture(scope="module")
def https_url() -> Iterator[str]:
    with configured_server("--tls-self-signed") as url:
        yield url


def _check_stamps(turns: pd.DataFrame, *, tls: bool) -> None:
    for name in TRANSPORTS:
        t = turns[turns["transport"] == name]
        new, reused = t[t["new_connection"]], t[~t["new_connection"]]
        assert len(new) > 0 and len(reused) > 0, name  # both kinds, or the test shows nothing
        assert (
            (new["connect_start_ns"] > 0) & (new["tcp_connected_ns"] > new["connect_start_ns"])
        ).all()
        if tls:
            assert (new["tls_done_ns"] > new["tcp_connected_ns"]).all(), name
            assert (new["connected_ns"] >= new["tls_done_ns"]).all(), name
        else:
            assert (new["tls_done_ns"] == 0).all(), name
        for column in ("connect_start_ns", "tcp_connected_ns", "tls_done_ns"):
            assert (reused[column] == 0).all(), (name, column)


def test_run_over_https_and_wss_records_the_handshake_of_new_connections_only(
    https_url: str, tmp_path: Path
) -> None:
    run_cli(
        "run", TINY, "--target", https_url, "--insecure", "--transports", ",".join(TRANSPORTS),
        "--out", str(tmp_path), "--run-id", "r", "-q", report=False,
    )  # fmt: skip
    run = load_run(tmp_path / "r")
    _check_stamps(run.turns, tls=True)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    for name in TRANSPORTS:
        t = run.turns[(run.turns["transport"] == name) & run.turns["new_connection"]]
        handshakes_ms = (t["tls_done_ns"] - t["tcp_connected_ns"]) / 1e6
        tls_ms = summary["transports"][name]["tls_ms"]
        assert tls_ms["p50"] > 0 and tls_ms["mean"] == pytest.approx(handshakes_ms.mean(), rel=0.01)
        assert summary["transports"][name]["connect_ms"]["p50"] > 0


def test_plain_http_measures_the_connect_and_no_handshake(tmp_path: Path) -> None:
    run = run_tiny(tmp_path, list(TRANSPORTS), {})
    _check_stamps(run.turns, tls=False)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    for name in TRANSPORTS:
        assert summary["transports"][name]["tls_ms"]["p50"] is None
        assert summary["transports"][name]["connect_ms"]["p50"] > 0
    assert "tls_ms" not in [m.name for m, _ in D.cli_columns(summary)]  # no empty TLS column


def test_run_tls_serves_the_embedded_server_over_https(tmp_path: Path) -> None:
    # The schedule-lag limit lifted: the claim is TLS, not timing, and a loaded machine's
    # event-loop stall (135 ms against the 100 ms limit) once made this short run exit 3.
    proc = run_cli(
        "run", TINY, "--tls", "--transports", ",".join(TRANSPORTS), "--out", str(tmp_path),
        "--run-id", "r", "-q", "--set", "load.max_schedule_lag_ms=10000",
    )  # fmt: skip
    # the handshake is shown where the run is read, not only kept in summary.json
    assert "TLS" in proc.stdout
    assert "TLS p50" in (tmp_path / "r" / "report.md").read_text()
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert json.dumps(manifest).count("https://127.0.0.1:") >= 1
    _check_stamps(load_run(tmp_path / "r").turns, tls=True)


def test_run_tls_with_a_target_is_a_usage_error(tmp_path: Path) -> None:
    proc = loopbench(
        "run", TINY, "--tls", "--target", "https://127.0.0.1:1/v1", "--out", str(tmp_path)
    )
    assert proc.returncode == 4
    assert (
        "--tls: starts the embedded server with TLS, so it cannot go with --target" in proc.stderr
    )
    assert list(tmp_path.iterdir()) == []
