from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from harness.metrics import honesty
from harness.metrics.hdr import Histogram
from harness.metrics.summary import Accumulator
from harness.metrics.timeseries import token_rate_series
from harness.workload.records import RolloutRecord, TurnRecord
from tests.metrics.bucket_series import aggregate_tps_series

MS = 1_000_000
S = 1_000_000_000


TURN_STAMPS = ("sent_ns", "first_event_ns", "first_token_ns", "last_token_ns", "done_ns")
ROLLOUT_STAMPS = ("intended_start_ns", "start_ns", "end_ns")


def _turn(key: tuple[str, int, int], status: str, stamps: Sequence[int], **kw: Any) -> TurnRecord:
    """Turn ``(transport, rollout, index)``; ``stamps`` in the order of TURN_STAMPS (0: none)."""
    return TurnRecord(*key, status=status, **dict(zip(TURN_STAMPS, stamps, strict=False)), **kw)


def _rollout(key: tuple[str, int], status: str, stamps: Sequence[int], **kw: Any) -> RolloutRecord:
    """Rollout ``(transport, rollout)``; ``stamps`` in the order of ROLLOUT_STAMPS."""
    return RolloutRecord(
        *key, status=status, **dict(zip(ROLLOUT_STAMPS, stamps, strict=False)), **kw
    )


def _sim(**ms: float) -> dict[str, float]:
    """The server's sim_timing fields of a turn: ``_sim(prefill=3.0)`` -> sim_prefill_ms."""
    return {f"sim_{part}_ms": value for part, value in ms.items()}


def _turns() -> list[TurnRecord]:
    t1, t2, t5 = S, 2 * S, 5 * S
    return [
        # warm-up rollout 0: excluded everywhere
        _turn(
            ("http", 0, 0),
            "completed",
            (1, 0, 900 * MS, 950 * MS, 999 * MS),
            output_tokens=500,
            burst_tokens_max=400,
            input_tokens=900,
            cached_tokens=800,
        ),
        _turn(
            ("http", 1, 0),
            "completed",
            (t1, t1 + 5 * MS, t1 + 10 * MS, t1 + 110 * MS, t1 + 120 * MS),
            output_tokens=101,
            burst_tokens_max=30,
            itl_ns=[1 * MS] * 100,
            output_arrivals=101,
            input_tokens=1000,
            **_sim(api_pre=2.0, api_queue=0.0, prefill=3.0, decode=100.0, api_post=1.0, ttft=9.0),
        ),
        _turn(
            ("http", 1, 1),
            "incomplete",
            (t2, t2 + 4 * MS, t2 + 20 * MS, t2 + 20 * MS, t2 + 30 * MS),
            output_tokens=1,
            burst_tokens_max=1,
            input_tokens=1200,
            cached_tokens=1000,
            **_sim(api_pre=4.0, ttft=21.0),
        ),
        _turn(("http", 1, 2), "failed", (3 * S,), error_kind="rate_limited"),
        _turn(
            ("ws", 1, 0),
            "completed",
            (t5, t5 + 2 * MS, t5 + 5 * MS, t5 + 5 * MS, t5 + 6 * MS),
            output_tokens=1,
            input_tokens=1000,
            cached_tokens=900,
        ),
    ]


def _rollouts() -> list[RolloutRecord]:
    return [
        _rollout(("http", 0), "completed", (1, 1, S), turns=1),
        _rollout(
            ("http", 1),
            "completed",
            (900 * MS, 950 * MS, 2100 * MS),
            turns=3,
            errors=1,
            tool_ns=300 * MS,
            client_ns=30 * MS,
        ),
        _rollout(("http", 2), "failed", (3 * S, 3 * S), error_kind="timeout"),
        _rollout(("ws", 1), "completed", (5 * S, 5 * S, 5 * S + 600 * MS), turns=1),
    ]


def _filled(**kw: object) -> Accumulator:
    acc = Accumulator(warmup_rollouts=1, **kw)  # type: ignore[arg-type]
    for rec in _turns():
        acc.add_turn(rec)
    for rollout in _rollouts():
        acc.add_rollout(rollout)
    return acc


def _slo_group(good: int, n: int, good_turns: int, turns: int) -> dict[str, Any]:
    return {
        "rollout_attainment": round(good / n, 6),
        "turn_attainment": round(good_turns / turns, 6),
        "rollouts": n,
        "good_rollouts": good,
        "rollout_attainment_ci95": [None, None],
        "turns": turns,
        "good_turns": good_turns,
        "turn_attainment_ci95": [None, None],
        "ci_reason": f"n={n}: too few for a CI (need 10)",
        "thresholds": {},
    }


# Hand-computed.  While a histogram holds at most EXACT_MAX values its percentiles are
# exact nearest-rank order statistics (docs/metrics.md §1.4): with two values p50 is the
# smaller, p90 and p99 the larger.  Means are exact.
EXPECTED = {
    "format_version": 1,
    "run_id": "golden",
    "valid": False,
    "invalid_reasons": ["client CPU saturated"],
    "transports": {
        "http": {
            "turns": {"count": 3, "errors": 1},
            "rollouts": {"count": 2, "errors": 1},
            "ttft_ms": {"p50": 10.0, "p90": 20.0, "p99": 20.0, "mean": 15.0},
            # by output kind: no turn of the golden run called a tool
            "ttft_text_ms": {"p50": 10.0, "p99": 20.0},
            "ttft_tool_ms": {"p50": None, "p99": None},
            "held_back_ms": {"count": 0, "p50": None, "p99": None},
            # records without first_output_ns (written before it existed) and no reasoning
            "ttfot_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
            "reasoning_tokens": {"p50": None, "p99": None, "mean": None},
            "ttfb_ms": {"p50": 4.0, "p90": 5.0, "p99": 5.0, "mean": 4.5},
            "connect_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
            "tls_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
            "compaction_ms": {"count": 0, "p50": None, "p99": None, "mean": None},
            "itl_ms": {"p50": 1.0, "p90": 1.0, "p99": 1.0, "mean": 1.0},
            "turn_ms": {"p50": 30.0, "p90": 120.0, "p99": 120.0, "mean": 75.0},
            "rollout_ms": {"p50": 1200.0, "p90": 1200.0, "p99": 1200.0, "mean": 1200.0},
            # from the actual start (950 ms)
            "rollout_uncorrected_ms": {"p50": 1150.0, "p90": 1150.0, "p99": 1150.0, "mean": 1150.0},
            # one TPOT sample: 100 ms over 100 gaps
            "tpot_ms": {"p50": 1.0, "p90": 1.0, "p99": 1.0, "mean": 1.0},
            "tps": {
                "decode_p50": 1000.0,  # 100 tokens after the first in 0.1 s
                "decode_mean": 1000.0,
                # 30 tokens / 0.1 s window, raised to the turn's own decode rate
                "burst_peak": 1000.0,
                "burst_peak_reason": None,
                "decode_excluded": 0,
                # 101 + 1 tokens between 1.010 s and 2.020 s
                "aggregate_mean": round(102 / 1.010, 3),
                # the span 1.010-2.020 s holds no whole second: [1, 2) and [2, 3) are partly idle
                "aggregate_peak": None,
                "aggregate_peak_reason": "no whole 1 s bucket inside the 1.01 s of output",
            },
            "breakdown_ms": {
                "api_pre": 3.0,
                "api_queue": 0.0,
                "engine_queue": None,
                "prefill": 3.0,
                "decode": 100.0,
                "api_post": 1.0,
                "tool": 100.0,  # 300 ms over 3 turns
                "client": 10.0,
                "recovery": 0.0,
            },
            # lags 50 ms and 0
            "schedule_lag_ms": {"p50": 0.0, "p99": 50.0},
            "errors_by_kind": {"rate_limited": 1, "rollout:timeout": 1},
            # 1000 cached of 2200 input; the failed turn reported none, the warm-up is left out
            "cache": {
                "cached_ratio": 0.4545,
                "input_tokens": 2200,
                "cached_tokens": 1000,
                "by_turn": [
                    {
                        "turn_index": 0,
                        "turns": 1,
                        "input_tokens": 1000,
                        "cached_tokens": 0,
                        "cached_ratio": 0.0,
                    },
                    {
                        "turn_index": 1,
                        "turns": 1,
                        "input_tokens": 1200,
                        "cached_tokens": 1000,
                        "cached_ratio": 0.8333,
                    },
                ],
            },
            # measured - modelled TTFT: +1 ms and -1 ms
            "measurement_error_ms": {"p50": -1.0, "p99": 1.0},
            # the golden turns carry no server lateness: no sample, no client-side error
            "server_late_ms": {"p50": None, "p99": None},
            "client_error_ms": {"p50": None, "p99": None},
            # SLO (no thresholds: good = succeeded): rollout 1 has a failed turn, rollout 2
            # failed; 2 of 3 turns succeeded; span 0.9 s (intended start) to 2.1 s
            "slo": _slo_group(0, 2, 2, 3),
            "goodput": {
                "goodput_tps": 0.0,
                "good_rollouts_per_s": 0.0,
                "good_output_tokens": 0,
                "span_s": 1.2,
            },
            # statistics from fewer samples than they need: path -> n (p90 needs 10, p99 100)
            "too_few_samples": {
                **{
                    f"{g}.{k}": 2 for g in ("ttft_ms", "ttfb_ms", "turn_ms") for k in ("p90", "p99")
                },
                "ttft_text_ms.p99": 2,
                **{
                    f"{g}.{k}": 1
                    for g in ("rollout_ms", "rollout_uncorrected_ms", "tpot_ms")
                    for k in ("p50", "p90", "p99")
                },
                "tps.decode_p50": 1,
                "schedule_lag_ms.p99": 2,
                "measurement_error_ms.p99": 2,
            },
        },
        "ws": {
            "turns": {"count": 1, "errors": 0},
            "rollouts": {"count": 1, "errors": 0},
            "ttft_ms": {"p50": 5.0, "p90": 5.0, "p99": 5.0, "mean": 5.0},
            "ttft_text_ms": {"p50": 5.0, "p99": 5.0},
            "ttft_tool_ms": {"p50": None, "p99": None},
            "held_back_ms": {"count": 0, "p50": None, "p99": None},
            "ttfot_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
            "reasoning_tokens": {"p50": None, "p99": None, "mean": None},
            "ttfb_ms": {"p50": 2.0, "p90": 2.0, "p99": 2.0, "mean": 2.0},
            "connect_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
            "tls_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
            "compaction_ms": {"count": 0, "p50": None, "p99": None, "mean": None},
            "itl_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
            "turn_ms": {"p50": 6.0, "p90": 6.0, "p99": 6.0, "mean": 6.0},
            "rollout_ms": {"p50": 600.0, "p90": 600.0, "p99": 600.0, "mean": 600.0},
            "rollout_uncorrected_ms": {"p50": 600.0, "p90": 600.0, "p99": 600.0, "mean": 600.0},
            "tpot_ms": {"p50": None, "p90": None, "p99": None, "mean": None},
            "tps": {
                "decode_p50": None,
                "decode_mean": None,
                "burst_peak": None,
                "burst_peak_reason": "no response long enough to fill a 100 ms window",
                "decode_excluded": 0,
                "aggregate_mean": None,
                "aggregate_peak": None,
                "aggregate_peak_reason": "no whole 1 s bucket inside the 0.00 s of output",
            },
            "breakdown_ms": {
                "api_pre": None,
                "api_queue": None,
                "engine_queue": None,
                "prefill": None,
                "decode": None,
                "api_post": None,
                "tool": 0.0,
                "client": 0.0,
                "recovery": 0.0,
            },
            "schedule_lag_ms": {"p50": 0.0, "p99": 0.0},
            "errors_by_kind": {},
            "cache": {
                "cached_ratio": 0.9,
                "input_tokens": 1000,
                "cached_tokens": 900,
                "by_turn": [
                    {
                        "turn_index": 0,
                        "turns": 1,
                        "input_tokens": 1000,
                        "cached_tokens": 900,
                        "cached_ratio": 0.9,
                    },
                ],
            },
            "measurement_error_ms": {"p50": None, "p99": None},
            "server_late_ms": {"p50": None, "p99": None},
            "client_error_ms": {"p50": None, "p99": None},
            "slo": _slo_group(1, 1, 1, 1),
            "goodput": {
                "goodput_tps": 1.667,
                "good_rollouts_per_s": 1.6667,
                "good_output_tokens": 1,
                "span_s": 0.6,
            },
            "too_few_samples": {
                **{
                    f"{g}.{k}": 1
                    for g in (
                        "ttft_ms",
                        "ttfb_ms",
                        "turn_ms",
                        "rollout_ms",
                        "rollout_uncorrected_ms",
                    )
                    for k in ("p50", "p90", "p99")
                },
                "schedule_lag_ms.p50": 1,
                "schedule_lag_ms.p99": 1,
                "ttft_text_ms.p50": 1,
                "ttft_text_ms.p99": 1,
            },
        },
    },
    "comparisons": [
        {
            "baseline": "http",
            "candidate": "ws",
            "rollout_speedup": 2.0,  # 1200 ms / 600 ms on rollout 1
            # one pair: the point estimate, no CI, and why
            "rollout_speedup_ci95": [None, None],
            "rollout_latency_reduction_pct": 50.0,
            "ttft_p50_reduction_pct": 50.0,
            "paired": True,
            "rollout_pairs": 1,
            "rollout_speedup_ci_reason": "n=1: too few for a CI (need 5)",
        }
    ],
    # the honesty checks' counters (docs/metrics.md §1.4): nothing flagged, no warning
    "honesty": {
        "http": {**dict.fromkeys(honesty.KEYS, 0), "checked_turns": 2},
        "ws": {**dict.fromkeys(honesty.KEYS, 0), "checked_turns": 1},
    },
    # planned vs server-reported tokens: these records carry no plan and no usage, so the
    # output is the counted one and there is nothing to compare
    "tokens": {
        name: {
            "turns": turns,
            # every measured turn reported its input (the records of the cache group above)
            "usage_turns": turns,
            "planned_input": 0,
            "planned_output": 0,
            "usage_planned_input": 0,
            "usage_planned_output": 0,
            "reported_input": reported,
            "reported_output": output,
            "input": reported,
            "output": output,
            "streamed_output": 0,
            "input_ratio": None,
            "output_ratio": None,
        }
        for name, turns, output, reported in (("http", 2, 102, 2200), ("ws", 1, 1, 1000))
    },
    # no hints sent (the default): outputs are not held to the plan
    "hint_ignored": [],
    "warnings": [],
}


def test_golden_summary() -> None:
    summary = _filled().summary(
        "golden",
        valid=False,
        invalid_reasons=["client CPU saturated"],
        comparisons=[("http", "ws"), ("http", "ws-append")],
    )
    assert summary == EXPECTED
    assert list(summary) == list(EXPECTED)
    assert list(summary["transports"]["http"]) == list(EXPECTED["transports"]["http"])  # type: ignore[index]
    orjson.dumps(summary)  # JSON-serialisable as is


def test_default_comparisons_use_http_as_baseline() -> None:
    summary = _filled().summary("x")
    assert [(c["baseline"], c["candidate"]) for c in summary["comparisons"]] == [("http", "ws")]


def test_unpaired_when_completed_rollouts_differ() -> None:
    acc = _filled()
    acc.add_rollout(_rollout(("ws", 3), "completed", (S, S, S + 200 * MS), turns=1))
    (cmp,) = acc.summary("x")["comparisons"]
    assert cmp["paired"] is False
    # ratio of medians: 1200 / median(600, 200) = 3
    assert cmp["rollout_speedup"] == 3.0
    assert cmp["rollout_latency_reduction_pct"] == pytest.approx(66.667)


def test_merge_equals_single_accumulator() -> None:
    turns, rollouts = _turns(), _rollouts()
    a = Accumulator(warmup_rollouts=1)
    b = Accumulator(warmup_rollouts=1)
    for i, rec in enumerate(turns):
        (a if i % 2 else b).add_turn(rec)
    for i, rollout in enumerate(rollouts):
        (b if i % 2 else a).add_rollout(rollout)
    merged = a.merge(b)
    whole = _filled()
    assert merged.summary("m") == whole.summary("m")
    assert merged.histograms() == whole.histograms()


def test_merge_rejects_a_rollout_measured_twice() -> None:
    with pytest.raises(ValueError, match="rollout 1"):
        _filled().merge(_filled())


def test_state_round_trip_through_json() -> None:
    acc = _filled()
    back = Accumulator.from_state(orjson.loads(orjson.dumps(acc.to_state())))
    assert back.summary("s") == acc.summary("s")
    assert back.histograms() == acc.histograms()


def test_histograms_exposed_per_transport_and_metric() -> None:
    hists = _filled().histograms()
    assert isinstance(hists["http", "ttft"], Histogram)
    assert hists["http", "ttft"].count == 2
    assert hists["http", "itl"].count == 100
    assert hists["http", "decode_tps"].unit == "tps"
    assert {m for t, m in hists if t == "ws"} == {
        "ttft",
        "ttfot",
        "reasoning_tokens",
        "ttfb",
        "ttft_text",
        "ttft_tool",
        "held_back",
        "connect",
        "tls",
        "compaction",
        "itl",
        "turn",
        "rollout",
        "rollout_uncorrected",
        "tpot",
        "schedule_lag",
        "decode_tps",
        "measurement_error_pos",
        "measurement_error_neg",
        "server_late_pos",
        "server_late_neg",
        "client_error_pos",
        "client_error_neg",
    }


def test_aggregate_tps_spreads_tokens_across_seconds() -> None:
    acc = Accumulator()
    # 300 tokens uniformly over 0.5 s .. 2.0 s: 100 in second 0, 200 in second 1
    acc.add_turn(
        _turn(("http", 0, 0), "completed", (1, 0, S // 2, 2 * S, 2 * S), output_tokens=300)
    )
    tps = acc.summary("x")["transports"]["http"]["tps"]
    assert tps["aggregate_peak"] == 200.0
    assert tps["aggregate_mean"] == 200.0  # 300 tokens over 1.5 s
    assert tps["decode_p50"] == 199.0  # 299 gaps over 1.5 s = 199.33 -> integer histogram


def test_empty_accumulator_summary() -> None:
    summary = Accumulator().summary("empty")
    assert summary == {
        "format_version": 1,
        "run_id": "empty",
        "valid": True,
        "invalid_reasons": [],
        "transports": {},
        "comparisons": [],
        "honesty": {},
        "tokens": {},
        "hint_ignored": [],
        "warnings": [],
    }


#: docs/metrics.md §3: the summary.json keys tools and CI rely on (dotted; <t> = every transport)
DESIGN_KEYS = [
    "format_version",
    "run_id",
    "valid",
    "invalid_reasons",
    "transports.<t>.turns.count",
    "transports.<t>.turns.errors",
    "transports.<t>.rollouts.count",
    "transports.<t>.rollouts.errors",
    *(
        f"transports.<t>.{m}.{s}"
        for m in (
            "ttft_ms",
            "ttfot_ms",
            "ttfb_ms",
            "itl_ms",
            "turn_ms",
            "rollout_ms",
            "connect_ms",
            "tls_ms",
        )
        for s in ("p50", "p90", "p99", "mean")
    ),
    *(f"transports.<t>.reasoning_tokens.{s}" for s in ("p50", "p99", "mean")),
    *(
        f"transports.<t>.tps.{k}"
        for k in ("decode_p50", "decode_mean", "burst_peak", "aggregate_mean", "aggregate_peak")
    ),
    *(
        f"transports.<t>.breakdown_ms.{k}"
        for k in (
            "api_pre",
            "api_queue",
            "engine_queue",
            "prefill",
            "decode",
            "api_post",
            "tool",
            "client",
            "recovery",
        )
    ),
    "transports.<t>.schedule_lag_ms.p50",
    "transports.<t>.schedule_lag_ms.p99",
    # §1.4: the protocol honesty checks
    "honesty.<t>.checked_turns",
    "honesty.<t>.chain_ignored",
    "honesty.<t>.decode_implausible",
    # §1.6: planned vs server-reported tokens
    *(
        f"tokens.<t>.{k}"
        for k in (
            "turns",
            "usage_turns",
            "planned_input",
            "planned_output",
            "reported_input",
            "reported_output",
            "input",
            "output",
            "streamed_output",
            "input_ratio",
            "output_ratio",
        )
    ),
    "warnings",
]
COMPARISON_KEYS = [
    "baseline",
    "candidate",
    "rollout_speedup",
    "rollout_speedup_ci95",
    "rollout_latency_reduction_pct",
    "ttft_p50_reduction_pct",
    "paired",
    "rollout_pairs",
    "rollout_speedup_ci_reason",
]


def _lookup(doc: object, dotted: str) -> object:
    for part in dotted.split("."):
        assert isinstance(doc, dict) and part in doc, f"summary: missing key {dotted!r}"
        doc = doc[part]
    return doc


def test_every_design_key_is_present_for_every_transport() -> None:
    summary = _filled().summary("keys")
    assert set(summary["transports"]) == {"http", "ws"}
    for key in DESIGN_KEYS:
        for name in summary["transports"]:
            _lookup(summary, key.replace("<t>", name))
    (cmp,) = summary["comparisons"]
    assert list(cmp) == COMPARISON_KEYS
    assert len(cmp["rollout_speedup_ci95"]) == 2


def test_aggregate_tps_series_matches_vectorised_series() -> None:
    acc = Accumulator(t0_ns=S // 4)
    turns = [
        (S // 2, 2 * S, 300),  # spread over three buckets
        (S + S // 10, S + S // 10, 7),  # a single-token-time response
        (4 * S, 4 * S + S // 2, 50),  # after an idle second
    ]
    for i, (first, last, n) in enumerate(turns):
        acc.add_turn(
            _turn(("ws", i, 0), "completed", (first - 1, 0, first, last, last), output_tokens=n)
        )
    series = aggregate_tps_series(acc, "ws")
    starts, rates = token_rate_series(
        [t[0] for t in turns],
        [t[1] for t in turns],
        [t[2] for t in turns],
        bucket_ns=S,
        origin_ns=S // 4,
    )
    assert [s for s, _ in series] == list(starts) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [r for _, r in series] == pytest.approx(list(rates))
    # relative to t0: 300 tokens over 0.25..1.75 s (150 + 150), 7 at 0.85 s, 50 over 3.75..4.25 s
    assert [r for _, r in series] == pytest.approx([157.0, 150.0, 0.0, 25.0, 25.0])
