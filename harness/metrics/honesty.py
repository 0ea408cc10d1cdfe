"""The summary's part of the protocol honesty checks: counts per transport, and the warnings.

The checks themselves run per turn on the client (:mod:`harness.client.honesty`); this
module folds their flags into a few counters (mergeable across processes) and turns
the counters into one warning line per transport and check (docs/metrics.md §1.5).
A warning does not invalidate the run: every measurement is what the client observed;
what the warning says is that a number the server reported cannot carry the meaning the
table gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from harness.metrics.definitions import (
    MIN_OUTPUT_ARRIVALS,
    RELEASED_BURST_MIN_TOKENS,
    WHOLE_OUTPUT_MIN_TOKENS,
    released_call,
)
from harness.wire.plural import counted
from harness.workload.records import TurnRecord

#: the counters, in ``summary.json`` order
KEYS = (
    "checked_turns",  # successful turns the checks judged
    "chain_ignored",
    "chain_input_tokens",  # summed over the flagged turns: what the server reported ...
    "chain_history_tokens",  # ... and what the client's history held
    "decode_implausible",
    "decode_reported_tokens",  # summed over the flagged turns: usage.output_tokens (visible) ...
    "decode_streamed_tokens",  # ... and the streamed text, in tokens
    # turns of WHOLE_OUTPUT_MIN_TOKENS visible tokens or more whose output arrived in fewer than
    # MIN_OUTPUT_ARRIVALS pieces (no ITL, TPOT or decode TPS from them), and how many of those
    # were tool calls
    "output_whole",
    "output_whole_calls",
    # tool-call turns streamed in enough pieces after a hold (definitions.RELEASED_CALL: the
    # first arrival was the call's name alone, or RELEASED_BURST_MIN_TOKENS tokens or more): no
    # TPOT or decode TPS
    "output_burst",
)


def new_counts() -> dict[str, int]:
    return dict.fromkeys(KEYS, 0)


def add(counts: dict[str, int], rec: TurnRecord) -> None:
    """Count one successful turn's flags."""
    counts["checked_turns"] += 1
    if rec.chain_ignored:
        counts["chain_ignored"] += 1
        counts["chain_input_tokens"] += rec.input_tokens
        counts["chain_history_tokens"] += rec.history_tokens
    if rec.decode_implausible:
        counts["decode_implausible"] += 1
        # the visible output: what the check compared with the stream (reasoning is not streamed)
        counts["decode_reported_tokens"] += rec.output_tokens - rec.reasoning_tokens
        counts["decode_streamed_tokens"] += rec.streamed_tokens
    if (
        0 < rec.output_arrivals < MIN_OUTPUT_ARRIVALS
        and rec.output_tokens - rec.reasoning_tokens >= WHOLE_OUTPUT_MIN_TOKENS
    ):
        counts["output_whole"] += 1
        counts["output_whole_calls"] += rec.function_calls > 0
    elif rec.output_arrivals >= MIN_OUTPUT_ARRIVALS and released_call(
        rec.function_calls, rec.first_arrival_tokens
    ):
        counts["output_burst"] += 1


def warnings(transport: str, counts: Mapping[str, int]) -> list[str]:
    """One line per check that flagged a turn of ``transport`` (none: an empty list)."""
    checked = counted(counts.get("checked_turns", 0), "turn")

    def mean(key: str, n: int) -> int:
        """A sum over the ``n`` flagged turns as their mean, rounded."""
        return round(counts[key] / n)

    lines: dict[str, Callable[[int], str]] = {
        "chain_ignored": lambda n: (
            f"the server reported {mean('chain_input_tokens', n):,} input tokens on average on "
            f"{n} of {checked} whose history held ~{mean('chain_history_tokens', n):,}: it "
            "appears to ignore previous_response_id; the speedup is not a chaining speedup"
        ),
        "decode_implausible": lambda n: (
            f"{n} of {checked} reported {mean('decode_reported_tokens', n):,} output tokens on "
            f"average but streamed text of ~{mean('decode_streamed_tokens', n):,} tokens, or "
            "decoded faster than any engine: their decode TPS and TPOT are left out of the "
            "percentiles"
        ),
        "output_whole": lambda n: (
            f"{n} of {checked} got their output in fewer than {MIN_OUTPUT_ARRIVALS} pieces "
            f"({counts.get('output_whole_calls', 0)} of them tool calls withheld or sent whole): "
            "no ITL, TPOT or decode TPS from them; a tool call's TTFT is when it was released, "
            "its wait after the first event is 'held back'"
        ),
        "output_burst": lambda n: (
            f"{n} of {checked} were tool calls whose first visible output was the name alone "
            f"or {RELEASED_BURST_MIN_TOKENS}+ tokens at once (a call held back until it parsed, "
            "or announced before its arguments): tokens were decoded before it, so no TPOT or "
            "decode TPS from them"
        ),
    }
    return [f"{transport}: {line(n)}" for key, line in lines.items() if (n := counts.get(key, 0))]
