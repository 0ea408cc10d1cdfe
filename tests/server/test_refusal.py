"""Service.refusal: what refuses an HTTP request before its body is read, in order.

One helper answers for /v1/responses, compact, chat and messages; a unit test with a
Service and no socket (the routes' end-to-end refusals are in test_sdk_conformance).
"""

from __future__ import annotations

import asyncio

from reference_server.core.config import ServerConfig
from reference_server.core.faults import FaultSpec
from reference_server.core.validation import RequestError
from reference_server.json_answers import retry_headers
from reference_server.service import Service


def _service(**options: object) -> Service:
    return Service(ServerConfig(store_path=":memory:", **options))  # type: ignore[arg-type]


def test_the_connection_refusal_comes_first_with_a_one_second_wait() -> None:
    denied = RequestError(429, "too_many_client_connections", "busy", type_="requests")
    service = _service(rate_limit_rps=1.0, rate_limit_burst=1.0)
    assert asyncio.run(service.refusal(denied)) == (denied, 1.0)


def test_the_rate_limit_then_the_injected_error() -> None:
    service = _service(
        rate_limit_rps=1.0, rate_limit_burst=1.0, faults=FaultSpec(error_rate={503: 1.0})
    )
    first = asyncio.run(service.refusal(None))
    assert first is not None and first[0].status == 503  # the bucket had room: the fault
    limited = asyncio.run(service.refusal(None))
    assert limited is not None and limited[0].code == "rate_limit_exceeded" and limited[1] > 0
    assert retry_headers(*limited) is not None


def test_no_fault_is_drawn_where_the_route_draws_none() -> None:
    service = _service(faults=FaultSpec(error_rate={503: 1.0}))
    assert asyncio.run(service.refusal(None, faults=False)) is None
    assert asyncio.run(service.refusal(None)) is not None
    assert retry_headers(RequestError(503, "x", "y")) is None
