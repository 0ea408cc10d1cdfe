"""How `python -m tools.real_engine.delivery` counts a window's answers and marks a round
whose placement did not take (pure)."""

from __future__ import annotations

from pathlib import Path

from tools.real_engine.delivery import SETTINGS, _window, deliveries, render
from tools.real_engine.engine import Placed
from tools.real_engine.engine_metrics import Snapshot
from tools.real_engine.side_by_side import read_window


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


def test_a_round_whose_placement_did_not_take_is_marked_not_applied(tmp_path: Path) -> None:
    nothing = read_window(tmp_path, None, Snapshot(), "")
    took = _window(SETTINGS["vllm"], 1, nothing, Placed("placed", True))
    refused = _window(SETTINGS["vllm"], 2, nothing, Placed("niced", False))
    assert (took["setting"], took["applied"]) == ("vllm", True)
    assert (refused["setting"], refused["applied"]) == ("vllm (not applied)", False)
    assert refused["placement"] == "niced"
    assert "vllm (not applied)" in render([took, refused]).splitlines()[-1]
