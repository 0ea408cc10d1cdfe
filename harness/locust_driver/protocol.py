"""Names and shared settings of the master <-> worker conversation.  Pure.

Messages (Locust custom messages; payloads are msgpack-able dicts):

* ``loopbench_hello`` worker → master, at test start: the worker takes part in the run,
  with its loopbench version and :data:`WIRE_FORMAT` (the master refuses another);
* ``loopbench_claim`` worker → master: ``{req, finished}``, the rollout just run
  (``[phase, rollout_id]`` or None) and a request for the next one;
* ``loopbench_work`` master → worker: ``{req, kind, ...}`` the answer (``run`` with
  the plan, or ``done``); answers to claims made while a phase drains are held
  until the next phase starts;
* ``loopbench_rows`` worker → master: record rows, every ~2 s;
* ``loopbench_final`` worker → master, once its users stopped: the
  accumulator state (HDR blobs), the last rows, the worker's own counts and its
  health (CPU share, wall time, event-loop lag histogram).

The master hands the run's settings to workers as a Locust parsed option
(:data:`RUN_OPTION`), which Locust forwards with every spawn message, so
workers need nothing but the master's address.  The settings carry the master's
loopbench version and :data:`WIRE_FORMAT`, which a worker checks before reading the rest:
two versions of these messages meet only as one clear refusal (:func:`version_mismatch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from harness.client.options import DEFAULT_SETTINGS, ClientSettings
from harness.wire.errors import LoopbenchError

MSG_HELLO = "loopbench_hello"
MSG_CLAIM = "loopbench_claim"
MSG_WORK = "loopbench_work"
MSG_ROWS = "loopbench_rows"
MSG_FINAL = "loopbench_final"

#: attribute of ``environment.parsed_options`` carrying :class:`RunConfig` to workers
RUN_OPTION = "loopbench_run"
#: the shape of these messages and of :class:`RunConfig`: raised with any change to them
#: (1: before versions were sent; 2: before the client settings travelled as one object)
WIRE_FORMAT = 3


@dataclass(frozen=True, slots=True)
class RunConfig:
    run_id: str
    target: str
    model: str
    warmup_rollouts: int
    #: the client settings; ``api_key`` stays the placeholder here (each worker reads its
    #: own key from ``api_key_env``), so no key travels over the wire
    client: ClientSettings = DEFAULT_SETTINGS
    api_key_env: str = ""
    #: the tokenizer.json the master resolved ("" for 4 characters a token); each worker
    #: loads it, so a remote worker needs the same path
    tokenizer: str = ""
    #: the scenario's SLO thresholds as JSON ({field: ms}; "" for none): every accumulator of
    #: a run judges records by the same ones, or they do not merge
    slo: str = ""
    #: the master's loopbench version and wire format ("" / 1: a master from before them)
    loopbench: str = ""
    wire_format: int = WIRE_FORMAT

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = _RUN_CONFIG.dump_python(self, mode="json")
        return wire

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RunConfig:
        # msgpack may hand back 120 for 120.0 and lists for tuples: the adapter converts
        return _RUN_CONFIG.validate_python(data)


_RUN_CONFIG = TypeAdapter(RunConfig)


class VersionMismatch(LoopbenchError):
    """A master and a worker of different loopbench versions (or wire formats) met."""


def versions(loopbench: str) -> dict[str, Any]:
    """What a side says of itself: its loopbench version and this module's wire format."""
    return {"loopbench": loopbench, "wire_format": WIRE_FORMAT}


def version_mismatch(
    data: Mapping[str, Any], mine: str, *, me: str, them: str
) -> VersionMismatch | None:
    """None when ``data`` (a hello, or run settings) comes from the same loopbench as ``mine``
    and speaks this wire format; else the one line that says both and what to do.

    Read before anything else of ``data``: another version's fields fail validation with a
    message about a field, not about the versions.
    """
    theirs, wire = data.get("loopbench"), data.get("wire_format")
    if theirs == mine and wire == WIRE_FORMAT:
        return None
    said = (
        f"loopbench {theirs} (wire format {wire})"
        if theirs
        else "a loopbench older than this one (its messages carry no version)"
    )
    return VersionMismatch(
        f"the {them} has {said}, this {me} loopbench {mine} (wire format {WIRE_FORMAT}): "
        f"install the same loopbench version on the master and every worker"
    )


# -- worker -> master messages: built here only, so a worker and anything that stands in for one
# (bench/master_sim's fake workers) send the same payloads.


def hello_message(run_id: str, pid: int, loopbench: str, **extra: Any) -> dict[str, Any]:
    """The worker takes part in the run (or says why it cannot: its versions are in it);
    ``extra``: what else it tells the master about itself."""
    return {"run_id": run_id, "pid": pid, **versions(loopbench), **extra}


def claim_message(req: int, finished: tuple[int, int] | None) -> dict[str, Any]:
    """A claim for the next rollout, reporting ``(phase, rollout_id)`` just run (or None)."""
    return {"req": req, "finished": list(finished) if finished else None}


def rows_message(run_id: str, turns: list[list[Any]], rollouts: list[list[Any]]) -> dict[str, Any]:
    """Turn and rollout rows (``wire.turn_to_row`` / ``rollout_to_row``) shipped to the master."""
    return {"run_id": run_id, "turns": turns, "rollouts": rollouts}


def final_message(
    run_id: str,
    *,
    state: dict[str, Any],
    turns: list[list[Any]],
    rollouts: list[list[Any]],
    turns_total: int,
    rollouts_total: int,
    health: dict[str, Any],
) -> dict[str, Any]:
    """The last rows, the accumulator's state (``Accumulator.to_state``), counts and health."""
    return {
        "run_id": run_id,
        "state": state,
        "turns": turns,
        "rollouts": rollouts,
        "turns_total": turns_total,
        "rollouts_total": rollouts_total,
        "health": health,
    }
