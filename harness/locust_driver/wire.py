"""Wire forms for Locust messages (msgpack carries plain lists, dicts and scalars only).  Pure."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from harness.locust_driver.work import Claim
from harness.workload.records import RolloutRecord, TurnRecord, csv_fields

TURN_FIELDS = tuple(csv_fields(TurnRecord))
ROLLOUT_FIELDS = tuple(csv_fields(RolloutRecord))
_CLAIM = TypeAdapter(Claim)


def turn_to_row(rec: TurnRecord) -> list[Any]:
    """The CSV columns of a turn (``itl_ns`` travels inside the histograms, not per row)."""
    return [getattr(rec, name) for name in TURN_FIELDS]


def turn_from_row(row: list[Any]) -> TurnRecord:
    return TurnRecord(**_fields("turn", TURN_FIELDS, row))


def rollout_to_row(rec: RolloutRecord) -> list[Any]:
    return [getattr(rec, name) for name in ROLLOUT_FIELDS]


def rollout_from_row(row: list[Any]) -> RolloutRecord:
    return RolloutRecord(**_fields("rollout", ROLLOUT_FIELDS, row))


def _fields(kind: str, names: tuple[str, ...], row: list[Any]) -> dict[str, Any]:
    if len(row) != len(names):
        raise ValueError(f"{kind} row: expected {len(names)} fields, got {len(row)}")
    return dict(zip(names, row, strict=True))


def work_message(req: int, claim: Claim) -> dict[str, Any]:
    """The master's answer to claim ``req``: the claim, its plan whole (sub-agents included)."""
    return {"req": req, **_CLAIM.dump_python(claim)}


def claim_from_wire(data: dict[str, Any]) -> Claim:
    """:func:`work_message` read back: msgpack hands back lists for tuples and may hand back
    120 for 120.0, which the adapter converts."""
    return _CLAIM.validate_python(data)


#: the instants of each record (a 0 is "did not happen" and stays 0); the other ``_ns``
#: fields are durations
TURN_INSTANTS = (
    "intended_start_ns",
    "sent_ns",
    "connected_ns",
    "connect_start_ns",
    "tcp_connected_ns",
    "tls_done_ns",
    "first_event_ns",
    "first_token_ns",
    "first_output_ns",
    "last_token_ns",
    "done_ns",
)
ROLLOUT_INSTANTS = ("intended_start_ns", "start_ns", "end_ns")


def shift_instants(rec: TurnRecord | RolloutRecord, shift_ns: int) -> None:
    """Move a record's instants by ``shift_ns`` (the edge host's clock onto the worker's)."""
    names = TURN_INSTANTS if isinstance(rec, TurnRecord) else ROLLOUT_INSTANTS
    for name in names:
        value = getattr(rec, name)
        if value:
            setattr(rec, name, value + shift_ns)
