"""The three create routes over HTTP: ``/v1/responses``, ``/v1/chat/completions``, ``/v1/messages``.

One request path for all three: admitted (connection limits, API key, rate limit, injected
fault), read and validated, waited through the same API tier and engine
(:meth:`Service.admit`, :meth:`Service.generate`), and streamed through a ``send`` that
translates the pipeline's Responses events into the API's own frames.  Chat and Messages
are the ``http`` transport in another shape: the whole conversation every turn, validated
and translated by the pure ``core/chat.py`` / ``core/messages.py``, so a chat or messages
turn costs what the same ``http`` turn costs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from harness.wire import events as ev
from harness.wire.sse import encode_event
from reference_server.core.api_tier import RequestCost
from reference_server.core.chat import ChatChunks, chat_completion, error_message, parse_chat
from reference_server.core.conversation import Conversation, tools_tokens
from reference_server.core.messages import (
    MessagesEvents,
    api_error,
    cache_usage,
    cached_read,
    message_object,
    parse_messages,
)
from reference_server.core.validation import CreateRequest, RequestError, parse_create, renamed
from reference_server.event_stream import EventStream, SendEvents, unless_gone
from reference_server.json_answers import error_response, json_response, retry_headers
from reference_server.lifecycle import Lifecycle
from reference_server.service import Job, Service, now_s
from reference_server.timing_log import client_id

Refusal = Callable[[Request, Headers], Awaitable[tuple[RequestError, float] | None]]
ReadJson = Callable[[Request], Awaitable[Any]]
NewConnection = Callable[[Request], bool]

NO_KEY_MESSAGE = (
    "You didn't provide an API key: send it in the x-api-key header "
    "(or in the Authorization header as 'Bearer <key>')."
)


class Translator(Protocol):
    """Responses events of one response → the API's stream frames."""

    failed: bool

    def translate(self, events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]: ...


@dataclass(slots=True)
class Parsed:
    """A validated body: the server's request, its conversation, and the API's own extras."""

    create: CreateRequest
    conv: Conversation
    extra: Any = None


class HttpApi:
    """One create route; subclasses give the API's shapes (the base is a stateless API's)."""

    done_marker = False  # `data: [DONE]` after a stream that ended normally
    api = ""  # the --timing-log name
    # A crash of a `stream: false` answer is the API's 500 error body (Chat, Messages),
    # not a raised exception (`/v1/responses`).
    fail_in_band = True

    def __init__(
        self,
        service: Service,
        *,
        refusal: Refusal,
        read_json: ReadJson,
        new_connection: NewConnection,
    ) -> None:
        self.service = service
        self._refusal = refusal
        self._read_json = read_json
        self._new_connection = new_connection

    # -- the API's shapes (subclasses) ----------------------------------------------------
    def auth_headers(self, headers: Headers) -> Headers:
        return headers

    def error_response(
        self, err: RequestError, request_id: str, headers: dict[str, str] | None = None
    ) -> Response:
        """The refusal in the API's error shape (here: OpenAI's)."""
        return error_response(err, request_id, headers)

    def parse(self, body: Any) -> Parsed:
        raise NotImplementedError

    def limit_error(self, err: RequestError, parsed: Parsed) -> RequestError:
        """A shared limit error (the context window, the output cap) in the API's terms."""
        return err

    async def job(self, request: Request, body: Any, rng: Any) -> tuple[Parsed, Job]:
        """The validated body and its job; stateless: the API tier processes the whole input."""
        parsed = self.parse(body)
        req = parsed.create
        try:
            self.service.fit_window(req, parsed.conv, tools_tokens(req.tools))
        except RequestError as err:
            raise self.limit_error(err, parsed) from None
        processed = parsed.conv.tokens + tools_tokens(req.tools)
        cost = RequestCost.http(self._new_connection(request), processed)
        return parsed, Job(req, parsed.conv, cost, rng, parent_stored=False, api=self.api)

    async def detached(self, job: Job, request_id: str) -> Response | None:
        """The answer of a create that runs apart from its request (background mode)."""
        return None

    def translator(self, parsed: Parsed, job: Job, created: int) -> Translator | None:
        """None: the Responses events go out as they are."""
        raise NotImplementedError

    def whole(self, parsed: Parsed, job: Job, created: int) -> dict[str, Any]:
        """The ``stream: false`` body of a finished response."""
        raise NotImplementedError

    def encode(self, frame: dict[str, Any]) -> bytes:
        return encode_event(frame)

    # -- the request ----------------------------------------------------------------------
    async def create(self, request: Request) -> Response:
        service = self.service
        rng = service.rng()
        request_id = ev.new_id("req", rng)
        refused = await self._refusal(request, self.auth_headers(request.headers))
        if refused is not None:
            return self.error_response(refused[0], request_id, retry_headers(*refused))
        try:
            parsed, job = await self.job(request, await self._read_json(request), rng)
        except RequestError as err:
            return self.error_response(err, request_id, retry_headers(err))
        except ClientDisconnect:
            return Response(status_code=499)
        detached = await self.detached(job, request_id)
        if detached is not None:
            return detached
        job.request_id = request.headers.get("x-request-id")
        created = now_s()
        if not job.req.stream:
            return await self._whole(request, parsed, job, request_id, created)
        await service.admit(job)
        translator = self.translator(parsed, job, created)

        async def run(send: SendEvents) -> bool:
            if translator is None:
                return await service.generate_or_fail(job, send)

            async def translated(events: Sequence[dict[str, Any]]) -> None:
                frames = translator.translate(events)
                if frames:
                    await send(frames)

            return await service.generate_or_fail(job, translated) and not translator.failed

        headers = {"x-request-id": request_id}
        return EventStream(run, headers, done_marker=self.done_marker, encode=self.encode)

    async def _whole(
        self, request: Request, parsed: Parsed, job: Job, request_id: str, created: int
    ) -> Response:
        """``stream: false``: one JSON body, or nothing if the client left."""
        failed: list[dict[str, Any]] = []

        async def keep_errors(events: Sequence[dict[str, Any]]) -> None:
            if self.fail_in_band:
                failed.extend(e for e in events if e.get("type") == ev.ERROR)

        # A disconnect drops the connection; the disconnect watch covers the API-tier wait too.
        answer = self.service.answer(job, keep_errors, fail_in_band=self.fail_in_band)
        answered = await unless_gone(request.receive, answer)
        if isinstance(answered, Response):
            return answered
        if failed:
            return self.error_response(
                RequestError(500, "server_error", error_message(failed[0]), type_="server_error"),
                request_id,
            )
        return json_response(self.whole(parsed, job, created), request_id)


class ResponsesApi(HttpApi):
    """``POST /v1/responses``: a conversation from the input or the store, background mode."""

    api = "responses"
    fail_in_band = False

    def __init__(self, service: Service, lifecycle: Lifecycle, **edges: Any) -> None:
        super().__init__(service, **edges)
        self.lifecycle = lifecycle
        self.done_marker = service.config.sse_done_marker

    async def job(self, request: Request, body: Any, rng: Any) -> tuple[Parsed, Job]:
        service = self.service
        req = parse_create(body)
        conv, rehydrated, cache = await service.resolve_http(req)
        fitted = service.fit_window(req, conv, tools_tokens(req.tools))
        if fitted.truncated:
            # The truncated context is a new prefix: rendered anew, stored as a new chain.
            conv, rehydrated = fitted.conv, 0
        processed = conv.tokens - rehydrated + tools_tokens(req.tools)
        cost = RequestCost.http(self._new_connection(request), processed, rehydrated)
        return Parsed(req, conv), Job(req, conv, cost, rng, cache, fitted)

    async def detached(self, job: Job, request_id: str) -> Response | None:
        if not job.req.background:
            return None
        return await self.lifecycle.create_background(job, request_id)

    def translator(self, parsed: Parsed, job: Job, created: int) -> Translator | None:
        return None

    def whole(self, parsed: Parsed, job: Job, created: int) -> dict[str, Any]:
        return job.builder.response_object()


class ChatApi(HttpApi):
    """``POST /v1/chat/completions``: a stream that fails midway sends one
    ``data: {"error": …}`` frame and ends without ``[DONE]``."""

    done_marker = True
    api = "chat"

    def parse(self, body: Any) -> Parsed:
        chat = parse_chat(body)
        return Parsed(chat.create, Conversation.build(None, [], chat.create.input_items), chat)

    def limit_error(self, err: RequestError, parsed: Parsed) -> RequestError:
        if err.param != "max_output_tokens":
            return err
        field = parsed.extra.max_tokens_field
        return renamed(err, "max_output_tokens", field, field)

    def translator(self, parsed: Parsed, job: Job, created: int) -> Translator:
        completion_id = client_id("chat", job.builder.response_id)
        include_usage = parsed.extra.include_usage
        return ChatChunks(completion_id, parsed.create.model, created, include_usage=include_usage)

    def whole(self, parsed: Parsed, job: Job, created: int) -> dict[str, Any]:
        completion_id = client_id("chat", job.builder.response_id)
        return chat_completion(job.builder.response_object(), completion_id, created)

    def encode(self, frame: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(frame) + b"\n\n"


class MessagesApi(HttpApi):
    """``POST /v1/messages``: the key in ``x-api-key`` (or ``Authorization: Bearer``); errors
    are the Messages API's ``{"type": "error", "error": {type, message}, "request_id"}`` with
    its statuses (an overloaded engine is 529); a failing stream sends ``event: error``."""

    api = "messages"

    def auth_headers(self, headers: Headers) -> Headers:
        key = headers.get("x-api-key")
        if key is None:
            return headers
        # One key check for every route: x-api-key is the Messages spelling of the bearer token.
        return Headers({"authorization": f"Bearer {key}"})

    def error_response(
        self, err: RequestError, request_id: str, headers: dict[str, str] | None = None
    ) -> Response:
        message = err.message
        if err.status == 401 and message.startswith("You didn't provide an API key"):
            message = NO_KEY_MESSAGE
        status, body = api_error(err.status, message)
        body["request_id"] = request_id
        return json_response(
            body, request_id, status, {"request-id": request_id, **(headers or {})}
        )

    def parse(self, body: Any) -> Parsed:
        msgs = parse_messages(body)
        return Parsed(msgs.create, msgs.conv, msgs)

    def limit_error(self, err: RequestError, parsed: Parsed) -> RequestError:
        return renamed(err, "'max_output_tokens'", "`max_tokens`", None)

    def translator(self, parsed: Parsed, job: Job, created: int) -> Translator:
        msgs = parsed.extra
        cache = self.service.sim.prefix_cache
        # message_start comes before prefill: what the cache holds now is what prefill will read.
        read = cached_read(msgs.cache_reads, cache.__contains__)
        start = cache_usage(msgs.cache_writes, read, msgs.input_tokens)
        message_id = client_id("messages", job.builder.response_id)
        return MessagesEvents(message_id, parsed.create.model, msgs.cache_writes, start)

    def whole(self, parsed: Parsed, job: Job, created: int) -> dict[str, Any]:
        message_id = client_id("messages", job.builder.response_id)
        return message_object(job.builder.response_object(), message_id, parsed.extra.cache_writes)
