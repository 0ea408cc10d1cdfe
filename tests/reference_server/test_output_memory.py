"""Output is produced lazily: streaming a response costs memory independent of its length.

The pure layers a response runs through (output plan, decode plan and its batches,
the cursor, the event builder) are driven to the end without waiting, as the
server drives them, and ``tracemalloc`` measures what they hold.  Only the
closing events carry the whole text (``output_text.done``, ``response.completed``),
so that one string is the response's only length-proportional cost
(docs/reliability.md "Memory per response").
"""

from __future__ import annotations

import random
import tracemalloc

from harness.wire.events import ResponseBuilder
from harness.wire.tokens import make_text
from reference_server.core.engine import NS_PER_MS, decode_plan
from reference_server.core.output import OutputCursor
from reference_server.core.profiles import load_profiles
from tests.reference_server.plans import hinted_plan

SMALL = 10_000
# 20x SMALL: a cost that grew with the response would be 20x, far outside the bounds below;
# the run is linear in tokens under tracemalloc (1,000,000 took over a minute of a 2-core box)
LARGE = 200_000
#: the figure docs/reliability.md quotes, measured by running this module
MEASURED = 1_000_000
# Coarser than the server's 2 ms so the test stays fast; it changes the number of
# deltas, not what a delta holds.
INTERVAL_NS = 50 * NS_PER_MS


def stream(n_tokens: int, reasoning_tokens: int = 0) -> tuple[int, int, int]:
    """(peak bytes while the deltas stream, peak bytes overall, characters of final text)."""
    _, engine = load_profiles()
    tracemalloc.start()
    try:
        builder = ResponseBuilder("resp_1", model="sim", created_at=0, request={})
        builder.start()
        plan = hinted_plan(n_tokens, 3, reasoning_tokens=reasoning_tokens, summary=True)
        cursor = OutputCursor(builder, plan, random.Random(4))
        batches = decode_plan(plan.output_tokens, random.Random(5), engine).iter_batches(
            INTERVAL_NS
        )
        held = next(batches)
        for batch in batches:
            cursor.emit(held[1])  # the events go to the socket and are dropped
            held = batch
        streaming_peak = tracemalloc.get_traced_memory()[1]
        closing = cursor.emit(held[1]) + cursor.finish()
        assert closing[-1]["type"] == "response.output_item.done"
        text = builder.output[-1]["content"][0]["text"]
        return streaming_peak, tracemalloc.get_traced_memory()[1], len(text)
    finally:
        tracemalloc.stop()


def test_streaming_memory_does_not_grow_with_the_response() -> None:
    small_stream, _, small_chars = stream(SMALL)
    large_stream, large_total, large_chars = stream(LARGE)
    assert (small_chars, large_chars) == (4 * SMALL, 4 * LARGE)
    # 20x the tokens: the streaming phase holds a window, not the response.
    assert large_stream < 2 * small_stream + 64 * 1024, (small_stream, large_stream)
    # At the close the whole text exists once (4 bytes a token) with its transient
    # chunks; eager planning held ~100 bytes a token.
    assert large_total < 12 * LARGE, large_total


def test_reasoning_costs_its_blob_not_its_plan() -> None:
    n = LARGE // 10
    _, small_total, _ = stream(100, reasoning_tokens=n // 100)
    _, large_total, _ = stream(100, reasoning_tokens=n)
    # What stays is the item's encrypted_content (4 bytes a token, kept by the conversation)
    # and its summary (a tenth of the tokens); the rest is transient while the blob is encoded.
    assert large_total - small_total < 16 * n, (small_total, large_total)


def test_lazy_text_is_the_text_eager_planning_made() -> None:
    # Same seed, same draws: the pieces drawn as they fall due spell the old text.
    builder = ResponseBuilder("resp_1", model="sim", created_at=0, request={})
    builder.start()
    plan = hinted_plan(5000, 3)
    cursor = OutputCursor(builder, plan, random.Random(9))
    deltas = []
    step = random.Random(1)
    while cursor.seg < len(cursor.segments):
        deltas += [e["delta"] for e in cursor.emit(step.randint(1, 700)) if "delta" in e]
    eager = make_text(5000, random.Random(9))
    assert "".join(deltas) == eager
    assert builder.output[-1]["content"][0]["text"] == eager


if __name__ == "__main__":
    for n in (SMALL, MEASURED):
        s, t, c = stream(n)
        print(f"{n} tokens: streaming peak {s / 1024:.0f} KiB, overall peak {t / 2**20:.1f} MiB")
