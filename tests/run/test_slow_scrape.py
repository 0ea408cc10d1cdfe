"""A ``--server-metrics`` scrape slow enough to hold up the target's streams is said on the
console, with its duration and the option that scrapes less often (issue 38: vLLM renders its
/metrics in the API server's event loop, 16-19 ms, which put +20 ms on TTFT p99s).

The scraper's clock and urlopen are injected: each GET "takes" what the test says.
"""

from __future__ import annotations

import io

import pytest

from harness.run import server_scrape
from harness.run.server_scrape import SLOW_SCRAPE_MS, ServerScraper, slow_scrape_note


class _Clock:
    """perf_counter_ns for the scraper: still, except that serving a GET moves it on by the
    next of ``took_ms``, so that the scrape "took" that long (the poller's own readings move
    nothing)."""

    def __init__(self) -> None:
        self.now = 1_000_000_000
        self.took_ms: list[float] = []

    def __call__(self) -> int:
        return self.now

    def served(self) -> None:
        if self.took_ms:
            self.now += round(self.took_ms.pop(0) * 1e6)


CLOCK = _Clock()


class _Answer(io.BytesIO):
    """What the fake urlopen gives: one-line Prometheus text, served in the clock's time."""

    def __init__(self) -> None:
        CLOCK.served()
        super().__init__(b"# TYPE up gauge\nup 1\n")


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_scrape.urllib.request, "urlopen", lambda *a, **k: _Answer())


URL = "http://127.0.0.1:9/metrics"


def _scraper(url: str, took_ms: list[float], said: list[str]) -> ServerScraper:
    CLOCK.took_ms = took_ms
    # an interval long enough that the poller never scrapes between start() and stop()
    return ServerScraper(url, 600.0, say=said.append, clock=CLOCK)


def test_a_slow_first_scrape_is_said_before_the_passes_with_its_duration() -> None:
    said: list[str] = []
    # the first scrape and its repeat (start), the last (stop)
    scraper = _scraper(URL, [17.4, 16.2, 1.0], said)
    assert scraper.start()
    assert len(said) == 1
    assert URL in said[0] and "2 scrapes took 16 ms at the median (the slowest 17 ms)" in said[0]
    assert "--server-metrics-interval" in said[0] and "every 600 s" in said[0]
    scraper.stop()
    assert len(said) == 1  # said once


def test_fast_scrapes_say_nothing() -> None:
    said: list[str] = []
    scraper = _scraper(URL, [1.0, 2.0], said)
    assert scraper.start()
    result = scraper.stop()
    assert said == [] and result.scrapes == 2


def test_a_first_scrape_slow_once_is_a_hiccup_not_a_slow_server() -> None:
    said: list[str] = []
    scraper = _scraper(URL, [25.0, 1.0, 1.0, 1.0], said)  # cold, then fast
    assert scraper.start()
    assert scraper.stop().scrapes == 3 and said == []


def test_scrapes_slow_during_the_run_are_said_at_the_end() -> None:
    said: list[str] = []
    scraper = _scraper(URL, [1.0, 42.0, 40.0, 45.0], said)
    assert scraper.start() and said == []
    for _ in range(2):  # what the poller's thread does every interval
        scraper._scrape()
    scraper.stop()
    assert len(said) == 1 and "4 scrapes took 40 ms at the median" in said[0]


def test_one_slow_scrape_at_the_end_of_a_short_run_is_a_hiccup() -> None:
    """A run shorter than the interval scrapes at its start and its end only: the end's
    scrape is judged beside the start's, not alone."""
    said: list[str] = []
    scraper = _scraper(URL, [1.0, 42.0], said)
    assert scraper.start()
    assert scraper.stop().scrapes == 2 and said == []


def test_a_cold_first_scrape_answered_fast_again_does_not_count_at_the_end() -> None:
    """Cold (42), its repeat fast (1), the end's slow (42): the cold one was slow for being
    the first and is not a slow scrape; the end's alone is a hiccup."""
    said: list[str] = []
    scraper = _scraper(URL, [42.0, 1.0, 42.0], said)
    assert scraper.start() and said == []
    assert scraper.stop().scrapes == 3 and said == []


def test_the_note_goes_by_the_median_scrape() -> None:
    assert slow_scrape_note("u", [SLOW_SCRAPE_MS - 0.1] * 3, 1.0) is None
    assert slow_scrape_note("u", [1.0, 1.0, 90.0], 1.0) is None  # one hiccup
    assert slow_scrape_note("u", [], 1.0) is None
    note = slow_scrape_note("u", [1.0, SLOW_SCRAPE_MS, 25.0], 2.0)
    assert note is not None
    assert "3 scrapes took 10 ms at the median" in note and "slowest 25 ms" in note
    assert "every 2 s" in note
