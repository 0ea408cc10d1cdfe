"""What each transport puts on the wire for one turn: headers, HTTP bodies, WebSocket messages.

Written once for both edges, so ``loopbench run`` and ``loopbench locust`` send the
same bytes (tests/transports/test_parity.py checks it on the wire).  The content
comes from :class:`~harness.workload.agent.TurnInput`; the transport's capabilities
(:class:`~harness.wire.transports.TransportSpec`) decide what of it is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.client.options import TransportOptions
from harness.wire.transports import TransportSpec
from harness.workload.agent import TurnInput


def http_headers(options: TransportOptions) -> list[tuple[str, str]]:
    """Headers of every HTTP request (``host``, ``content-length`` and ``connection`` are the
    connection's business)."""
    headers = {
        "user-agent": "loopbench",
        "accept": "text/event-stream",
        "authorization": f"Bearer {options.api_key}",
        "content-type": "application/json",
    }
    headers.update({k.lower(): v for k, v in options.extra_headers.items()})
    # The run's own headers last: a --header authorization (or content-type) replaces ours.
    headers.update({k.lower(): v for k, v in options.shaping.headers})
    return list(headers.items())


def ws_headers(
    options: TransportOptions, session: Sequence[tuple[str, str]] = ()
) -> dict[str, str]:
    """Headers of the WebSocket handshake (``session``: the rollout's session-affinity header)."""
    # Lower-cased like the HTTP headers, so a --header Authorization replaces the default
    # instead of going out as a second authorization header.
    headers = {"authorization": f"Bearer {options.api_key}"}
    headers.update({k.lower(): v for k, v in options.extra_headers.items()})
    headers.update({k.lower(): v for k, v in options.shaping.headers})
    headers.update({k.lower(): v for k, v in session})
    return headers


#: what a stateless request asks for so that it can send the reasoning back (as Codex does)
INCLUDE_REASONING = ["reasoning.encrypted_content"]


def _common(inp: TurnInput) -> dict[str, Any]:
    body = {
        "model": inp.model,
        "instructions": inp.instructions,
        "tools": inp.tools,
        "tool_choice": inp.tool_choice,
        "metadata": inp.metadata,
        "max_output_tokens": inp.max_output_tokens,
    }
    if inp.reasoning is not None:
        body["reasoning"] = inp.reasoning
    # the probe's one-message turn: no empty instructions, no tool_choice without tools
    if not inp.instructions:
        del body["instructions"]
    if not inp.tools:
        del body["tools"], body["tool_choice"]
    return body


def http_body(
    spec: TransportSpec, inp: TurnInput, previous_response_id: str | None
) -> dict[str, Any]:
    """``POST /responses``: the history, or for a chained transport the id and the new items."""
    body = _common(inp)
    body["stream"] = True
    if spec.chained and previous_response_id is not None and inp.chain:
        body["input"] = inp.new_items
        body["previous_response_id"] = previous_response_id
        body["store"] = True
    else:
        body["input"] = inp.history
        body["store"] = spec.store
        _include_reasoning(body, inp)
    return body


def _include_reasoning(body: dict[str, Any], inp: TurnInput) -> None:
    if inp.reasoning is not None and inp.resend_reasoning:
        # Sent whole, the history carries the reasoning: it comes back encrypted for the next
        # turn's history (harness/workload/agent.py), as Codex asks for it.
        body["include"] = list(INCLUDE_REASONING)


def ws_create(
    spec: TransportSpec, inp: TurnInput, previous_response_id: str | None
) -> dict[str, Any]:
    """``response.create``: chained by id when there is one and the turn chains, else the
    whole history."""
    body = {"type": "response.create", **_common(inp), "store": spec.store}
    if previous_response_id is None or not inp.chain:
        body["input"] = inp.history
        _include_reasoning(body, inp)
    else:
        body["input"] = inp.new_items
        body["previous_response_id"] = previous_response_id
    return body


def ws_warmup(spec: TransportSpec, inp: TurnInput) -> dict[str, Any]:
    """``response.create`` with ``generate: false``: the instructions and tools of the turn
    that follows, no input and no output (docs/protocol.md §2.4); that turn chains from it."""
    return {
        "type": "response.create",
        **_common(inp),
        "store": spec.store,
        "input": [],
        "generate": False,
    }


def ws_append(inp: TurnInput, response_id: str) -> dict[str, Any]:
    """``response.append`` (append prototype): the tool outputs, plus this turn's metadata and
    tool_choice (a loopbench extension) so the replayed rollout keeps its shape."""
    return {
        "type": "response.append",
        "response_id": response_id,
        "input": inp.new_items,
        "metadata": inp.metadata,
        "tool_choice": inp.tool_choice,
    }


def sent_tokens(body: dict[str, Any], inp: TurnInput) -> int:
    """The tokens ``body`` carries of ``inp`` (the turn row's ``sent_input_tokens``), in the
    run's token convention: the whole history, instructions and tools included, unless the
    body chains (then those and the new items) or appends (the new items only)."""
    if body.get("type") == "response.append":
        return inp.new_tokens
    if "previous_response_id" in body:
        return inp.base_tokens + inp.new_tokens
    return inp.history_tokens


def compact_body(inp: TurnInput) -> dict[str, Any]:
    """``POST /responses/compact`` (``client.responses.compact``): the history to compact.

    Sent whole whatever the transport: a compaction starts a new chain (docs/protocol.md §6).
    """
    body = {"model": inp.model, "instructions": inp.instructions, "input": inp.history}
    if not inp.instructions:
        del body["instructions"]
    return body
