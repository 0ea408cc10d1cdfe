"""Drawn faults applied to live streams: the asyncio side of reference_server/core/faults.py.

The HTTP and WebSocket paths draw a fault per request from the pure injector;
this module carries it to the response's send (a cut or a stall at the first
delta), waits a latency spike, and keeps intentional drops out of the error log.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.responses import Response

from harness.wire import events as ev
from reference_server.core.faults import NO_FAULT, Fault, FaultSpec

Send = Callable[[Sequence[dict[str, Any]]], Awaitable[None]]


class IntentionalDisconnect(Exception):
    """Raised to make the ASGI server drop a connection on purpose (logged at debug only)."""


class InjectedDisconnect(IntentionalDisconnect):
    """The ``disconnect`` fault: cut this stream now."""


class CutAnswer(Response):
    """A non-streamed response cut by the ``disconnect`` fault: its status line and head go
    out, its body never ends (as a streamed one's).  Raised before any answer, the exception
    would become Starlette's 500, an error the fault is not."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # No content-length: the body is chunked, and its end never comes.
        await send({"type": "http.response.start", "status": 200, "headers": _JSON_HEAD})
        raise InjectedDisconnect("injected disconnect of a non-streamed answer")


_JSON_HEAD = [(b"content-type", b"application/json")]


# The fault drawn for the response being generated in this task (read by wrap_send).
current: contextvars.ContextVar[Fault] = contextvars.ContextVar("loopbench_fault", default=NO_FAULT)


async def spike(spec: FaultSpec) -> None:
    await asyncio.sleep(spec.spike_ms / 1000)


def wrap_send(send: Send, stall_s: float, on_applied: Callable[[Fault], None]) -> Send:
    """``send`` with this task's ``disconnect`` or ``stall`` fault applied at the first delta;
    ``on_applied(fault)`` counts it then."""
    fault = current.get()
    if fault.kind not in ("disconnect", "stall"):
        return send
    armed = True

    async def faulty(events: Sequence[dict[str, Any]]) -> None:
        nonlocal armed
        await send(events)
        if armed and any(e.get("type") in ev.DELTA_TYPES for e in events):
            armed = False
            on_applied(fault)
            if fault.kind == "disconnect":
                raise InjectedDisconnect("injected mid-stream disconnect")
            await asyncio.sleep(stall_s)

    return faulty


class QuietIntentional(logging.Filter):
    """Drop the ASGI server's "Exception in ASGI application" record for intentional drops."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, UnicodeDecodeError):
            # uvicorn logs a client's text frame of invalid UTF-8 with its traceback, then
            # closes with 1007 as it should: the client's fault, worth one line, not a trace.
            record.exc_info = None
            return True
        return not _intentional(exc)


def _intentional(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    if isinstance(exc, IntentionalDisconnect):
        return True
    group = getattr(exc, "exceptions", None)
    if group:
        return all(_intentional(e) for e in group)
    return _intentional(exc.__cause__) if exc.__cause__ is not None else False


def install_log_filter() -> None:
    logging.getLogger("uvicorn.error").addFilter(QuietIntentional())
