"""``loopbench probe`` and the check ``loopbench run --target`` makes before measuring.

The I/O of the probe: a TCP/TLS connect, tiny requests over the measurement path's
own HTTP/1.1 pool and WebSocket opener, each check bounded by ``timeout_s``.  What is
sent and how each answer is judged is :mod:`harness.client.probe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from harness.client.api_errors import api_error_from_body
from harness.client.bodies import http_headers
from harness.client.options import TransportOptions
from harness.client.probe import (
    CHAINING,
    FEATURES,
    LANES,
    PROBE_LANE,
    REACHABLE,
    SSE,
    WARMUP,
    WEBSOCKET,
    WS_CHAINING,
    Finding,
    StreamReading,
    features_for,
    http_create,
    http_failure,
    judge_chain,
    judge_connect,
    judge_lanes,
    judge_sse,
    judge_warmup,
    judge_ws,
    not_checked,
    read_stream,
    refusal,
    ws_create,
    ws_refused,
)
from harness.client.shaping import NO_SHAPING, RequestShaping
from harness.run.event_loop import run_async
from harness.transports.h1client import H1Pool
from harness.transports.ws import open_ws
from harness.wire.errors import LoopbenchError, UsageError
from harness.wire.events import ERROR, TERMINAL_TYPES, dumps, loads
from harness.wire.exit_codes import ExitCode
from harness.wire.sse import SSEDecoder
from harness.wire.transports import transport_spec

#: seconds each check may take (connect, one request or one WebSocket exchange)
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MODEL = "sim-model"
ALL_FEATURES: tuple[str, ...] = tuple(f for f, _ in FEATURES)


class _Prober:
    def __init__(
        self,
        target: str,
        api_key: str,
        verify_tls: bool,
        timeout_s: float,
        model: str,
        shaping: RequestShaping = NO_SHAPING,
    ) -> None:
        self.options = TransportOptions(
            # the run's headers (a gateway's own auth header, say): the probe must get in too
            shaping=shaping,
            base_url=target,
            api_key=api_key,
            keepalive=True,
            verify_tls=verify_tls,
            connect_timeout_s=timeout_s,
            request_timeout_s=timeout_s,
            max_connections=1,
        )
        self.timeout_s = timeout_s
        self.model = model
        self.pool = H1Pool(
            target,
            max_connections=1,
            keepalive=True,
            verify_tls=verify_tls,
            connect_timeout_s=timeout_s,
            read_timeout_s=timeout_s,
        )
        self.post_url = target.rstrip("/") + "/responses"
        self.ws_url = self.options.ws_url

    async def reachable(self) -> Finding:
        pool = self.pool
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                _, writer = await asyncio.open_connection(
                    pool.host,
                    pool.port,
                    ssl=pool.ssl,
                    server_hostname=pool.host if pool.ssl else None,
                )
        except TimeoutError:
            return judge_connect(pool.authority, f"no answer within {self.timeout_s:g} s", 0)
        except OSError as exc:
            return judge_connect(pool.authority, _os_reason(exc), 0)
        connect_ms = (time.perf_counter() - t0) * 1e3
        writer.close()
        # Only the connect was asked for; how the close goes says nothing about the endpoint.
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), 2)
        return judge_connect(pool.authority, None, connect_ms)

    async def post(self, body: dict[str, Any]) -> tuple[int, str, StreamReading | str]:
        """(status, content type, the events read, or the server's error message)."""
        async with asyncio.timeout(self.timeout_s):
            resp = await self.pool.request(
                "POST", "/responses", http_headers(self.options), dumps(body)
            )
        content_type = resp.headers.get("content-type", "")
        if resp.status >= 400:
            err = api_error_from_body(resp.status, resp.body)
            # "http_500: Internal Server Error" says the status twice; the server's code stays.
            text = str(err).removeprefix(f"http_{resp.status}: ")
            return resp.status, content_type, text
        events: list[dict[str, Any]] = []
        for msg in SSEDecoder().feed(resp.body + b"\n\n"):
            if msg.data.startswith("[DONE]"):
                continue
            try:
                events.append(loads(msg.data))
            except LoopbenchError:
                break
        return resp.status, content_type, read_stream(events)

    async def sse(self, store: bool) -> tuple[Finding, StreamReading | None]:
        try:
            status, ctype, got = await self.post(http_create(self.model, store=store))
        except (TimeoutError, LoopbenchError) as exc:
            return Finding(
                SSE, False, f"POST {self.post_url}: {_failure(exc, self.timeout_s)}"
            ), None
        if isinstance(got, str):
            return Finding(SSE, False, http_failure(self.post_url, status, got)), None
        finding = judge_sse(self.post_url, status, ctype, got)
        return finding, got if finding.supported else None

    async def chaining(self, first: StreamReading) -> Finding:
        where = f"POST {self.post_url}"
        if first.response_id is None:
            return judge_chain(CHAINING, where, first, first)
        body = http_create(self.model, store=True, previous_response_id=first.response_id)
        try:
            status, _, got = await self.post(body)
        except (TimeoutError, LoopbenchError) as exc:
            return Finding(CHAINING, False, f"{where}: {_failure(exc, self.timeout_s)}")
        if isinstance(got, str):
            return Finding(CHAINING, False, http_failure(self.post_url, status, got))
        return judge_chain(CHAINING, where, first, got)

    async def websocket(self, wanted: Sequence[str]) -> list[Finding]:
        """One connection: a create, then (if wanted) a chained one, a warm-up and a lane."""
        url = self.ws_url
        rest = [f for f in (WS_CHAINING, WARMUP, LANES) if f in wanted]
        try:
            async with asyncio.timeout(self.timeout_s):
                conn = await open_ws(self.options, url)
        except (TimeoutError, LoopbenchError) as exc:
            found = Finding(WEBSOCKET, False, _ws_failure(url, exc, self.timeout_s))
            return [found, *(not_checked(f, "no WebSocket mode") for f in rest)]
        try:
            first = await self._exchange(conn, ws_create(self.model))
            found = (
                judge_ws(url, first)
                if isinstance(first, StreamReading)
                else Finding(WEBSOCKET, False, f"{url} upgraded, but {first}")
            )
            out = [found]
            if not found.supported:
                return out + [not_checked(f, "no response over WebSocket mode") for f in rest]
            assert isinstance(first, StreamReading)
            if WS_CHAINING in rest:
                chained = await self._exchange(
                    conn, ws_create(self.model, previous_response_id=first.response_id)
                )
                out.append(
                    self._judged(
                        chained, lambda r: judge_chain(WS_CHAINING, url, first, r), WS_CHAINING
                    )
                )
            if WARMUP in rest:
                warm = await self._exchange(conn, ws_create(self.model, generate=False))
                out.append(self._judged(warm, judge_warmup, WARMUP))
            if LANES in rest:
                lane = await self._exchange(conn, ws_create(self.model, stream_id=PROBE_LANE))
                out.append(self._judged(lane, judge_lanes, LANES))
            return out
        finally:
            await _close(conn)

    @staticmethod
    def _judged(
        got: StreamReading | str, judge: Callable[[StreamReading], Finding], feature: str
    ) -> Finding:
        return judge(got) if isinstance(got, StreamReading) else Finding(feature, False, got)

    async def _exchange(self, conn: ClientConnection, body: dict[str, Any]) -> StreamReading | str:
        """Send one create; the events of its response, or why none came."""
        events: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                await conn.send(dumps(body).decode())
                async for raw in conn:
                    event = loads(raw)
                    events.append(event)
                    kind = event.get("type")
                    if kind in TERMINAL_TYPES or (kind == ERROR and "sequence_number" not in event):
                        break
        except TimeoutError:
            return f"no terminal event within {self.timeout_s:g} s ({len(events)} events)"
        except websockets.exceptions.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else 1006
            return f"the server closed the WebSocket with code {code} ({len(events)} events)"
        except LoopbenchError as exc:
            return f"an answer was not a JSON event: {exc}"
        return read_stream(events)

    async def aclose(self) -> None:
        await self.pool.aclose()


async def _close(conn: ClientConnection) -> None:
    # The probe is over; a socket that will not close cleanly is dropped anyway.
    with contextlib.suppress(TimeoutError, OSError, websockets.exceptions.WebSocketException):
        await asyncio.wait_for(conn.close(), 2)


def _os_reason(exc: OSError) -> str:
    """``connection refused`` rather than ``[Errno 111] Connect call failed (...)``."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"its TLS certificate was not accepted ({exc.verify_message}); "
            "--insecure skips the verification"
        )
    return (exc.strerror or str(exc) or type(exc).__name__).lower()


def _failure(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no complete answer within {timeout_s:g} s"
    return str(exc)


def _ws_failure(url: str, exc: BaseException, timeout_s: float) -> str:
    """The upgrade's HTTP status when the server answered one, else why it did not."""
    cause = exc.__cause__
    if isinstance(cause, websockets.exceptions.InvalidStatus):
        return ws_refused(url, cause.response.status_code, "")
    if isinstance(exc, TimeoutError) or isinstance(cause, TimeoutError):
        return ws_refused(url, None, f"no upgrade within {timeout_s:g} s")
    if isinstance(cause, OSError):
        return ws_refused(url, None, _os_reason(cause))
    if cause is not None:
        return ws_refused(url, None, f"the upgrade failed: {cause}")
    return ws_refused(url, None, str(exc))


async def probe_endpoint(
    target: str,
    features: Sequence[str] = ALL_FEATURES,
    *,
    api_key: str,
    verify_tls: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    model: str = DEFAULT_MODEL,
    shaping: RequestShaping = NO_SHAPING,
) -> list[Finding]:
    """Check ``features`` of the Responses endpoint at ``target`` (``http://HOST:PORT/v1``)."""
    try:
        prober = _Prober(target, api_key, verify_tls, timeout_s, model, shaping)
    except LoopbenchError as exc:
        raise UsageError(f"--target: {exc}") from None
    try:
        reach = await prober.reachable()
        rest = [f for f in features if f != REACHABLE]
        if not reach.supported:
            return [reach, *(not_checked(f, "the target is unreachable") for f in rest)]
        out = [reach]
        if SSE in rest or CHAINING in rest:
            # store: true only when a chain will follow: a stateless run must not fail the
            # probe on an endpoint that refuses to store (zero data retention).
            sse, first = await prober.sse(store=CHAINING in rest)
            if SSE in rest:
                out.append(sse)
            if CHAINING in rest:
                out.append(
                    await prober.chaining(first)
                    if first is not None
                    else not_checked(CHAINING, "no SSE stream to chain on")
                )
        ws_features = [f for f in rest if f in (WEBSOCKET, WS_CHAINING, WARMUP, LANES)]
        if ws_features:
            out += await prober.websocket(ws_features)
        order = {f: i for i, (f, _) in enumerate(FEATURES)}
        return sorted((f for f in out if f.feature in features), key=lambda f: order[f.feature])
    finally:
        await prober.aclose()


def probe(target: str, features: Sequence[str] = ALL_FEATURES, **kwargs: Any) -> list[Finding]:
    """:func:`probe_endpoint` on its own event loop."""
    return run_async(probe_endpoint(target, features, **kwargs))


def probe_for_run(
    target: str | None,
    transports: Sequence[str],
    *,
    api_key: str,
    verify_tls: bool,
    model: str = DEFAULT_MODEL,
    enabled: bool = True,
    say: Callable[[str], None],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    shaping: RequestShaping = NO_SHAPING,
) -> int | None:
    """Before ``loopbench run --target``: probe what the transports need, once per family.

    Returns :attr:`ExitCode.USAGE` after saying the one-line cause when the target is
    unreachable or lacks a feature a transport needs; None to go ahead.  The embedded
    server is not probed (it is known to support every transport).
    """
    if target is None or not enabled:
        return None
    specs = [transport_spec(t) for t in transports]
    try:
        findings = probe(
            target,
            features_for(specs),
            api_key=api_key,
            verify_tls=verify_tls,
            timeout_s=timeout_s,
            model=model,
            shaping=shaping,
        )
    except UsageError as exc:
        say(f"error: {exc}")
        return ExitCode.USAGE
    cause = refusal(findings, specs, target)
    if cause is None:
        return None
    say(f"error: {cause} (nothing was measured; --no-probe skips this check)")
    return ExitCode.USAGE
