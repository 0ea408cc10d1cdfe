"""``loopbench run --prometheus-port``: the live endpoint scraped while a real run is in progress.

The run is the CLI in a subprocess against its embedded server; the test reads the port the
CLI prints, scrapes ``/metrics`` with plain HTTP GETs and parses them with prometheus_client's
own parser.  Every wait is bounded by a deadline; no assertion depends on how fast the
machine is.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "examples" / "grafana-loopbench.json"
DEADLINE_S = 120.0
TRANSPORTS = ("http", "ws")


def _scrape(url: str) -> dict[str, list[Any]]:
    """``{sample name: [samples]}`` of one GET of ``url``."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def _by_transport(scrape: dict[str, list[Any]], name: str) -> dict[str, float]:
    return {s.labels["transport"]: s.value for s in scrape.get(name, [])}


def _lines(stream: Any, into: list[str]) -> None:
    for line in stream:
        into.append(line)


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """``loopbench run tiny`` with enough rollouts to last a few seconds, serving live metrics
    on a port it picks (0); yields the process, the URL it printed and its stderr lines."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "harness", "run", "tiny", "-q",
            "--out", str(tmp_path / "results"),
            "--set", "rollout.count=16",
            # the claim is the live endpoint: a loaded machine's event-loop stall made this
            # run invalid (exit 3) once, which says nothing about it
            "--set", "load.max_schedule_lag_ms=10000",
            "--prometheus-port", "0",
            "--prometheus-interval-s", "0.2",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    err: list[str] = []
    reader = threading.Thread(target=_lines, args=(proc.stderr, err), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            for line in list(err):
                m = re.search(r"prometheus: live metrics at (http://\S+)", line)
                if m:
                    url = m.group(1)
            time.sleep(0.05)
        assert url is not None, f"the run printed no URL; stderr: {''.join(err)}"
        yield proc, url, err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_live_endpoint_serves_counters_and_interval_percentiles_while_the_run_runs(
    live_run: tuple[subprocess.Popen[str], str, list[str]],
) -> None:
    proc, url, err = live_run
    assert url.startswith("http://127.0.0.1:")  # loopback by default
    deadline = time.monotonic() + DEADLINE_S
    scrapes: list[dict[str, list[Any]]] = []
    finite_ttft = False
    # scrape until both transports have turns and a later scrape shows more, or the run ends
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            scrape = _scrape(url)
        except OSError:
            break  # the run ended between poll() and the GET
        turns = _by_transport(scrape, "loopbench_turns_total")
        if turns:
            scrapes.append(scrape)
        for s in scrape.get("loopbench_interval_ttft_seconds", []):
            finite_ttft = finite_ttft or math.isfinite(s.value)
        first = scrapes[0] if scrapes else None
        if first is not None and set(turns) >= set(TRANSPORTS):
            t0 = _by_transport(first, "loopbench_turns_total")
            if sum(turns.values()) > sum(t0.values()) and finite_ttft:
                break
        time.sleep(0.1)
    assert scrapes, f"no scrape showed a transport before the run ended; stderr: {''.join(err)}"
    first, last = scrapes[0], scrapes[-1]

    # per-transport counters, and they grow while the run runs
    for name in (
        "loopbench_turns_total",
        "loopbench_turn_errors_total",
        "loopbench_rollouts_total",
        "loopbench_input_tokens_total",
        "loopbench_cached_tokens_total",
        "loopbench_output_tokens_total",
    ):
        assert set(_by_transport(last, name)) == set(TRANSPORTS), name
    before = sum(_by_transport(first, "loopbench_turns_total").values())
    after = sum(_by_transport(last, "loopbench_turns_total").values())
    assert after > before, "the turn counters did not grow between two scrapes during the run"
    assert sum(_by_transport(last, "loopbench_output_tokens_total").values()) > 0

    # the interval latency series exist per transport and quantile, and one had a value
    for short in ("ttft", "ttfot", "turn"):
        samples = last[f"loopbench_interval_{short}_seconds"]
        assert {(s.labels["transport"], s.labels["quantile"]) for s in samples} == {
            (t, q) for t in TRANSPORTS for q in ("0.5", "0.9", "0.99")
        }
    assert finite_ttft, "no interval ever had a TTFT sample"
    planned = _by_transport(last, "loopbench_rollouts_planned")
    assert planned == {"http": 16.0, "ws": 16.0}
    assert last["loopbench_elapsed_seconds"][0].value > 0
    assert last["loopbench_run_info"][0].labels["scenario"] == "tiny"

    # every series the dashboard plots is one the endpoint serves
    assert set(_dashboard_series()) <= set(last)

    # the run ends by itself, and the port is closed with it
    proc.wait(timeout=DEADLINE_S)
    assert proc.returncode == 0, "".join(err)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


class _Lines:
    """A stderr that keeps what is written, for a thread to read while the command runs."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def write(self, s: str) -> int:
        self.text.append(s)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_the_port_closes_when_the_run_ends_while_the_process_lives_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, so that a port left open would still be open when the command returns."""
    err = _Lines()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.chdir(tmp_path)
    previous = signal.getsignal(signal.SIGTERM)
    ok_scrapes: list[dict[str, list[Any]]] = []
    done = threading.Event()

    def scrape_while_running() -> None:
        deadline = time.monotonic() + DEADLINE_S
        url = None
        while url is None and not done.is_set() and time.monotonic() < deadline:
            m = re.search(r"live metrics at (http://\S+)", "".join(err.text))
            url = m.group(1) if m else None
            time.sleep(0.02)
        while url is not None and not done.is_set() and time.monotonic() < deadline:
            try:
                scrape = _scrape(url)
            except OSError:
                continue
            if _by_transport(scrape, "loopbench_turns_total"):
                ok_scrapes.append(scrape)
            time.sleep(0.05)

    scraper = threading.Thread(target=scrape_while_running, daemon=True)
    scraper.start()
    args = build_parser().parse_args(
        ["run", "tiny", "-q", "--out", str(tmp_path / "results"), "--set", "rollout.count=8",
         "--prometheus-port", "0", "--prometheus-interval-s", "0.2"]
    )  # fmt: skip
    try:
        code = args.func(args)
    finally:
        done.set()
        scraper.join(30)
        signal.signal(signal.SIGTERM, previous)
    assert code == 0, "".join(err.text)
    assert ok_scrapes, "no scrape answered with the run's transports while it ran"
    m = re.search(r"live metrics at http://127\.0\.0\.1:(\d+)/metrics", "".join(err.text))
    assert m is not None
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", int(m.group(1))), 5):
        pass


def _dashboard_series() -> list[str]:
    """The series names the example dashboard's queries use."""
    doc = json.loads(DASHBOARD.read_text())
    names: list[str] = []
    for panel in doc["panels"]:
        for target in panel["targets"]:
            names += re.findall(r"\bloopbench_[a-z0-9_]+", target["expr"])
    return names


def test_the_dashboard_is_one_panel_of_ttft_p99_by_transport() -> None:
    doc = json.loads(DASHBOARD.read_text())
    (panel,) = doc["panels"]
    (target,) = panel["targets"]
    assert _dashboard_series() == ["loopbench_interval_ttft_seconds"]
    assert 'quantile="0.99"' in target["expr"]
    assert "{{transport}}" in target["legendFormat"]


def test_prometheus_port_is_refused_with_procs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "tiny", "--procs", "2", "--prometheus-port", "0",
         "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--prometheus-port: not available with --procs 2" in proc.stderr
    assert not any(tmp_path.iterdir()), "a refused command began a results folder"
