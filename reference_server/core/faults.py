"""Seeded fault injection: what goes wrong with which request.

A :class:`FaultSpec` holds rates; :class:`FaultInjector` draws one
:class:`Fault` per admitted request (an HTTP POST or a WebSocket
``response.create``) from its own seeded generator, so the same sequence of
requests meets the same sequence of faults.  The kinds (error, disconnect, stall,
spike, evict; ``lifetime_s`` is not drawn) are mutually exclusive, drawn with one
uniform number against cumulative rates; what each does and what a client sees:
docs/reliability.md's fault table.

Drawing is pure; applying a drawn fault to a live stream (the cut, the stall, the
spike's wait) is the asyncio edge's: reference_server/fault_send.py.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.wire.pairs import parse_key_values

ERROR_STATUSES: dict[int, tuple[str, str, str]] = {
    # status: (type, code, message) in the shapes the public API uses for each
    429: (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached (injected by loopbench fault injection).",
    ),
    500: (
        "server_error",
        "server_error",
        "The server had an error while processing your request (injected fault).",
    ),
    502: ("server_error", "bad_gateway", "Bad gateway (injected fault)."),
    503: (
        "server_error",
        "service_unavailable",
        "The engine is currently overloaded, please try again later (injected fault).",
    ),
    504: ("server_error", "gateway_timeout", "Gateway timeout (injected fault)."),
}


class FaultSpecError(ValueError):
    """A fault option or file entry is invalid (one line: which key, expected, got)."""


@dataclass(frozen=True, slots=True)
class FaultSpec:
    seed: int = 0
    error_rate: Mapping[int, float] = field(default_factory=dict)
    disconnect_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 3600.0
    spike_rate: float = 0.0
    spike_ms: float = 500.0
    evict_rate: float = 0.0
    lifetime_s: float | None = None

    @property
    def enabled(self) -> bool:
        return self.total_rate > 0 or self.lifetime_s is not None

    @property
    def total_rate(self) -> float:
        return sum((*self.error_rate.values(), *(getattr(self, k) for k in _RATE_KEYS)))


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # "" (none), "error", "disconnect", "stall", "spike" or "evict"
    status: int = 0

    def __bool__(self) -> bool:
        return bool(self.kind)


NO_FAULT = Fault("")
#: kinds that act at a response's first delta, so counted when they do (FaultInjector.applied)
_AT_FIRST_DELTA = ("disconnect", "stall")
_RATE_KEYS = ("disconnect_rate", "stall_rate", "spike_rate", "evict_rate")
_POSITIVE_KEYS = ("stall_s", "spike_ms", "lifetime_s")


def _number(key: str, raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise FaultSpecError(f"fault {key}: expected a number, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise FaultSpecError(f"fault {key}: expected a finite number, got {raw!r}")
    return value


def parse_fault_spec(entries: Mapping[str, Any]) -> FaultSpec:
    """Build a spec from ``key: value`` pairs (command line ``--fault`` or a YAML ``faults:`` map).

    Keys: ``seed``, ``error_rate.<status>`` (or ``error_rate: {status: rate}``),
    ``disconnect_rate``, ``stall_rate``, ``stall_s``, ``spike_rate``, ``spike_ms``,
    ``evict_rate``, ``lifetime_s``.  Rates are probabilities per request; their
    sum must not exceed 1.
    """
    values: dict[str, Any] = {}
    errors: dict[int, float] = {}
    for key, raw in entries.items():
        key = str(key).strip()
        if key == "error_rate" and isinstance(raw, Mapping):
            for status, rate in raw.items():
                where = f"error_rate.{status}"
                errors[_status(where, status)] = _rate(where, rate)
        elif key.startswith("error_rate."):
            errors[_status(key, key.partition(".")[2])] = _rate(key, raw)
        elif key == "seed":
            try:
                values["seed"] = int(raw)
            except (TypeError, ValueError):
                raise FaultSpecError(f"fault seed: expected an integer, got {raw!r}") from None
        elif key in _RATE_KEYS:
            values[key] = _rate(key, raw)
        elif key in _POSITIVE_KEYS:
            value = _number(key, raw)
            if value <= 0:
                raise FaultSpecError(f"fault {key}: expected a positive number, got {raw!r}")
            values[key] = value
        else:
            known = ", ".join(("seed", "error_rate.<status>", *_RATE_KEYS, *_POSITIVE_KEYS))
            raise FaultSpecError(f"fault {key!r}: unknown key; expected one of {known}")
    spec = FaultSpec(error_rate=dict(sorted(errors.items())), **values)
    if spec.total_rate > 1.0 + 1e-9:
        raise FaultSpecError(
            f"faults: rates add up to {spec.total_rate:g}; expected at most 1 "
            "(each request meets at most one fault)"
        )
    return spec


def _rate(key: str, raw: Any) -> float:
    value = _number(key, raw)
    if not 0.0 <= value <= 1.0:
        raise FaultSpecError(f"fault {key}: expected a probability from 0 to 1, got {raw!r}")
    return value


def _status(key: str, raw: Any) -> int:
    try:
        status = int(raw)
    except (TypeError, ValueError):
        status = 0
    if status not in ERROR_STATUSES:
        raise FaultSpecError(
            f"fault {key}: expected a status among {', '.join(map(str, ERROR_STATUSES))}, got {raw!r}"
        )
    return status


def parse_fault_args(items: list[str]) -> dict[str, str]:
    """``["stall_rate=0.1", ...]`` (the ``--fault`` options) as a mapping."""
    return parse_key_values(
        items,
        lambda item: FaultSpecError(f"--fault {item!r}: expected KEY=VALUE, e.g. stall_rate=0.01"),
    )


class FaultInjector:
    """Draws faults and counts what it injected (``/health`` reports the counts)."""

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed)
        #: faults that took effect, by kind: what a client can have seen (``/health``)
        self.counts: dict[str, int] = {}
        table: list[tuple[float, Fault]] = []
        acc = 0.0
        for status, rate in spec.error_rate.items():
            acc += rate
            table.append((acc, Fault("error", status)))
        for kind in ("disconnect", "stall", "spike", "evict"):
            acc += getattr(spec, f"{kind}_rate")
            table.append((acc, Fault(kind)))
        self._table = table
        self._active = spec.total_rate > 0

    def draw(self, *, websocket: bool) -> Fault:
        """The fault for the next request (``evict`` only exists over WebSocket)."""
        if not self._active:
            return NO_FAULT
        u = self._rng.random()
        for edge, fault in self._table:
            if u < edge:
                if fault.kind == "evict" and not websocket:
                    return NO_FAULT
                if fault.kind not in _AT_FIRST_DELTA:
                    name = f"error_{fault.status}" if fault.kind == "error" else fault.kind
                    self.counts[name] = self.counts.get(name, 0) + 1
                return fault
        return NO_FAULT

    def applied(self, fault: Fault, *, websocket: bool) -> None:
        """Count a ``disconnect`` or ``stall`` when it takes effect, at the response's first
        delta: one drawn for a request that never got there (refused, failed first, or a
        background create, answered at once while its run goes on without the fault)
        changed nothing, and counting it made the injected faults outnumber what clients
        saw.  A WebSocket's is counted apart (``disconnect_websocket``, ``stall_websocket``):
        there a cut is a close the client recovers from, not an error."""
        name = fault.kind + ("_websocket" if websocket else "")
        self.counts[name] = self.counts.get(name, 0) + 1
