"""The reference Responses API server: HTTP+SSE and WebSocket mode on one path.

The ASGI app is thin: it validates requests (:mod:`.validate`), rebuilds the
conversation from the input, the store or the connection cache
(:mod:`.conversation`), asks the simulator to wait the modelled API-tier and
engine time (:mod:`.sim`), and writes the events the pure builder produces
(:mod:`harness.core.events`).  Everything that decides *what* to send lives in
pure modules; this one decides *when* and *where*.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from harness.core import events as ev
from harness.core.sse import encode_event
from harness.core.tokens import CHARS_PER_TOKEN, token_pieces
from reference_server.api_tier import RequestCost
from reference_server.config import ServerConfig
from reference_server.conversation import Conversation, tools_tokens
from reference_server.output import OutputPlan, plan_output
from reference_server.profiles import load_profiles
from reference_server.sim import Simulator
from reference_server.store import MemoryStore, ResponseStore, StoredResponse
from reference_server.validate import CreateRequest, RequestError, parse_create

Send = Callable[[dict[str, Any]], Awaitable[None]]


class _OutputCursor:
    """Turns "k more tokens are due" into delta events walking through the planned items."""

    def __init__(self, builder: ev.ResponseBuilder, plan: OutputPlan, rng: random.Random) -> None:
        self.b = builder
        self.segments: list[tuple[str, str, list[str]]] = []  # (kind, name/call_id, pieces)
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
                out.extend(self.b.end_function_call() if kind == "call" else self.b.end_message())
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
class _LaneState:
    response_id: str
    conversation: Conversation
    tools_key: bytes


@dataclass(slots=True)
class _WsConnection:
    lanes: dict[str | None, _LaneState] = field(default_factory=dict)
    creates: int = 0


class ReferenceServer:
    def __init__(self, config: ServerConfig, store: ResponseStore | None = None) -> None:
        self.config = config
        api, engine = load_profiles(config.api_profile, config.engine_profile, config.overrides)
        self.sim = Simulator(
            api, engine, seed=config.seed, min_delta_interval_ms=config.min_delta_interval_ms
        )
        self.store: ResponseStore = store or MemoryStore()
        self._counter = itertools.count()
        self._seen_clients: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._background: set[asyncio.Task[Any]] = set()
        self.app = Starlette(
            routes=[
                Route("/v1/responses", self.http_create, methods=["POST"]),
                WebSocketRoute("/v1/responses", self.websocket),
                Route("/health", self.health, methods=["GET"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ],
            exception_handlers={404: self._not_found, 405: self._method_not_allowed},
        )

    # -- helpers ---------------------------------------------------------------------------
    def _rng(self) -> random.Random:
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

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @staticmethod
    def _error_response(err: RequestError, request_id: str) -> JSONResponse:
        body = ev.error_body(err.status, err.code, err.message, err.param, err.type)
        return JSONResponse(body, status_code=err.status, headers={"x-request-id": request_id})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.sim.describe()})

    async def models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": self.config.model, "object": "model", "owned_by": "loopbench"}],
            }
        )

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        body = ev.error_body(
            404, "not_found", f"Unknown route: {request.method} {request.url.path}."
        )
        return JSONResponse(body, status_code=404)

    async def _method_not_allowed(self, request: Request, exc: Exception) -> Response:
        body = ev.error_body(
            405,
            "method_not_allowed",
            f"Method {request.method} is not allowed on {request.url.path}.",
        )
        return JSONResponse(body, status_code=405)

    # -- the shared response pipeline ---------------------------------------------------------
    async def _resolve_http(self, req: CreateRequest) -> tuple[Conversation, int, str]:
        """Conversation for an HTTP request: (conversation, rehydrated tokens, cache label)."""
        if req.previous_response_id is None:
            conv = Conversation()
            if req.instructions:
                conv.extend([{"type": "message", "role": "developer", "content": req.instructions}])
            conv.extend(req.input_items)
            return conv, 0, "none"
        stored = await self.store.get(req.previous_response_id)
        if stored is None:
            raise RequestError(
                400,
                "previous_response_not_found",
                f"Previous response with id '{req.previous_response_id}' not found.",
                "previous_response_id",
            )
        conv = Conversation.from_items(stored.items)
        rehydrated = conv.tokens
        if req.instructions:
            conv.extend([{"type": "message", "role": "developer", "content": req.instructions}])
        conv.extend(req.input_items)
        return conv, rehydrated, "store"

    async def _generate(
        self,
        req: CreateRequest,
        conv: Conversation,
        cost: RequestCost,
        builder: ev.ResponseBuilder,
        send: Send,
        timing: dict[str, Any],
        *,
        blocking_post: bool,
    ) -> Conversation:
        """Sample and stream the output; returns the conversation including the output items."""
        rng = self._rng()
        tools_tok = tools_tokens(req.tools)
        for e in builder.start():
            await send(e)
        if not req.generate:
            usage = ev.usage(conv.tokens + tools_tok, 0, 0)
            timing.update(
                {
                    "engine_queue": 0.0,
                    "prefill": 0.0,
                    "decode": 0.0,
                    "api_post": 0.0,
                    "cached_input_tokens": 0,
                }
            )
            await send(
                builder.complete(usage, {"sim_timing": timing}, completed_at=self._completed_at())
            )
            return conv
        plan = plan_output(
            tools=req.tools,
            tool_choice=req.tool_choice,
            parallel_tool_calls=req.parallel_tool_calls,
            metadata=req.metadata,
            max_output_tokens=req.max_output_tokens,
            chain_function_calls=conv.function_calls,
            default_output_tokens=self.config.default_output_tokens,
            default_auto_tool_calls=self.config.default_auto_tool_calls,
            rng=rng,
        )
        cursor = _OutputCursor(builder, plan, rng)

        async def emit(k: int) -> None:
            for e in cursor.emit(k):
                await send(e)

        inf = await self.sim.inference(
            conv.prefix_hashes,
            conv.tokens + tools_tok,
            plan.output_tokens,
            rng.getrandbits(63),
            emit,
        )
        for e in cursor.finish():
            await send(e)
        cached = int(inf.get("cached_tokens", 0))
        timing.update(
            {
                "engine_queue": inf.get("engine_queue", 0.0),
                "prefill": inf.get("prefill", 0.0),
                "decode": inf.get("decode", 0.0),
                "cached_input_tokens": cached,
            }
        )
        timing["ttft"] = timing["api_pre"] + timing["api_queue"] + float(inf.get("ttft", 0.0))
        if blocking_post:
            timing["api_post"] = await self.sim.post_inference(cost)
        else:
            timing["api_post"] = 0.0
            self._spawn(self.sim.post_inference(cost))
        usage = ev.usage(conv.tokens + tools_tok, cached, plan.output_tokens)
        if plan.truncated:
            await send(builder.incomplete("max_output_tokens", usage, {"sim_timing": timing}))
        else:
            await send(
                builder.complete(usage, {"sim_timing": timing}, completed_at=self._completed_at())
            )
        out = conv
        out.extend(builder.output)
        return out

    def _builder(self, req: CreateRequest, response_id: str) -> ev.ResponseBuilder:
        return ev.ResponseBuilder(
            response_id,
            model=req.model,
            created_at=int(time.time()),
            request=req.raw,
            stream_id=req.stream_id,
        )

    @staticmethod
    def _completed_at() -> int:
        return int(time.time())

    # -- HTTP ------------------------------------------------------------------------------
    async def http_create(self, request: Request) -> Response:
        rng = self._rng()
        request_id = ev.new_id("req", rng)
        try:
            raw = await request.body()
            if len(raw) > self.config.max_body_bytes:
                raise RequestError(
                    413,
                    "request_too_large",
                    f"Request body of {len(raw)} bytes exceeds the limit of {self.config.max_body_bytes} bytes.",
                )
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise RequestError(
                    400, "invalid_json", f"We could not parse the JSON body of your request: {exc}."
                ) from None
            req = parse_create(body)
            conv, rehydrated, cache = await self._resolve_http(req)
        except RequestError as err:
            return self._error_response(err, request_id)
        cost = RequestCost(
            new_connection=self._new_http_connection(request),
            websocket=False,
            connection_resolved=False,
            processed_tokens=conv.tokens - rehydrated + tools_tokens(req.tools),
            rehydrated_tokens=rehydrated,
        )
        timing: dict[str, Any] = dict(await self.sim.pre_inference(cost))
        timing.update(
            {
                "cache": cache,
                "processed_input_tokens": cost.processed_tokens + cost.rehydrated_tokens,
            }
        )
        response_id = ev.new_id("resp", rng)
        builder = self._builder(req, response_id)
        headers = {"x-request-id": request_id}

        async def finish(conv_out: Conversation) -> None:
            if req.store:
                await self.store.put(
                    StoredResponse(response_id, conv_out.items, conv_out.function_calls)
                )

        if not req.stream:

            async def discard(_: dict[str, Any]) -> None:
                return None

            conv_out = await self._generate(
                req, conv, cost, builder, discard, timing, blocking_post=True
            )
            await finish(conv_out)
            body_obj = builder.response_object()
            return Response(orjson.dumps(body_obj), media_type="application/json", headers=headers)

        queue: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def send(e: dict[str, Any]) -> None:
            queue.put_nowait(encode_event(e))

        async def produce() -> None:
            try:
                conv_out = await self._generate(
                    req, conv, cost, builder, send, timing, blocking_post=True
                )
                await finish(conv_out)
                if self.config.sse_done_marker:
                    queue.put_nowait(b"data: [DONE]\n\n")
            except Exception as exc:  # a bug must not leave the client hanging: fail the response
                for e in builder.fail(
                    "server_error",
                    f"The server had an error: {type(exc).__name__}.",
                    nested=self.config.sse_error_shape != "flat",
                ):
                    queue.put_nowait(encode_event(e))
            finally:
                queue.put_nowait(None)

        async def body_iter() -> Any:
            task = asyncio.ensure_future(produce())
            try:
                while True:
                    chunk = await queue.get()
                    if chunk is None:
                        break
                    # Coalesce what is already queued into one write: fewer syscalls, same bytes.
                    parts = [chunk]
                    while not queue.empty():
                        nxt = queue.get_nowait()
                        if nxt is None:
                            yield b"".join(parts)
                            return
                        parts.append(nxt)
                    yield b"".join(parts) if len(parts) > 1 else chunk
            finally:
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

        return StreamingResponse(
            body_iter(),
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache"},
        )

    # -- WebSocket -------------------------------------------------------------------------
    async def websocket(self, ws: WebSocket) -> None:
        await ws.accept()
        state = _WsConnection()
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                text = msg.get("text")
                if text is None:
                    await ws.send_text(
                        orjson.dumps(
                            ev.ws_error_event(
                                400,
                                "invalid_message",
                                "Binary frames are not supported; send JSON text frames.",
                            )
                        ).decode()
                    )
                    continue
                if len(text) > self.config.max_ws_message_bytes:
                    await ws.send_text(
                        orjson.dumps(
                            ev.ws_error_event(
                                400,
                                "message_too_large",
                                f"Message of {len(text)} bytes exceeds the limit of {self.config.max_ws_message_bytes} bytes.",
                            )
                        ).decode()
                    )
                    continue
                await self._ws_message(ws, state, text)
        except WebSocketDisconnect:
            return

    async def _ws_message(self, ws: WebSocket, state: _WsConnection, text: str) -> None:
        async def send(e: dict[str, Any]) -> None:
            await ws.send_text(orjson.dumps(e).decode())

        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            await send(
                ev.ws_error_event(
                    400, "invalid_json", f"Could not parse the message as JSON: {exc}."
                )
            )
            return
        if not isinstance(body, dict) or body.get("type") != "response.create":
            kind = body.get("type") if isinstance(body, dict) else None
            await send(
                ev.ws_error_event(
                    400,
                    "unknown_event_type",
                    f"Unsupported client event type {kind!r}; expected 'response.create'.",
                    "type",
                )
            )
            return
        rng = self._rng()
        lane_key: str | None = None
        try:
            req = parse_create(body, websocket=True)
            lane_key = req.stream_id
            conv, cache, rehydrated = await self._resolve_ws(state, req)
        except RequestError as err:
            if lane_key is not None or body.get("previous_response_id"):
                state.lanes.pop(lane_key, None)
            await send(
                ev.ws_error_event(err.status, err.code, err.message, err.param, stream_id=lane_key)
            )
            return
        first = state.creates == 0
        state.creates += 1
        tools_key = orjson.dumps(req.tools)
        lane = state.lanes.get(lane_key)
        tools_cached = cache == "hit" and lane is not None and lane.tools_key == tools_key
        cost = RequestCost(
            new_connection=first,
            websocket=True,
            connection_resolved=not first,
            processed_tokens=conv.tokens
            - rehydrated
            - (lane.conversation.tokens if cache == "hit" and lane else 0)
            + (0 if tools_cached else tools_tokens(req.tools)),
            rehydrated_tokens=rehydrated,
        )
        timing: dict[str, Any] = dict(await self.sim.pre_inference(cost))
        timing.update(
            {
                "cache": cache,
                "processed_input_tokens": cost.processed_tokens + cost.rehydrated_tokens,
            }
        )
        response_id = ev.new_id("resp", rng)
        builder = self._builder(req, response_id)
        conv_out = await self._generate(req, conv, cost, builder, send, timing, blocking_post=False)
        state.lanes[lane_key] = _LaneState(response_id, conv_out, tools_key)
        if req.store:
            await self.store.put(
                StoredResponse(response_id, conv_out.items, conv_out.function_calls)
            )

    async def _resolve_ws(
        self, state: _WsConnection, req: CreateRequest
    ) -> tuple[Conversation, str, int]:
        """(conversation, cache label, rehydrated tokens) for a WebSocket create."""
        prev = req.previous_response_id
        if prev is None:
            conv = Conversation()
            if req.instructions:
                conv.extend([{"type": "message", "role": "developer", "content": req.instructions}])
            conv.extend(req.input_items)
            return conv, "none", 0
        lane = state.lanes.get(req.stream_id)
        if lane is not None and lane.response_id == prev:
            conv = lane.conversation.fork()
            if req.instructions:
                conv.extend([{"type": "message", "role": "developer", "content": req.instructions}])
            conv.extend(req.input_items)
            return conv, "hit", 0
        if req.store:
            stored = await self.store.get(prev)
            if stored is not None:
                conv = Conversation.from_items(stored.items)
                rehydrated = conv.tokens
                conv.extend(req.input_items)
                return conv, "store", rehydrated
        raise RequestError(
            400,
            "previous_response_not_found",
            f"Previous response with id '{prev}' not found.",
            "previous_response_id",
        )


def create_app(config: ServerConfig | None = None) -> Starlette:
    return ReferenceServer(config or ServerConfig()).app
