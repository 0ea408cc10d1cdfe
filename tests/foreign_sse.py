"""A small canned Responses SSE server that loopbench did not write, for the honesty checks.

Started by a test on 127.0.0.1 port 0 in a background thread (its own event loop),
stopped when the ``with`` block ends.  It speaks just enough of ``POST /v1/responses``
(HTTP/1.1, keep-alive, chunked SSE) for the harness to run a rollout, and each mode
lies in one way a foreign endpoint might:

* ``ignore_chain``: answers every request as a new conversation: ``usage.input_tokens``
  counts only what the request carried (instructions and input), whatever
  ``previous_response_id`` names;
* ``lie_output``: streams a function call's arguments ``"{}"`` as two one-character deltas
  but reports ``LIED_OUTPUT_TOKENS`` output tokens; its message answers are honest, so a
  run holds turns to keep and turns to leave out.

Otherwise honest: text deltas of four characters per token, ``output_tokens`` equal to
what was streamed.  Deltas are paced (``DELTA_GAP_S``) so they reach the client in
separate reads, as a real engine's would.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from harness.wire.tokens import count_tokens
from tests.foreign_http import keep_alive, serve_in_thread

LIED_OUTPUT_TOKENS = 300
DELTA_GAP_S = 0.002
#: an honest message answer: this many tokens, one delta per token
HONEST_TOKENS = 24
MODES = ("ignore_chain", "lie_output")


class _Server:
    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"foreign server mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.ids = itertools.count(1)
        self.requests = 0
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1

        async def answer(
            _line: str, _headers: dict[str, str], body: bytes, w: asyncio.StreamWriter
        ) -> None:
            self.requests += 1
            await self.answer(w, orjson.loads(body) if body else {})

        await keep_alive(reader, writer, answer)

    async def answer(self, writer: asyncio.StreamWriter, req: dict[str, Any]) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        seq = itertools.count()
        n = next(self.ids)
        rid = f"resp_foreign{n}"
        call = req.get("tool_choice") == "required"
        if call:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_foreign{n}",
                "call_id": f"call_foreign{n}",
                "name": "run_tool",
                "arguments": "",
            }
            deltas = ["{", "}"] if self.mode == "lie_output" else ['{"command":', ' "ls -la"}']
        else:
            item = {"type": "message", "id": f"msg_foreign{n}", "role": "assistant", "content": []}
            deltas = [" the"] * HONEST_TOKENS
        text = "".join(deltas)
        streamed = count_tokens(text)
        out_tokens = LIED_OUTPUT_TOKENS if self.mode == "lie_output" and call else streamed
        # What a server that starts afresh counts: the instructions and the input it was sent.
        in_tokens = count_tokens(str(req.get("instructions", ""))) + count_tokens(
            orjson.dumps(req.get("input", [])).decode()
        )
        resp = {"id": rid, "object": "response", "status": "in_progress", "output": []}

        async def event(kind: str, **fields: Any) -> None:
            data = orjson.dumps({"type": kind, "sequence_number": next(seq), **fields})
            chunk = b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()

        await event("response.created", response=resp)
        await event("response.in_progress", response=resp)
        await event("response.output_item.added", output_index=0, item=item)
        ref = {"item_id": item["id"], "output_index": 0}
        if call:
            for d in deltas:
                await asyncio.sleep(DELTA_GAP_S)
                await event("response.function_call_arguments.delta", delta=d, **ref)
            await event("response.function_call_arguments.done", arguments=text, **ref)
            done_item = {**item, "arguments": text, "status": "completed"}
        else:
            part = {"type": "output_text", "text": "", "annotations": []}
            await event("response.content_part.added", content_index=0, part=part, **ref)
            for d in deltas:
                await asyncio.sleep(DELTA_GAP_S)
                await event("response.output_text.delta", content_index=0, delta=d, **ref)
            await event("response.output_text.done", content_index=0, text=text, **ref)
            full = {**part, "text": text}
            await event("response.content_part.done", content_index=0, part=full, **ref)
            done_item = {**item, "content": [full], "status": "completed"}
        await event("response.output_item.done", output_index=0, item=done_item)
        usage = {
            "input_tokens": in_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out_tokens,
            "total_tokens": in_tokens + out_tokens,
        }
        final = {**resp, "status": "completed", "output": [done_item], "usage": usage}
        await event("response.completed", response=final)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


@contextmanager
def foreign_sse_server(mode: str) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a canned server in ``mode`` while open."""
    with serve_in_thread(_Server(mode).handle, "foreign SSE server") as port:
        yield f"http://127.0.0.1:{port}/v1"
