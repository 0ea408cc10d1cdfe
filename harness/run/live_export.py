"""``--prometheus-port``: the run's live metrics over HTTP, for Prometheus and Grafana.

Everything happens off the measuring event loop: prometheus_client's HTTP server answers
scrapes from its own threads, and one ticker thread closes an interval every
``interval_s`` (the interval percentiles, :mod:`harness.metrics.live`).  Both read the
run's :class:`~harness.metrics.summary.Accumulator` as it is, through
:meth:`~harness.metrics.summary.Accumulator.live`, so the run itself does no more work per
record than without the export.  The series are listed in docs/observability.md.

One exporter serves the whole command: a sweep's runs, one after the other, appear under
their own ``run_id`` (counters restart at 0 with each run, which Prometheus' ``rate()``
takes as a counter reset).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from harness.metrics.live import LIVE_LATENCY, QUANTILES, Interval, IntervalPercentiles
from harness.run.measurement import Measurement
from harness.wire.errors import UsageError

#: the default interval of the latency percentiles: Prometheus' default scrape interval, so
#: each scrape sees a new interval and none goes unseen
DEFAULT_INTERVAL_S = 15.0
PREFIX = "loopbench"


@dataclass(slots=True)
class _Attached:
    run: Measurement
    started: float
    #: the last closed interval per (transport, metric), and when it closed
    intervals: dict[tuple[str, str], Interval]
    percentiles: IntervalPercentiles


class LiveExport:
    """Serve ``/metrics`` on ``host:port`` (0: a free port, see :attr:`port`) until
    :meth:`stop`; :meth:`attach` names the run whose metrics it shows."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self.host = host
        self.interval_s = interval_s
        self._requested_port = port
        self._attached: _Attached | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: Any = None
        self._ticker: threading.Thread | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> int:
        """Bind and serve; returns the port.  A busy port is a :class:`UsageError`."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        try:
            self._server, _ = start_http_server(
                self._requested_port, addr=self.host, registry=registry
            )
        except OSError as exc:
            raise UsageError(
                f"--prometheus-port {self._requested_port}: cannot listen on "
                f"{self.host}:{self._requested_port} ({exc.strerror or exc}); give a free port, "
                "or 0 to pick one"
            ) from None
        self.port = int(self._server.server_address[1])
        self._ticker = threading.Thread(
            target=self._tick, name="loopbench-live-export", daemon=True
        )
        self._ticker.start()
        return self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and close the port (idempotent)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(5)
            self._ticker = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> LiveExport:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def attach(self, run: Measurement) -> None:
        """Show ``run`` from now on (the runner calls this once its measurement is open)."""
        with self._lock:
            self._attached = _Attached(run, time.monotonic(), {}, IntervalPercentiles())

    # -- the interval ------------------------------------------------------------------------

    def _tick(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.close_interval()

    def close_interval(self) -> None:
        """End the current interval: its percentiles become what scrapes show."""
        with self._lock:
            att = self._attached
            if att is None:
                return
            snapshot = att.run.acc.live([m for m, _ in LIVE_LATENCY])
            att.intervals = att.percentiles.advance(
                {t: d["histograms"] for t, d in snapshot.items()}
            )

    # -- a scrape ----------------------------------------------------------------------------

    def families(self) -> Iterator[Metric]:
        with self._lock:
            att = self._attached
            intervals = dict(att.intervals) if att is not None else {}
        if att is None:
            return
        run = att.run
        live = run.acc.live()
        transports = list(dict.fromkeys([*run.transports, *live]))
        measured = max(0, run.planned - run.acc.warmup_rollouts)

        info = GaugeMetricFamily(
            f"{PREFIX}_run_info", "the run being measured (value 1)", labels=["run_id", "scenario"]
        )
        info.add_metric([run.run_id, run.scenario.name], 1.0)
        yield info
        yield GaugeMetricFamily(
            f"{PREFIX}_elapsed_seconds",
            "seconds since the run's measurement opened",
            value=time.monotonic() - att.started,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_interval_seconds",
            "length of the interval the interval_* percentiles cover",
            value=self.interval_s,
        )
        planned = GaugeMetricFamily(
            f"{PREFIX}_rollouts_planned",
            "measured rollouts the run plans per transport (warm-up excluded)",
            labels=["transport"],
        )
        for t in transports:
            planned.add_metric([t], float(measured))
        yield planned

        counters = {
            "turns": "turns recorded (failed ones included; warm-up excluded)",
            "turn_errors": "turns that failed",
            "rollouts": "rollouts finished (failed ones included; warm-up excluded)",
            "rollout_errors": "rollouts that did not complete",
            "input_tokens": "input tokens the server reported (usage)",
            "cached_tokens": "input tokens the server reported as cached",
            "output_tokens": "output tokens the server reported (failed turns included)",
        }
        for key, doc in counters.items():
            fam = CounterMetricFamily(f"{PREFIX}_{key}", doc, labels=["transport"])
            for t in transports:
                fam.add_metric([t], float(live[t][key]) if t in live else 0.0)
            yield fam
        errors = CounterMetricFamily(
            f"{PREFIX}_errors",
            "failed turns by error kind (rollout:<kind>: a rollout that failed with no failed turn)",
            labels=["transport", "kind"],
        )
        for t in transports:
            for kind, n in sorted((live.get(t) or {}).get("errors_by_kind", {}).items()):
                errors.add_metric([t, kind], float(n))
        yield errors

        samples = GaugeMetricFamily(
            f"{PREFIX}_interval_samples",
            "samples in the last interval, per latency metric",
            labels=["transport", "metric"],
        )
        for metric, short in LIVE_LATENCY:
            quantiles = GaugeMetricFamily(
                f"{PREFIX}_interval_{short}_seconds",
                f"{short} percentiles of the last interval (NaN: no sample in it)",
                labels=["transport", "quantile"],
            )
            for t in transports:
                iv = intervals.get((t, metric))
                values = iv.quantiles if iv is not None else (math.nan,) * len(QUANTILES)
                for q, v in zip(QUANTILES, values, strict=True):
                    quantiles.add_metric([t, f"{q:g}"], v)
                samples.add_metric([t, short], float(iv.samples if iv is not None else 0))
            yield quantiles
        yield samples


class _Collector(Collector):
    def __init__(self, export: LiveExport) -> None:
        self._export = export

    def collect(self) -> Iterator[Metric]:
        return self._export.families()
