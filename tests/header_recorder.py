"""The reference server, recording the headers and bodies of what it receives.

:func:`recording_target` starts the reference server app on 127.0.0.1 port 0 in a
background thread (its own event loop), behind an ASGI middleware that keeps, per
HTTP request, its path, headers and body, and per WebSocket connection its handshake
headers and every text frame.  It yields ``(base_url, Recording)`` and stops when the
block ends.  (tests/transports/recording_server.py records bodies only, in a
subprocess, for the parity test; this one is for what a run adds to requests.)
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from reference_server.app import ReferenceServer
from reference_server.core.config import ServerConfig
from reference_server.process import bind

#: the rollouts and load of a shaping test's scenario: two short rollouts per transport
SHAPE = """
rollout:
  count: 2
  system_tokens: 60
  tool_schema_tokens: 50
  user_prompt_tokens: 20
  tool_calls: 2
  tool_output_tokens: 30
  tool_latency_ms: 1
  step_output_tokens: 20
  final_answer_tokens: 30
load:
  mode: closed
  concurrency: 2
"""

#: seconds the server may take to start or stop
START_TIMEOUT_S = 30.0


@dataclass
class Exchange:
    """One HTTP request, or one WebSocket connection and the frames the client sent on it."""

    kind: str  # "http" or "ws"
    path: str
    headers: dict[str, str]
    bodies: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Recording:
    exchanges: list[Exchange] = field(default_factory=list)

    def http(self, path_suffix: str = "/responses") -> list[Exchange]:
        return [e for e in self.exchanges if e.kind == "http" and e.path.endswith(path_suffix)]

    def ws(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.kind == "ws"]


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


class _Recorder:
    def __init__(self, app: Any, recording: Recording) -> None:
        self.app = app
        self.recording = recording

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        entry = Exchange("http" if kind == "http" else "ws", scope["path"], _headers(scope))
        self.recording.exchanges.append(entry)
        parts: list[bytes] = []

        async def recording_receive() -> Any:
            msg = await receive()
            if msg["type"] == "http.request":
                parts.append(msg.get("body", b""))
                if not msg.get("more_body") and any(parts):
                    entry.bodies.append(json.loads(b"".join(parts)))
            elif msg["type"] == "websocket.receive" and msg.get("text") is not None:
                entry.bodies.append(json.loads(msg["text"]))
            return msg

        await self.app(scope, recording_receive, send)


@contextmanager
def recording_target() -> Iterator[tuple[str, Recording]]:
    recording = Recording()
    app = ReferenceServer(ServerConfig(store_path=":memory:")).app
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(
        _Recorder(app, recording),
        log_level="warning",
        access_log=False,
        ws="websockets-sansio",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started, "the recording server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", recording
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()
