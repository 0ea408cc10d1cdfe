"""The response lifecycle over HTTP: retrieve, delete, input items, cancel, background creates.

``app.py`` routes here: ``GET /v1/responses/{id}`` (``?stream=true&starting_after=N``
resumes a background response's events), ``DELETE /v1/responses/{id}``,
``GET /v1/responses/{id}/input_items`` and ``POST /v1/responses/{id}/cancel``, and a
``background: true`` create.  What each answers is decided in
:mod:`.core.lifecycle`; running background responses live in :mod:`.background`;
finished ones, and every ``store: true`` response, in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from harness.wire import events as ev
from reference_server import fault_send
from reference_server.background import (
    BackgroundRun,
    BackgroundRuns,
    EventGap,
    EventLog,
    gap_error,
)
from reference_server.core.config import ServerConfig
from reference_server.core.faults import NO_FAULT
from reference_server.core.lifecycle import (
    QUEUED,
    TERMINAL,
    cancel_refusal,
    input_item_views,
    not_found,
    not_streamable,
    page,
    parse_list_query,
)
from reference_server.core.validation import CreateRequest, RequestError, invalid
from reference_server.event_stream import SseResponse
from reference_server.json_answers import error_response, json_response
from reference_server.service import Job, Service, now_s

Frames = AsyncGenerator[list[bytes], None]


Handler = Callable[["Lifecycle", Request, str, str], Awaitable[Response]]


def _route(handler: Handler) -> Callable[[Lifecycle, Request], Awaitable[Response]]:
    """A ``/v1/responses/{id}`` route: the API key checked before anything is looked up, the
    handler given the request id and the response id, a :class:`RequestError` it raises
    answered as the error it names."""

    @functools.wraps(handler)
    async def route(self: Lifecycle, request: Request) -> Response:
        request_id = self._request_id()
        denied = self.service.check_api_key(request.headers)
        if denied is not None:
            return error_response(denied, request_id)
        try:
            return await handler(self, request, request_id, request.path_params["response_id"])
        except RequestError as err:
            return error_response(err, request_id)

    return route


class Lifecycle:
    def __init__(self, service: Service, config: ServerConfig) -> None:
        self.service = service
        self.store = service.store
        self.runs = BackgroundRuns(config.max_background)
        self._done_marker = config.sse_done_marker

    # -- answers -------------------------------------------------------------------------------
    def _request_id(self) -> str:
        return ev.new_id("req", self.service.rng())

    def _stream(self, frames: Frames, request_id: str, ended: Callable[[], bool]) -> Response:
        headers = {"x-request-id": request_id}
        return _FrameStream(frames, headers, done_marker=self._done_marker, ended=ended)

    # -- GET /v1/responses/{id} ----------------------------------------------------------------
    @_route
    async def retrieve(self, request: Request, request_id: str, rid: str) -> Response:
        if _flag(request.query_params.get("stream")):
            return await self._replay(rid, request, request_id)
        run = self.runs.get(rid)
        if run is not None:
            return json_response(run.current(), request_id)
        stored = await self.store.get_object(rid)
        if stored is None:
            raise not_found(rid)
        return json_response(stored.response, request_id)

    async def _replay(self, rid: str, request: Request, request_id: str) -> Response:
        after = _starting_after(request.query_params.get("starting_after"))
        run = self.runs.get(rid)
        if run is not None:
            try:
                run.log.after(after)  # refuse a gap now, while an error status can still be sent
            except EventGap as gap:
                raise gap_error(rid, gap.first_kept) from None
            return self._follow(run, after, request_id)
        stored = await self.store.get_object(rid)
        if stored is None:
            raise not_found(rid)
        if not stored.background:
            raise not_streamable(rid)
        blob = await self.store.events(rid)
        if blob is None:
            # Queued or in progress in another process (--workers), or cut by a crash.
            raise not_found(rid)
        try:
            frames = EventLog.unpack(blob).after(after)
        except EventGap as gap:
            raise gap_error(rid, gap.first_kept) from None
        status = stored.response["status"]
        return self._stream(_once(frames), request_id, lambda: status != "cancelled")

    # -- DELETE /v1/responses/{id} -------------------------------------------------------------
    @_route
    async def delete(self, request: Request, request_id: str, rid: str) -> Response:
        run = self.runs.get(rid)
        if run is not None:
            # Deleted data cannot keep being generated: the run is stopped first.
            await self.runs.stop(run, "cancelled")
        if not await self.store.delete(rid):
            raise not_found(rid)
        return json_response({"id": rid, "object": "response", "deleted": True}, request_id)

    # -- GET /v1/responses/{id}/input_items ----------------------------------------------------
    @_route
    async def input_items(self, request: Request, request_id: str, rid: str) -> Response:
        query = parse_list_query(dict(request.query_params))
        items = await self._inputs(rid)
        return json_response(page(input_item_views(items, rid), query), request_id)

    async def _inputs(self, rid: str) -> list[dict[str, Any]]:
        """Every item the response was generated from: its chain's, then its own input."""
        run = self.runs.get(rid)
        if run is not None:
            return run.input_items
        stored = await self.store.get_object(rid)
        if stored is None:
            raise not_found(rid)
        chain = await self.store.get(rid)
        items = chain.items if chain is not None else await self.store.own_items(rid)
        if items is None:
            return []  # failed before anything was stored (a crash, an injected failure)
        return items[: len(items) - stored.n_output]

    # -- POST /v1/responses/{id}/cancel --------------------------------------------------------
    @_route
    async def cancel(self, request: Request, request_id: str, rid: str) -> Response:
        run = self.runs.get(rid)
        if run is not None:
            await self.runs.stop(run, "cancelled")
            # It may have ended on its own meanwhile: cancelling a completed run is refused.
            refused = cancel_refusal(True, run.status) if run.status != "cancelled" else None
            if refused is not None:
                raise refused
            return json_response(run.snapshot, request_id)
        stored = await self.store.get_object(rid)
        if stored is None:
            raise not_found(rid)
        status = stored.response["status"]
        refused = cancel_refusal(stored.background, status)
        if refused is not None:
            raise refused
        if status in TERMINAL:
            return json_response(stored.response, request_id)  # cancelled already: idempotent
        # Queued or in progress here but run by no task of this process (a restart cut it).
        response = dict(stored.response, status="cancelled")
        self.store.put_object(rid, response, background=True, n_output=0)
        return json_response(response, request_id)

    # -- POST /v1/responses with background: true ---------------------------------------------
    async def create_background(self, job: Job, request_id: str) -> Response:
        req, conv = job.req, job.conv
        if not req.store:
            return error_response(
                invalid(
                    "Invalid value for 'background': background mode requires 'store' to be true.",
                    "background",
                ),
                request_id,
            )
        refused = self.runs.refusal()
        if refused is not None:
            return error_response(refused, request_id)
        response_id = ev.new_id("resp", job.rng)
        announce = ev.ResponseBuilder(
            response_id, model=req.model, created_at=now_s(), request=req.raw
        )
        run = BackgroundRun(
            response_id, announce.response_object(QUEUED), list(conv.chain_items), self.store
        )
        own_input = conv.items[len(conv.items) - len(req.input_items) :]
        calls = conv.function_calls

        async def generation(run: BackgroundRun) -> None:
            # Faults drawn for the create belong to its connection, not to the detached work.
            fault_send.current.set(NO_FAULT)
            try:
                await self.service.admit(job, response_id=response_id)
                job.builder.created_at = run.created_at
                run.builder = job.builder
                await self.service.generate(job, run.publish_generated)
                run.end()
            except asyncio.CancelledError:
                self._stopped(run, req, own_input, calls)
            except Exception as exc:
                self._crashed(run, exc)

        self.runs.start(run, generation)
        if not req.stream:
            return json_response(run.snapshot, request_id)
        return self._follow(run, -1, request_id)

    def _follow(self, run: BackgroundRun, after: int, request_id: str) -> Response:
        """A running response's events after ``after``; ``[DONE]`` unless it was cancelled."""
        return self._stream(
            run.follow(after), request_id, lambda: run.status in TERMINAL - {"cancelled"}
        )

    def _stopped(
        self, run: BackgroundRun, req: CreateRequest, own_input: list[dict[str, Any]], calls: int
    ) -> None:
        """A cancel (or the shutdown) stopped the run: store what it had and how it ended."""
        if run.status in TERMINAL:
            run.end()  # it sent its terminal event just before the cancel landed
            return
        # The input stays listable (input_items) and chainable, like any stored response's.
        if req.previous_response_id is not None:
            self.store.put(run.response_id, req.previous_response_id, own_input, calls)
        else:
            self.store.put(run.response_id, None, run.input_items, calls)
        builder = run.builder or ev.ResponseBuilder(
            run.response_id, model=req.model, created_at=run.created_at, request=req.raw
        )
        if run.stop_reason == "shutdown":
            message = "The server shut down before this background response finished."
            run.end(dict(builder.response_object("failed"), error=_server_error(message)))
            return
        run.end(builder.response_object("cancelled"))

    def _crashed(self, run: BackgroundRun, exc: Exception) -> None:
        message = f"The server had an error: {type(exc).__name__}."
        if run.builder is not None and run.status not in TERMINAL:
            with contextlib.suppress(ValueError):
                events = self.service.failure(run.builder, message)
                # Numbered like the rest of the run's events (publish_generated's shift).
                for event in events:
                    event["sequence_number"] += 1
                run.move("failed", events[-1]["response"])
                run.publish(events)
        if run.status not in TERMINAL:
            run.move("failed", dict(run.snapshot, status="failed", error=_server_error(message)))
        run.end()


def _server_error(message: str) -> dict[str, str]:
    return {"code": "server_error", "message": message}


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _starting_after(value: str | None) -> int:
    if value is None or value == "":
        return -1
    try:
        after = int(value)
    except ValueError:
        after = -2
    if after < -1:
        raise invalid(
            f"Invalid 'starting_after': expected a sequence number (an integer >= 0), got {value!r}.",
            "starting_after",
        )
    return after


async def _once(frames: list[bytes]) -> Frames:
    if frames:
        yield frames


class _FrameStream(SseResponse):
    """Ready SSE frames; a disconnect stops the reading, not the run."""

    def __init__(
        self,
        frames: Frames,
        headers: dict[str, str],
        *,
        done_marker: bool,
        ended: Callable[[], bool],
    ) -> None:
        super().__init__(headers, done_marker=done_marker)
        self._frames = frames
        self._ended = ended

    async def produce(self, write: Callable[[bytes], Awaitable[None]]) -> bool:
        async with contextlib.aclosing(self._frames) as frames:
            async for batch in frames:
                await write(b"".join(batch))
        return self._ended()
