"""``--server-metrics URL``: poll a Prometheus text endpoint while the run measures.

The poller must not disturb the measurement, so it runs in a thread of its own
and, during the run, only fetches: a GET releases the GIL while it waits on the
socket, and each answer is kept as bytes with the instant it arrived. Parsing
(pure Python, milliseconds for a vLLM-sized answer, which would hold the GIL
the measuring loop needs) waits until :meth:`ServerScraper.stop`, after the
last turn. Timestamps are ``time.perf_counter_ns``, the clock of ``turns.csv``,
taken as the midpoint of the request and the end of its answer.

It is observability, not the measurement: a URL that does not answer, or answers
with something else than Prometheus text, costs one warning line and no scrapes,
and the run goes on. docs/server-metrics.md.
"""

from __future__ import annotations

import contextlib
import ssl
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.metrics.server_series import NotPrometheusText, parse_exposition
from harness.report.server_metrics import Sample
from harness.wire.plural import counted

#: how long one scrape may take before it counts as failed
SCRAPE_TIMEOUT_S = 2.0
#: answers held in memory at most (bytes); past it the poller stops and says so
MAX_HELD_BYTES = 256 * 1024 * 1024
#: scrapes that took this long at the median are said on the console.  A server that renders
#: its metrics in the loop that serves the measured requests holds every stream up that long:
#: vLLM's API server does (prometheus_client's ASGI app), 16-19 ms for its ~320 kB answer with
#: fine histogram buckets on a 2-CPU machine, which put +20 ms on a window's TTFT p99
#: (docs/real-engine.md, "The scrapes").  The reference server's (4.7 kB) takes ~0.5 ms.
SLOW_SCRAPE_MS = 10.0


def slow_scrape_note(url: str, took_ms: Sequence[float], interval_s: float) -> str | None:
    """The console line when the scrapes of ``url`` took :data:`SLOW_SCRAPE_MS` or longer at
    the median (None otherwise: one slow scrape is a hiccup of either side, a server that
    renders in its serving loop is slow every time): how long, and the option that scrapes
    less often."""
    # the lower median: of a slow first answer and a fast repeat, the fast one
    if not took_ms or (typical := statistics.median_low(took_ms)) < SLOW_SCRAPE_MS:
        return None
    return (
        f"warning: --server-metrics {url}: {counted(len(took_ms), 'scrape')} took "
        f"{typical:.0f} ms at the median (the slowest {max(took_ms):.0f} "
        "ms); a server that renders its metrics in the loop that serves requests (vLLM does) "
        f"holds up the turns that meet a scrape by as much, every {interval_s:g} s: a longer "
        "--server-metrics-interval scrapes less often (docs/server-metrics.md)"
    )


def embedded_metrics_url(base_url: str) -> str:
    """``http://127.0.0.1:PORT/metrics`` of an embedded server's ``http://127.0.0.1:PORT/v1``."""
    return base_url.rstrip("/").removesuffix("/v1") + "/metrics"


@dataclass(slots=True)
class ScrapeResult:
    url: str
    interval_s: float
    samples: list[Sample] = field(default_factory=list)
    scrapes: int = 0
    failed: int = 0
    last_failure: str = ""

    def summary(self) -> dict[str, Any]:
        """The summary's ``server_metrics`` block."""
        return {
            "url": self.url,
            "interval_s": self.interval_s,
            "scrapes": self.scrapes,
            "failed_scrapes": self.failed,
            "series": len({(name, labels) for _, name, labels, _ in self.samples}),
            "names": sorted({name for _, name, _, _ in self.samples}),
        }


class ServerScraper:
    """Polls ``url`` every ``interval_s`` in a thread between :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        url: str,
        interval_s: float,
        *,
        say: Callable[[str], None],
        verify_tls: bool = True,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.url = url
        self.interval_s = interval_s
        self.say = say
        self.clock = clock
        self._context: ssl.SSLContext | None = None
        if not verify_tls:
            # The run's own self-signed server (--tls): nothing to verify it against.
            self._context = ssl.create_default_context()
            self._context.check_hostname = False
            self._context.verify_mode = ssl.CERT_NONE
        self._held: list[tuple[int, bytes]] = []
        self._held_bytes = 0
        #: how long each scrape took (ms), the start's included
        self._took_ms: list[float] = []
        self._slow_said = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.result = ScrapeResult(url, interval_s)

    def _fetch(self) -> tuple[int, bytes]:
        """(stamp, body) of one GET; raises :class:`OSError` or ``ValueError`` saying what failed."""
        t0 = self.clock()
        req = urllib.request.Request(self.url, headers={"Accept": "text/plain"})
        try:
            with urllib.request.urlopen(
                req, timeout=SCRAPE_TIMEOUT_S, context=self._context
            ) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            raise ValueError(f"answered HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            raise OSError(f"could not connect: {_why(exc.reason)}") from None
        except (OSError, ValueError) as exc:
            raise OSError(f"the request failed: {_why(exc)}") from None
        t1 = self.clock()
        self._took_ms.append((t1 - t0) / 1e6)
        return (t0 + t1) // 2, body

    def start(self) -> bool:
        """One scrape now, checked; the thread polls on if it was Prometheus text.

        Returns whether scraping goes on. Called before the passes begin, so the
        warning comes before the progress display and the check costs no measurement.
        """
        try:
            stamp, body = self._fetch()
            parse_exposition(body.decode("utf-8", "replace"))
        except (OSError, ValueError) as exc:
            what = str(exc) if not isinstance(exc, NotPrometheusText) else f"answered with {exc}"
            self.say(
                f"warning: --server-metrics {self.url}: {what}; the run goes on without "
                "server metrics"
            )
            return False
        self._keep(stamp, body)
        if self._took_ms[-1] >= SLOW_SCRAPE_MS:
            # once more before saying so: a server's first answer may be slow for being the
            # first (a cold route, a fresh connection)
            with contextlib.suppress(OSError, ValueError):
                self._keep(*self._fetch())
                # answered fast the second time: the first was slow for being the first, and
                # must not count as a slow scrape at stop()
                if self._took_ms[-1] < SLOW_SCRAPE_MS:
                    del self._took_ms[0]
        # said before the passes: the user may stop and scrape less often
        note = slow_scrape_note(self.url, self._took_ms, self.interval_s)
        if note:
            self.say(note)
        self._slow_said = note is not None  # said once, not again at stop()
        # the start's timings stay: a run shorter than the interval scrapes once more, at its
        # end, and that one slow scrape beside fast ones is a hiccup, not a slow server
        self._thread = threading.Thread(target=self._poll, name="loopbench-server-metrics")
        self._thread.daemon = True
        self._thread.start()
        return True

    def _keep(self, stamp: int, body: bytes) -> None:
        self._held.append((stamp, body))
        self._held_bytes += len(body)
        self.result.scrapes += 1

    def _poll(self) -> None:
        interval_ns = round(self.interval_s * 1e9)
        next_ns = self.clock() + interval_ns
        while not self._stop.wait(max(0.0, (next_ns - self.clock()) / 1e9)):
            # A scrape slower than the interval delays the next one instead of queueing a burst.
            next_ns = max(next_ns + interval_ns, self.clock() + interval_ns // 2)
            if self._held_bytes > MAX_HELD_BYTES:
                self.result.failed += 1
                self.result.last_failure = (
                    f"stopped after {MAX_HELD_BYTES // 2**20} MiB of answers; "
                    "raise --server-metrics-interval"
                )
                return
            self._scrape()

    def _scrape(self) -> None:
        try:
            self._keep(*self._fetch())
        except (OSError, ValueError) as exc:
            self.result.failed += 1
            self.result.last_failure = str(exc)

    def stop(self) -> ScrapeResult:
        """Stop polling, scrape once more (the run's end state) and parse what was held."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(SCRAPE_TIMEOUT_S + 1)
            self._scrape()
        samples = self.result.samples
        for stamp, body in self._held:
            t_s = stamp / 1e9
            try:
                rows = parse_exposition(body.decode("utf-8", "replace"))
            except NotPrometheusText as exc:
                self.result.scrapes -= 1
                self.result.failed += 1
                self.result.last_failure = f"answered with {exc}"
                continue
            samples.extend((t_s, name, labels, value) for name, labels, value in rows)
        self._held.clear()
        note = slow_scrape_note(self.url, self._took_ms, self.interval_s)
        if note and not self._slow_said:
            self.say(note)
        if self.result.failed:
            self.say(
                f"warning: --server-metrics {self.url}: {self.result.failed} of "
                f"{counted(self.result.scrapes + self.result.failed, 'scrape')} failed "
                f"(last: {self.result.last_failure})"
            )
        return self.result


def _why(reason: object) -> str:
    """A failed connection in words ("connection refused (nothing listening?)"), not an errno."""
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (nothing listening?)"
    if isinstance(reason, TimeoutError):
        return f"no answer within {SCRAPE_TIMEOUT_S:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror[:1].lower() + reason.strerror[1:]
    return str(reason)
