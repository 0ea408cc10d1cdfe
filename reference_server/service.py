"""What the HTTP and WebSocket paths share: admission, one response's pipeline, the store.

``app.py`` (HTTP) and ``ws_connection.py`` (WebSocket) each read, validate and
answer in their own framing; both call one :class:`Service` for the rate limit
and API key, the request's injected fault, a ``previous_response_id`` resolved
from the store, the modelled API-tier wait, running one response through the
simulator and the pure output model, and persisting ``store: true`` responses.
Everything that decides *what* to send lives in ``core/``; this decides *when*.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import orjson
from starlette.datastructures import Headers

from harness.wire import events as ev
from reference_server import fault_send
from reference_server.core.api_tier import RequestCost
from reference_server.core.arguments import mentioned_paths
from reference_server.core.config import ServerConfig
from reference_server.core.context_window import (
    Fitted,
    Limits,
    check_max_output,
    fit,
    requested_output,
    truncation_mode,
)
from reference_server.core.conversation import Conversation, tools_tokens
from reference_server.core.engine import NS_PER_MS
from reference_server.core.faults import ERROR_STATUSES, Fault, FaultInjector
from reference_server.core.limits import TokenBucket
from reference_server.core.output import (
    HINT_OUTPUT_TOKENS,
    Lengths,
    OutputCursor,
    OutputPlan,
    plan_output,
)
from reference_server.core.profiles import load_profiles
from reference_server.core.reasoning import reasoning_budget
from reference_server.core.validation import CreateRequest, RequestError, invalid, reasoning_options
from reference_server.metrics import ServerCounters
from reference_server.sim import Simulator, decode_seed, mark_arrival
from reference_server.store import SqliteStore
from reference_server.timer import yield_to_due
from reference_server.timing_log import TimingLog, unix_offset_ns

# Events that are due together go out together: one SSE write or one batch of WS frames.
Send = fault_send.Send
# Called with the finished conversation just before the terminal event goes out, so a
# client that chains from the response the moment it completes always finds it.
OnOutput = Callable[[Conversation], None]

HINT_FAIL = "loopbench.fail"


#: time_ns() − perf_counter_ns(), measured once per process (sim_timing.arrived_unix_ns)
_UNIX_OFFSET_NS = unix_offset_ns()


@dataclass(slots=True)
class Segment:
    """What one stretch of sampling produced (a whole response, or one append-mode segment)."""

    output_tokens: int
    cached_tokens: int
    input_tokens: int
    calls: int
    truncated: bool
    engine_ttft: float
    timing: dict[str, float]
    reasoning_tokens: int
    cursor: OutputCursor  # what the conversation keeps of its output: cursor.conversation_items
    # perf_counter_ns just after the first output delta was handed to the transport
    first_delta_ns: int | None
    # ... and just after the last one (the decode span the server wrote, sim_timing)
    last_delta_ns: int | None = None

    def record(self, timing: dict[str, Any], arrived_ns: int | None = None) -> None:
        """Add this segment's engine times to a response's ``sim_timing``.

        ``arrived_ns``: where the response's API-tier clock started, when this segment's
        first delta is the response's first token: ``first_token_late_ms`` is how much
        later than arrival + modelled TTFT that delta was written (absent without a delta).
        """
        timing.update(self.timing)
        timing["cached_input_tokens"] = self.cached_tokens
        ttft = timing["api_pre"] + timing["api_queue"] + self.engine_ttft
        timing["ttft"] = ttft
        if arrived_ns:
            # CLOCK_MONOTONIC, shared by every process of the host: a client on the same host
            # can tell how long the request waited before this server read it (docs/server.md);
            # the Unix-epoch twin is for clients that stamp on the epoch (the gevent edge)
            timing["arrived_clock_ns"] = arrived_ns
            timing["arrived_unix_ns"] = arrived_ns + _UNIX_OFFSET_NS
        if arrived_ns and self.first_delta_ns is not None:
            timing["first_token_late_ms"] = (
                self.first_delta_ns - arrived_ns - round(ttft * NS_PER_MS)
            ) / NS_PER_MS
        if arrived_ns and self.last_delta_ns is not None:
            # The same for the last token (due a modelled decode after the first): a client's
            # decode span that is longer than the modelled one is the server's by this much
            # (minus the first token's lateness), the rest the wire's and the client's.
            due_ns = arrived_ns + round((ttft + timing["decode"]) * NS_PER_MS)
            timing["last_token_late_ms"] = (self.last_delta_ns - due_ns) / NS_PER_MS

    def usage(self, output_tokens: int, reasoning_tokens: int | None = None) -> dict[str, Any]:
        """``usage`` of the response; ``reasoning_tokens`` defaults to this segment's."""
        return ev.usage(
            self.input_tokens,
            self.cached_tokens,
            output_tokens,
            cache_write_tokens=self.input_tokens - self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens
            if reasoning_tokens is None
            else reasoning_tokens,
        )


@dataclass(slots=True)
class Job:
    """One create: validated, its conversation resolved and fitted; then, once :meth:`Service.admit`
    has waited its API-tier work, what generating it needs."""

    req: CreateRequest
    conv: Conversation
    cost: RequestCost
    rng: random.Random
    cache: str = "none"  # where the conversation came from: none, store or the WS cache
    fitted: Fitted | None = None  # what the context window dropped (sim_timing reports it)
    # The previous response is stored under its id: this one stores only what it adds.  A
    # truncated conversation is a new prefix, stored as a new chain.
    parent_stored: bool = True
    # For --timing-log: which API's shapes the client sees, and its X-Request-ID header.
    api: str = "responses"
    request_id: str | None = None
    # Set by admit():
    builder: ev.ResponseBuilder = field(init=False)
    timing: dict[str, Any] = field(init=False)  # the response's sim_timing, filled in as generated
    on_output: OnOutput = field(init=False)
    # perf_counter_ns the API-tier clock started at: the modelled first token is due at
    # arrived_ns + timing["ttft"] (sim_timing.first_token_late_ms; docs/server.md)
    arrived_ns: int = field(default=0, init=False)
    first_delta_ns: int | None = field(default=None, init=False)  # (see Segment)


def previous_not_found(response_id: str) -> RequestError:
    return invalid(
        f"Previous response with id '{response_id}' not found.",
        "previous_response_id",
        "previous_response_not_found",
    )


def fault_error(fault: Fault) -> RequestError:
    """The error an injected ``error`` fault answers with, in the public API's shape."""
    type_, code, message = ERROR_STATUSES[fault.status]
    return RequestError(fault.status, code, message, type_=type_)


class Service:
    def __init__(self, config: ServerConfig, store: SqliteStore | None = None) -> None:
        self.config = config
        api, engine = load_profiles(config.api_profile, config.engine_profile, config.overrides)
        self.sim = Simulator(
            api, engine, seed=config.seed, min_delta_interval_ms=config.min_delta_interval_ms
        )
        self.limits = Limits(engine.context_window_tokens, engine.max_output_tokens)
        self.store = store or SqliteStore(
            config.store_path,
            retention_s=config.store_retention_s,
            max_responses=config.store_max_responses,
        )
        self.faults = FaultInjector(config.faults)
        # Workers share the store: their id sequences must not overlap (2**40 ids each).
        self._counter = itertools.count(config.worker_index << 40)
        self._background: set[asyncio.Task[Any]] = set()
        # Bytes: compare_digest takes str only when it is ASCII, and a key may not be.
        self._keys = tuple(k.encode() for k in dict.fromkeys(config.api_keys))
        self._bucket = (
            TokenBucket(config.rate_limit_rps, config.rate_limit_burst)
            if config.rate_limit_rps
            else None
        )
        self._nested_errors = config.sse_error_shape != "flat"
        self.counters = ServerCounters()  # GET /metrics (reference_server/metrics.py)
        #: WebSocket connections the --ws-fault-close-after cut has fired on
        self.ws_cuts = 0
        self.timing_log = TimingLog(config.timing_log) if config.timing_log else None

    def rng(self) -> random.Random:
        return random.Random(self.config.seed * 1_000_003 + next(self._counter))

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- admission -------------------------------------------------------------------------
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
        if not key_matches(token.encode(), self._keys):
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

    async def refusal(
        self, denied: RequestError | None, *, faults: bool = True
    ) -> tuple[RequestError, float] | None:
        """What refuses an HTTP request before its body is read, with a 429's wait: ``denied``
        (connection limits, API key), the rate limit, then an injected ``error`` fault.

        An injected spike comes before the API tier: it restarts the arrival clock.
        """
        if denied is not None:
            return denied, 1.0
        limited = self.check_rate()
        if limited is not None or not faults:
            return limited
        fault = await self.draw_fault(websocket=False)
        if fault.kind == "error":
            return fault_error(fault), 1.0
        if fault.kind == "spike":
            mark_arrival()
        return None

    def faulty(self, send: Send, *, websocket: bool) -> Send:
        """``send`` with this task's drawn ``disconnect`` or ``stall`` applied at the first delta."""
        applied = partial(self.faults.applied, websocket=websocket)
        return fault_send.wrap_send(send, self.config.faults.stall_s, applied)

    async def draw_fault(self, *, websocket: bool) -> Fault:
        """This request's fault, armed for :meth:`generate` in this task; a spike is waited here."""
        fault = self.faults.draw(websocket=websocket)
        # Set every time: a WebSocket lane's task runs its creates one after another.
        fault_send.current.set(fault)
        if fault.kind == "spike":
            await fault_send.spike(self.config.faults)
        return fault

    @property
    def _unhinted_output(self) -> int:
        """The most output a request without a hint or limit may plan: the window leaves room for it."""
        fixed = self.config.default_output_tokens
        if fixed is not None:
            return fixed
        engine = self.sim.engine
        return max(engine.text_tokens.max, engine.tool_call_tokens.max)

    def fit_window(self, req: CreateRequest, conv: Conversation, tools_tok: int) -> Fitted:
        """The context window (core/context_window.py): the 400, or the conversation that fits.

        Called once the conversation is resolved and before :meth:`admit`, so a request
        that cannot fit is answered before any modelled API-tier or engine work.
        """
        check_max_output(req, self.limits)
        mode = truncation_mode(req)
        fitted = fit(
            conv,
            req.instructions,
            extra_tokens=tools_tok,
            output_tokens=requested_output(req, self._unhinted_output, self.limits),
            window=self.limits.context_window_tokens,
            truncation=mode,
        )
        fitted.auto = mode == "auto"
        return fitted

    def append_fits(self, req: CreateRequest, conv: Conversation, metadata: dict[str, str]) -> None:
        """An append-mode segment's context must fit too (no truncation: the response goes on)."""
        seg = replace(req, metadata=metadata)
        fit(
            conv,
            req.instructions,
            extra_tokens=tools_tokens(req.tools),
            output_tokens=requested_output(seg, self._unhinted_output, self.limits),
            window=self.limits.context_window_tokens,
            truncation="disabled",
        )

    # -- store -----------------------------------------------------------------------------
    async def from_store(self, req: CreateRequest) -> tuple[Conversation, int] | None:
        """The stored chain ``req`` continues, with its instructions: (conversation, its tokens)."""
        assert req.previous_response_id is not None
        stored = await self.store.get(req.previous_response_id)
        if stored is None:
            return None
        conv = Conversation.build(req.instructions, stored.items)
        return conv, conv.chain_tokens

    async def resolve_http(self, req: CreateRequest) -> tuple[Conversation, int, str]:
        """An HTTP request's conversation: (conversation, tokens re-hydrated, cache label)."""
        if req.previous_response_id is None:
            return Conversation.build(req.instructions, [], req.input_items), 0, "none"
        found = await self.from_store(req)
        if found is None:
            raise previous_not_found(req.previous_response_id)
        conv, rehydrated = found
        conv.extend(req.input_items)
        return conv, rehydrated, "store"

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

    # -- one response ----------------------------------------------------------------------
    async def admit(
        self,
        job: Job,
        *,
        remember: Callable[[str, Conversation], None] | None = None,
        response_id: str | None = None,
    ) -> Job:
        """Wait the modelled API-tier work; the job's output is stored (and ``remember``-ed).

        ``response_id`` is given when the id was announced before this wait (background mode).
        """
        req, conv, cost, fitted = job.req, job.conv, job.cost, job.fitted
        modelled, job.arrived_ns = await self.sim.pre_inference(cost)
        timing = job.timing = dict(modelled)
        timing["cache"] = job.cache
        self.counters.context[(cost.websocket, job.cache)] += 1
        timing["processed_input_tokens"] = cost.processed_tokens + cost.rehydrated_tokens
        rid = response_id or ev.new_id("resp", job.rng)
        added_from = len(conv.items) - len(req.input_items)
        parent_stored = job.parent_stored and not (fitted is not None and fitted.truncated)
        if fitted is not None:
            fitted.record(timing)

        def on_output(conv_out: Conversation) -> None:
            if remember is not None:
                remember(rid, conv_out)
            added = conv_out.items[added_from:]
            self.store_response(req, rid, conv_out, parent_stored=parent_stored, added_items=added)

        job.on_output = on_output
        job.builder = ev.ResponseBuilder(
            rid, model=req.model, created_at=now_s(), request=req.raw, stream_id=req.stream_id
        )
        return job

    async def answer(self, job: Job, send: Send, *, fail_in_band: bool = False) -> Job:
        """A non-streamed answer: admit, then generate through ``send``.  One awaitable, so
        the disconnect watch covers the API-tier wait too: with a long input, or a queue for
        the API workers, it lasts seconds, and a client that gave up must not hold one.

        ``fail_in_band``: a crash sends the failing events through ``send`` (Chat, Messages)
        instead of raising (``/v1/responses``).
        """
        await self.admit(job)
        await (self.generate_or_fail if fail_in_band else self.generate)(job, send)
        return job

    def failure(
        self, builder: ev.ResponseBuilder, message: str, code: str = "server_error"
    ) -> list[dict[str, Any]]:
        """``error`` + ``response.failed`` in the configured error shape."""
        self.counters.responses["failed"] += 1
        return builder.fail(code, message, nested=self._nested_errors)

    def crashed(self, builder: ev.ResponseBuilder, exc: Exception) -> list[dict[str, Any]]:
        """A bug must not leave the client hanging: the events that fail the response."""
        return self.failure(builder, f"The server had an error: {type(exc).__name__}.")

    async def generate_or_fail(self, job: Job, send: Send) -> bool:
        """Stream one response over HTTP; whether it ran to its end without crashing.

        A crash sends the events that fail the response (:meth:`crashed`) through ``send``;
        an injected disconnect propagates: the connection is dropped, not the response failed.
        """
        try:
            await self.generate(job, send)
        except fault_send.InjectedDisconnect:
            raise
        except Exception as exc:
            with contextlib.suppress(ValueError):
                await send(self.crashed(job.builder, exc))
            return False
        return True

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
        reasoning = reasoning_options(req.raw)
        # Loopbench's own runs plan exactly (hints) and pay nothing for reading the conversation.
        unhinted_calls = bool(req.tools) and HINT_OUTPUT_TOKENS not in metadata
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
            lengths=Lengths(
                self.sim.engine.text_tokens,
                self.sim.engine.tool_call_tokens,
                weights=self.sim.engine.tool_weights,
            ),
            reasoning_tokens=reasoning_budget(
                metadata,
                reasoning.effort,
                self.sim.engine.reasoning_tokens,
                efforts=self.sim.engine.reasoning_effort_tokens,
                rng=rng,
                ceiling=req.reasoning_ceiling,
            ),
            summary=reasoning.summary,
            include_encrypted=reasoning.include_encrypted,
            context_paths=mentioned_paths(conv.items) if unhinted_calls else (),
        )
        cursor = OutputCursor(builder, plan, rng)
        first_delta_ns = last_delta_ns = 0

        async def emit(sizes: Sequence[int]) -> None:
            nonlocal first_delta_ns, last_delta_ns
            if len(sizes) == 1:
                events = cursor.emit(sizes[0])
            else:
                events = []
                for k in sizes:
                    events.extend(cursor.emit(k))
            if events:  # hidden reasoning tokens without a summary produce none
                await send(events)
                # The clock read of a response's lateness: the send has handed the bytes
                # to the transport (encoding and the ASGI layers included).
                last_delta_ns = time.perf_counter_ns()
                if not first_delta_ns:
                    first_delta_ns = last_delta_ns

        input_tokens = conv.tokens + tools_tok
        static_prefix: tuple[int, int] | None = (hash(orjson.dumps(req.tools)), tools_tok)
        hashes = conv.prefix_hashes
        if req.cache_prefixes is not None:
            # Messages prompt caching: only the marked prefixes (tools included) are cached.
            hashes, static_prefix = req.cache_prefixes, None
        inf = await self.sim.inference(
            hashes,
            input_tokens,
            plan.output_tokens,
            # Content-derived, so every transport replays the same bursts (paired comparisons).
            decode_seed(conv.items),
            emit,
            static_prefix=static_prefix,
            reasoning_tokens=plan.reasoning_tokens,
            insert_hashes=req.cache_writes,
        )
        closing = cursor.finish()
        if closing:
            await send(closing)
        if cursor.reasoning_item is not None and static_prefix is not None:
            # The engine holds the KV of the reasoning it just decoded: a continuation that
            # carries the item (kept by the store or a WebSocket cache, or re-sent) finds it cached.
            with_reasoning = conv.fork()
            with_reasoning.extend([cursor.reasoning_item])
            self.sim.remember_prefix(with_reasoning.prefix_hashes[-1:], static_prefix)
        return Segment(
            output_tokens=plan.output_tokens,
            cached_tokens=int(inf.get("cached_tokens", 0)),
            input_tokens=input_tokens,
            calls=len(plan.calls),
            truncated=plan.truncated,
            engine_ttft=float(inf.get("ttft", 0.0)),
            timing={
                "engine_queue": float(inf.get("engine_queue", 0.0)),
                "prefill": float(inf.get("prefill", 0.0)),
                "decode": float(inf.get("decode", 0.0)),
                "reasoning_ms": float(inf.get("reasoning", 0.0)),
            },
            reasoning_tokens=plan.reasoning_tokens,
            cursor=cursor,
            first_delta_ns=first_delta_ns or None,
            last_delta_ns=last_delta_ns or None,
        )

    async def fail_mid_stream(
        self, builder: ev.ResponseBuilder, send: Send, rng: random.Random
    ) -> None:
        """The ``loopbench.fail: mid_stream`` hint: one output delta, then error + response.failed."""
        cursor = OutputCursor(builder, OutputPlan((), 4, truncated=False), rng)
        await send(cursor.emit(1))
        message = (
            "The server had an error while processing your request (injected by loopbench.fail)."
        )
        await send(self.failure(builder, message))

    async def finish(
        self,
        builder: ev.ResponseBuilder,
        send: Send,
        usage: dict[str, Any],
        timing: dict[str, Any],
        *,
        truncated: bool,
    ) -> str:
        """Send the terminal event; returns the response's final status."""
        if truncated:
            self.counters.responses["incomplete"] += 1
            await send([builder.incomplete("max_output_tokens", usage, {"sim_timing": timing})])
            return "incomplete"
        self.counters.responses["completed"] += 1
        await send([builder.complete(usage, {"sim_timing": timing}, completed_at=now_s())])
        return "completed"

    def _keeping_object(self, send: Send) -> Send:
        """Store the response object as its terminal event goes out (``GET /v1/responses/{id}``).

        Queued before the event is sent, so a retrieve the moment the client sees it finds it.
        """

        async def keeping(events: Sequence[dict[str, Any]]) -> None:
            if events and events[-1]["type"] in ev.TERMINAL_TYPES:
                response = events[-1]["response"]
                n_output = len(response["output"]) if response["status"] != "failed" else 0
                self.store.put_object(response["id"], response, background=False, n_output=n_output)
            await send(events)

        return keeping

    async def generate(self, job: Job, send: Send) -> str:
        """Stream one whole response; returns its final status.

        Post-inference work blocks ``response.completed`` over HTTP and runs in the
        background over WebSocket (docs/model.md).
        """
        if self.timing_log is None:
            return await self._generate(job, send)
        status = "cancelled"  # the client left (or the drain timed out) mid-response
        try:
            status = await self._generate(job, send)
        except Exception:
            status = "failed"  # the caller sends the failure events
            raise
        finally:
            self.log_response(job, status)
        return status

    def log_response(self, job: Job, status: str, timing: dict[str, Any] | None = None) -> None:
        """Queue ``job``'s ``--timing-log`` line (a no-op without the option).

        ``timing``: the ``sim_timing`` the client got, when it is not ``job.timing``
        (an append-mode response reports its last segment's).
        """
        if self.timing_log is not None:
            self.timing_log.add(
                job.api,
                job.builder.response_id,
                job.request_id,
                job.req.input_items,
                job.arrived_ns,
                job.first_delta_ns,
                status,
                job.timing if timing is None else timing,
            )

    async def _generate(self, job: Job, send: Send) -> str:
        req, conv, cost, builder, timing = job.req, job.conv, job.cost, job.builder, job.timing
        rng = self.rng()
        send = self.faulty(send, websocket=cost.websocket)
        if req.store and not req.background:  # a background run keeps its own (background.py)
            send = self._keeping_object(send)
        await send(builder.start())
        if req.metadata.get(HINT_FAIL) == "mid_stream":
            await self.fail_mid_stream(builder, send, rng)
            return "failed"
        if not req.generate:
            stages = ("engine_queue", "prefill", "decode", "reasoning_ms", "api_post")
            timing.update(dict.fromkeys(stages, 0.0), cached_input_tokens=0)
            timing["ttft"] = timing["api_pre"] + timing["api_queue"]
            job.on_output(conv)
            usage = ev.usage(conv.tokens + tools_tokens(req.tools), 0, 0)
            return await self.finish(builder, send, usage, timing, truncated=False)
        seg = await self.run_segment(
            req, conv, builder, send, rng, tool_choice=req.tool_choice, metadata=req.metadata
        )
        seg.record(timing, job.arrived_ns)
        job.first_delta_ns = seg.first_delta_ns
        if cost.websocket:
            # Storing and encoding the terminal event wait for no deadline, and streams in
            # step finish together: the other streams' tokens due now are written first
            # (over HTTP the modelled api_post wait below puts this work ~20 ms later).
            await yield_to_due()
            timing["api_post"] = 0.0
            self.spawn(self.sim.post_inference(cost))
        else:
            timing["api_post"] = await self.sim.post_inference(cost)
        conv.extend(seg.cursor.conversation_items(builder.output))
        job.on_output(conv)
        usage = seg.usage(seg.output_tokens)
        return await self.finish(builder, send, usage, timing, truncated=seg.truncated)


def key_matches(token: bytes, keys: Sequence[bytes]) -> bool:
    """Whether ``token`` is one of ``keys``, in a time that does not depend on where they differ.

    Every key is compared, a match or not, so the time says neither which key matched
    nor how long a prefix of one the token shares (``in`` on a set or ``==`` would stop
    at the first differing byte). It still depends on the number and lengths of the keys,
    which an attacker learns nothing secret from.
    """
    found = False
    for key in keys:
        found |= hmac.compare_digest(token, key)
    return found


def now_s() -> int:
    """Unix seconds, as the API's ``created_at`` and ``completed_at`` give them."""
    return int(time.time())
