"""``--server-metrics``: the embedded server's /metrics scraped during a run, and a URL that fails.

Real runs against the embedded server; the failing endpoints are a closed port and a
one-page HTTP server this module starts (docs/server-metrics.md).
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.metrics.server_series import parse_exposition, pick_series, rates
from harness.report.server_metrics import SERVER_METRICS, load_server_metrics
from harness.run.embedded import embedded_server
from tests.runs import TINY, loopbench, run_tiny


def test_the_embedded_server_is_scraped_on_the_turns_clock(tmp_path: Path) -> None:
    t_before = time.perf_counter_ns() / 1e9
    # a tenth of a second between scrapes: several of them while the tiny run turns
    run = run_tiny(tmp_path, ["http", "ws"], {}, server_metrics_interval_s=0.1)
    t_after = time.perf_counter_ns() / 1e9
    df = load_server_metrics(run.path)
    assert df is not None
    stamps = sorted(df["t_s"].unique())
    assert len(stamps) >= 3
    assert t_before < stamps[0] and stamps[-1] < t_after
    turns = run.turns
    first_sent, last_done = turns["sent_ns"].min() / 1e9, turns["done_ns"].max() / 1e9
    # the first scrape precedes the first request, the last follows the last answer,
    # and some fall in between: one clock, the turns'
    assert stamps[0] < first_sent and last_done < stamps[-1]
    assert any(first_sent < t < last_done for t in stamps)

    def total(name: str) -> list[float]:
        rows = df[df["name"] == name]
        return rows.groupby("t_s")["value"].sum().sort_index().tolist()

    requests = total("loopbench_server_http_requests_total")
    assert requests[-1] > requests[0]
    tokens = total("loopbench_server_output_tokens_total")
    assert tokens == sorted(tokens) and tokens[-1] > tokens[0]
    summary = run.summary or {}
    block = summary["server_metrics"]
    assert block["url"].endswith("/metrics") and block["failed_scrapes"] == 0
    assert block["scrapes"] == len(stamps)
    assert "loopbench_server_engine_running_streams" in block["names"]


def test_no_server_metrics_scrapes_nothing(tmp_path: Path) -> None:
    run = run_tiny(tmp_path, ["http"], {}, scrape_embedded=False)
    assert not (run.path / SERVER_METRICS).exists()
    assert "server_metrics" not in (run.summary or {})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _HtmlPage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body>not metrics</body></html>\n"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def html_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("endpoint", ["closed port", "html page"])
def test_a_failing_url_warns_once_and_the_run_succeeds(
    tmp_path: Path, endpoint: str, html_server: str
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/metrics" if endpoint == "closed port" else html_server
    proc = loopbench(
        "run", TINY, "--transports", "http", "--out", tmp_path, "--run-id", "r", "-q",
        "--server-metrics", url, timeout=120, report=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "--server-metrics" in line]
    assert len(warnings) == 1, proc.stderr
    assert url in warnings[0] and "the run goes on" in warnings[0]
    expected = (
        "could not connect: connection refused (nothing listening?)"
        if endpoint == "closed port"
        else "Prometheus text format"
    )
    assert expected in warnings[0]
    assert "Errno" not in warnings[0]  # a sentence, not an exception's repr
    assert not (tmp_path / "r" / SERVER_METRICS).exists()
    assert (tmp_path / "r" / "summary.json").exists()


def test_parse_keeps_samples_and_drops_buckets() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m",engine="0"} 3\n'
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="0.5"} 1\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 2\n'
        "vllm:e2e_request_latency_seconds_count 2\n"
        "vllm:e2e_request_latency_seconds_sum 1.5\n"
    )
    rows = parse_exposition(text)
    assert ("vllm:num_requests_running", 'engine="0",model_name="m"', 3.0) in rows
    assert [r[0] for r in rows if "latency" in r[0]] == [
        "vllm:e2e_request_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum",
    ]
    assert pick_series([r[0] for r in rows], ["vllm:e2e_request_latency_seconds_count", "x"]) == (
        ["vllm:e2e_request_latency_seconds_count"],
        ["x"],
    )
    # a counter that drops (another worker answered, a restart) is a reset, never a negative rate
    assert rates([0.0, 1.0, 2.0], [10.0, 14.0, 3.0]) == ([1.0, 2.0], [4.0, 3.0])


def test_the_window_holds_only_the_measured_turns_not_the_probe(tmp_path: Path) -> None:
    """``run --target`` probes the endpoint first; the baseline scrape comes after the probe,
    so the server's counters over the window count the run's turns and nothing else.  End to
    end: only a whole run shows the order of the probe and the scraper."""
    with embedded_server() as url:
        metrics = url.removesuffix("/v1") + "/metrics"
        proc = loopbench(
            "run", TINY, "--target", url, "--transports", "http", "--out", tmp_path,
            "--run-id", "r", "-q", "--server-metrics", metrics, timeout=120, report=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    df = load_server_metrics(tmp_path / "r")
    assert df is not None
    posts = df[
        (df["name"] == "loopbench_server_http_requests_total")
        & df["labels"].str.contains('route="/v1/responses"')
        & df["labels"].str.contains('method="POST"')
    ]
    counts = posts.groupby("t_s")["value"].sum().sort_index().tolist()
    with gzip.open(tmp_path / "r" / "turns.csv.gz", "rt") as f:
        turns = sum(1 for _ in f) - 1
    assert counts[0] >= 1, "the probe's POST /responses was counted before the baseline"
    assert counts[-1] - counts[0] == turns, (counts, turns)
