"""The connection guard under another ASGI server: it stamps each HTTP request's connection
(when it opened, which request of it this is) as reference_server/protocols.py does."""

from __future__ import annotations

import asyncio
from typing import Any

from reference_server.guard import ConnectionGuard
from reference_server.protocols import CONNECTION_KEY


def _serve(guard_lifetime_s: float | None, ports: list[int]) -> list[tuple[Any, Any]]:
    """(connection stamp, Connection header answered) of one request from each port in turn."""
    stamps: list[Any] = []
    answered: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        stamps.append(scope[CONNECTION_KEY])
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message: Any) -> None:
        answered.append(dict(message["headers"]).get(b"connection"))

    async def main() -> None:
        guard = ConnectionGuard(app, send_timeout_s=30.0, http_lifetime_s=guard_lifetime_s)
        for port in ports:
            await guard({"type": "http", "client": ("127.0.0.1", port)}, None, send)
            await asyncio.sleep(0.002)
        await guard.aclose()

    asyncio.run(main())
    return list(zip(stamps, answered, strict=True))


def test_requests_of_one_client_port_are_numbered_as_one_connection() -> None:
    seen = _serve(None, [1000, 1000, 2000, 1000])
    assert [stamp[1] for stamp, _ in seen] == [1, 2, 1, 3]
    assert seen[0][0][0] == seen[1][0][0] == seen[3][0][0] != seen[2][0][0]
    assert all(header is None for _, header in seen)


def test_a_connection_past_its_lifetime_is_closed_and_the_next_request_opens_another() -> None:
    seen = _serve(0.001, [1000, 1000, 1000])
    assert [header for _, header in seen] == [None, b"close", None]
    assert [stamp[1] for stamp, _ in seen] == [1, 2, 1]
