"""The JSON answers every HTTP route gives: a body with its request id, and an error in
the OpenAI shape (``{"error": {...}}``, the status the error names)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from harness.wire import events as ev
from reference_server.core.limits import retry_after_headers
from reference_server.core.validation import RequestError


def json_response(
    body: Any, request_id: str, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(body),
        status_code=status,
        media_type="application/json",
        headers={"x-request-id": request_id, **(headers or {})},
    )


def error_response(
    err: RequestError, request_id: str, headers: dict[str, str] | None = None
) -> Response:
    body = ev.error_body(err.status, err.code, err.message, err.param, err.type)
    return json_response(body, request_id, err.status, headers)


def retry_headers(err: RequestError, wait_s: float = 1.0) -> dict[str, str] | None:
    """``retry-after`` for a 429 (after ``wait_s``), nothing for any other refusal."""
    return retry_after_headers(wait_s) if err.status == 429 else None
