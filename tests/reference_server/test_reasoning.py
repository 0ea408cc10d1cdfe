"""core/reasoning.py and the reasoning part of the output policy (pure)."""

from __future__ import annotations

import base64
import random

import pytest

from harness.wire.events import ResponseBuilder
from reference_server.core import reasoning
from reference_server.core.conversation import ITEM_OVERHEAD_TOKENS, item_tokens
from reference_server.core.output import OutputCursor, OutputPlan
from tests.reference_server.plans import hinted_plan
from tests.wire.test_events import validate


@pytest.mark.parametrize(
    ("meta", "effort", "default", "expected"),
    [
        ({}, None, 0, 0),
        ({}, None, 300, 300),
        ({"loopbench.reasoning_tokens": "42"}, None, 300, 42),
        ({"loopbench.reasoning_tokens": "-5"}, None, 300, 0),
        ({"loopbench.reasoning_tokens": "99999999"}, None, 0, 1_000_000),
        ({"loopbench.reasoning_tokens": "many"}, None, 300, 300),
        ({"loopbench.reasoning_tokens": "42"}, "none", 300, 0),
        ({"loopbench.reasoning_tokens": "42"}, "low", 300, 42),
    ],
)
def test_budget(meta: dict[str, str], effort: str | None, default: int, expected: int) -> None:
    assert reasoning.reasoning_budget(meta, effort, default) == expected


@pytest.mark.parametrize("n", [1, 7, 250, 40_000])
def test_blob_carries_its_token_count_and_grows_like_the_reasoning(n: int) -> None:
    blob = reasoning.encrypted_content(n, "rs_1")
    assert blob == reasoning.encrypted_content(n, "rs_1")  # seeded
    if n > 4:  # shorter blobs are all header
        assert blob != reasoning.encrypted_content(n, "rs_2")
    assert "=" not in blob and abs(len(blob) - 4 * n) <= 16
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob}
    assert reasoning.input_tokens(item) == n
    assert item_tokens(item) == n + ITEM_OVERHEAD_TOKENS


def test_a_forged_or_foreign_blob_is_charged_by_its_length() -> None:
    forged = base64.urlsafe_b64encode(b"lbr1.1000000.xyz").rstrip(b"=").decode()
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": forged}
    assert reasoning.input_tokens(item) == (len(forged) + 3) // 4
    foreign = {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA" + "x" * 95}
    assert reasoning.input_tokens(foreign) == 25
    summary = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "abcdefgh"}],
    }
    assert reasoning.input_tokens(summary) == 2


def plan(
    n_reasoning: int, *, max_output_tokens: int | None = None, summary: bool = False
) -> OutputPlan:
    return hinted_plan(
        10,
        1,
        max_output_tokens=max_output_tokens,
        default_output_tokens=100,
        reasoning_tokens=n_reasoning,
        summary=summary,
        include_encrypted=True,
    )


def test_max_output_tokens_covers_reasoning_then_visible() -> None:
    assert (plan(20).reasoning_tokens, plan(20).text_tokens, plan(20).truncated) == (20, 10, False)
    cut = plan(20, max_output_tokens=25)
    assert (cut.reasoning_tokens, cut.text_tokens, cut.truncated) == (20, 5, True)
    gone = plan(40, max_output_tokens=25)
    assert (gone.reasoning_tokens, gone.text_tokens, gone.truncated) == (25, 0, True)


@pytest.mark.parametrize("step", [1, 3, 64])
def test_cursor_events_validate_whatever_the_batching(step: int) -> None:
    b = ResponseBuilder("resp_1", model="sim", created_at=1_751_569_118, request={})
    p = plan(30, summary=True)
    cursor = OutputCursor(b, p, random.Random(2))
    events = b.start()
    while True:
        out = cursor.emit(step)
        if not out and cursor.seg >= len(cursor.segments):
            break
        events += out
    events += cursor.finish()
    validate(events)
    assert [o["type"] for o in b.output] == ["reasoning", "message"]
    assert cursor.reasoning_item is not None
    assert reasoning.input_tokens(cursor.reasoning_item) == 30 + 3  # summary: 30 // 10 tokens
