"""Request shaping for real servers: extra headers, a session-affinity header, extra body fields.

Pure, and the one place both edges (and every API's body builder) ask what to add to a
request (docs/targets.md).  ``options.shaping.headers`` are already in
:func:`~harness.client.bodies.http_headers` and :func:`~harness.client.bodies.ws_headers`
(after loopbench's own, replacing a header of the same name).  :func:`shape_body` applies to
every body that asks for a model response, not to ``/responses/compact`` or the
``response.append`` prototype.  The session key (:func:`rollout_key`) is stable over a
rollout's turns and distinct per transport: each replay of a rollout is a conversation of its
own, and one key for all transports would route a later replay to the replica whose prefix
cache the earlier one filled with the same conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.workload.agent import TurnInput
from harness.workload.target import EXTRA_BODY_APIS, HEADER_NAME


@dataclass(frozen=True, slots=True)
class RequestShaping:
    """What every request of a run carries on top of what its transport sends."""

    #: added to every HTTP request and every WebSocket handshake, in order
    headers: tuple[tuple[str, str], ...] = ()
    #: header set to the rollout key on every request of a rollout (None: no such header)
    session_header: str | None = None
    #: api -> fields merged into that API's request bodies
    extra_body: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    #: the run id, the first part of :func:`rollout_key`
    run_id: str = ""

    def describe(self) -> dict[str, Any]:
        """For the manifest and ``summary.json``: header names only, never their values."""
        return {
            "headers": [name for name, _ in self.headers],
            "session_header": self.session_header,
            "extra_body": {api: dict(fields) for api, fields in self.extra_body.items() if fields},
        }


NO_SHAPING = RequestShaping()


#: an ``extra_body`` value that stands for the turn's planned output tokens
OUTPUT_TOKENS = "{output_tokens}"


def _merge(base: Any, extra: Any, planned: int | None = None) -> Any:
    if isinstance(extra, Mapping):
        # A mapping replaces what is not one, its own placeholders filled in too.
        out = dict(base) if isinstance(base, dict) else {}
        for key, value in extra.items():
            out[key] = _merge(out.get(key), value, planned)
        return out
    if extra == OUTPUT_TOKENS and planned is not None:
        return planned
    return extra


def shape_body(
    body: dict[str, Any], api: str, shaping: RequestShaping, planned_output: int | None = None
) -> dict[str, Any]:
    """``body`` with the ``extra_body`` of ``api`` merged in, ``body`` itself unchanged: a
    mapping merges key by key into the body's mapping of that name, any other value replaces
    the body's, and ``"{output_tokens}"`` becomes ``planned_output``."""
    extra = shaping.extra_body.get(api)
    if not extra:
        return body
    merged: dict[str, Any] = _merge(body, extra, planned_output)
    return merged


def planned_output(inp: TurnInput) -> int:
    """The turn's planned output tokens, reasoning included: ``shape_body``'s ``planned_output``."""
    return inp.turn.output_tokens + inp.turn.reasoning_tokens


def rollout_key(run_id: str, transport: str, rollout_id: int) -> str:
    """The session-affinity value of one rollout over one transport."""
    return f"{run_id}-{transport}-{rollout_id}" if run_id else f"{transport}-{rollout_id}"


def session_headers(shaping: RequestShaping, key: str | None) -> list[tuple[str, str]]:
    """``[(session_header, key)]`` when the run asks for one and the rollout has a key."""
    if shaping.session_header is None or key is None:
        return []
    return [(shaping.session_header, key)]


def is_secret_header(name: str) -> bool:
    """A header whose value is a credential: never printed, never recorded."""
    low = name.strip().lower()
    return low in ("authorization", "proxy-authorization", "cookie") or any(
        word in low for word in ("token", "key", "secret", "password")
    )


def redacted(name: str, value: str) -> str:
    """``value`` as it may be shown: a credential's is replaced by ``***``."""
    return "***" if is_secret_header(name) else value


def parse_header(raw: str) -> tuple[str, str] | None:
    """``"Name: value"`` (or ``Name:value``) as (name, value); None when it is not one."""
    name, sep, value = raw.partition(":")
    name = name.strip()
    value = value.strip()
    if not sep or not HEADER_NAME.match(name) or any(c in value for c in "\r\n\0"):
        return None
    return name, value


def split_extra_body(extra: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``extra_body`` as written (for every API, or keyed by API) as ``api -> fields``.

    A mapping whose keys are all API names is per API; any other applies to every API
    (a mapping that mixes the two is refused by
    :func:`harness.workload.target.extra_body_problem`).
    """
    if not extra:
        return {}
    if all(k in EXTRA_BODY_APIS for k in extra):
        return {api: dict(extra[api]) for api in EXTRA_BODY_APIS if extra.get(api)}
    return {api: dict(extra) for api in EXTRA_BODY_APIS}


def merge_extra_body(
    base: Mapping[str, Mapping[str, Any]], over: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Two per-API ``extra_body`` mappings, ``over``'s fields winning (merged as bodies are)."""
    out = {api: dict(fields) for api, fields in base.items()}
    for api, fields in over.items():
        out[api] = _merge(out.get(api, {}), fields)
    return out
