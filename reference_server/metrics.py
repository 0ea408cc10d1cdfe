"""``GET /metrics``: the server's own state in the Prometheus text format (docs/server.md).

Cost on the hot path is what decides the shape. Whatever the server already
keeps (engine slots and queue, prefix-cache hits and misses, open WebSocket
connections, the modelled time the simulator adds up) is read when a scrape
arrives, by :class:`ServerCollector`; only what nothing else counts is counted
as it happens, in plain ints and dicts (:class:`ServerCounters`: one event loop
per process, so no lock), and one ASGI layer (:class:`HttpMetrics`) counts the
HTTP requests. Nothing is rendered until someone scrapes.

Every app has its own :class:`~prometheus_client.CollectorRegistry`, never the
global one: tests start several servers in one process. Under ``--workers N``
each worker process answers for itself (a scrape reaches whichever worker the
kernel hands the connection to); every series carries that worker's ``worker``
label, and ``loopbench_server_info`` its pid.
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

    def _family(self, kind: type[Any], name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
        return kind(name, doc, labels=(*labels, "worker"))

    def _one(self, kind: type[Any], name: str, doc: str, value: float) -> Metric:
        fam = self._family(kind, name, doc)
        fam.add_metric([self.worker], value)
        return fam

    def collect(self) -> Iterator[Metric]:
        c, sim, w = self.counters, self.sim, self.worker
        G, C = GaugeMetricFamily, CounterMetricFamily
        info = self._family(
            G, "loopbench_server_info", "This server process.", tuple(sorted(self.info))
        )
        info.add_metric([*(self.info[k] for k in sorted(self.info)), w], 1)
        yield info
        http = self._family(
            C,
            "loopbench_server_http_requests",
            "HTTP requests answered, by method, route template and status (0: no response began).",
            ("method", "route", "status"),
        )
        for (method, route, status), n in sorted(c.http.items()):
            http.add_metric([method, route, str(status), w], n)
        yield http
        errors = self._family(
            C,
            "loopbench_server_errors",
            "Error answers: HTTP 4xx/5xx and WebSocket error events, by route, status and code.",
            ("transport", "route", "status", "code"),
        )
        for (transport, route, status, code), n in sorted(c.errors.items()):
            errors.add_metric([transport, route, str(status), code, w], n)
        yield errors
        yield self._one(
            G,
            "loopbench_server_http_requests_in_flight",
            "HTTP requests begun, not answered.",
            c.http_in_flight,
        )
        yield self._one(
            G,
            "loopbench_server_websocket_connections",
            "Open WebSocket connections.",
            self.ws_open(),
        )
        yield self._one(
            C,
            "loopbench_server_websocket_connections_opened",
            "WebSocket connections accepted.",
            c.ws_opened,
        )
        refused = self._family(
            C,
            "loopbench_server_websocket_handshakes_refused",
            "WebSocket handshakes refused before the 101, by the HTTP status answered.",
            ("status",),
        )
        for status, n in sorted(c.ws_refused.items()):
            refused.add_metric([str(status), w], n)
        yield refused
        workers = sim.api.workers
        yield self._one(
            G,
            "loopbench_server_api_queue_depth",
            "Requests waiting for an API-tier worker.",
            max(0, sim.api_in_tier - workers),
        )
        yield self._one(
            G,
            "loopbench_server_api_busy_workers",
            "API-tier workers doing a request's modelled pre-inference work.",
            min(sim.api_in_tier, workers),
        )
        cap = sim.capacity
        yield self._one(
            G,
            "loopbench_server_engine_running_streams",
            "Responses holding an engine stream slot.",
            cap.active,
        )
        yield self._one(
            G,
            "loopbench_server_engine_queue_depth",
            "Responses waiting for an engine stream slot.",
            cap.queued,
        )
        cache = sim.prefix_cache
        yield self._one(
            C,
            "loopbench_server_prefix_cache_hits",
            "Engine prefills that found a cached prefix.",
            cache.hits,
        )
        yield self._one(
            C,
            "loopbench_server_prefix_cache_misses",
            "Engine prefills that found no cached prefix.",
            cache.misses,
        )
        yield self._one(
            G,
            "loopbench_server_prefix_cache_entries",
            "Prefixes held by the prefix cache.",
            len(cache),
        )
        context = self._family(
            C,
            "loopbench_server_context_resolved",
            "Responses by what supplied their conversation: the request's input, the WebSocket "
            "connection's cache, or the store.",
            ("transport", "source"),
        )
        fallbacks = 0
        for (websocket, label), n in sorted(c.context.items()):
            transport = "websocket" if websocket else "http"
            context.add_metric([transport, CONTEXT_SOURCES.get(label, label), w], n)
            if websocket and label == "store":
                fallbacks += n
        yield context
        yield self._one(
            C,
            "loopbench_server_store_fallbacks",
            "WebSocket responses whose previous_response_id was not in the connection's cache "
            "and was rehydrated from the store.",
            fallbacks,
        )
        modelled = self._family(
            C,
            "loopbench_server_modelled_seconds",
            "Modelled time summed over responses, by component.",
            ("component",),
        )
        for component in MODELLED_COMPONENTS:
            modelled.add_metric([component, w], sim.modelled_ms[component] / 1000.0)
        yield modelled
        responses = self._family(
            C, "loopbench_server_responses", "Responses finished, by final status.", ("status",)
        )
        for final, n in sorted(c.responses.items()):
            responses.add_metric([final, w], n)
        yield responses
        for key, doc in (
            ("input", "Input tokens of the responses the engine ran (cached ones included)."),
            ("cached_input", "Input tokens the prefix cache supplied (not prefilled)."),
            ("output", "Output tokens the engine generated."),
        ):
            yield self._one(C, f"loopbench_server_{key}_tokens", doc, sim.tokens[key])


def registry(collector: ServerCollector) -> CollectorRegistry:
    """A registry of its own holding this app's collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def exposition(reg: CollectorRegistry) -> bytes:
    """The registry's series in the Prometheus text format."""
    return generate_latest(reg)
