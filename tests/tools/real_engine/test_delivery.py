"""How `python -m tools.real_engine.delivery` counts a window's answers (pure), and that a
placement is never applied to processes that are not vLLM's."""

from __future__ import annotations

import os

from tools.real_engine.delivery import deliveries
from tools.real_engine.engine import place


def _turn(first_ms: float, reads: int, events: int) -> dict[str, str]:
    return {
        "sent_ns": "1000000000",
        "first_token_ns": str(1000000000 + int(first_ms * 1e6)),
        "output_arrivals": str(reads),
        "delta_events": str(events),
    }


def test_whole_merged_and_late_answers_are_counted_apart() -> None:
    turns = [
        _turn(8.0, 90, 94),  # streamed
        _turn(112.0, 1, 94),  # read whole, sent in 94 events: the client read late
        _turn(110.0, 1, 1),  # sent in one event: vLLM merged the outputs
        _turn(9.0, 2, 90),  # two reads, on time
    ]
    # vLLM's own TTFT p99 over the window: 10 ms; late is beyond 10 + 3 ms
    assert deliveries(turns, 10.0) == {"turns": 4, "whole": 3, "merged": 1, "late": 2}
    # without vLLM's p99 no turn is called late
    assert deliveries(turns, None)["late"] == -1


def test_a_placement_finds_no_vllm_under_a_process_that_is_not_one() -> None:
    said = place(os.getpid(), "engine-niced")
    assert said.startswith("placement engine-niced: no vLLM worker or engine-core process")
