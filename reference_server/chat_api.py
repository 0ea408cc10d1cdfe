"""``POST /v1/chat/completions``: the Chat Completions face of the shared pipeline.

Validation and translation are pure (``core/chat.py``); admission, generation and
``stream: false`` are :class:`~reference_server.stateless_api.StatelessApi`'s.  Errors
are the OpenAI error body the Responses routes send; a stream that fails midway sends
one ``data: {"error": …}`` frame and ends without ``[DONE]``.
"""

from __future__ import annotations

from typing import Any

import orjson

from reference_server.core.chat import (
    ChatChunks,
    chat_completion,
    parse_chat,
    rename_limit_error,
)
from reference_server.core.conversation import Conversation
from reference_server.core.validation import RequestError
from reference_server.service import Job
from reference_server.stateless_api import Parsed, StatelessApi, Translator
from reference_server.timing_log import client_id


class ChatApi(StatelessApi):
    done_marker = True
    api = "chat"

    def parse(self, body: Any) -> Parsed:
        chat = parse_chat(body)
        return Parsed(chat.create, Conversation.build(None, [], chat.create.input_items), chat)

    def limit_error(self, err: RequestError, parsed: Parsed) -> RequestError:
        return rename_limit_error(err, parsed.extra.max_tokens_field)

    def _completion_id(self, job: Job) -> str:
        # The response id's random part: one id per turn, drawn once.
        return client_id("chat", job.builder.response_id)

    def translator(self, parsed: Parsed, job: Job, created: int) -> Translator:
        return ChatChunks(
            self._completion_id(job),
            parsed.create.model,
            created,
            include_usage=parsed.extra.include_usage,
        )

    def whole(self, parsed: Parsed, job: Job, created: int) -> dict[str, Any]:
        return chat_completion(job.builder.response_object(), self._completion_id(job), created)

    def encode(self, frame: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(frame) + b"\n\n"
