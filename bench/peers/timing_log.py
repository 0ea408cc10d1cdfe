"""The reference server's ``--timing-log``: one JSON object per finished response.

Pure: parses the text of the file.  The contract (docs/peers.md) is::

    {"api": "responses"|"chat"|"messages", "id": ..., "request_id": ..., "tag": ...,
     "arrived_unix_ns": int, "first_token_unix_ns": int|null, "status": ...,
     "sim_timing": {"ttft": ms, "first_token_late_ms": ms (optional), ...}}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from harness.wire.errors import LoopbenchError


class TimingLogError(LoopbenchError):
    """A line of the server's timing log is not what the contract says."""


@dataclass(frozen=True, slots=True)
class ServerEntry:
    """One response as the server saw it: its ids, arrival and the TTFT it modelled."""

    api: str
    id: str
    request_id: str | None
    tag: str | None
    arrived_unix_ns: int
    status: str
    # sim_timing.ttft in ms; None when the response failed before the model ran
    modelled_ttft_ms: float | None
    # sim_timing.first_token_late_ms: how late the server wrote the first token (absent: None)
    late_ms: float | None
    first_token_unix_ns: int | None = None
    # sim_timing.decode (modelled first-to-last token) and last_token_late_ms: with late_ms,
    # the server's share of a measured decode span longer than modelled (None: not given)
    decode_ms: float | None = None
    last_late_ms: float | None = None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _opt_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def parse_entry(obj: Any, where: str) -> ServerEntry:
    """One decoded line; ``where`` names the file and line in the error."""
    if not isinstance(obj, dict):
        raise TimingLogError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    rid = obj.get("id")
    arrived = obj.get("arrived_unix_ns")
    if not isinstance(rid, str) or not rid:
        raise TimingLogError(f"{where}: field 'id' must be a non-empty string")
    if isinstance(arrived, bool) or not isinstance(arrived, int):
        raise TimingLogError(f"{where}: field 'arrived_unix_ns' must be an integer (ns)")
    sim = obj.get("sim_timing")
    sim = sim if isinstance(sim, dict) else {}
    ttft_s = _opt_float(sim.get("ttft"))
    first = obj.get("first_token_unix_ns")
    return ServerEntry(
        api=str(obj.get("api") or ""),
        id=rid,
        request_id=_opt_str(obj.get("request_id")),
        tag=_opt_str(obj.get("tag")),
        arrived_unix_ns=arrived,
        status=str(obj.get("status") or ""),
        modelled_ttft_ms=ttft_s,
        late_ms=_opt_float(sim.get("first_token_late_ms")),
        first_token_unix_ns=first
        if isinstance(first, int) and not isinstance(first, bool)
        else None,
        decode_ms=_opt_float(sim.get("decode")),
        last_late_ms=_opt_float(sim.get("last_token_late_ms")),
    )


def parse_timing_log(lines: Iterable[str | bytes], source: str = "timing log") -> list[ServerEntry]:
    """Every entry of the log; blank lines are skipped, a torn last line is tolerated."""
    raw = [ln for ln in lines if ln.strip()]
    out: list[ServerEntry] = []
    for n, line in enumerate(raw, 1):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if n == len(raw):  # a server killed mid-write leaves half a line: not an entry
                break
            raise TimingLogError(f"{source} line {n}: not JSON ({exc})") from exc
        out.append(parse_entry(obj, f"{source} line {n}"))
    return out
