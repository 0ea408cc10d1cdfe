"""``GET /metrics``: the server's own state in the Prometheus text format.

Cost on the hot path decides the shape: what the server keeps anyway is read when a scrape
arrives (:class:`ServerCollector`); only what nothing else counts is counted as it happens
(:class:`ServerCounters`: plain ints, one event loop per process, so no lock), and one ASGI
layer (:class:`HttpMetrics`) counts the HTTP requests.  The series, the per-app registry and
``--workers``: docs/server.md, "Server-side metrics".
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reference_server.sim import MODELLED_COMPONENTS, Simulator

__all__ = ["CONTENT_TYPE_LATEST", "HttpMetrics", "ServerCollector", "ServerCounters", "registry"]

#: the route label of a request no route matched (404): its path would be unbounded
UNMATCHED_ROUTE = "unmatched"
Labelled = list[tuple[tuple[str, ...], float]]
Family = tuple[type[Any], str, str, tuple[str, ...], Labelled]


def one(kind: type[Any], name: str, doc: str, value: float) -> Family:
    """A series of one sample (labelled only by the worker)."""
    return kind, name, doc, (), [((), value)]


#: what resolved a response's conversation (``Service.admit``'s cache label) -> its label
CONTEXT_SOURCES = {"none": "request_input", "hit": "connection_cache", "store": "store"}


class ServerCounters:
    """What nothing else counts, counted as it happens; read by :class:`ServerCollector`."""

    __slots__ = (
        "context",
        "errors",
        "http",
        "http_in_flight",
        "responses",
        "ws_opened",
        "ws_refused",
    )

    def __init__(self) -> None:
        # (method, route template, status) -> requests
        self.http: Counter[tuple[str, str, int]] = Counter()
        self.http_in_flight = 0
        # (transport, route, status, code) -> error answers
        self.errors: Counter[tuple[str, str, int, str]] = Counter()
        # final status (completed, incomplete, failed) -> responses
        self.responses: Counter[str] = Counter()
        # (websocket?, Service.admit's cache label) -> responses
        self.context: Counter[tuple[bool, str]] = Counter()
        self.ws_opened = 0
        # HTTP status -> WebSocket handshakes refused before the 101 (a wrong key: 401)
        self.ws_refused: Counter[int] = Counter()

    def ws_error(self, status: int, code: str) -> None:
        self.errors[("websocket", "/v1/responses", status, code or "")] += 1


def error_code(body: bytes) -> str:
    """The ``code`` (else ``type``) of an error body in the OpenAI or Anthropic shape, else ``""``."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict):
        return ""
    code = err.get("code") or err.get("type") or ""
    return code if isinstance(code, str) else str(code)


class HttpMetrics:
    """ASGI layer: HTTP requests by method, route template and status; in flight; error codes.

    The route is Starlette's matched route (``scope["route"]``, set on the shared scope
    by the router), so a route added to the app is counted with no change here.
    Per message the cost is one comparison; an error's body is parsed for its code.
    """

    def __init__(self, app: Any, counters: ServerCounters) -> None:
        self.app = app
        self.counters = counters

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        counters = self.counters
        # [status, error code]: status 0 until the response starts
        seen: list[Any] = [0, ""]

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                seen[0] = message["status"]
            elif seen[0] >= 400 and not seen[1] and message["type"] == "http.response.body":
                seen[1] = error_code(message.get("body", b""))
            await send(message)

        counters.http_in_flight += 1
        try:
            await self.app(scope, receive, counting_send)
        finally:
            counters.http_in_flight -= 1
            route = scope.get("route")
            path = getattr(route, "path", None) or UNMATCHED_ROUTE
            # 0: the client left (or the app failed) before any response started
            status = seen[0]
            counters.http[(scope.get("method", ""), path, status)] += 1
            if status >= 400:
                counters.errors[("http", path, status, seen[1])] += 1


class ServerCollector:
    """Every series, built from the live state when a scrape arrives."""

    def __init__(
        self,
        counters: ServerCounters,
        sim: Simulator,
        ws_open: Callable[[], int],
        *,
        worker: int,
        info: dict[str, str],
    ) -> None:
        self.counters = counters
        self.sim = sim
        self.ws_open = ws_open
        self.worker = str(worker)
        self.info = {**info, "pid": str(os.getpid())}

    def collect(self) -> Iterator[Metric]:
        c, sim = self.counters, self.sim
        G, C = GaugeMetricFamily, CounterMetricFamily
        workers, cap, cache = sim.api.workers, sim.capacity, sim.prefix_cache
        info = tuple(sorted(self.info))
        context: Labelled = [
            (("websocket" if ws else "http", CONTEXT_SOURCES.get(label, label)), n)
            for (ws, label), n in sorted(c.context.items())
        ]
        fallbacks = sum(n for (ws, label), n in c.context.items() if ws and label == "store")
        # (kind, name after loopbench_server_, help, labels, [(label values, value)])
        families: list[Family] = [
            (G, "info", "This server process.", info, [(tuple(self.info[k] for k in info), 1)]),
            (
                C,
                "http_requests",
                "HTTP requests answered, by method, route template and status (0: no response began).",
                ("method", "route", "status"),
                [((m, r, str(s)), n) for (m, r, s), n in sorted(c.http.items())],
            ),
            (
                C,
                "errors",
                "Error answers: HTTP 4xx/5xx and WebSocket error events, by route, status and code.",
                ("transport", "route", "status", "code"),
                [((t, r, str(s), code), n) for (t, r, s, code), n in sorted(c.errors.items())],
            ),
            one(
                G, "http_requests_in_flight", "HTTP requests begun, not answered.", c.http_in_flight
            ),
            one(G, "websocket_connections", "Open WebSocket connections.", self.ws_open()),
            one(C, "websocket_connections_opened", "WebSocket connections accepted.", c.ws_opened),
            (
                C,
                "websocket_handshakes_refused",
                "WebSocket handshakes refused before the 101, by the HTTP status answered.",
                ("status",),
                [((str(s),), n) for s, n in sorted(c.ws_refused.items())],
            ),
            one(
                G,
                "api_queue_depth",
                "Requests waiting for an API-tier worker.",
                max(0, sim.api_in_tier - workers),
            ),
            one(
                G,
                "api_busy_workers",
                "API-tier workers doing a request's modelled pre-inference work.",
                min(sim.api_in_tier, workers),
            ),
            one(
                G, "engine_running_streams", "Responses holding an engine stream slot.", cap.active
            ),
            one(
                G, "engine_queue_depth", "Responses waiting for an engine stream slot.", cap.queued
            ),
            one(C, "prefix_cache_hits", "Engine prefills that found a cached prefix.", cache.hits),
            one(
                C,
                "prefix_cache_misses",
                "Engine prefills that found no cached prefix.",
                cache.misses,
            ),
            one(G, "prefix_cache_entries", "Prefixes held by the prefix cache.", len(cache)),
            (
                C,
                "context_resolved",
                "Responses by what supplied their conversation: the request's input, the WebSocket "
                "connection's cache, or the store.",
                ("transport", "source"),
                context,
            ),
            one(
                C,
                "store_fallbacks",
                "WebSocket responses whose previous_response_id was not in the connection's cache "
                "and was rehydrated from the store.",
                fallbacks,
            ),
            (
                C,
                "modelled_seconds",
                "Modelled time summed over responses, by component.",
                ("component",),
                [((k,), sim.modelled_ms[k] / 1000.0) for k in MODELLED_COMPONENTS],
            ),
            (
                C,
                "responses",
                "Responses finished, by final status.",
                ("status",),
                [((final,), n) for final, n in sorted(c.responses.items())],
            ),
        ]
        for key, doc in (
            ("input", "Input tokens of the responses the engine ran (cached ones included)."),
            ("cached_input", "Input tokens the prefix cache supplied (not prefilled)."),
            ("output", "Output tokens the engine generated."),
        ):
            families.append(one(C, f"{key}_tokens", doc, sim.tokens[key]))
        for kind, name, doc, labels, samples in families:
            family = kind(f"loopbench_server_{name}", doc, labels=(*labels, "worker"))
            for values, value in samples:
                family.add_metric([*values, self.worker], value)
            yield family


def registry(collector: ServerCollector) -> CollectorRegistry:
    """A registry of its own holding this app's collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def exposition(reg: CollectorRegistry) -> bytes:
    """The registry's series in the Prometheus text format."""
    return generate_latest(reg)
