"""The reference Responses API server: the ASGI app, HTTP+SSE and WebSocket mode on one path.

The app is thin: it admits connections (connection limits, API key), reads and
validates HTTP requests (:mod:`.core.validation`), rebuilds the conversation from
the input or the store (:mod:`.core.conversation`), and streams what the shared
response pipeline produces (:mod:`.service`) as SSE.  A WebSocket, once
accepted, is handed to :mod:`.ws_connection`, which uses the same service.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.websockets import WebSocket

from harness.wire import events as ev
from reference_server import compaction
from reference_server.access_log import AccessLog, log_ws_refused
from reference_server.allocator import malloc_report
from reference_server.core.config import ServerConfig
from reference_server.core.validation import RequestError, invalid, parse_create
from reference_server.guard import ConnectionGuard
from reference_server.http_api import ChatApi, MessagesApi, ResponsesApi
from reference_server.json_answers import error_response, json_response, retry_headers
from reference_server.lifecycle import Lifecycle
from reference_server.metrics import (
    CONTENT_TYPE_LATEST,
    HttpMetrics,
    ServerCollector,
    exposition,
    registry,
)
from reference_server.protocols import ARRIVED_KEY, CONNECTION_KEY
from reference_server.service import Service, now_s
from reference_server.sim import mark_arrival
from reference_server.store import SqliteStore
from reference_server.ws_connection import WsConnection


class ReferenceServer:
    def __init__(self, config: ServerConfig, store: SqliteStore | None = None) -> None:
        self.config = config
        self.service = Service(config, store)
        self.lifecycle = Lifecycle(self.service, config)
        # Open WebSocket connections, so a shutdown can drain and close them.
        self.ws_connections: set[WsConnection] = set()
        #: set by a graceful shutdown (reference_server/shutdown.py): drains a WebSocket
        #: that registers after the shutdown listed the open ones
        self.drain_ws: Callable[[WsConnection], None] | None = None
        edges: dict[str, Any] = {
            "refusal": self._refusal,
            "read_json": self._read_json,
            "new_connection": self._new_http_connection,
        }
        self.responses = ResponsesApi(self.service, self.lifecycle, **edges)
        self.chat = ChatApi(self.service, **edges)
        self.messages = MessagesApi(self.service, **edges)
        self.starlette = Starlette(
            routes=[
                Route("/v1/responses", self.responses.create, methods=["POST"]),
                Route("/v1/chat/completions", self.chat.create, methods=["POST"]),
                Route("/v1/messages", self.messages.create, methods=["POST"]),
                Route("/v1/responses/compact", self.http_compact, methods=["POST"]),
                *self.lifecycle_routes(),
                Route("/health", self.health, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
            ],
            exception_handlers={404: self._not_found, 405: self._method_not_allowed},
            lifespan=self._lifespan,
        )
        self.guard = ConnectionGuard(
            _WebSocketRoute(self.starlette, "/v1/responses", self.websocket),
            send_timeout_s=config.send_timeout_s,
            http_lifetime_s=config.faults.lifetime_s,
        )
        # The access log wraps the guard, so its duration includes admission and the whole stream.
        inner: Any = AccessLog(self.guard) if config.access_log else self.guard
        counters = self.service.counters
        collector = ServerCollector(
            counters,
            self.service.sim,
            lambda: len(self.ws_connections),
            worker=config.worker_index,
            info={
                "api_profile": config.api_profile,
                "engine_profile": config.engine_profile,
                "model": config.model,
            },
        )
        self.registry = registry(collector)
        self.app = _StampArrival(HttpMetrics(inner, counters))

    def lifecycle_routes(self) -> list[Route]:
        life = self.lifecycle
        return [
            Route("/v1/responses/{response_id}", life.retrieve, methods=["GET"]),
            Route("/v1/responses/{response_id}", life.delete, methods=["DELETE"]),
            Route("/v1/responses/{response_id}/input_items", life.input_items, methods=["GET"]),
            Route("/v1/responses/{response_id}/cancel", life.cancel, methods=["POST"]),
        ]

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.lifecycle.runs.aclose()
        await self.guard.aclose()
        await self.service.store.close()
        if self.service.timing_log is not None:
            self.service.timing_log.close()  # after the drain: every response has its line

    def _new_http_connection(self, request: Request) -> bool:
        # ASGI hides the TCP connection: the stamp (the protocol's, else the guard's) says
        # which request of its connection this is.
        stamped = request.scope.get(CONNECTION_KEY)
        return stamped is None or stamped[1] == 1

    def _admit(self, client_host: str | None, headers: Any) -> RequestError | None:
        """Connection limits, then the API key: whatever refuses a request or a WebSocket first."""
        # The counts include the connection asking (see ConnectionGuard).
        per_client = self.config.max_connections_per_client
        if per_client and self.guard.client_open(client_host) > per_client:
            return RequestError(
                429,
                "too_many_client_connections",
                f"This client address already has {per_client} open connections "
                "(--max-connections-per-client); close some or retry later.",
                type_="requests",
            )
        if self.guard.open > self.config.max_connections:
            return RequestError(
                503,
                "too_many_connections",
                f"The server is at its limit of {self.config.max_connections} open connections; retry later.",
                type_="server_error",
            )
        return self.service.check_api_key(headers)

    def _request_id(self) -> str:
        return ev.new_id("req", self.service.rng())

    async def health(self, request: Request) -> Response:
        sim = self.service.sim
        doc: dict[str, Any] = {"status": "ok", "model": sim.describe()}
        doc["slow_clients_dropped"] = self.guard.dropped_slow
        # Responses holding an engine stream slot now, and waiting for one.
        doc["engine"] = {"active": sim.capacity.active, "queued": sim.capacity.queued}
        # The LRU prefix cache fills up to its bound (~13 MiB once churning): the soak accounts for it.
        cache = sim.prefix_cache
        doc["prefix_cache"] = {
            "entries": len(cache),
            "max_entries": cache.max_entries,
            "table_bytes": cache.table_bytes(),
        }
        # What malloc holds and holds free (reference_server/allocator.py): the soak's rows.
        memory = malloc_report()
        if memory is not None:
            doc["memory"] = memory
        if self.config.faults.enabled:
            doc["faults_injected"] = dict(sorted(self.service.faults.counts.items()))
        return JSONResponse(doc)

    async def metrics(self, request: Request) -> Response:
        """Prometheus text format, no API key (as vLLM and SGLang serve theirs); docs/server.md."""
        return Response(exposition(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def models(self, request: Request) -> Response:
        request_id = self._request_id()
        denied = self.service.check_api_key(request.headers)
        if denied is not None:
            return error_response(denied, request_id)
        model = {"id": self.config.model, "object": "model", "owned_by": "loopbench"}
        return json_response({"object": "list", "data": [model]}, request_id)

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        err = RequestError(404, "not_found", f"Unknown route: {request.method} {request.url.path}.")
        return error_response(err, self._request_id())

    async def _method_not_allowed(self, request: Request, exc: Exception) -> Response:
        err = RequestError(
            405,
            "method_not_allowed",
            f"Method {request.method} is not allowed on {request.url.path}.",
        )
        return error_response(err, self._request_id())

    # -- HTTP ------------------------------------------------------------------------------
    async def _read_json(self, request: Request) -> Any:
        """The request body, parsed (400 ``invalid_json`` when it is not JSON)."""
        raw = await self._read_body(request)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise invalid(
                f"We could not parse the JSON body of your request: {exc}.", None, "invalid_json"
            ) from None

    async def _read_body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(int(declared), limit)
        chunks: list[bytes] = []
        size = 0
        # Read incrementally so an oversized body without content-length is refused
        # after at most one chunk past the limit, not buffered whole.
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit)
            chunks.append(chunk)
        return b"".join(chunks)

    async def _refusal(
        self, request: Request, headers: Headers, *, faults: bool = True
    ) -> tuple[RequestError, float] | None:
        """What refuses an HTTP request before its body is read (:meth:`Service.refusal`)."""
        host = request.client.host if request.client else None
        return await self.service.refusal(self._admit(host, headers), faults=faults)

    async def http_compact(self, request: Request) -> Response:
        """``POST /v1/responses/compact`` (``client.responses.compact``): admitted like a create."""
        rng = self.service.rng()
        request_id = ev.new_id("req", rng)
        refused = await self._refusal(request, request.headers, faults=False)
        try:
            if refused is not None:
                raise refused[0]
            req = parse_create(await self._read_json(request))
            conv, rehydrated, _ = await self.service.resolve_http(req)
            summary = compaction.check_window(self.service, conv)
        except RequestError as err:
            return error_response(err, request_id, retry_headers(err))
        except ClientDisconnect:
            return Response(status_code=499)
        doc = await compaction.compact(
            self.service,
            req,
            conv,
            rehydrated,
            summary,
            new_connection=self._new_http_connection(request),
            rng=rng,
            created_at=now_s(),
        )
        return json_response(doc, request_id)

    # -- WebSocket -------------------------------------------------------------------------
    async def websocket(self, ws: WebSocket) -> None:
        started = time.perf_counter_ns()
        request_id = self._request_id()
        denied = self._admit(ws.client.host if ws.client else None, ws.headers)
        if denied is None and self.config.no_websocket:
            # A client error, as an HTTP-only endpoint's "no such route": nothing went wrong
            # on the server, and retrying will not help (a 5xx would invite both readings).
            denied = RequestError(
                404,
                "websocket_disabled",
                "WebSocket mode is disabled on this server (--no-websocket); "
                "use POST /v1/responses over HTTP",
            )
        if denied is not None:
            # Refused before the 101, as the API does: the client sees an HTTP status.
            await ws.send_denial_response(error_response(denied, request_id))
            counters = self.service.counters
            counters.ws_refused[denied.status] += 1
            counters.ws_error(denied.status, denied.code or "")
            if self.config.access_log:
                log_ws_refused(ws.scope, denied.status, started)
            return
        append = ws.query_params.get("mode") == "append"
        await ws.accept(headers=[(b"x-request-id", request_id.encode())])
        conn = WsConnection(self.service, ws, append_mode=append)
        self.ws_connections.add(conn)
        self.service.counters.ws_opened += 1
        if self.drain_ws is not None:
            self.drain_ws(conn)
        try:
            await conn.run()
        finally:
            self.ws_connections.discard(conn)


def _too_large(size: int, limit: int) -> RequestError:
    return RequestError(
        413,
        "request_too_large",
        f"Request body of {size} bytes exceeds the limit of {limit} bytes.",
    )


class _WebSocketRoute:
    """``path``'s WebSocket straight to its handler; anything else to the Starlette app.

    A token sent through Starlette's error middleware, exception middleware and router
    crossed two more wrapped ``send`` coroutines each, and every upgrade paid for the
    route matching: CPU on the event loop that paces every stream (BENCHMARKS.md, issue
    39).  Starlette handles nothing for a WebSocket that the handler does not: an
    exception ends the connection either way (an error before the 101 is a 500).
    """

    def __init__(self, app: Any, path: str, handler: Any) -> None:
        self.app = app
        self.path = path
        self.handler = handler

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket" and scope["path"] == self.path:
            await self.handler(WebSocket(scope, receive, send))
        else:
            await self.app(scope, receive, send)


class _StampArrival:
    """Outermost ASGI layer: start an HTTP request's API-tier clock.

    At the instant its bytes reached the server when the protocol stamped it
    (``scope["loopbench.arrived_ns"]``, reference_server/protocols.py), else now.
    Parsing, routing, admission and reading the body then run inside the modelled
    API-tier time (:func:`reference_server.sim.mark_arrival`) instead of before it.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            mark_arrival(scope.get(ARRIVED_KEY))
        await self.app(scope, receive, send)


def create_app(config: ServerConfig | None = None) -> Any:
    return ReferenceServer(config or ServerConfig()).app
