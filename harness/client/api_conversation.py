"""A rollout's conversation over a stateless API other than Responses (``chat``, ``messages``).

The same bookkeeping as :class:`~harness.client.conversation.Conversation` (both edges use
it the same way): the request is the API's body (:mod:`harness.client.chat_api`,
:mod:`harness.client.messages_api`), and the response's stream is translated into Responses
events for :class:`~harness.client.stream.ResponseStream` (:mod:`harness.client.translate`).
"""

from __future__ import annotations

from typing import Any

from harness.client import chat_api, messages_api
from harness.client.bodies import http_headers
from harness.client.conversation import Conversation
from harness.client.options import TransportOptions
from harness.client.shaping import planned_output, shape_body
from harness.client.stream import ResponseStream
from harness.client.translate import TranslatedFeed, Translator
from harness.wire.events import dumps
from harness.wire.transports import TransportSpec
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord

#: the request path of each API (after the base URL's ``/v1``)
PATHS = {"responses": "/responses", "chat": chat_api.PATH, "messages": messages_api.PATH}
_ENDS = {"chat": "[DONE]", "messages": "message_stop"}


def api_headers(spec: TransportSpec, options: TransportOptions) -> list[tuple[str, str]]:
    """The HTTP headers of ``spec``'s API (Messages authenticates with ``x-api-key``)."""
    return (
        messages_api.messages_headers(options) if spec.api == "messages" else http_headers(options)
    )


class ApiConversation(Conversation):
    """One rollout over ``chat`` or ``messages``: the whole conversation every turn, no chain."""

    __slots__ = ("cache_control", "path", "stream_end")

    def __init__(self, spec: TransportSpec, cache_control: str = "conversation", **kw: Any) -> None:
        """``kw``: :class:`Conversation`'s ``shaping`` and ``tokens``."""
        if spec.api not in _ENDS:
            raise ValueError(
                f"transport {spec.name!r}: expected the chat or messages API, got {spec.api!r}"
            )
        super().__init__(spec, **kw)
        self.cache_control = cache_control
        self.stream_end = _ENDS[spec.api]
        self.path = PATHS[spec.api]

    def body(self, inp: TurnInput) -> dict[str, Any]:
        """The turn's request body, one dict per API (where request shaping merges its fields)."""
        if self.spec.api == "chat":
            return chat_api.chat_body(inp)
        return messages_api.messages_body(inp, self.cache_control)

    def http_request(self, inp: TurnInput, rec: TurnRecord) -> bytes:
        # chat and messages are stateless: the whole conversation every turn
        rec.sent_input_tokens = inp.history_tokens
        payload = dumps(
            shape_body(self.body(inp), self.spec.api, self.shaping, planned_output(inp))
        )
        rec.bytes_sent = len(payload)
        return payload

    def http_sent(self, rec: TurnRecord, sent_ns: int) -> TranslatedFeed:
        """The request goes out now: its stream, fed through the API's translator."""
        translator: Translator = (
            chat_api.ChatTranslator()
            if self.spec.api == "chat"
            else messages_api.MessagesTranslator()
        )
        return TranslatedFeed(ResponseStream(sent_ns, tokens=self.tokens, rec=rec), translator)
