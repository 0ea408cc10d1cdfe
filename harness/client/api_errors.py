"""The endpoint's errors as typed exceptions, and the name each error gets in the results.

An HTTP error body (``{"error": {"code", "type", "message"}}``) and a WebSocket
``error`` event without ``sequence_number`` (one that belongs to the connection,
not to a response) both become :class:`~harness.wire.errors.APIError`.
"""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import urlsplit

from harness.wire.errors import APIError, ErrorKind, LoopbenchError, ProtocolError, TransportError
from harness.wire.events import loads


def api_error_from_body(status: int, body: bytes) -> APIError:
    """The error of an HTTP response with ``status`` >= 400.

    An OpenAI-style body (``{"error": {"code", "type", "message"}}``) or an Anthropic one
    (``{"type": "error", "error": {"type", "message"}}``) gives code and message: the
    code, else the type, names the error (``rate_limit_exceeded``, ``overloaded_error``);
    any other body is quoted (its start).
    """
    try:
        doc = loads(body)
    except LoopbenchError:
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    err = err if isinstance(err, dict) else {}
    code = err.get("code") or err.get("type")
    if err.get("message"):
        return _classified(status, code, str(err["message"]))
    return APIError(status, code, f"HTTP {status} with the body {body_start(body)}")


_HTML = re.compile(r"\s*<(!doctype\s+html|html|head|body|title)\b", re.IGNORECASE)
_HIDDEN = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
#: how much of an HTML page is read for its text
_HTML_READ = 64 * 1024


def body_start(body: bytes, limit: int = 200) -> str:
    """The start of a body for a one-line error message, saying how much was left out.

    Runs of whitespace become one space: the message is one line wherever it is shown.  An
    HTML page (a web server's or a gateway's error page) is quoted by its text, tags left
    out: "Error code: 501 Message: Unsupported method ('POST')" is what a user can act on,
    and it comes after a ``<head>`` that alone fills the first 200 bytes.
    """
    if _HTML.match(body[:200].decode("utf-8", "replace")):
        page = body[:_HTML_READ].decode("utf-8", "replace")
        text = " ".join(html.unescape(_TAG.sub(" ", _HIDDEN.sub(" ", page))).split())
        if len(text) > limit:
            text = text[:limit].rstrip() + " …"
        return f"(an HTML page of {len(body)} bytes) {text}" if text else "(an empty HTML page)"
    text = " ".join(body[:limit].decode("utf-8", "replace").split())
    if not text:
        return "(empty)"
    more = len(body) - limit
    return f"{text} …({more} more bytes)" if more > 0 else text


def api_error_from_event(event: dict[str, Any]) -> APIError:
    """The error of a connection-level WebSocket ``error`` event."""
    err = event.get("error") or {}
    status = int(event.get("status", 400))
    return _classified(status, err.get("code"), str(err.get("message", "")), websocket=True)


# What a client does about an error, whichever API named it: the OpenAI codes, the reference
# server's, Anthropic's types.
_CLASSES = {
    "rate_limited": frozenset(
        {"rate_limit_exceeded", "rate_limit_error", "too_many_client_connections"}
    ),
    "overloaded": frozenset(
        {"overloaded_error", "service_unavailable", "too_many_connections", "engine_overloaded"}
    ),
    "server_error": frozenset({"server_error", "api_error", "bad_gateway", "gateway_timeout"}),
    "authentication": frozenset({"invalid_api_key", "authentication_error"}),
    "permission": frozenset({"permission_error"}),
    "not_found": frozenset({"not_found_error"}),
    "invalid_request": frozenset({"invalid_request_error", "request_too_large"}),
}
_STATUS_CLASSES = {
    401: "authentication",
    403: "permission",
    404: "not_found",
    429: "rate_limited",
    500: "server_error",
    502: "server_error",
    503: "overloaded",
    504: "server_error",
    529: "overloaded",
}
#: the classes a client may retry after waiting (the status alone says so for 429 and 5xx)
RETRYABLE_CLASSES = frozenset({"rate_limited", "overloaded", "server_error"})


def error_class(status: int, code: str | None) -> str:
    """What kind of refusal an API error is, the same for all three APIs' vocabularies:
    ``rate_limited``, ``overloaded``, ``server_error``, ``authentication``, ``permission``,
    ``not_found``, ``invalid_request``, else ``other``.

    The code decides when it is known (an Anthropic ``overloaded_error`` is an overload
    whatever its status); otherwise the status.  ``status`` 0: unknown (an error event).
    """
    for name, codes in _CLASSES.items():
        if code in codes:
            return name
    if code == CONTEXT_LENGTH_EXCEEDED:
        return "invalid_request"
    if status in _STATUS_CLASSES:
        return _STATUS_CLASSES[status]
    return "invalid_request" if 400 <= status < 500 else "other"


def retryable(status: int, code: str | None) -> bool:
    """Whether the same request may succeed later: a rate limit, an overload (503, 529,
    ``overloaded_error``) or a server error, never a refusal of the request itself."""
    return error_class(status, code) in RETRYABLE_CLASSES


CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
# The reference server's numbers ("N input tokens + M requested output tokens exceed the
# context window of W tokens"), and the wording OpenAI-compatible servers (vLLM, the
# Chat Completions API) use: "maximum context length is W tokens. However, you requested N".
_OURS = re.compile(
    r"(\d+) input tokens \+ (\d+) requested output tokens exceed the context window of (\d+) tokens"
)
_THEIRS = re.compile(
    r"maximum context length is (\d+) tokens\. However, you requested (\d+) tokens"
)


def _classified(
    status: int, code: str | None, message: str, *, websocket: bool = False
) -> APIError:
    """The error, with a context-window refusal named as one whatever the endpoint called it."""
    if code == CONTEXT_LENGTH_EXCEEDED or (status == 400 and _THEIRS.search(message)):
        code, message = CONTEXT_LENGTH_EXCEEDED, context_message(message)
    return APIError(status, code, message, websocket=websocket)


def context_message(message: str) -> str:
    """A ``context_length_exceeded`` error in the harness's words, with the numbers when known."""
    ours = _OURS.search(message)
    if ours:
        inp, out, window = (int(g) for g in ours.groups())
        why = (
            f"the request's {inp:,} input tokens + {out:,} requested output tokens exceed "
            f"the model's context window of {window:,} tokens"
        )
    elif theirs := _THEIRS.search(message):
        window, asked = (int(g) for g in theirs.groups())
        why = f"the request's {asked:,} tokens (input and output) exceed the model's context window ({window:,} tokens)"
    else:
        why = "the request's input exceeds the model's context window"
    return f"{why}; the endpoint said: {message}"


def error_kind(exc: LoopbenchError) -> str:
    """The ``error_kind`` a failed turn is recorded with.

    The server's error code for an API error, the :class:`~harness.wire.errors.ErrorKind`
    of a transport error, the kind of a protocol violation (``invalid_event``,
    ``invalid_sse``, ``out_of_order_event``, ``invalid_http``), else the class name.
    """
    if isinstance(exc, APIError) and exc.code:
        return exc.code
    if isinstance(exc, TransportError | ProtocolError):
        return str(exc.kind)
    return type(exc).__name__


def describe_os_error(exc: BaseException, peer: str) -> str:
    """A socket failure talking to ``peer`` (``host:port``) as a sentence a user can act on.

    The client edge words its connection errors with this, so a
    failed turn's ``error`` column never holds an exception's repr.
    """
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {peer} (nothing listening?)"
    if isinstance(exc, ConnectionResetError):
        return f"connection reset by {peer}"
    if isinstance(exc, ConnectionAbortedError | BrokenPipeError):
        return f"connection to {peer} closed while sending"
    if isinstance(exc, TimeoutError):
        return f"connecting to {peer} timed out"
    # socket.gaierror, named without importing socket into this pure module
    if type(exc).__name__ == "gaierror":
        return f"cannot resolve the host of {peer}: {getattr(exc, 'strerror', None) or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{peer}: {exc.strerror} (errno {exc.errno})"
    text = str(exc)
    return f"{peer}: {text}" if text else f"{peer}: {type(exc).__name__}"


def lost_mid_response(exc: BaseException | None, peer: str) -> str:
    """The connection ended after some bytes of the response arrived."""
    why = f": {describe_os_error(exc, peer)}" if exc is not None else ""
    return f"connection to {peer} lost in the middle of the response{why}"


def answered(status: int, message: str) -> str:
    """``HTTP 500: the server's message`` or ``HTTP 500 with the body …``."""
    # the error parser already says "HTTP 500 with the body …" for a body that is not JSON
    message = message.removeprefix(f"HTTP {status} ")
    detail = (
        "" if not message else (f" {message}" if message.startswith("with ") else f": {message}")
    )
    return f"HTTP {status}{detail}"


def error_text(status: int, body: bytes) -> str:
    """The message of an error answer, its code first when it has one (``not_found: …``);
    the status is the sentence's (:func:`answered`), so it is not repeated here."""
    text = str(api_error_from_body(status, body))
    text = text.removeprefix(f"http_{status}: ").replace(f" (HTTP {status}): ", ": ", 1)
    if text.startswith("HTTP "):
        # Not the OpenAI shape; vLLM's older errors put the message at the top level
        # ({"object": "error", "message": …}), FastAPI's put it in "detail".
        try:
            doc = loads(body)
        except LoopbenchError:
            return text
        if isinstance(doc, dict) and doc.get("object") == "error" and doc.get("message"):
            return str(doc["message"])
    return text


#: the 5xx that do answer: no such method or feature (501), no such HTTP version (505), a
#: network's login first (511)
NOT_SERVER_ERRORS = (501, 505, 511)
#: the error classes (:func:`error_class`) that are about the server's state, in words
STATE_WORDS = {
    "server_error": "a server error",
    "overloaded": "the server is overloaded",
    "rate_limited": "the server is rate-limiting",
}
#: the statuses that are about the server's state, not the route (5xx are too): why, in words
BUSY = {408: "the server timed out reading the request", 429: STATE_WORDS["rate_limited"]}


def server_state(status: int) -> str | None:
    """Why ``status`` says nothing of a feature (a server error, a rate limit), or None."""
    if status >= 500 and status not in NOT_SERVER_ERRORS:
        return STATE_WORDS["server_error"]
    return BUSY.get(status)


def error_state(status: int, code: object) -> str | None:
    """Why an error with ``code`` (``status`` 0: unknown) says nothing of a feature, or None."""
    return STATE_WORDS.get(error_class(status, code if isinstance(code, str) else None))


def no_websocket_mode(url: str, status: int, said: str = "") -> str:
    """The upgrade of a WebSocket connection was answered with a plain HTTP status (and
    ``said``, its body's message)."""
    return f"no WebSocket mode at {url}: the upgrade was answered with {answered(status, said)}"


def not_sse(content_type: str, body: bytes) -> str:
    """A 200 answer to a streaming request that is not a server-sent-event stream."""
    shown = content_type or "no content type"
    return f"expected an SSE stream (text/event-stream), got {shown}: {body_start(body)}"


#: an HTTP status line anywhere in a message: ``expected HTTP/1.1: HTTP/1.0 500 …``
_STATUS_LINE = re.compile(r"\bHTTP/\d(?:\.\d)? (\d{3})\b")


def upgrade_status(exc: BaseException) -> tuple[int, bytes] | None:
    """The HTTP status and body a WebSocket upgrade was refused with; None if no answer came.

    Duck-typed on the ``websockets`` library both edges use: a refusal it parsed carries
    ``response.status_code``. An HTTP/1.0 answer (``python -m http.server``, some proxies)
    it refuses to parse ("did not receive a valid HTTP response", caused by "expected
    HTTP/1.1: HTTP/1.0 500 …"), though it is a status all the same; its body is not kept.
    """
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return status, bytes(getattr(response, "body", None) or b"")
    found = _STATUS_LINE.search(str(exc.__cause__ or ""))
    return (int(found.group(1)), b"") if found else None


def ws_open_failure(exc: BaseException, url: str) -> TransportError:
    """Why a WebSocket to ``url`` could not be opened, as the turn's error.

    Duck-typed (:func:`upgrade_status`), so this module imports no I/O library.
    """
    answer = upgrade_status(exc)
    if answer is not None:
        status, body = answer
        said = error_text(status, body) if body else ""
        state = server_state(status)
        if state is not None:
            # not "no WebSocket mode": the server failed (or was too busy for) this upgrade;
            # named by its body's code, as the same answer over HTTP is
            return APIError(
                status,
                api_error_from_body(status, body).code if body else None,
                f"the WebSocket upgrade at {url} was answered with {answered(status, said)} "
                f"({state}, not an answer about WebSocket mode)",
            )
        return TransportError(ErrorKind.NO_WEBSOCKET, no_websocket_mode(url, status, said))
    peer = urlsplit(url).netloc or url
    if isinstance(exc, TimeoutError):
        return TransportError(ErrorKind.TIMEOUT, f"WebSocket {url}: opening handshake timed out")
    if isinstance(exc, OSError):
        return TransportError(
            ErrorKind.CONNECTION, f"WebSocket {url}: {describe_os_error(exc, peer)}"
        )
    text = str(exc) or type(exc).__name__
    return TransportError(
        ErrorKind.CONNECTION, f"WebSocket {url}: the opening handshake failed: {text}"
    )
