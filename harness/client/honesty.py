"""Protocol honesty checks: does the endpoint's ``usage`` agree with what the client saw?

Against an endpoint loopbench did not write, two numbers the measurements lean on come from
the server alone: ``usage.input_tokens`` (did a chained request really continue the stored
conversation?) and ``usage.output_tokens`` (the numerator of every decode rate).  Each
check flags the turn record; the summary counts the flags and warns (docs/metrics.md §1.5).
Pure: record fields in, a boolean out, the same on both client edges.
"""

from __future__ import annotations

from harness.wire.transports import TransportSpec
from harness.workload.records import TurnRecord

#: a chained turn whose reported input is below this share of the history the client holds
#: ignored ``previous_response_id`` (why a half: docs/metrics.md §1.5)
CHAIN_MIN_SHARE = 0.5
#: reported (visible) output tokens above this multiple of the streamed text's estimate, plus
#: :data:`OUTPUT_SLACK_TOKENS`, were not streamed (why 4x: docs/metrics.md §1.5)
OUTPUT_MAX_RATIO = 4
#: slack for short answers, where rounding and framing tokens dominate ("{}" is one token)
OUTPUT_SLACK_TOKENS = 16
#: a per-stream decode rate above this is no decode rate (why 20,000 tokens/s:
#: docs/metrics.md §1.5)
DECODE_MAX_TPS = 20_000.0
#: responses shorter than this are not judged by rate: two deltas read back to back on a busy
#: host give any rate at all
DECODE_MIN_TOKENS = 32


def chain_ignored(spec: TransportSpec, rec: TurnRecord) -> bool:
    """A chained turn (not the rollout's first) whose reported input is far below its history."""
    if not spec.chained or rec.turn_index == 0 or rec.input_tokens <= 0:
        return False
    return rec.input_tokens < CHAIN_MIN_SHARE * rec.history_tokens


def decode_implausible(rec: TurnRecord, reasoning_tokens: int | None = None) -> bool:
    """Reported output the stream did not carry, or a decode rate no engine reaches.

    Reasoning tokens (``usage.output_tokens_details``; the record's ``reasoning_tokens``
    unless given) are output a server counts but does not stream as visible output; they are
    taken out of the reported count, and the rate is judged from the first visible delta.
    """
    reasoning = rec.reasoning_tokens if reasoning_tokens is None else reasoning_tokens
    visible = rec.output_tokens - max(0, reasoning)
    if visible > OUTPUT_MAX_RATIO * rec.streamed_tokens + OUTPUT_SLACK_TOKENS:
        return True
    first = rec.first_output_ns or rec.first_token_ns
    span_ns = rec.last_token_ns - first
    if visible < DECODE_MIN_TOKENS or first <= 0 or span_ns <= 0:
        return False
    return (visible - 1) * 1e9 / span_ns > DECODE_MAX_TPS


def check(spec: TransportSpec, rec: TurnRecord) -> None:
    """Set the record's honesty flags (a successful turn's; a failed one has nothing to judge)."""
    if not rec.ok:
        return
    rec.chain_ignored = chain_ignored(spec, rec)
    rec.decode_implausible = decode_implausible(rec)
