"""What the Chat Completions and Messages routes share: one stateless request through the Service.

Both APIs are the ``http`` transport in another shape: the whole conversation every
turn, validated and translated by ``core/chat.py`` / ``core/messages.py`` into the
server's own request, admitted like ``POST /v1/responses`` (connection limits, API
key, rate limit, injected fault), waited through the same API tier and engine
(:meth:`Service.admit`, :meth:`Service.generate`), and streamed through a ``send``
that translates the pipeline's Responses events into the API's own frames.  There is
no second generator: a chat or messages turn costs what the same ``http`` turn costs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from harness.wire import events as ev
from reference_server.core.api_tier import RequestCost
from reference_server.core.chat import error_message
from reference_server.core.conversation import Conversation, tools_tokens
from reference_server.core.validation import CreateRequest, RequestError
from reference_server.event_stream import EventStream, SendEvents, unless_gone
from reference_server.json_answers import error_response, json_response, retry_headers
from reference_server.service import Job, Service, now_s

Refusal = Callable[[Request, Headers], Awaitable[tuple[RequestError, float] | None]]
ReadJson = Callable[[Request], Awaitable[Any]]
NewConnection = Callable[[Request], bool]


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


class StatelessApi:
    """One stateless route (chat or messages); subclasses give the API's shapes."""

    done_marker = False  # `data: [DONE]` after a stream that ended normally
    api = ""  # the --timing-log name: "chat" or "messages"

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
        """The refusal in the API's error shape (here: OpenAI's, as the Responses routes)."""
        return error_response(err, request_id, headers)

    def parse(self, body: Any) -> Parsed:
        raise NotImplementedError

    def limit_error(self, err: RequestError, parsed: Parsed) -> RequestError:
        """A shared limit error (the context window, the output cap) in the API's terms."""
        return err

    def translator(self, parsed: Parsed, job: Job, created: int) -> Translator:
        raise NotImplementedError

    def whole(self, parsed: Parsed, job: Job, created: int) -> dict[str, Any]:
        """The ``stream: false`` body of a finished response."""
        raise NotImplementedError

    def encode(self, frame: dict[str, Any]) -> bytes:
        raise NotImplementedError

    # -- the request ----------------------------------------------------------------------
    async def create(self, request: Request) -> Response:
        service = self.service
        rng = service.rng()
        request_id = ev.new_id("req", rng)
        refused = await self._refusal(request, self.auth_headers(request.headers))
        if refused is not None:
            return self.error_response(refused[0], request_id, retry_headers(*refused))
        try:
            parsed = self.parse(await self._read_json(request))
            req = parsed.create
            try:
                service.fit_window(req, parsed.conv, tools_tokens(req.tools))
            except RequestError as err:
                raise self.limit_error(err, parsed) from None
        except RequestError as err:
            return self.error_response(err, request_id, retry_headers(err))
        except ClientDisconnect:
            return Response(status_code=499)
        # Stateless: the API tier processes the whole input every turn, as for `http`.
        processed = parsed.conv.tokens + tools_tokens(req.tools)
        cost = RequestCost.http(self._new_connection(request), processed)
        created = now_s()
        job = Job(
            req,
            parsed.conv,
            cost,
            rng,
            parent_stored=False,
            api=self.api,
            request_id=request.headers.get("x-request-id"),
        )
        if not req.stream:
            return await self._whole(request, parsed, job, request_id, created)
        await service.admit(job)
        translator = self.translator(parsed, job, created)

        async def run(send: SendEvents) -> bool:
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
        """``stream: false``: one JSON body, or nothing if the client left (as for Responses)."""
        failed: list[dict[str, Any]] = []

        async def keep_errors(events: Sequence[dict[str, Any]]) -> None:
            failed.extend(e for e in events if e.get("type") == ev.ERROR)

        # A crash's failure events land in `failed`; a disconnect drops the connection, as for
        # a non-streamed /v1/responses.
        answer = self.service.answer(job, keep_errors, fail_in_band=True)
        answered = await unless_gone(request.receive, answer)
        if isinstance(answered, Response):
            return answered
        if failed:
            return self.error_response(
                RequestError(500, "server_error", error_message(failed[0]), type_="server_error"),
                request_id,
            )
        return json_response(self.whole(parsed, job, created), request_id)
