"""``loopbench calibrate`` reads turns.csv rows through the metric table's own rules."""

from __future__ import annotations

import math
from typing import Any

from harness.metrics import definitions as D
from harness.model.calibrate import _timing

MS = 1_000_000


def _row(**over: Any) -> dict[str, Any]:
    """A streamed tool-call turn: 60 tokens over 41 reads, 100 ms from the first visible."""
    row: dict[str, Any] = {
        "rollout_id": 0,
        "turn_index": 0,
        "status": "completed",
        "sent_ns": 1 * MS,
        "first_event_ns": 2 * MS,
        "first_token_ns": 30 * MS,
        "first_output_ns": 30 * MS,
        "last_token_ns": 130 * MS,
        "done_ns": 131 * MS,
        "output_tokens": 60,
        "delta_events": 41,
        "output_arrivals": 41,
        "function_calls": 1,
        "first_arrival_tokens": 2,
    }
    return {**row, **over}


def test_a_call_released_after_a_hold_gives_calibrate_no_decode_rate() -> None:
    """The fit reads decode rates as the summary does: a call announced by its name alone (or
    released in a burst) is left out, a streamed one and a row from before the count are kept.
    (The row was rebuilt without function_calls and first_arrival_tokens, so the rule never
    fired and calibrate fitted the released calls' ~18 % fast rates.)"""
    decode = D.get("decode_tps")
    assert D.sample(decode, _timing("chat", _row())) is not None
    assert D.sample(decode, _timing("chat", _row(first_arrival_tokens=0))) is None
    assert D.sample(decode, _timing("chat", _row(first_arrival_tokens=20))) is None
    assert D.sample(decode, _timing("chat", _row(first_arrival_tokens=math.nan))) is not None
    old = _row()
    del old["first_arrival_tokens"]
    assert D.sample(decode, _timing("chat", old)) is not None
