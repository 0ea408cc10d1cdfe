"""Seeded fault injection: what goes wrong with which request (docs/reliability.md's table).

:class:`FaultInjector` draws one :class:`Fault` per admitted request from its own seeded
generator, so the same requests meet the same faults; the kinds are mutually exclusive (one
uniform draw against cumulative rates).  Applying one to a live stream is
reference_server/fault_send.py's.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from harness.wire.pairs import parse_key_values
from harness.wire.validation import KnownFields, describe_error, invalid

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


def _status_number(key: Any) -> Any:
    # ``--fault error_rate.503=...`` names the status as text
    return int(key) if isinstance(key, str) and key.strip().isdigit() else key


if TYPE_CHECKING:
    Status = int
else:
    Status = Annotated[Literal[tuple(ERROR_STATUSES)], BeforeValidator(_status_number)]
Rate = Annotated[float, Field(ge=0, le=1)]
Positive = Annotated[float, Field(gt=0)]


class FaultSpec(KnownFields):
    """Probabilities per request of each fault, and its parameters (docs/reliability.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    seed: int = 0
    error_rate: dict[Status, Rate] = Field(default_factory=dict)
    disconnect_rate: Rate = 0.0
    stall_rate: Rate = 0.0
    stall_s: Positive = 3600.0
    spike_rate: Rate = 0.0
    spike_ms: Positive = 500.0
    evict_rate: Rate = 0.0
    lifetime_s: Positive | None = None

    @model_validator(mode="before")
    @classmethod
    def _dotted_statuses(cls, data: Any) -> Any:
        """``error_rate.503: 0.1`` (a ``--fault`` entry) into the ``error_rate`` mapping."""
        if not isinstance(data, Mapping):
            return data
        out = {str(k).strip(): v for k, v in data.items()}
        if not isinstance(out.get("error_rate", {}), Mapping) and any(
            k.startswith("error_rate.") for k in out
        ):
            raise invalid("error_rate", "a mapping of status to rate", out["error_rate"])
        for key in [k for k in out if k.startswith("error_rate.")]:
            out["error_rate"] = {
                **out.get("error_rate", {}),
                key[len("error_rate.") :]: out.pop(key),
            }
        return out

    @field_validator("error_rate")
    @classmethod
    def _by_status(cls, rates: dict[int, float]) -> dict[int, float]:
        return dict(sorted(rates.items()))

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


def parse_fault_spec(entries: Mapping[str, Any]) -> FaultSpec:
    """Build a spec from ``key: value`` pairs (command line ``--fault`` or a YAML ``faults:`` map).

    Keys: ``seed``, ``error_rate.<status>`` (or ``error_rate: {status: rate}``),
    ``disconnect_rate``, ``stall_rate``, ``stall_s``, ``spike_rate``, ``spike_ms``,
    ``evict_rate``, ``lifetime_s``.  Rates are probabilities per request; their
    sum must not exceed 1.
    """
    try:
        spec = FaultSpec.model_validate(entries)
    except ValidationError as exc:
        field, message = describe_error(exc.errors(include_url=False)[0])
        raise FaultSpecError(f"fault {field}: {message}") from None
    if spec.total_rate > 1.0 + 1e-9:
        raise FaultSpecError(
            f"faults: rates add up to {spec.total_rate:g}; expected at most 1 "
            "(each request meets at most one fault)"
        )
    return spec


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
