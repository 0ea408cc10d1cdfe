"""The reference Responses API server: HTTP+SSE and WebSocket mode on one path.

The ASGI app is thin: it admits requests (API key, rate limit, size and
connection limits), validates them (:mod:`.validate`), rebuilds the
conversation from the input, the store or the connection cache
(:mod:`.conversation`), asks the simulator to wait the modelled API-tier and
engine time (:mod:`.sim`), and writes the events the pure builder produces
(:mod:`harness.wire.events`).  WebSocket connections live in
:mod:`.ws_connection`.  Everything that decides *what* to send lives in pure
modules; this one decides *when* and *where*.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from harness.wire import events as ev
from harness.wire.tokens import CHARS_PER_TOKEN, token_pieces
from reference_server.core import faults
from reference_server.core.api_tier import RequestCost
from reference_server.core.config import ServerConfig
from reference_server.core.conversation import Conversation, tools_tokens
from reference_server.core.limits import TokenBucket, retry_after_headers
from reference_server.core.output import OutputPlan, plan_output
from reference_server.core.profiles import load_profiles
from reference_server.core.validation import CreateRequest, RequestError, parse_create
from reference_server.event_stream import EventStream, SendEvents, until_disconnect
from reference_server.guard import ConnectionGuard
from reference_server.protocols import ARRIVED_KEY
from reference_server.sim import Simulator, decode_seed, mark_arrival
from reference_server.store import SqliteStore

# Events that are due together go out together: one SSE write or one batch of WS frames.
Send = Callable[[Sequence[dict[str, Any]]], Awaitable[None]]
# Called with the finished conversation just before the terminal event goes out, so a
# client that chains from the response the moment it completes always finds it.
OnOutput = Callable[[Conversation], None]

HINT_FAIL = "loopbench.fail"


class _OutputCursor:
    """Turns "k more tokens are due" into delta events walking through the planned items."""

    def __init__(self, builder: ev.ResponseBuilder, plan: OutputPlan, rng: random.Random) -> None:
        self.b = builder
        self.truncated = plan.truncated
        self.segments: list[tuple[str, str, list[str]]] = []  # (kind, name, pieces)
        for call in plan.calls:
            text = call.arguments
            pieces = [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]
            self.segments.append(("call", call.name, pieces))
        if plan.text_tokens:
            self.segments.append(("text", "", token_pieces(plan.text_tokens, rng)))
        self.rng = rng
        self.seg = 0
        self.pos = 0
        self.open = False

    def emit(self, k: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while k > 0 and self.seg < len(self.segments):
            kind, name, pieces = self.segments[self.seg]
            if not self.open:
                if kind == "call":
                    out.extend(self.b.begin_function_call(name, ev.new_id("call", self.rng)))
                else:
                    out.extend(self.b.begin_message())
                self.open = True
            take = min(k, len(pieces) - self.pos)
            chunk = "".join(pieces[self.pos : self.pos + take])
            self.pos += take
            k -= take
            if chunk:
                out.append(
                    self.b.arguments_delta(chunk) if kind == "call" else self.b.text_delta(chunk)
                )
            if self.pos >= len(pieces):
                if kind == "call":
                    out.extend(self.b.end_function_call())
                else:
                    # A message cut by max_output_tokens is itself incomplete.
                    out.extend(self.b.end_message("incomplete" if self.truncated else "completed"))
                self.seg += 1
                self.pos = 0
                self.open = False
        return out

    def finish(self) -> list[dict[str, Any]]:
        """Close whatever is still open (the engine emitted fewer tokens than planned)."""
        out: list[dict[str, Any]] = []
        while self.seg < len(self.segments):
            out.extend(self.emit(len(self.segments[self.seg][2]) - self.pos or 1))
        return out


@dataclass(slots=True)
class Segment:
    """What one stretch of sampling produced (a whole response, or one append-mode segment)."""

    output_tokens: int
    cached_tokens: int
    input_tokens: int
    calls: int
    truncated: bool
    timing: dict[str, float]


class ReferenceServer:
    def __init__(self, config: ServerConfig, store: SqliteStore | None = None) -> None:
        self.config = config
        api, engine = load_profiles(config.api_profile, config.engine_profile, config.overrides)
        self.sim = Simulator(
            api, engine, seed=config.seed, min_delta_interval_ms=config.min_delta_interval_ms
        )
        self.store = store or SqliteStore(config.store_path, retention_s=config.store_retention_s)
        # Workers share the store: their id sequences must not overlap (2**40 ids each).
        self._counter = itertools.count(config.worker_index << 40)
        self._seen_clients: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._background: set[asyncio.Task[Any]] = set()
        self._keys = frozenset(config.api_keys)
        self._bucket = (
            TokenBucket(config.rate_limit_rps, config.rate_limit_burst)
            if config.rate_limit_rps
            else None
        )
        self.faults = faults.FaultInjector(config.faults)
        # Open WebSocket connections (WsConnection), so a shutdown can drain and close them.
        self.ws_connections: set[Any] = set()
        self.starlette = Starlette(
            routes=[
                Route("/v1/responses", self.http_create, methods=["POST"]),
                WebSocketRoute("/v1/responses", self.websocket),
                Route("/health", self.health, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ],
            exception_handlers={404: self._not_found, 405: self._method_not_allowed},
            lifespan=self._lifespan,
        )
        self.guard = ConnectionGuard(
            self.starlette,
            send_timeout_s=config.send_timeout_s,
            http_lifetime_s=config.faults.lifetime_s,
        )
        self.app = _StampArrival(self.guard)

    @property
    def open_connections(self) -> int:
        return self.guard.open

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.guard.aclose()
        await self.store.close()

    # -- helpers ---------------------------------------------------------------------------
    def rng(self) -> random.Random:
        return random.Random(self.config.seed * 1_000_003 + next(self._counter))

    def _new_http_connection(self, request: Request) -> bool:
        # ASGI hides the TCP connection; the client's (host, port) identifies it while it is open.
        client = request.client
        if client is None:
            return True
        key = (client.host, client.port)
        if key in self._seen_clients:
            self._seen_clients.move_to_end(key)
            return False
        self._seen_clients[key] = None
        if len(self._seen_clients) > 65536:
            self._seen_clients.popitem(last=False)
        return True

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def check_api_key(self, headers: Headers) -> RequestError | None:
        """401 unless keys are configured off or the bearer token is one of them."""
        if not self._keys:
            return None
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return RequestError(
                401,
                "invalid_api_key",
                "You didn't provide an API key. Provide it in the Authorization header as 'Bearer <key>'.",
            )
        token = token.strip()
        if token not in self._keys:
            shown = token[:3] + "*" * 4 + token[-4:] if len(token) > 8 else "*" * len(token)
            return RequestError(401, "invalid_api_key", f"Incorrect API key provided: {shown}.")
        return None

    def check_rate(self) -> tuple[RequestError, float] | None:
        """(429 error, seconds to wait) when the configured rate limit is exceeded."""
        if self._bucket is None:
            return None
        wait = self._bucket.take(time.monotonic())
        if wait <= 0:
            return None
        return (
            RequestError(
                429,
                "rate_limit_exceeded",
                f"Rate limit reached: {self.config.rate_limit_rps:g} requests per second. "
                f"Please try again in {wait * 1000:.0f}ms.",
                type_="requests",
            ),
            wait,
        )

    def check_connections(self, client_host: str | None = None) -> RequestError | None:
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
        if self.open_connections > self.config.max_connections:
            return RequestError(
                503,
                "too_many_connections",
                f"The server is at its limit of {self.config.max_connections} open connections; retry later.",
                type_="server_error",
            )
        return None

    @staticmethod
    def error_response(
        err: RequestError, request_id: str, headers: dict[str, str] | None = None
    ) -> Response:
        body = ev.error_body(err.status, err.code, err.message, err.param, err.type)
        return Response(
            orjson.dumps(body),
            status_code=err.status,
            media_type="application/json",
            headers={"x-request-id": request_id, **(headers or {})},
        )

    async def health(self, request: Request) -> Response:
        doc: dict[str, Any] = {"status": "ok", "model": self.sim.describe()}
        doc["slow_clients_dropped"] = self.guard.dropped_slow
        # Responses holding an engine stream slot now, and waiting for one.
        doc["engine"] = {"active": self.sim.capacity.active, "queued": self.sim.capacity.queued}
        if self.config.faults.enabled:
            doc["faults_injected"] = dict(sorted(self.faults.counts.items()))
        return JSONResponse(doc)

    async def models(self, request: Request) -> Response:
        request_id = ev.new_id("req", self.rng())
        denied = self.check_api_key(request.headers)
        if denied is not None:
            return self.error_response(denied, request_id)
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": self.config.model, "object": "model", "owned_by": "loopbench"}],
            },
            headers={"x-request-id": request_id},
        )

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        err = RequestError(404, "not_found", f"Unknown route: {request.method} {request.url.path}.")
        return self.error_response(err, ev.new_id("req", self.rng()))

    async def _method_not_allowed(self, request: Request, exc: Exception) -> Response:
        err = RequestError(
            405,
            "method_not_allowed",
            f"Method {request.method} is not allowed on {request.url.path}.",
        )
        return self.error_response(err, ev.new_id("req", self.rng()))

    # -- the shared response pipeline ---------------------------------------------------------
    def builder(self, req: CreateRequest, response_id: str) -> ev.ResponseBuilder:
        return ev.ResponseBuilder(
            response_id,
            model=req.model,
            created_at=int(time.time()),
            request=req.raw,
            stream_id=req.stream_id,
        )

    async def run_segment(
        self,
        req: CreateRequest,
        conv: Conversation,
        builder: ev.ResponseBuilder,
        send: Send,
        rng: random.Random,
        *,
        tool_choice: Any,
        metadata: dict[str, str],
    ) -> Segment:
        """Plan the output, wait the engine, stream the items; returns what was produced."""
        tools_tok = tools_tokens(req.tools)
        plan = plan_output(
            tools=req.tools,
            tool_choice=tool_choice,
            parallel_tool_calls=req.parallel_tool_calls,
            metadata=metadata,
            max_output_tokens=req.max_output_tokens,
            chain_function_calls=conv.function_calls,
            default_output_tokens=self.config.default_output_tokens,
            default_auto_tool_calls=self.config.default_auto_tool_calls,
            rng=rng,
        )
        cursor = _OutputCursor(builder, plan, rng)

        async def emit(sizes: Sequence[int]) -> None:
            if len(sizes) == 1:
                await send(cursor.emit(sizes[0]))
                return
            events: list[dict[str, Any]] = []
            for k in sizes:
                events.extend(cursor.emit(k))
            await send(events)

        input_tokens = conv.tokens + tools_tok
        inf = await self.sim.inference(
            conv.prefix_hashes,
            input_tokens,
            plan.output_tokens,
            # Content-derived, so every transport replays the same bursts (paired comparisons).
            decode_seed(conv.items),
            emit,
            static_prefix=(hash(orjson.dumps(req.tools)), tools_tok),
        )
        closing = cursor.finish()
        if closing:
            await send(closing)
        return Segment(
            output_tokens=plan.output_tokens,
            cached_tokens=int(inf.get("cached_tokens", 0)),
            input_tokens=input_tokens,
            calls=len(plan.calls),
            truncated=plan.truncated,
            timing={
                "engine_queue": float(inf.get("engine_queue", 0.0)),
                "prefill": float(inf.get("prefill", 0.0)),
                "decode": float(inf.get("decode", 0.0)),
                "engine_ttft": float(inf.get("ttft", 0.0)),
            },
        )

    async def fail_mid_stream(
        self, builder: ev.ResponseBuilder, send: Send, rng: random.Random
    ) -> None:
        """The ``loopbench.fail: mid_stream`` hint: one output delta, then error + response.failed."""
        plan = OutputPlan((), 4, truncated=False)
        cursor = _OutputCursor(builder, plan, rng)
        await send(cursor.emit(1))
        await send(
            builder.fail(
                "server_error",
                "The server had an error while processing your request (injected by loopbench.fail).",
                nested=self.config.sse_error_shape != "flat",
            )
        )

    async def generate(
        self,
        req: CreateRequest,
        conv: Conversation,
        cost: RequestCost,
        builder: ev.ResponseBuilder,
        send: Send,
        timing: dict[str, Any],
        *,
        on_output: OnOutput,
    ) -> str:
        """Stream one whole response; returns its final status.

        Post-inference work blocks ``response.completed`` over HTTP and runs in the
        background over WebSocket (docs/model.md).
        """
        rng = self.rng()
        send = faults.wrap_send(send, self.config.faults.stall_s)
        await send(builder.start())
        if req.metadata.get(HINT_FAIL) == "mid_stream":
            await self.fail_mid_stream(builder, send, rng)
            return "failed"
        tools_tok = tools_tokens(req.tools)
        if not req.generate:
            timing.update(
                engine_queue=0.0, prefill=0.0, decode=0.0, api_post=0.0, cached_input_tokens=0
            )
            timing["ttft"] = timing["api_pre"] + timing["api_queue"]
            on_output(conv)
            usage = ev.usage(conv.tokens + tools_tok, 0, 0)
            await send([builder.complete(usage, {"sim_timing": timing}, completed_at=_now_s())])
            return "completed"
        seg = await self.run_segment(
            req, conv, builder, send, rng, tool_choice=req.tool_choice, metadata=req.metadata
        )
        engine_ttft = seg.timing.pop("engine_ttft")
        timing.update(seg.timing)
        timing["cached_input_tokens"] = seg.cached_tokens
        timing["ttft"] = timing["api_pre"] + timing["api_queue"] + engine_ttft
        if cost.websocket:
            timing["api_post"] = 0.0
            self.spawn(self.sim.post_inference(cost))
        else:
            timing["api_post"] = await self.sim.post_inference(cost)
        conv.extend(builder.output)
        on_output(conv)
        usage = ev.usage(
            seg.input_tokens,
            seg.cached_tokens,
            seg.output_tokens,
            cache_write_tokens=seg.input_tokens - seg.cached_tokens,
        )
        if seg.truncated:
            await send([builder.incomplete("max_output_tokens", usage, {"sim_timing": timing})])
            return "incomplete"
        await send([builder.complete(usage, {"sim_timing": timing}, completed_at=_now_s())])
        return "completed"

    async def pre_inference(self, cost: RequestCost, cache: str) -> dict[str, Any]:
        timing: dict[str, Any] = dict(await self.sim.pre_inference(cost))
        timing["cache"] = cache
        timing["processed_input_tokens"] = cost.processed_tokens + cost.rehydrated_tokens
        return timing

    def store_response(
        self,
        req: CreateRequest,
        response_id: str,
        conv: Conversation,
        *,
        parent_stored: bool,
        added_items: list[dict[str, Any]],
    ) -> None:
        """Persist a ``store: true`` response: its additions, or its whole chain if the parent is not stored."""
        if not req.store:
            return
        if parent_stored and req.previous_response_id is not None:
            self.store.put(response_id, req.previous_response_id, added_items, conv.function_calls)
        else:
            self.store.put(response_id, None, conv.chain_items, conv.function_calls)

    # -- HTTP ------------------------------------------------------------------------------
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

    async def _resolve_http(self, req: CreateRequest) -> tuple[Conversation, int, str]:
        """Conversation for an HTTP request: (conversation, rehydrated tokens, cache label)."""
        if req.previous_response_id is None:
            return Conversation.build(req.instructions, [], req.input_items), 0, "none"
        stored = await self.store.get(req.previous_response_id)
        if stored is None:
            raise previous_not_found(req.previous_response_id)
        conv = Conversation.build(req.instructions, stored.items)
        rehydrated = conv.chain_tokens
        conv.extend(req.input_items)
        return conv, rehydrated, "store"

    async def http_create(self, request: Request) -> Response:
        rng = self.rng()
        request_id = ev.new_id("req", rng)
        client = request.client.host if request.client else None
        denied = self.check_connections(client) or self.check_api_key(request.headers)
        if denied is not None:
            headers = retry_after_headers(1.0) if denied.status == 429 else None
            return self.error_response(denied, request_id, headers)
        limited = self.check_rate()
        if limited is not None:
            return self.error_response(limited[0], request_id, retry_after_headers(limited[1]))
        fault = self.faults.draw(websocket=False)
        if fault:
            if fault.kind == "error":
                type_, code, message = self.faults.error_body(fault.status)
                err = RequestError(fault.status, code, message, type_=type_)
                retry = retry_after_headers(1.0) if fault.status == 429 else None
                return self.error_response(err, request_id, retry)
            if fault.kind == "spike":
                await self.faults.spike()
                mark_arrival()  # the spike comes before the API tier: restart its clock
            faults.current.set(fault)  # read by generate() in this task and its children
        return await self._http_create(request, request_id, rng)

    async def _http_create(self, request: Request, request_id: str, rng: random.Random) -> Response:
        try:
            raw = await self._read_body(request)
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise RequestError(
                    400, "invalid_json", f"We could not parse the JSON body of your request: {exc}."
                ) from None
            req = parse_create(body)
            conv, rehydrated, cache = await self._resolve_http(req)
        except RequestError as err:
            return self.error_response(err, request_id)
        except ClientDisconnect:
            return Response(status_code=499)
        cost = RequestCost(
            new_connection=self._new_http_connection(request),
            websocket=False,
            connection_resolved=False,
            processed_tokens=conv.tokens - rehydrated + tools_tokens(req.tools),
            rehydrated_tokens=rehydrated,
        )
        timing = await self.pre_inference(cost, cache)
        response_id = ev.new_id("resp", rng)
        builder = self.builder(req, response_id)
        headers = {"x-request-id": request_id}
        added_from = len(conv.items) - len(req.input_items)

        def on_output(conv_out: Conversation) -> None:
            self.store_response(
                req,
                response_id,
                conv_out,
                parent_stored=True,
                added_items=conv_out.items[added_from:],
            )

        if not req.stream:

            async def discard(_: Sequence[dict[str, Any]]) -> None:
                return None

            finished = await until_disconnect(
                request.receive,
                self.generate(req, conv, cost, builder, discard, timing, on_output=on_output),
            )
            if not finished:
                return Response(status_code=499)  # the client left: stop generating for nobody
            return Response(
                orjson.dumps(builder.response_object()),
                media_type="application/json",
                headers=headers,
            )

        async def run(send: SendEvents) -> bool:
            try:
                await self.generate(req, conv, cost, builder, send, timing, on_output=on_output)
            except faults.InjectedDisconnect:
                raise  # the connection is dropped, not the response failed
            except Exception as exc:  # a bug must not leave the client hanging: fail the response
                with contextlib.suppress(ValueError):
                    await send(
                        builder.fail(
                            "server_error",
                            f"The server had an error: {type(exc).__name__}.",
                            nested=self.config.sse_error_shape != "flat",
                        )
                    )
                return False
            return True

        return EventStream(
            run,
            {**headers, "cache-control": "no-cache"},
            done_marker=self.config.sse_done_marker,
        )

    # -- WebSocket -------------------------------------------------------------------------
    async def websocket(self, ws: WebSocket) -> None:
        from reference_server.ws_connection import WsConnection

        request_id = ev.new_id("req", self.rng())
        denied = self.check_connections(ws.client.host if ws.client else None)
        denied = denied or self.check_api_key(ws.headers)
        if denied is not None:
            # Refused before the 101, as the API does: the client sees an HTTP status.
            await ws.send_denial_response(self.error_response(denied, request_id))
            return
        append = ws.query_params.get("mode") == "append"
        await ws.accept(headers=[(b"x-request-id", request_id.encode())])
        conn = WsConnection(self, ws, append_mode=append)
        self.ws_connections.add(conn)
        try:
            await conn.run()
        finally:
            self.ws_connections.discard(conn)


def previous_not_found(response_id: str) -> RequestError:
    return RequestError(
        400,
        "previous_response_not_found",
        f"Previous response with id '{response_id}' not found.",
        "previous_response_id",
    )


def _too_large(size: int, limit: int) -> RequestError:
    return RequestError(
        413,
        "request_too_large",
        f"Request body of {size} bytes exceeds the limit of {limit} bytes.",
    )


def _now_s() -> int:
    return int(time.time())


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
