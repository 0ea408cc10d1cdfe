"""A non-streamed request (``stream: false``) stops its modelled work when its client leaves.

A real reference server (``--access-log``, no engine bursts, so decode time is linear in
the output tokens); a raw socket sends a non-streamed request for a long response and
closes.  The generation must stop long before its modelled end: ``/health``'s
``engine.active`` returns to 0, and the access log records the request as a 499 whose
duration is a small part of the modelled time.  Every bound is a fraction of the
modelled time the same server reports for a shorter request (``sim_timing``), not a
fixed number of seconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from harness.run.child import ReadyChild
from harness.run.embedded import server_child
from tests.server.conftest import hinted_body, post_and_leave

LONG_TOKENS = 40_000
PROBE_TOKENS = 400
#: the cancelled request must end within this fraction of its modelled duration
FRACTION = 0.2
ACCESS_499 = re.compile(r"access: POST /v1/responses 499 ([0-9.]+) ms")


def _server(*args: str) -> Any:
    return server_child(
        [
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--store",
            ":memory:",
            "--access-log",
            "--set",
            "engine.burst_probability=0",
            *args,
        ]
    )


@pytest.fixture(scope="module")
def server() -> Iterator[ReadyChild]:
    with _server() as child:
        yield child


def _body(tokens: int) -> dict[str, Any]:
    return hinted_body(tokens, stream=False)


def _modelled_ms(base_url: str, tokens: int) -> float:
    """The modelled time of a ``tokens``-token response, scaled from a short one's ``sim_timing``."""
    resp = httpx.post(base_url + "/responses", json=_body(PROBE_TOKENS), timeout=30)
    assert resp.status_code == 200, resp.text
    timing = resp.json()["sim_timing"]
    fixed = timing["api_pre"] + timing["api_queue"] + timing["engine_queue"] + timing["prefill"]
    return float(fixed + timing["decode"] * tokens / PROBE_TOKENS + timing["api_post"])


def _engine_active(base_url: str) -> int:
    doc = httpx.get(base_url.removesuffix("/v1") + "/health", timeout=10).json()
    active: int = doc["engine"]["active"]
    return active


def _wait_for(predicate: Any, within_s: float, what: str) -> float:
    """Poll ``predicate`` until true; returns the seconds it took; fails after ``within_s``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > within_s:
            raise AssertionError(f"expected {what} within {within_s:.1f} s")
        time.sleep(0.02)
    return time.monotonic() - started


def _cancelled_lines(child: ReadyChild) -> list[float]:
    return [float(m.group(1)) for line in child.stderr if (m := ACCESS_499.search(line))]


def test_non_streamed_generation_stops_when_the_client_leaves(server: ReadyChild) -> None:
    base_url = server.ready
    modelled_s = _modelled_ms(base_url, LONG_TOKENS) / 1000
    assert modelled_s > 10  # long enough that "stopped early" is not noise
    assert _engine_active(base_url) == 0
    post_and_leave(
        base_url,
        _body(LONG_TOKENS),
        until=lambda: _wait_for(lambda: _engine_active(base_url) == 1, modelled_s, "a generation"),
    )
    # The client is gone: the engine slot is free again long before the modelled end.
    took_s = _wait_for(
        lambda: _engine_active(base_url) == 0, FRACTION * modelled_s, "the slot to be freed"
    )
    assert took_s < FRACTION * modelled_s
    (logged_ms,) = _wait_cancelled(server, modelled_s)
    assert logged_ms < FRACTION * modelled_s * 1000
    # The server answers the next request in full.
    resp = httpx.post(base_url + "/responses", json=_body(3), timeout=30)
    assert resp.status_code == 200 and resp.json()["status"] == "completed"


def _wait_cancelled(child: ReadyChild, modelled_s: float) -> list[float]:
    _wait_for(lambda: _cancelled_lines(child), FRACTION * modelled_s, "an access-log 499 line")
    return _cancelled_lines(child)


def test_a_client_leaving_during_the_api_tier_wait_ends_the_request() -> None:
    # 20 s of modelled API-tier work before the engine: the request never holds an engine
    # slot, so only the access log can show when it ended.
    with _server("--set", "api.fixed_ms=20000") as child:
        base_url = child.ready
        modelled_s = 20.0
        post_and_leave(base_url, _body(PROBE_TOKENS), until=lambda: time.sleep(0.2))
        (logged_ms,) = _wait_cancelled(child, modelled_s)
        assert logged_ms < FRACTION * modelled_s * 1000
        assert _engine_active(base_url) == 0
