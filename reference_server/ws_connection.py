"""One WebSocket-mode connection (docs/protocol.md §2 and the append prototype of §5).

A reader task takes every client message as it arrives and never waits for a
generation: it answers admission errors at once and hands each accepted
``response.create`` to its lane.  Each lane (``stream_id``; ``None`` is the
default lane) has one FIFO worker, so a lane's responses never overlap while
different lanes interleave; a connection-wide semaphore caps the responses
generating at once (16 by default) and the rest wait, up to a queue limit.
Because the reader keeps reading, and pings are answered by the server's
WebSocket protocol layer below the app, a long generation never starves either.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.websockets import WebSocket

from harness.wire import events as ev
from reference_server import fault_send
from reference_server.access_log import log_ws_create
from reference_server.core.api_tier import RequestCost
from reference_server.core.conversation import Conversation, tools_tokens
from reference_server.core.lanes import (
    INVALID_STREAM_ID_MESSAGE,
    CachedResponse,
    LaneCache,
    valid_stream_id,
)
from reference_server.core.validation import (
    AppendRequest,
    CreateRequest,
    RequestError,
    parse_append,
    parse_create,
)
from reference_server.protocols import ARRIVED_KEY, BATCH_EXTENSION, BATCH_KEY
from reference_server.service import (
    Job,
    Send,
    Service,
    fault_error,
    previous_not_found,
)
from reference_server.sim import mark_arrival
from reference_server.timer import yield_to_due


class _Closed(Exception):
    """Stop this response: the socket is gone, or (``code`` > 0) must be closed with ``code``."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


@dataclass(slots=True)
class _Paused:
    """An append-mode response waiting for the tool outputs of its function calls."""

    future: asyncio.Future[AppendRequest]
    call_ids: frozenset[str]
    lane: str | None


@dataclass(slots=True)
class _Resolved:
    conv: Conversation
    cache: str  # hit | store | none
    processed_tokens: int
    rehydrated_tokens: int
    parent_stored: bool
    tools_tokens: int


def _lifetime_text(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} seconds"


class WsConnection:
    def __init__(self, server: Service, ws: WebSocket, *, append_mode: bool) -> None:
        self.s = server
        self.cfg = server.config
        self.ws = ws
        self.append_mode = append_mode
        self.loop = asyncio.get_running_loop()
        self.opened = self.loop.time()
        self.cache = LaneCache(self.cfg.ws_max_cached_bytes)
        self.named_lanes: set[str] = set()
        # Per lane: (create body, when its bytes arrived if it could start at once, else None).
        self.queues: dict[str | None, deque[tuple[dict[str, Any], int | None]]] = {}
        self.workers: dict[str | None, asyncio.Task[None]] = {}
        self.slots = asyncio.Semaphore(self.cfg.ws_max_in_flight)
        # Accepted creates not finished yet: up to ws_max_in_flight generate, the rest
        # wait.  Counted at admission so the limit does not depend on task scheduling.
        self.outstanding = 0
        self.started = 0  # responses started on this connection
        self.segments = 0  # responses + resumed append segments (fault injection counts these)
        self.cut_armed = False
        self.paused: dict[str, _Paused] = {}
        self.active_appends: set[str] = set()
        self.closed = False
        self.draining = False  # the server is shutting down: no new creates
        # The ASGI server can send a batch of frames in one write (reference_server/protocols.py).
        self.batch_send = BATCH_EXTENSION in ws.scope.get("extensions", {})

    # -- sending -----------------------------------------------------------------------------

    async def send(self, events: Sequence[dict[str, Any]]) -> None:
        """Send ``events``, one text message each: in one write when the server can batch."""
        if self.closed:
            raise _Closed()
        if not events:
            return
        try:
            if self.batch_send:
                texts = [orjson.dumps(e) for e in events]
                await self.ws.send({"type": "websocket.send", BATCH_KEY: texts})
            else:
                for e in events:
                    await self.ws.send({"type": "websocket.send", "text": orjson.dumps(e).decode()})
        except Exception as exc:  # the peer is gone; whatever the layer below raised
            self.closed = True
            raise _Closed() from exc
        if self.cut_armed and any(e["type"] in ev.DELTA_TYPES for e in events):
            self.cut_armed = False
            raise _Closed(self.cfg.ws_fault_close_code)

    def segment_started(self) -> None:
        self.segments += 1
        if self.segments == self.cfg.ws_fault_close_after:
            limit = self.cfg.ws_fault_close_connections
            if limit and self.s.ws_cuts >= limit:
                return  # the connections to cut were cut: the reconnected client goes on
            self.s.ws_cuts += 1
            self.cut_armed = True

    async def error(
        self,
        status: int,
        code: str,
        message: str,
        param: str | None = None,
        stream_id: str | None = None,
        type_: str | None = None,
    ) -> None:
        self.s.counters.ws_error(status, code)
        await self.send([ev.ws_error_event(status, code, message, param, stream_id, type_=type_)])

    async def request_error(self, err: RequestError, lane: str | None = None) -> None:
        await self.error(err.status, err.code or "", err.message, err.param, lane, err.type)

    async def close_now(self, code: int) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            await self.ws.close(code)

    # -- the reader --------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while not self.closed:
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                await self.on_message(msg)
        except (_Closed, RuntimeError):
            pass
        finally:
            self.closed = True
            for paused in self.paused.values():
                paused.future.cancel()
            tasks = list(self.workers.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.cache.clear()

    async def on_message(self, msg: Mapping[str, Any]) -> None:
        # Parsing a message is new work: the tokens due in the meantime are written first
        # (reference_server/timer.py).  Its API-tier clock started when its bytes arrived.
        await yield_to_due()
        text = msg.get("text")
        if text is None:
            await self.error(
                400, "invalid_message", "Binary frames are not supported; send JSON text frames."
            )
            return
        limit = self.cfg.max_ws_message_bytes
        size = len(text) if len(text) * 4 <= limit else len(text.encode())
        if size > limit:
            await self.error(
                400,
                "message_too_large",
                f"Message of {size} bytes exceeds the limit of {limit} bytes.",
            )
            return
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            await self.error(400, "invalid_json", f"Could not parse the message as JSON: {exc}.")
            return
        kind = body.get("type") if isinstance(body, dict) else None
        if kind == "response.create":
            await self.on_create(body, msg.get(ARRIVED_KEY))
        elif kind == "response.append":
            await self.on_append(body)
        elif kind == "response.steer":
            await self.on_steer(body)
        else:
            await self.error(
                400,
                "unknown_event_type",
                f"Unsupported client event type {kind!r}; expected 'response.create'"
                + (" or 'response.append'." if self.append_mode else "."),
                "type",
            )

    async def on_create(self, body: dict[str, Any], arrived_ns: int | None = None) -> None:
        cfg = self.cfg
        if self.draining:
            await self.error(
                503,
                "server_shutting_down",
                "The server is shutting down; this connection closes once its responses finish.",
                type_="server_error",
            )
            return
        if self.loop.time() - self.opened >= cfg.ws_lifetime_s:
            await self.error(
                400,
                "websocket_connection_limit_reached",
                f"Responses websocket connection limit reached ({_lifetime_text(cfg.ws_lifetime_s)}). "
                "Create a new websocket connection to continue.",
            )
            await self.drain_and_close(cfg.ws_lifetime_close_code)
            return
        lane: str | None = None
        sid = body.get("stream_id")
        if sid is not None:
            if not valid_stream_id(sid):
                await self.error(400, "invalid_stream_id", INVALID_STREAM_ID_MESSAGE, "stream_id")
                return
            if sid not in self.named_lanes:
                if len(self.named_lanes) >= cfg.ws_max_lanes:
                    await self.error(
                        400,
                        "websocket_stream_limit_reached",
                        f"This WebSocket connection has reached its maximum number of distinct stream IDs "
                        f"({cfg.ws_max_lanes}). Reuse an existing stream_id or open a new WebSocket connection.",
                        "stream_id",
                        sid,
                    )
                    return
                self.named_lanes.add(sid)
            lane = sid
        if body.get("background") is True:
            await self.error(
                400,
                "unsupported_parameter",
                "The 'background' parameter is not supported over WebSocket.",
                "background",
                lane,
            )
            return
        limited = self.s.check_rate()
        if limited is not None:
            await self.request_error(limited[0], lane)
            return
        waiting = max(0, self.outstanding - cfg.ws_max_in_flight)
        if waiting >= cfg.ws_max_queued:
            await self.error(
                429,
                "websocket_queue_full",
                f"This WebSocket connection already has {waiting} response.create events waiting "
                f"behind {cfg.ws_max_in_flight} in flight (limit {cfg.ws_max_queued}). Wait for responses "
                "to finish or open another connection.",
                None,
                lane,
            )
            return
        if body.get("loopbench_mode") == "append":
            self.append_mode = True
        # Its API-tier clock starts at arrival only if nothing is ahead of it (lane or slots).
        immediate = lane not in self.workers and self.outstanding < cfg.ws_max_in_flight
        self.queues.setdefault(lane, deque()).append((body, arrived_ns if immediate else None))
        self.outstanding += 1
        if lane not in self.workers:
            self.workers[lane] = asyncio.ensure_future(self.lane_worker(lane))

    async def shutdown(self, code: int, timeout_s: float) -> None:
        """Refuse new creates, let started responses finish (bounded), then close with ``code``."""
        self.draining = True
        # Creates accepted but not started will not run: say so instead of dropping them.
        with contextlib.suppress(_Closed):
            for lane, queue in list(self.queues.items()):
                for _ in range(len(queue)):
                    await self.error(
                        503,
                        "server_shutting_down",
                        "The server is shutting down; this response was not started.",
                        None,
                        lane,
                        "server_error",
                    )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drain_and_close(code), timeout_s)
        for task in list(self.workers.values()):
            task.cancel()
        await self.close_now(code)

    async def drain_and_close(self, code: int) -> None:
        """Let accepted responses finish, then close (the lifetime limit)."""
        for paused in self.paused.values():
            paused.future.cancel()
        for queue in self.queues.values():
            self.outstanding -= len(queue)
            queue.clear()
        await asyncio.gather(*self.workers.values(), return_exceptions=True)
        await self.close_now(code)

    async def on_steer(self, body: dict[str, Any]) -> None:
        # Steering (docs/protocol.md §2.3) is not simulated: say so in the documented shape.
        await self.send(
            [
                {
                    "type": "response.steer.failed",
                    "sequence_number": 0,
                    "error": {
                        "code": "steering_not_supported",
                        "message": "Steering is not supported by the loopbench reference server.",
                        "type": "invalid_request_error",
                    },
                    "steer": {
                        "input": body.get("input"),
                        "previous_response_id": body.get("previous_response_id"),
                    },
                }
            ]
        )

    async def on_append(self, body: dict[str, Any]) -> None:
        try:
            append = parse_append(body)
        except RequestError as err:
            await self.request_error(err)
            return
        rid = append.response_id
        paused = self.paused.get(rid)
        if paused is None:
            if rid in self.active_appends:
                await self.error(
                    400,
                    "response_not_paused",
                    f"Response '{rid}' is still generating; send response.append after its response.done.",
                    "response_id",
                )
            else:
                await self.error(
                    400,
                    "response_not_found",
                    f"Response with id '{rid}' is not waiting for input on this connection.",
                    "response_id",
                )
            return
        outputs = {
            it["call_id"]
            for it in append.input_items
            # an output without a call_id (a tool the client ran by itself) answers no call
            if it.get("type") == "function_call_output" and isinstance(it.get("call_id"), str)
        }
        unknown = sorted(outputs - paused.call_ids)
        if unknown:
            await self.error(
                400,
                "invalid_append_input",
                f"function_call_output for call_id(s) {', '.join(unknown)} that response '{rid}' did not make.",
                "input",
                paused.lane,
            )
            return
        del self.paused[rid]
        paused.future.set_result(append)

    # -- lanes -------------------------------------------------------------------------------

    async def lane_worker(self, lane: str | None) -> None:
        queue = self.queues[lane]
        try:
            while queue and not self.closed:
                async with self.slots:
                    body, arrived_ns = queue.popleft()
                    try:
                        await self.process(lane, body, arrived_ns)
                    finally:
                        self.outstanding -= 1
        except _Closed as closing:
            if closing.code:
                await self.close_now(closing.code)
        finally:
            # No await between the empty check and this: the reader sees a consistent state.
            if self.workers.get(lane) is asyncio.current_task():
                del self.workers[lane]

    async def resolve(self, req: CreateRequest, lane: str | None) -> _Resolved:
        prev = req.previous_response_id
        if prev is None:
            tools_tok = tools_tokens(req.tools)
            conv = Conversation.build(req.instructions, [], req.input_items)
            return _Resolved(conv, "none", conv.tokens + tools_tok, 0, False, tools_tok)
        entry = self.cache.lane(lane)
        same_lane = entry is not None and entry.response_id == prev
        if same_lane:
            self.cache.touch(lane)
        else:
            found = self.cache.find(prev)  # a fork from another lane's latest response
            entry = found[1] if found else None
        if entry is not None:
            tools_cached = entry.tools == req.tools
            tools_tok = entry.tools_tokens if tools_cached else tools_tokens(req.tools)
            if entry.instructions == req.instructions:
                conv = entry.conversation.fork()
                processed = conv.extend(req.input_items)
            else:
                conv = Conversation.build(req.instructions, entry.conversation.chain_items)
                processed = conv.head_tokens + conv.extend(req.input_items)
            processed += 0 if tools_cached else tools_tok
            return _Resolved(conv, "hit", processed, 0, entry.stored, tools_tok)
        stored = await self.s.from_store(req) if req.store else None
        if stored is None:
            raise previous_not_found(prev)
        conv, rehydrated = stored
        tools_tok = tools_tokens(req.tools)
        processed = conv.head_tokens + conv.extend(req.input_items) + tools_tok
        return _Resolved(conv, "store", processed, rehydrated, True, tools_tok)

    async def process(self, lane: str | None, body: dict[str, Any], arrived_ns: int | None) -> None:
        if not self.cfg.access_log:
            await self._process(lane, body, arrived_ns)
            return
        started = time.perf_counter_ns()
        outcome = "closed"  # the connection went away mid-response
        try:
            outcome = await self._process(lane, body, arrived_ns)
        finally:
            log_ws_create(self.ws.scope, lane, outcome, started)

    async def _process(self, lane: str | None, body: dict[str, Any], arrived_ns: int | None) -> str:
        """One response.create; returns how it ended (the access log's outcome)."""
        if arrived_ns is None:
            # Validating and resolving a create that waited behind others is new work now,
            # after the tokens due.  One that started at once already waited in on_message:
            # a second wait would add its own cap to the first (docs/server.md).
            await yield_to_due()
        fault = await self.s.draw_fault(websocket=True)
        if fault.kind == "error":
            err = fault_error(fault)
            await self.request_error(err, lane)
            return f"error {err.status} {err.code}"
        if fault.kind == "evict":
            self.cache.clear()
        # Reading, parsing and resolving run inside the modelled API-tier time
        # (sim.mark_arrival); an injected latency spike comes before it.
        mark_arrival(None if fault.kind == "spike" else arrived_ns)
        prev = body.get("previous_response_id")
        cached = self.cache.lane(lane)
        same_lane = isinstance(prev, str) and cached is not None and cached.response_id == prev
        rng = self.s.rng()
        try:
            req = parse_create(body, websocket=True)
            res = await self.resolve(req, lane)
            fitted = self.s.fit_window(req, res.conv, res.tools_tokens)
        except RequestError as err:
            if same_lane and isinstance(prev, str):
                self.cache.evict_response(prev)
            await self.request_error(err, lane)
            return f"error {err.status} {err.code}"
        if fitted.truncated:
            # The truncated context is a new prefix: rendered anew, cached and stored as a new chain.
            res.conv, res.rehydrated_tokens, res.parent_stored = fitted.conv, 0, False
            res.processed_tokens = fitted.conv.tokens + res.tools_tokens
        first = self.started == 0
        self.started += 1
        cost = RequestCost(
            new_connection=first,
            websocket=True,
            connection_resolved=not first,
            processed_tokens=res.processed_tokens,
            rehydrated_tokens=res.rehydrated_tokens,
        )

        def remember(response_id: str, conv_out: Conversation) -> None:
            self.cache.put(
                lane,
                CachedResponse(
                    response_id, conv_out, req.instructions, req.tools, res.tools_tokens, req.store
                ),
            )

        # A WebSocket response has no headers of its own: the upgrade request's X-Request-ID.
        upgrade_id = self.ws.headers.get("x-request-id")
        job = Job(req, res.conv, cost, rng, res.cache, fitted, res.parent_stored)
        job.request_id = upgrade_id
        await self.s.admit(job, remember=remember)
        self.segment_started()
        try:
            if self.append_mode:
                # generate() applies a drawn disconnect/stall itself; the append loop does not.
                status = await self.run_append(job, self.s.faulty(self.send, websocket=True))
            else:
                status = await self.s.generate(job, self.send)
        except _Closed:
            raise
        except fault_send.InjectedDisconnect:
            raise _Closed(self.cfg.ws_fault_close_code) from None
        except Exception as exc:
            status = "failed"
            with contextlib.suppress(ValueError):
                await self.send(self.s.crashed(job.builder, exc))
        if status == "failed" and same_lane and isinstance(prev, str):
            self.cache.evict_response(prev)
        return status

    # -- the append prototype (docs/protocol.md §5) --------------------------------------------------

    async def run_append(self, job: Job, send: Send) -> str:
        """One response for a whole rollout: pause after function calls, resume on append.

        Pre-inference work was charged once, before this; post-inference work is
        charged once, after the last segment, off the critical path.
        """
        req, conv, builder, timing = job.req, job.conv, job.builder, job.timing
        rng = self.s.rng()
        rid = builder.response_id
        await send(builder.start())
        tool_choice, metadata = req.tool_choice, req.metadata
        total_out = 0
        total_reasoning = 0
        seg_timing = dict(timing)
        self.active_appends.add(rid)
        status = "cancelled"
        try:
            while True:
                n_before = len(builder.output)
                seg = await self.s.run_segment(
                    req, conv, builder, send, rng, tool_choice=tool_choice, metadata=metadata
                )
                # Lateness is the response's first token's: only the first segment has one.
                seg.record(seg_timing, job.arrived_ns if n_before == 0 else None)
                if n_before == 0:
                    job.first_delta_ns = seg.first_delta_ns
                seg_timing["api_post"] = 0.0
                total_out += seg.output_tokens
                total_reasoning += seg.reasoning_tokens
                new_output = builder.output[n_before:]
                conv.extend(seg.cursor.conversation_items(new_output))
                usage = seg.usage(total_out, total_reasoning)
                if not seg.calls or seg.truncated:
                    break
                calls = frozenset(
                    str(it.get("call_id")) for it in new_output if it.get("type") == "function_call"
                )
                future: asyncio.Future[AppendRequest] = self.loop.create_future()
                self.paused[rid] = _Paused(future, calls, req.stream_id)
                await send([builder.pause({"usage": usage, "sim_timing": seg_timing})])
                append = await future
                self.segment_started()
                conv.extend(append.input_items)
                if append.metadata is not None:
                    metadata = append.metadata
                if append.tool_choice is not None:
                    tool_choice = append.tool_choice
                try:
                    self.s.append_fits(req, conv, metadata)
                except RequestError as err:
                    status = "failed"
                    await send(self.s.failure(builder, err.message, err.code or "server_error"))
                    return status
                # Later segments pay no API-tier work: the sampling loop simply continues.
                seg_timing = dict(
                    timing,
                    api_pre=0.0,
                    api_queue=0.0,
                    cache="hit",
                    processed_input_tokens=0,
                )
            self.s.spawn(self.s.sim.post_inference(job.cost))
            job.on_output(conv)
            status = await self.s.finish(builder, send, usage, seg_timing, truncated=seg.truncated)
        except Exception:
            status = "failed"
            raise
        finally:
            self.active_appends.discard(rid)
            self.paused.pop(rid, None)
            self.s.log_response(job, status, seg_timing)
        return status
