"""The ``chat`` and ``messages`` transports over asyncio: Chat Completions and Anthropic Messages.

The same HTTP/1.1 pool as ``http`` (:mod:`harness.transports.http`), one module for both
APIs: the spec's ``api`` picks the path, the headers, the body and the stream's translator
(:class:`harness.client.api_conversation.ApiConversation`).  Each received chunk is stamped
when it is read and translated in the same call, so the metrics mean what they mean for
``http``.
"""

from __future__ import annotations

from harness.client.api_conversation import ApiConversation, api_headers
from harness.client.options import TransportOptions
from harness.transports.http import HttpTransport
from harness.wire.transports import TransportSpec


class ApiHttpTransport(HttpTransport):
    """POST /chat/completions or /messages with ``stream: true``, the whole conversation; a
    compaction goes to the reference server's ``/responses/compact``, as for ``http``."""

    def __init__(self, spec: TransportSpec, options: TransportOptions) -> None:
        super().__init__(spec, options)
        self.headers = api_headers(spec, options)

    def conversation(self) -> ApiConversation:
        options = self.options
        return ApiConversation(
            self.spec, options.cache_control, shaping=options.shaping, tokens=options.tokens
        )
