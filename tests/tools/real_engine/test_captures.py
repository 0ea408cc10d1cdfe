"""The raw vLLM streams in tests/data/vllm/ read back as they were recorded (pure).

They are test data for the client's edges (issue 38 item 2): each ``.json`` indexes its
``.http`` file read by read, and the SSE events decoded from those reads must be the events the
``.json`` lists, at the same times.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.real_engine.capture import events, first_times

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm"
CAPTURES = sorted(p.stem for p in DATA.glob("*.json"))


def _reads(name: str) -> tuple[dict[str, object], list[tuple[int, bytes]]]:
    doc = json.loads((DATA / f"{name}.json").read_text())
    raw = (DATA / str(doc["raw"])).read_bytes()
    reads = [
        (round(r["t_us"] * 1000), raw[r["offset"] : r["offset"] + r["length"]])
        for r in doc["reads"]
    ]
    assert sum(len(b) for _, b in reads) == len(raw)
    return doc, reads


@pytest.mark.parametrize("name", CAPTURES)
def test_a_capture_decodes_to_the_events_it_lists(name: str) -> None:
    doc, reads = _reads(name)
    decoded = [{"t_us": e["t_us"], "kind": e["kind"]} for e in events(reads)]
    assert decoded == doc["events"]
    kinds = [e["kind"] for e in decoded]
    assert kinds[0].startswith("role") and kinds[-2:] == ["usage", "done"]
    assert sum("finish:" in k for k in kinds) == 1, kinds
    # a forced call streams tool-call deltas (some cut off by finish_reason length), text content
    wanted = "tool_calls" if "tool-call" in name else "content"
    assert any(wanted in k for k in kinds), kinds


def test_the_role_chunk_tracks_the_engine_while_a_forced_call_is_withheld() -> None:
    """The premise of issue 38 item 2, as captured: the first event comes within the front
    end's few ms of vLLM's own TTFT, the first tool-call delta tens of ms later."""
    doc, _ = _reads("chat-forced-tool-call-1")
    times = first_times(doc)
    engine = float(doc["engine_ttft_ms"])  # type: ignore[arg-type]
    assert times["first_event_ms"] is not None and times["first_output_ms"] is not None
    assert 0 <= times["first_event_ms"] - engine < 3
    assert times["first_output_ms"] - times["first_event_ms"] > 20
