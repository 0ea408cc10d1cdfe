"""``POST /v1/messages``: the Anthropic Messages face of the shared pipeline.

Validation, translation and the prompt-cache split are pure (``core/messages.py``);
admission, generation and ``stream: false`` are
:class:`~reference_server.stateless_api.StatelessApi`'s.  The API key comes in
``x-api-key`` (or ``Authorization: Bearer``); errors are the Messages API's
``{"type": "error", "error": {type, message}, "request_id"}`` with its statuses (an
overloaded engine is 529), and a stream that fails midway sends ``event: error`` and ends.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers
from starlette.responses import Response

from harness.wire.sse import encode_event
from reference_server.core.messages import (
    MessagesEvents,
    api_error,
    cache_usage,
    cached_read,
    message_object,
    parse_messages,
    rename_limit_error,
)
from reference_server.core.validation import RequestError
from reference_server.json_answers import json_response
from reference_server.service import Job
from reference_server.stateless_api import Parsed, StatelessApi, Translator
from reference_server.timing_log import client_id

NO_KEY_MESSAGE = (
    "You didn't provide an API key: send it in the x-api-key header "
    "(or in the Authorization header as 'Bearer <key>')."
)


class MessagesApi(StatelessApi):
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
        return rename_limit_error(err)

    def _message_id(self, job: Job) -> str:
        return client_id("messages", job.builder.response_id)

    def translator(self, parsed: Parsed, job: Job, created: int) -> Translator:
        msgs = parsed.extra
        cache = self.service.sim.prefix_cache
        # message_start comes before prefill: what the cache holds now is what prefill will read.
        read = cached_read(msgs.cache_reads, cache.__contains__)
        start = cache_usage(msgs.cache_writes, read, msgs.input_tokens)
        return MessagesEvents(self._message_id(job), parsed.create.model, msgs.cache_writes, start)

    def whole(self, parsed: Parsed, job: Job, created: int) -> dict[str, Any]:
        return message_object(
            job.builder.response_object(), self._message_id(job), parsed.extra.cache_writes
        )

    def encode(self, frame: dict[str, Any]) -> bytes:
        return encode_event(frame)
