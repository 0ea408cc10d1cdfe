"""The honesty warnings' words from the counters alone (records in, lines out)."""

from __future__ import annotations

from harness.metrics import honesty


def _counts(**flagged: int) -> dict[str, int]:
    counts = honesty.new_counts()
    counts.update(flagged)
    return counts


def test_each_warning_says_how_many_turns_of_how_many_checked() -> None:
    # The chain warning once lost its count of checked turns ("on 4 of turns whose history").
    # in KEYS order: 8 checked; 4 ignoring the chain (720 input, 1,664 history tokens);
    # 2 implausible decodes (600 reported, 3 streamed tokens); 1 whole output, a tool call;
    # 3 tool calls released in a burst
    counts = dict(zip(honesty.KEYS, (8, 4, 720, 1664, 2, 600, 3, 1, 1, 3), strict=True))
    chain, decode, whole, burst = honesty.warnings("http-chained", counts)
    assert chain.startswith(
        "http-chained: the server reported 180 input tokens on average on 4 of 8 turns whose "
        "history held ~416: it appears to ignore previous_response_id"
    ), chain
    assert decode.startswith(
        "http-chained: 2 of 8 turns reported 300 output tokens on average "
        "but streamed text of ~2 tokens"
    ), decode
    assert whole.startswith("http-chained: 1 of 8 turns got their output in fewer than "), whole
    assert burst.startswith(
        "http-chained: 3 of 8 turns were tool calls whose first visible output was the name "
        "alone or "
    ), burst


def test_one_checked_turn_is_a_turn_and_nothing_flagged_says_nothing() -> None:
    (line,) = honesty.warnings("ws", _counts(checked_turns=1, output_whole=1))
    assert line.startswith("ws: 1 of 1 turn got their output"), line
    assert honesty.warnings("ws", _counts(checked_turns=5)) == []
