"""What a Locust worker and its edge host say over the host's stdin and stdout.  Pure.

A frame is a 4-byte length and a pickle (why: docs/distributed.md, "The asyncio edge in a
child of each worker").  Worker -> host: ``("begin", EdgeBegin)``, ``("run", EdgeRollout)``,
``("cancel", key)``, ``("end",)``.  Host -> worker: ``("ready",)`` once imported,
``("turn", values)`` (:func:`pack_turn`), ``("rollout", key, RolloutRecord)``,
``("ended", health state)`` after every record of the run.  Timestamps are the host's
``perf_counter_ns``: the worker moves them onto its own clock.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from harness.client.options import TransportOptions
from harness.workload.plan import RolloutPlan
from harness.workload.records import TurnRecord

_LEN = struct.Struct("<I")
#: a turn crosses as its field values in order: a third of the bytes and of the time a
#: pickled dataclass takes, once per turn on both sides
_TURN_VALUES = attrgetter(*(f.name for f in fields(TurnRecord)))
HEADER_BYTES = _LEN.size


@dataclass(frozen=True, slots=True)
class EdgeBegin:
    """A run's settings: one set of transport options for every transport of the run."""

    options: TransportOptions
    model: str
    #: a tokenizer.json for the host to load ("" for 4 characters a token)
    tokenizer: str = ""


@dataclass(frozen=True, slots=True)
class EdgeRollout:
    """One claimed rollout; ``intended_ns`` on the host's clock (None: start it now)."""

    key: int
    transport: str
    plan: RolloutPlan
    intended_ns: int | None
    round: int
    rollout_key: str | None


def frame(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


def body_length(header: bytes) -> int:
    (n,) = _LEN.unpack(header)
    return int(n)


def unframe(body: bytes) -> tuple[Any, ...]:
    message: tuple[Any, ...] = pickle.loads(body)  # our own child over our own pipe
    return message


def read_message(read: Callable[[int], bytes]) -> tuple[Any, ...] | None:
    """The next message from a blocking ``read(n)`` (a pipe's), or None at its end."""
    header = read(HEADER_BYTES)
    if len(header) < HEADER_BYTES:
        return None
    return unframe(read(body_length(header)))


def pack_turn(rec: TurnRecord) -> tuple[Any, ...]:
    values: tuple[Any, ...] = _TURN_VALUES(rec)
    return values


def unpack_turn(values: tuple[Any, ...]) -> TurnRecord:
    return TurnRecord(*values)
