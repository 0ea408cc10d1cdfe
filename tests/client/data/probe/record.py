"""Record the reference server's answers to the probe's requests into this folder (run once:
``.venv/bin/python -m tests.client.data.probe.record``).

Each answer's body is kept as the bytes the server sent; a WebSocket exchange as its text
messages, one a line.  tests/client/test_probe_judges.py judges them without a server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness.client.messages_api import messages_headers
from harness.client.probe_answers import (
    chat_create,
    http_create,
    messages_create,
    ws_create,
)
from harness.run.embedded import embedded_server
from harness.run.probe import _Prober
from harness.transports.ws import open_ws
from harness.wire.credentials import PLACEHOLDER_API_KEY
from harness.wire.events import dumps

HERE = Path(__file__).parent
MODEL = "sim-model"


async def record(url: str) -> None:
    prober = _Prober(url, PLACEHOLDER_API_KEY, True, 10.0, MODEL)
    try:
        answers = {
            "responses.sse": ("/responses", http_create(MODEL, store=False), None),
            "chat.sse": ("/chat/completions", chat_create(MODEL), None),
            "chat_tools.sse": ("/chat/completions", chat_create(MODEL, tools=True), None),
            "messages.sse": ("/messages", messages_create(MODEL), messages_headers(prober.options)),
        }
        for name, (path, body, headers) in answers.items():
            _, _, raw = await prober.call("POST", path, body, headers)
            (HERE / name).write_bytes(raw)
        conn = await open_ws(prober.options, prober.ws_url)
        try:
            await conn.send(dumps(ws_create(MODEL, stream_id="loopbench-probe")).decode())
            lines = []
            while True:
                raw, _, _ = await conn.recv()
                text = raw if isinstance(raw, str) else raw.decode()
                lines.append(text)
                if '"response.completed"' in text:
                    break
            (HERE / "ws_lane.jsonl").write_text("\n".join(lines) + "\n")
        finally:
            await conn.close()
    finally:
        await prober.aclose()


if __name__ == "__main__":
    with embedded_server(extra_args=["--store", ":memory:"]) as base:
        asyncio.run(record(base))
