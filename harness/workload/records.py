"""Measurement records: one row per turn and per rollout, integer nanoseconds.

Timestamps are monotonic nanoseconds taken at the I/O edge (``time.perf_counter_ns``
in the asyncio layer).  ``0`` means "did not happen" (no connection opened this
turn, no token received).  Derived metrics are computed from these fields by
:mod:`harness.metrics`; records themselves hold only what was observed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

#: the sliding window of ``TurnRecord.burst_tokens_max``: the most output tokens any
#: 100 ms of one response held (burst TPS = that / the window)
BURST_WINDOW_NS = 100_000_000

#: the server-modelled parts of a turn in critical-path order: (``sim_timing`` key, TurnRecord field)
SIM_BREAKDOWN = (
    ("api_pre", "sim_api_pre_ms"),
    ("api_queue", "sim_api_queue_ms"),
    ("engine_queue", "sim_engine_queue_ms"),
    ("prefill", "sim_prefill_ms"),
    ("decode", "sim_decode_ms"),
    ("api_post", "sim_api_post_ms"),
)
#: every ``sim_timing`` key a turn keeps: the parts and the modelled TTFT
SIM_FIELDS = (*SIM_BREAKDOWN, ("ttft", "sim_ttft_ms"))
#: the statuses of a successful turn and rollout; any other status is a failure
OK_TURN_STATUSES = ("completed", "incomplete")
OK_ROLLOUT_STATUSES = ("completed",)


@dataclass(slots=True)
class TurnRecord:
    transport: str
    rollout_id: int
    turn_index: int
    round: int = 0
    # timestamps (ns, monotonic)
    intended_start_ns: int = 0
    sent_ns: int = 0
    connected_ns: int = 0
    # a new connection's setup, apart (0: reused, or not measured by this edge): its TCP
    # connect began, TCP was established, the TLS handshake completed (0 too without TLS)
    connect_start_ns: int = 0
    tcp_connected_ns: int = 0
    tls_done_ns: int = 0
    first_event_ns: int = 0
    # the first delta of any kind, reasoning included (TTFT); then the first visible output
    # delta, text or tool-call arguments (TTFOT; equal to first_token_ns without reasoning)
    first_token_ns: int = 0
    first_output_ns: int = 0
    last_token_ns: int = 0
    done_ns: int = 0
    # what was sent and received
    status: str = "error"
    error_kind: str = ""
    error_message: str = ""
    response_id: str = ""
    history_tokens: int = 0
    sent_input_tokens: int = 0
    bytes_sent: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    # usage.output_tokens_details.reasoning_tokens: part of output_tokens, decoded before the
    # visible output and not streamed as it (docs/metrics.md §1.1)
    reasoning_tokens: int = 0
    delta_events: int = 0
    # how many times visible output arrived: deltas read together share one arrival stamp and
    # are one observation of timing (docs/metrics.md §1.2, MIN_OUTPUT_ARRIVALS); a tool call's
    # name counts as output
    output_arrivals: int = 0
    # the visible tokens of the first delta of the first of those arrivals (the stream's token
    # convention); a call announced by its name alone reads 0 (docs/metrics.md §1.2,
    # RELEASED_CALL); -1: not counted (a row written before the count)
    first_arrival_tokens: int = -1
    # the visible outputs (deltas, Chat tool calls' names) that share the first one's stamp: 1 when
    # the read that carried the first visible output ended with it; more when later output came
    # in the same read, which stamps the first token with the later segment's arrival
    # (docs/metrics.md §1.9); 0: no visible output, or the response never ended (counted at its
    # terminal event); -1: not counted (a row written before the count)
    first_arrival_deltas: int = -1
    # function calls in the output: a tool-call turn (> 0) or a text turn (docs/metrics.md §1.2)
    function_calls: int = 0
    new_connection: bool = False
    burst_tokens_max: int = 0
    # the streamed delta text in tokens (chars / 4, docs/metrics.md §1.5); output_tokens is usage's
    streamed_tokens: int = 0
    # the plan's output for this turn (visible + reasoning; 0 for a compaction): what the
    # summary's planned-vs-reported token figures compare usage with
    planned_output_tokens: int = 0
    # honesty checks against the endpoint's usage (harness/client/honesty.py, docs/metrics.md §1.5)
    chain_ignored: bool = False
    decode_implausible: bool = False
    # recovery (WS cache miss, reconnect)
    recoveries: int = 0
    recovery_ns: int = 0
    # a compaction (POST /responses/compact, rollout.compact_at_tokens) before the turn of
    # this index, not a model turn: no stream, so no TTFT/TTFB; its time is its latency
    compaction: bool = False
    # server-reported model (sim_timing, ms); -1 = not reported
    sim_api_pre_ms: float = -1.0
    sim_api_queue_ms: float = -1.0
    sim_engine_queue_ms: float = -1.0
    sim_prefill_ms: float = -1.0
    sim_decode_ms: float = -1.0
    sim_api_post_ms: float = -1.0
    sim_ttft_ms: float = -1.0
    sim_cache: str = ""
    # sim_timing.first_token_late_ms: how much later than arrival + modelled TTFT the server
    # wrote the first token (may be slightly negative); None: the server did not say
    server_late_ms: float | None = None
    # sim_timing.arrived_clock_ns − sent_ns: how long the request waited before the server read
    # it (its modelled clock starts there), when client and server share a clock (one host:
    # the value lies between the send and the first token); None otherwise
    server_read_ms: float | None = None
    # the conversation the turn belongs to: 0 the rollout's own, 1.. a sub-agent's id
    # (plan.SubagentPlan.subagent_id); -1: the root has no parent
    conversation: int = 0
    parent_conversation: int = -1
    # how the turn's reads were stamped (docs/metrics.md §1.9): "kernel" (the socket's
    # SO_TIMESTAMPNS receive time, moved to the perf_counter clock) or "user" (perf_counter_ns
    # when the read returned); and, for the diagnostic window (a run's first turns of each
    # transport), the first-token read's user-space stamp minus its kernel stamp, in µs
    rx_stamp: str = "user"
    rx_user_minus_kernel_us: float | None = None
    # gaps between consecutive output deltas (ns); not written to CSV, fed to histograms
    itl_ns: list[int] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.status in OK_TURN_STATUSES


@dataclass(slots=True)
class RolloutRecord:
    transport: str
    rollout_id: int
    round: int = 0
    intended_start_ns: int = 0
    start_ns: int = 0
    end_ns: int = 0
    turns: int = 0
    errors: int = 0
    status: str = "error"
    error_kind: str = ""
    model_ns: int = 0
    tool_ns: int = 0
    client_ns: int = 0
    recovery_ns: int = 0
    recoveries: int = 0
    connections: int = 0
    # sub-agents (docs/metrics.md §1.7): the conversations the rollout ran (1 without
    # sub-agents); the time its conversations waited for sub-agents after their own tools were
    # done (the root's, summed with the waits of sub-agents that are themselves on the critical
    # path); the critical path: its model turns and the conversations it went through ("0>2>0")
    conversations: int = 1
    subagent_wait_ns: int = 0
    critical_path_turns: int = 0
    critical_path: str = ""

    @property
    def ok(self) -> bool:
        return self.status in OK_ROLLOUT_STATUSES

    # The run's schedule accounting needs the lag as an integer for every rollout, failed ones
    # too; it agrees with the table's schedule_lag_ms (tested there).
    @property
    def schedule_lag_ns(self) -> int:
        return max(0, self.start_ns - self.intended_start_ns)

    @classmethod
    def driver_failed(
        cls,
        transport: str,
        rollout_id: int,
        round_index: int,
        start_ns: int,
        end_ns: int,
        exc: Exception,
    ) -> RolloutRecord:
        """A rollout the driver itself failed to run: reported, so a bug cannot stall a phase."""
        return cls(
            transport=transport,
            rollout_id=rollout_id,
            round=round_index,
            intended_start_ns=start_ns,
            start_ns=start_ns,
            end_ns=end_ns,
            status="error",
            error_kind=f"driver:{type(exc).__name__}",
        )


def csv_fields(cls: type) -> list[str]:
    """Column names for a record class: every dataclass field except list-valued ones."""
    return [f.name for f in fields(cls) if f.name != "itl_ns"]
