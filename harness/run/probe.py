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

from harness.client.api_errors import answered, error_text, upgrade_status
from harness.client.bodies import http_headers
from harness.client.chat_api import PATH as CHAT_PATH
from harness.client.messages_api import PATH as MESSAGES_PATH
from harness.client.messages_api import messages_headers
from harness.client.options import TransportOptions
from harness.client.probe import (
    API_NAMES,
    API_OF,
    AUTH_REFUSED,
    BACKGROUND,
    BACKGROUND_DONE,
    CHAINING,
    CHAT,
    CHAT_CACHED,
    CHAT_TOOLS,
    CHAT_USAGE,
    COMPACTION,
    FEATURES,
    FORBIDDEN,
    LANES,
    MESSAGES,
    MESSAGES_CACHE,
    REACHABLE,
    RETRIEVE,
    SSE,
    WARMUP,
    WEBSOCKET,
    WS_CHAINING,
    Finding,
    features_for,
    judge_background,
    judge_chain,
    judge_chat,
    judge_chat_cached,
    judge_chat_tools,
    judge_chat_usage,
    judge_compaction,
    judge_connect,
    judge_lanes,
    judge_messages,
    judge_prompt_cache,
    judge_retrieve,
    judge_sse,
    judge_upgrade,
    judge_warmup,
    judge_ws,
    not_checked,
    not_checked_after,
    refusal,
    refused,
    ws_refused,
)
from harness.client.probe_answers import (
    CHAT_API,
    MESSAGES_API,
    PROBE_LANE,
    StreamReading,
    answer_of,
    background_create,
    chat_create,
    compact_request,
    http_create,
    messages_create,
    read_body,
    ws_create,
)
from harness.client.shaping import NO_SHAPING, RequestShaping
from harness.run.event_loop import run_async
from harness.transports.h1client import H1Pool
from harness.transports.ws import open_ws
from harness.transports.ws_conn import WsConnection
from harness.wire.credentials import PLACEHOLDER_API_KEY
from harness.wire.errors import LoopbenchError, UsageError, WsClosed
from harness.wire.events import dumps
from harness.wire.exit_codes import ExitCode
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
        # The user gave no key and no credential header of their own: a refusal then most
        # likely wants their key, and the finding says how to give it.
        own = {name.lower() for name, _ in shaping.headers} & {"authorization", "x-api-key"}
        self.placeholder_key = api_key == PLACEHOLDER_API_KEY and not own
        self.pool = H1Pool(
            target,
            max_connections=1,
            keepalive=True,
            verify_tls=verify_tls,
            connect_timeout_s=timeout_s,
            read_timeout_s=timeout_s,
        )
        #: an HTTP request got past the credentials (None: no answer yet)
        self.answered: bool | None = None
        #: responses the probe stored besides the one the retrieve check deletes
        self.stored: list[str] = []
        self.base = target.rstrip("/")
        self.post_url = self.base + "/responses"
        self.ws_url = self.options.ws_url

    async def key_accepted(self) -> bool:
        """Whether an HTTP request with the probe's credentials got past them: an earlier
        check's answer, else ``GET /models`` (any answer but 401 and 403 will do)."""
        if self.answered is None:
            with contextlib.suppress(TimeoutError, LoopbenchError):
                await self.call("GET", "/models")
        return bool(self.answered)

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

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> tuple[int, str, bytes]:
        """One request bounded by the timeout: (status, content type, the whole body)."""
        if headers is None:
            headers = http_headers(self.options)
            if body is None or not body.get("stream"):
                headers = [(k, "application/json" if k == "accept" else v) for k, v in headers]
        async with asyncio.timeout(self.timeout_s):
            resp = await self.pool.request(
                method, path, headers, dumps(body) if body is not None else b""
            )
        if not self.answered:
            self.answered = resp.status not in AUTH_REFUSED
        return resp.status, resp.headers.get("content-type", ""), resp.body

    async def stream(
        self,
        api: str,
        path: str,
        body: dict[str, Any],
        headers: list[tuple[str, str]] | None = None,
    ) -> tuple[int, str, StreamReading | str]:
        """(status, content type, the answer read as a run reads it, or the server's error
        message)."""
        status, content_type, raw = await self.call("POST", path, body, headers)
        if status >= 400:
            return status, content_type, error_text(status, raw)
        return status, content_type, read_body(api, raw)

    def failed(self, feature: str, where: str, exc: BaseException) -> Finding:
        """A check that got no answer: "no" when the exchange broke, "unknown" (that stops a
        run) when the server did not answer in time, which says nothing of the feature."""
        if isinstance(exc, TimeoutError):
            return Finding(
                feature,
                None,
                f"{where}: no complete answer within {self.timeout_s:g} s",
                stopped_by="server",
            )
        return Finding(feature, False, f"{where}: {exc}")

    async def api_answer(
        self,
        feature: str,
        path: str,
        body: dict[str, Any],
        judge: Callable[[str, int, str, StreamReading], Finding],
        headers: list[tuple[str, str]] | None = None,
    ) -> tuple[Finding, StreamReading | None]:
        """A streamed request of ``feature``'s API: its finding, and the answer when one was
        read."""
        url = self.base + path
        try:
            status, ctype, got = await self.stream(API_OF[feature] or "", path, body, headers)
        except (TimeoutError, LoopbenchError) as exc:
            return self.failed(feature, f"POST {url}", exc), None
        if isinstance(got, str):
            return refused(feature, url, status, got, placeholder_key=self.placeholder_key), None
        return judge(url, status, ctype, got), got

    async def json(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any] | str]:
        """(status, :func:`answer_of` the answer)."""
        status, _, raw = await self.call(method, path, body)
        return status, answer_of(status, raw)

    async def chaining(self, first: StreamReading) -> Finding:
        if first.response_id is None:
            return judge_chain(CHAINING, f"POST {self.post_url}", first, first)
        body = http_create(self.model, store=True, previous_response_id=first.response_id)
        found, got = await self.api_answer(
            CHAINING,
            "/responses",
            body,
            lambda url, _status, _ctype, got: judge_chain(CHAINING, f"POST {url}", first, got),
        )
        if got is not None and got.response_id is not None:
            self.stored.append(got.response_id)
        return found

    async def background(self) -> tuple[Finding, str | None]:
        """A background create, polled with GET until it ends (all within the timeout)."""
        url = self.post_url
        try:
            status, created = await self.json("POST", "/responses", background_create(self.model))
        except (TimeoutError, LoopbenchError) as exc:
            return self.failed(BACKGROUND, f"POST {url}", exc), None
        if isinstance(created, str) or not isinstance(created.get("id"), str):
            return judge_background(url, status, created, None, 0), None
        rid = str(created["id"])
        final: dict[str, Any] | str = created
        polls = 0
        try:
            async with asyncio.timeout(self.timeout_s):
                while isinstance(final, dict) and final.get("status") not in BACKGROUND_DONE:
                    # short first waits: a tiny response ends in well under a second
                    await asyncio.sleep(min(0.05 * 2**polls, 1.0))
                    polls += 1
                    got_status, final = await self.json("GET", f"/responses/{rid}")
                    if isinstance(final, str):
                        final = f"GET /responses/{rid} answered {answered(got_status, final)}"
        except TimeoutError:
            last = final.get("status") if isinstance(final, dict) else None
            final = f"it was still {last} after {self.timeout_s:g} s of polling"
        except LoopbenchError as exc:
            final = f"GET /responses/{rid} failed: {exc}"
        return judge_background(url, status, created, final, polls), rid

    async def compaction(self) -> Finding:
        url = self.post_url + "/compact"
        try:
            status, got = await self.json("POST", "/responses/compact", compact_request(self.model))
        except (TimeoutError, LoopbenchError) as exc:
            return self.failed(COMPACTION, f"POST {url}", exc)
        return judge_compaction(url, status, got)

    async def retrieve(self, response_id: str) -> Finding:
        url = f"/responses/{response_id}"
        try:
            got = await self.json("GET", url)
            deleted = None if isinstance(got[1], str) else await self.json("DELETE", url)
        except (TimeoutError, LoopbenchError) as exc:
            return self.failed(RETRIEVE, f"GET {url}", exc)
        return judge_retrieve(url, response_id, got, deleted)

    async def forget(self, response_id: str) -> None:
        """Delete a response the probe stored; whether that works was the retrieve check's."""
        with contextlib.suppress(TimeoutError, LoopbenchError):
            await self.call("DELETE", f"/responses/{response_id}")

    def without_api(self, found: Finding, path: str, rest: list[str]) -> list[Finding]:
        """``found`` (the check that an API is there, which did not pass) and the features in
        ``rest`` not checked for it."""
        missing = f"no {API_NAMES[API_OF[found.feature] or '']}"
        url = self.base + path
        return [found, *(not_checked_after(f, found, url, missing) for f in rest)]

    async def chat_features(self, wanted: Sequence[str]) -> list[Finding]:
        """The chat completion (and its usage, cached tokens), then a tool call."""
        rest = [f for f in (CHAT_USAGE, CHAT_CACHED, CHAT_TOOLS) if f in wanted]
        found, got = await self.api_answer(CHAT, CHAT_PATH, chat_create(self.model), judge_chat)
        if got is None or not found.supported:
            return self.without_api(found, CHAT_PATH, rest)
        out = [found]
        if CHAT_USAGE in rest:
            out.append(judge_chat_usage(got))
        if CHAT_CACHED in rest:
            out.append(judge_chat_cached(got))
        if CHAT_TOOLS in rest:
            url = self.base + CHAT_PATH
            try:
                body = chat_create(self.model, tools=True)
                status, ctype, tooled = await self.stream(CHAT_API, CHAT_PATH, body)
            except (TimeoutError, LoopbenchError) as exc:
                out.append(self.failed(CHAT_TOOLS, f"POST {url}", exc))
            else:
                out.append(judge_chat_tools(url, status, ctype, tooled))
        return out

    async def messages_features(self, wanted: Sequence[str]) -> list[Finding]:
        """A tiny message, then (if wanted) the prompt-caching pair."""
        rest = [f for f in (MESSAGES_CACHE,) if f in wanted]
        headers = messages_headers(self.options)
        found, got = await self.api_answer(
            MESSAGES, MESSAGES_PATH, messages_create(self.model), judge_messages, headers
        )
        if got is None or not found.supported:
            return self.without_api(found, MESSAGES_PATH, rest)
        out = [found]
        if rest:
            url = self.base + MESSAGES_PATH
            body = messages_create(self.model, cached=True)
            try:
                first = await self.stream(MESSAGES_API, MESSAGES_PATH, body, headers)
                second = await self.stream(MESSAGES_API, MESSAGES_PATH, body, headers)
            except (TimeoutError, LoopbenchError) as exc:
                out.append(self.failed(MESSAGES_CACHE, f"POST {url}", exc))
            else:
                out.append(judge_prompt_cache(url, (first[0], first[2]), (second[0], second[2])))
        return out

    async def websocket(self, wanted: Sequence[str]) -> list[Finding]:
        """One connection: a create, then (if wanted) a chained one, a warm-up and a lane."""
        url = self.ws_url
        rest = [f for f in (WS_CHAINING, WARMUP, LANES) if f in wanted]
        try:
            async with asyncio.timeout(self.timeout_s):
                conn = await open_ws(self.options, url)
        except (TimeoutError, LoopbenchError) as exc:
            # the library's refusal, under the edge's TransportError
            answer = upgrade_status(exc.__cause__ or exc)
            if answer is None:
                found = _ws_unanswered(url, exc, self.timeout_s)
            else:
                status, body = answer
                # the server's own words (an invalid key, "WebSocket mode is disabled…")
                message = error_text(status, body) if body else ""
                # Starlette (vLLM) refuses every upgrade with a bare 403: whether that is about
                # the key is told by an HTTP request with the same key.
                bare = status == FORBIDDEN and not message
                found = judge_upgrade(
                    url,
                    status,
                    message,
                    placeholder_key=self.placeholder_key,
                    key_accepted=bare and await self.key_accepted(),
                )
            return [found, *(not_checked_after(f, found, url, "no WebSocket mode") for f in rest)]
        try:
            first = await self._exchange(conn, ws_create(self.model))
            if isinstance(first, StreamReading):
                found = judge_ws(url, first)
            else:
                # upgraded, then silent: no more an answer about WebSocket mode than over HTTP
                found = Finding(
                    WEBSOCKET,
                    None if isinstance(first, _NoAnswer) else False,
                    f"{url} upgraded, but {first}",
                    stopped_by="server" if isinstance(first, _NoAnswer) else None,
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

    async def _exchange(self, conn: WsConnection, body: dict[str, Any]) -> StreamReading | str:
        """Send one create; its response read as a run reads it, or why none came."""
        reading = StreamReading()
        try:
            async with asyncio.timeout(self.timeout_s):
                await conn.send(dumps(body))
                while not reading.feed((await conn.recv())[0]):
                    pass
        except TimeoutError:
            return _NoAnswer(
                f"no terminal event within {self.timeout_s:g} s ({reading.events} events)"
            )
        except WsClosed as exc:
            return f"the server closed the WebSocket with code {exc.code} ({reading.events} events)"
        return reading

    async def aclose(self) -> None:
        await self.pool.aclose()


class _NoAnswer(str):
    """Why an exchange got no answer in time (a time-out, not a refusal)."""

    __slots__ = ()


async def _close(conn: WsConnection) -> None:
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


def _ws_unanswered(url: str, exc: BaseException, timeout_s: float) -> Finding:
    """Why an upgrade got no HTTP answer at all."""
    cause = exc.__cause__
    if isinstance(exc, TimeoutError) or isinstance(cause, TimeoutError):
        return Finding(
            WEBSOCKET,
            None,
            f"no answer to the WebSocket upgrade at {url} within {timeout_s:g} s",
            stopped_by="server",
        )
    if isinstance(cause, OSError):
        why = _os_reason(cause)
    elif cause is not None:
        why = f"the upgrade failed: {cause}"
    else:
        why = str(exc)
    return Finding(WEBSOCKET, False, ws_refused(url, None, why))


_NO_HTTP = "no Responses API stream over HTTP"


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
    """Check ``features`` of the endpoint at ``target`` (``http://HOST:PORT/v1``): which of
    the three APIs it has, and which of their features."""
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
        first: StreamReading | None = None
        #: the SSE check when it did not pass: the Responses API's other HTTP routes are worth
        #: asking only where it answers; where it did not, their rows give the cause it found
        failed: Finding | None = None
        if any(f in rest for f in (SSE, CHAINING, RETRIEVE)):
            # store: true only when a chain or a retrieve will follow: a stateless run must not
            # fail the probe on an endpoint that refuses to store (zero data retention).
            body = http_create(model, store=CHAINING in rest or RETRIEVE in rest)
            sse, first = await prober.api_answer(SSE, "/responses", body, judge_sse)
            out.append(sse)
            if not sse.supported:
                first, failed = None, sse
        if failed is not None:
            why = {
                CHAINING: "no SSE stream to chain on",
                RETRIEVE: "no stored response to retrieve",
            }
            out += [
                not_checked_after(f, failed, prober.post_url, why.get(f, _NO_HTTP))
                for f in rest
                if f in (CHAINING, BACKGROUND, COMPACTION, RETRIEVE)
            ]
        else:
            if CHAINING in rest and first is not None:
                out.append(await prober.chaining(first))
            if BACKGROUND in rest:
                found, rid = await prober.background()
                out.append(found)
                prober.stored += [rid] if rid else []
            if COMPACTION in rest:
                out.append(await prober.compaction())
            if RETRIEVE in rest:
                if first is None or first.response_id is None:
                    out.append(not_checked(RETRIEVE, "no stored response to retrieve"))
                else:
                    found = await prober.retrieve(first.response_id)
                    out.append(found)
                    if found.supported:
                        # what the probe stored is deleted where DELETE works
                        for rid in prober.stored:
                            await prober.forget(rid)
        ws_features = [f for f in rest if f in (WEBSOCKET, WS_CHAINING, WARMUP, LANES)]
        if ws_features:
            out += await prober.websocket(ws_features)
        if any(f in rest for f in (CHAT, CHAT_USAGE, CHAT_CACHED, CHAT_TOOLS)):
            out += await prober.chat_features(rest)
        if any(f in rest for f in (MESSAGES, MESSAGES_CACHE)):
            out += await prober.messages_features(rest)
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
    progress: Callable[[str], None] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    compaction: bool = False,
    shaping: RequestShaping = NO_SHAPING,
) -> int | None:
    """Before ``loopbench run --target``: probe what the transports need, once per family
    (and ``POST /responses/compact`` when the scenario compacts: ``compaction``).

    Returns :attr:`ExitCode.USAGE` after saying the one-line cause when the target is
    unreachable or lacks a feature a transport needs; None to go ahead.  The embedded
    server is not probed (it is known to support every transport).  ``progress`` (None
    when quiet) is told first what is probed.
    """
    if target is None or not enabled:
        return None
    specs = [transport_spec(t) for t in transports]
    if progress is not None:
        # An endpoint that accepts the connection but never answers keeps the probe waiting
        # for each check's whole time-out: without this line the run looks hung.
        progress(
            f"probing {target} ({', '.join(transports)}; each check waits up to {timeout_s:g} s) …"
        )
    try:
        findings = probe(
            target,
            features_for(specs, compaction=compaction),
            api_key=api_key,
            verify_tls=verify_tls,
            timeout_s=timeout_s,
            model=model,
            shaping=shaping,
        )
    except UsageError as exc:
        say(f"error: {exc}")
        return ExitCode.USAGE
    cause = refusal(findings, specs, target, compaction=compaction)
    if cause is None:
        return None
    # a slow endpoint (a cold start) may need longer than the default: say how to give it
    longer = "; --probe-timeout-s waits longer" if f"within {timeout_s:g} s" in cause else ""
    say(f"error: {cause} (nothing was measured; --no-probe skips this check{longer})")
    return ExitCode.USAGE
