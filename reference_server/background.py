"""Background responses: generated detached from any request, their events kept for resume.

A ``background: true`` create returns at once (status ``queued``) or streams its
events as they come; either way the generation runs in its own task
(:class:`BackgroundRuns`), so a client that polls, disconnects or resumes a
stream later does not change it.  Each run keeps its events as SSE frames in
an :class:`EventLog` (in memory, bounded by :data:`MAX_EVENT_BYTES`), from
which any number of readers follow it (``GET /v1/responses/{id}?stream=true
&starting_after=N``).  When the run ends, its final object and its events go to
the store (compressed), so a stream can be replayed after it ended, and the
run leaves memory.

The number of runs queued or in progress is capped (``--max-background``); on
shutdown they get the drain time, then whatever still runs is cut and stored as
``failed``.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from array import array
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from typing import Any

from harness.wire import events as ev
from harness.wire.sse import encode_event
from reference_server.core.lifecycle import IN_PROGRESS, QUEUED, TERMINAL, can_move
from reference_server.core.validation import RequestError, invalid
from reference_server.store import SqliteStore

# Events one running background response keeps in memory (its SSE frames); beyond it the
# oldest are dropped, and resuming before the first one kept is refused (docs/server.md).
MAX_EVENT_BYTES = 16 * 1024 * 1024
_HEADER = struct.Struct("<qI")  # first sequence number, number of frames
_log = logging.getLogger("reference_server.background")


class EventGap(Exception):
    """The events a reader asked for are no longer kept."""

    def __init__(self, first_kept: int) -> None:
        super().__init__(first_kept)
        self.first_kept = first_kept


def gap_error(response_id: str, first_kept: int) -> RequestError:
    return invalid(
        f"Events of response '{response_id}' before sequence_number {first_kept} are no longer "
        f"kept (at most {MAX_EVENT_BYTES // (1024 * 1024)} MiB per response); "
        f"resume with starting_after >= {first_kept - 1}.",
        "starting_after",
    )


class EventLog:
    """SSE frames by sequence number, contiguous; the oldest dropped beyond a byte budget."""

    def __init__(self, budget: int = MAX_EVENT_BYTES, first: int = 0) -> None:
        self.budget = budget
        self.first = first  # sequence number of frames[0]
        self.frames: list[bytes] = []
        self.size = 0

    @property
    def next_seq(self) -> int:
        return self.first + len(self.frames)

    def append(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.size += len(frame)
        if self.size > self.budget and len(self.frames) > 1:
            # Drop a quarter at once: the list shifts once per many appends, not per append.
            cut = max(1, len(self.frames) // 4)
            self.size -= sum(len(f) for f in self.frames[:cut])
            del self.frames[:cut]
            self.first += cut

    def after(self, seq: int) -> list[bytes]:
        """Frames with a sequence number above ``seq``; :class:`EventGap` if some are gone."""
        start = seq + 1 - self.first
        if start < 0:
            raise EventGap(self.first)
        return self.frames[start:]

    def pack(self) -> bytes:
        lengths = array("I", (len(f) for f in self.frames))
        return (
            _HEADER.pack(self.first, len(self.frames)) + lengths.tobytes() + b"".join(self.frames)
        )

    @classmethod
    def unpack(cls, blob: bytes) -> EventLog:
        first, count = _HEADER.unpack_from(blob)
        lengths = array("I")
        offset = _HEADER.size + count * lengths.itemsize
        lengths.frombytes(blob[_HEADER.size : offset])
        log = cls(budget=len(blob), first=first)
        for n in lengths:
            log.frames.append(blob[offset : offset + n])
            offset += n
        log.size = offset
        return log


class BackgroundRun:
    """One background response while it is queued or in progress."""

    def __init__(
        self,
        response_id: str,
        snapshot: dict[str, Any],
        input_items: list[dict[str, Any]],
        store: SqliteStore,
    ) -> None:
        self.response_id = response_id
        self.created_at: int = snapshot["created_at"]
        self.snapshot = snapshot  # the response object as retrieve answers it now
        self.input_items = input_items  # what input_items lists (the chain and this input)
        self.status = QUEUED
        self.log = EventLog()
        self.builder: ev.ResponseBuilder | None = None
        self.task: asyncio.Task[None] | None = None
        self.stop_reason: str | None = None  # "cancelled" (a client asked) or "shutdown"
        self.done = False
        self._wake = asyncio.Event()
        self._store = store
        self.publish(
            [
                {"type": ev.CREATED, "sequence_number": 0, "response": snapshot},
                {"type": ev.QUEUED, "sequence_number": 1, "response": dict(snapshot)},
            ]
        )
        self._persist()

    def current(self) -> dict[str, Any]:
        """The response object now: in progress with the output items completed so far."""
        if self.builder is not None and self.status == IN_PROGRESS:
            return self.builder.response_object(IN_PROGRESS)
        return self.snapshot

    def move(self, status: str, snapshot: dict[str, Any]) -> None:
        if not can_move(self.status, status):
            raise ValueError(f"background response {self.response_id}: {self.status} -> {status}")
        self.status = status
        self.snapshot = snapshot

    def publish(self, events: Sequence[dict[str, Any]]) -> None:
        for event in events:
            self.log.append(encode_event(event))
        self._wake.set()
        self._wake = asyncio.Event()

    async def publish_generated(self, events: Sequence[dict[str, Any]]) -> None:
        """The generation's ``send``: numbered after the two queued-phase events.

        The builder numbers from 0 and opens with ``response.created``, which the
        queued phase already sent; the rest move up by one.
        """
        out: list[dict[str, Any]] = []
        for event in events:
            kind = event["type"]
            if kind == ev.CREATED:
                continue
            event["sequence_number"] += 1
            if kind == ev.IN_PROGRESS:
                self.move(IN_PROGRESS, event["response"])
                self._persist()
            elif kind in ev.TERMINAL_TYPES:
                self.move(event["response"]["status"], event["response"])
            out.append(event)
        self.publish(out)

    def end(self, final: dict[str, Any] | None = None) -> None:
        """Mark the run over (with its final object if it did not send one) and store it."""
        if final is not None:
            self.move(final["status"], final)
        self.done = True
        self._persist()
        self._wake.set()

    def _persist(self) -> None:
        response = self.snapshot
        ended = response["status"] in TERMINAL
        n_output = (
            len(response["output"]) if response["status"] in ("completed", "incomplete") else 0
        )
        self._store.put_object(
            self.response_id,
            response,
            background=True,
            n_output=n_output,
            events=self.log.pack() if ended else None,
        )

    async def follow(self, after: int) -> AsyncGenerator[list[bytes], None]:
        """The frames after sequence number ``after``, as they come, until the run is over."""
        cursor = after
        while True:
            frames = self.log.after(cursor)
            if frames:
                cursor += len(frames)
                yield frames
                continue
            if self.done:
                return
            await self._wake.wait()


Generation = Callable[[BackgroundRun], Coroutine[Any, Any, None]]


class BackgroundRuns:
    """The background responses of this process, at most ``limit`` at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.runs: dict[str, BackgroundRun] = {}

    def refusal(self) -> RequestError | None:
        if len(self.runs) < self.limit:
            return None
        return RequestError(
            429,
            "too_many_background_responses",
            f"This server already has {self.limit} background responses queued or in progress "
            "(--max-background); retry when one has finished.",
            type_="requests",
        )

    def start(self, run: BackgroundRun, generation: Generation) -> None:
        self.runs[run.response_id] = run

        async def main() -> None:
            try:
                await generation(run)
            finally:
                self.runs.pop(run.response_id, None)

        run.task = asyncio.ensure_future(main())

    def get(self, response_id: str) -> BackgroundRun | None:
        return self.runs.get(response_id)

    async def stop(self, run: BackgroundRun, reason: str) -> None:
        """Cancel a run's generation and wait until it has stored its final state."""
        if run.task is None or run.done:
            return
        run.stop_reason = run.stop_reason or reason
        run.task.cancel()
        # wait(), not await: the run's end is awaited, its outcome is the run's own business.
        await asyncio.wait({run.task})

    @property
    def active(self) -> int:
        return len(self.runs)

    async def aclose(self) -> None:
        """Shutdown: the runs still going after the drain are cut and stored as failed."""
        runs = list(self.runs.values())
        if runs:
            _log.warning("shutdown: cutting %d background response(s) still running", len(runs))
        await asyncio.gather(*(self.stop(r, "shutdown") for r in runs), return_exceptions=True)
