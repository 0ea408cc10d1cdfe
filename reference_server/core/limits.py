"""Admission limits of the reference server (pure: time is passed in).

A token bucket for the optional request rate limit; the other limits (body
bytes, message bytes, connections, lanes, queued creates, cached bytes) are
plain counters kept where the resource lives.
"""

from __future__ import annotations

import math


class TokenBucket:
    """``rate`` requests per second on average, up to ``burst`` at once.

    :meth:`take` admits a request (returns 0.0) or returns how many seconds the
    caller should wait before a request would be admitted (the ``retry-after``).
    """

    def __init__(self, rate: float, burst: float | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"rate: expected a positive number of requests per second, got {rate}")
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else rate)
        self._tokens = self.burst
        self._t: float | None = None

    def take(self, now: float) -> float:
        if self._t is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
        self._t = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate


def retry_after_headers(wait_s: float) -> dict[str, str]:
    """``retry-after`` (whole seconds, at least 1) and ``retry-after-ms`` as the SDK reads them."""
    return {
        "retry-after": str(max(1, math.ceil(wait_s))),
        "retry-after-ms": str(max(1, math.ceil(wait_s * 1000))),
    }
