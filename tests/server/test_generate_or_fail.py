"""Service.generate_or_fail: what every streamed HTTP route (Responses, Chat, Messages) does
when generating a response crashes or a fault drops the connection.  Records in and out,
no server: the generator is replaced by one that raises."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import pytest

from harness.wire import events as ev
from reference_server.core.config import ServerConfig
from reference_server.fault_send import InjectedDisconnect
from reference_server.service import Job, Service


def _run(raises: BaseException | None, *, send_fails: bool = False) -> tuple[bool, list[Any]]:
    """generate_or_fail over a job whose generation raises ``raises`` (or ends normally)."""
    service = Service(ServerConfig())
    sent: list[dict[str, Any]] = []

    async def generate(job: Job, send: Any) -> str:
        if raises is not None:
            raise raises
        return "completed"

    async def send(events: Sequence[dict[str, Any]]) -> None:
        if send_fails:
            raise ValueError("the client left")
        sent.extend(events)

    service.generate = generate  # type: ignore[method-assign]
    builder = ev.ResponseBuilder("resp_1", model="m", created_at=0, request={})
    job = cast(Job, type("J", (), {"builder": builder})())

    async def main() -> bool:
        try:
            return await service.generate_or_fail(job, send)
        finally:
            await service.store.close()

    return asyncio.run(main()), sent


def test_a_crash_fails_the_response_in_the_stream() -> None:
    ok, sent = _run(RuntimeError("bug"))
    assert ok is False
    assert [e["type"] for e in sent] == ["error", "response.failed"]
    assert sent[0]["error"]["message"] == "The server had an error: RuntimeError."


def test_a_crash_after_the_client_left_is_not_a_second_error() -> None:
    assert _run(RuntimeError("bug"), send_fails=True) == (False, [])


def test_an_injected_disconnect_drops_the_connection() -> None:
    with pytest.raises(InjectedDisconnect):
        _run(InjectedDisconnect("cut"))


def test_a_normal_end_sends_nothing_more() -> None:
    assert _run(None) == (True, [])
