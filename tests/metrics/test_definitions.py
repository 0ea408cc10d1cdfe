"""The metric table is the one source: summary, analysis, gate, compare, report and CLI read it."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from harness.cli.summary_table import print_summary
from harness.gate import samples as gate_samples
from harness.gate.rules import GateRulesError, parse_rules
from harness.metrics import definitions as D
from harness.metrics.summary import Accumulator
from harness.report import analysis as A
from harness.report import load_run
from harness.report.compare import compare
from harness.report.render import latency_table, throughput_tables
from harness.workload.records import RolloutRecord, TurnRecord, csv_fields

ROOT = Path(__file__).resolve().parents[2]
MS = 1_000_000
S = 1_000_000_000


def _synthetic() -> ModuleType:
    path = ROOT / "tests" / "report" / "helper_synthetic.py"
    spec = importlib.util.spec_from_file_location("metrics_helper_synthetic", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: edge cases of every kind: failed, missing timestamps, no intended start, late start, 1 token
TURNS = [
    TurnRecord("http", 1, 0, sent_ns=S, first_event_ns=S + 2 * MS, first_token_ns=S + 5 * MS,
               last_token_ns=S + 105 * MS, done_ns=S + 110 * MS, status="completed",
               output_tokens=101, sim_ttft_ms=4.5, itl_ns=[MS] * 100, output_arrivals=101,
               server_late_ms=0.2, server_read_ms=0.05,
               connect_start_ns=S, tcp_connected_ns=S + MS // 2, tls_done_ns=S + 2 * MS),
    TurnRecord("http", 1, 1, sent_ns=2 * S, first_token_ns=2 * S + 7 * MS,
               last_token_ns=2 * S + 7 * MS, done_ns=2 * S + 9 * MS, status="incomplete",
               output_tokens=1, server_late_ms=-0.01),
    TurnRecord("http", 1, 2, sent_ns=3 * S, first_token_ns=3 * S + MS,
               last_token_ns=3 * S + 50 * MS, status="failed", output_tokens=20,
               connect_start_ns=3 * S, tcp_connected_ns=3 * S + MS),
    TurnRecord("http", 2, 0, status="error"),
    TurnRecord("http", 2, 1, sent_ns=4 * S, done_ns=4 * S + 3 * MS, status="completed"),
    # a last token without a first: once decode TPS to the analysis and the gate, not the summary
    TurnRecord("http", 2, 2, sent_ns=5 * S, last_token_ns=5 * S + 9 * MS, done_ns=5 * S + 10 * MS,
               status="completed", output_tokens=3),
    # a reasoning turn: 300 reasoning tokens, then 101 visible ones over 100 ms from the first
    # visible delta (the decode rate is the visible output's, 1,000 tokens/s)
    TurnRecord("http", 2, 3, sent_ns=6 * S, first_event_ns=6 * S + 2 * MS,
               first_token_ns=6 * S + 5 * MS, first_output_ns=6 * S + 305 * MS,
               last_token_ns=6 * S + 405 * MS, done_ns=6 * S + 410 * MS, status="completed",
               output_tokens=401, reasoning_tokens=300, itl_ns=[MS] * 100, output_arrivals=101),
    # a forced tool call withheld until it parsed (tests/data/vllm/chat-forced-tool-call-1): the
    # role chunk at 17 ms, the call's name at 53 ms, its 4 argument deltas in one read at 83 ms:
    # TTFT at the release, 36 ms held back, no ITL, TPOT or decode TPS (2 arrivals)
    # (over Chat Completions: over the Responses API the first event is response.created, on
    # the request's arrival, and no held-back time is defined)
    TurnRecord("chat", 3, 0, sent_ns=8 * S, first_event_ns=8 * S + 17 * MS,
               first_token_ns=8 * S + 53 * MS, first_output_ns=8 * S + 53 * MS,
               last_token_ns=8 * S + 83 * MS, done_ns=8 * S + 112 * MS, status="completed",
               output_tokens=48, function_calls=1, output_arrivals=2, itl_ns=[0, 0, 0]),
    # a streamed tool call: 40 arrivals over 78 ms, a decode rate like a text turn's
    TurnRecord("chat", 3, 1, sent_ns=9 * S, first_event_ns=9 * S + 2 * MS,
               first_token_ns=9 * S + 4 * MS, first_output_ns=9 * S + 4 * MS,
               last_token_ns=9 * S + 82 * MS, done_ns=9 * S + 85 * MS, status="completed",
               output_tokens=40, function_calls=1, output_arrivals=40, itl_ns=[2 * MS] * 39),
    # a compaction: one JSON answer after 800 ms, no stream (no TTFB, no TTFT)
    TurnRecord("http", 2, 4, sent_ns=7 * S, done_ns=7 * S + 800 * MS, status="completed",
               output_tokens=512, compaction=True),
]  # fmt: skip
ROLLOUTS = [
    RolloutRecord("http", 1, intended_start_ns=S, start_ns=S + 3 * MS, end_ns=4 * S,
                  status="completed", turns=3),
    RolloutRecord("http", 2, start_ns=4 * S, end_ns=5 * S, status="completed", turns=2),
    RolloutRecord("http", 3, intended_start_ns=6 * S, start_ns=6 * S, end_ns=7 * S,
                  status="failed", turns=1),
    RolloutRecord("http", 4, intended_start_ns=8 * S, start_ns=8 * S - MS, end_ns=0,
                  status="completed"),
]  # fmt: skip


def _frame(recs: list[Any]) -> pd.DataFrame:
    return pd.DataFrame([{f: getattr(r, f) for f in csv_fields(type(r))} for r in recs])


def _records(m: D.Metric) -> list[Any]:
    return TURNS if m.record == "turn" else ROLLOUTS


def _same(a: Any, b: Any) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return b is not None and a == pytest.approx(b)


# -- one definition, three evaluations -------------------------------------------------------------


@pytest.mark.parametrize("metric", [m for m in D.METRICS if m.per_record], ids=lambda m: m.name)
def test_record_column_and_accumulator_agree(metric: D.Metric) -> None:
    recs = _records(metric)
    per_record = [D.sample(metric, r) for r in recs]
    assert any(v is not None for v in per_record), "the edge cases give no sample at all"
    if metric.column is not None:
        col = D.column(metric, _frame(recs))
        for rec, want, got in zip(recs, per_record, col.tolist(), strict=True):
            assert _same(got, want), (metric.name, rec)
    # the compiled hot path records exactly the per-record samples
    acc = Accumulator()
    for rec in recs:
        (acc.add_turn if metric.record == "turn" else acc.add_rollout)(rec)
    hists = acc.histograms()
    flat = [x for v in per_record if v is not None for x in (v if metric.many else [v])]
    names = (
        (metric.histogram + "_pos", metric.histogram + "_neg")
        if metric.signed
        else (metric.histogram,)
    )
    count = sum(h.count for (_, name), h in hists.items() if name in names)
    assert count == len(flat)


def _summary() -> dict[str, Any]:
    """The summary of TURNS and ROLLOUTS."""
    acc = Accumulator()
    for rec in TURNS:
        acc.add_turn(rec)
    for rollout in ROLLOUTS:
        acc.add_rollout(rollout)
    return acc.summary("s")


def test_summary_values_are_the_table_statistics_of_the_samples() -> None:
    t = _summary()["transports"]["http"]
    assert t["ttft_ms"]["p50"] == pytest.approx(5.0, abs=0.01)  # 5 ms and 7 ms: rank 1
    assert t["rollout_ms"]["mean"] == pytest.approx((3000 + 1000) / 2)  # intended start, else start
    assert t["rollout_uncorrected_ms"]["mean"] == pytest.approx((2997 + 1000) / 2)
    # failed rollouts were scheduled too; HdrHistogram: within 0.1 %
    assert t["schedule_lag_ms"]["p99"] == pytest.approx(3.0, rel=1e-3)
    assert t["tps"]["decode_p50"] == 1000.0


def test_records_keep_no_formula_but_success_and_the_schedule_lag() -> None:
    # every derived value is the table's; the run's schedule accounting keeps an integer lag
    props = {
        n
        for c in (TurnRecord, RolloutRecord)
        for n, v in vars(c).items()
        if isinstance(v, property)
    }
    assert props == {"ok", "schedule_lag_ns"}
    assert [t.ok for t in TURNS] == [True] * 2 + [False] * 2 + [True] * 6
    assert [r.ok for r in ROLLOUTS] == [True, True, False, True]
    lags = [D.sample(D.get("schedule_lag_ms"), r) for r in ROLLOUTS]
    assert lags == [3.0, None, 0.0, 0.0]  # no intended start: no lag sample
    assert [r.schedule_lag_ns / MS for r in ROLLOUTS if r.intended_start_ns] == [3.0, 0.0, 0.0]


def test_a_withheld_tool_call_gives_ttft_at_release_held_back_apart_and_no_decode_sample() -> None:
    withheld, streamed = (t for t in TURNS if t.function_calls)
    one = {m.name: D.sample(m, withheld) for m in D.per_record("turn")}
    assert one["ttfb_ms"] == 17.0  # the first event: the engine's first iteration
    assert one["ttft_ms"] == one["ttft_tool_ms"] == 53.0 and one["ttft_text_ms"] is None
    assert one["held_back_ms"] == 53.0 - 17.0
    assert one["itl_ms"] is None and one["tpot_ms"] is None and one["decode_tps"] is None
    # the same call streamed in 40 pieces: decode samples, nothing held back
    assert D.sample(D.get("decode_tps"), streamed) == pytest.approx(39 / 0.078)
    assert D.sample(D.get("held_back_ms"), streamed) is None
    assert D.sample(D.get("itl_ms"), streamed) == [2.0] * 39
    # a text turn is TTFT text, not tool call
    assert D.sample(D.get("ttft_text_ms"), TURNS[0]) == 5.0
    assert D.sample(D.get("ttft_tool_ms"), TURNS[0]) is None


def test_a_failed_record_gives_how_long_it_ran_only_when_asked() -> None:
    rollout, turn = D.get("rollout_ms"), D.get("turn_ms")
    failed_rollout, failed_turn, errored_turn = ROLLOUTS[2], TURNS[2], TURNS[3]
    assert D.sample(rollout, failed_rollout) is None
    assert D.sample(rollout, failed_rollout, failed_too=True) == 1000.0
    # the expressions still decide: a failed turn without a terminal stamp gives nothing
    assert D.sample(turn, failed_turn, failed_too=True) is None
    assert D.sample(turn, errored_turn, failed_too=True) is None
    assert D.sample(turn, TURNS[0], failed_too=True) == D.sample(turn, TURNS[0]) == 110.0


def test_expressions_reject_what_a_column_cannot_compute() -> None:
    bad = D.Metric("x_ms", "x", "ms", True, "x_ms", D.stats("p50"), record="turn",
                   when="sent_ns > 0", value="max(done_ns, 1)", histogram="x")  # fmt: skip
    with pytest.raises(ValueError, match="only calls allowed"):
        D.validate([bad])
    not_a_field = D.Metric("x_ms", "x", "ms", True, "x_ms", D.stats("p50"), record="turn",
                           when="known(sent_ns + 1)", value="sent_ns", histogram="x")  # fmt: skip
    with pytest.raises(ValueError, match=r"known\(\) takes one record field"):
        D.validate([not_a_field])
    typo = D.Metric("x_ms", "x", "ms", True, "x_ms", D.stats("p50"), record="rollout",
                    when="sent_ns > 0", value="end_ns", histogram="x")  # fmt: skip
    with pytest.raises(ValueError, match="'sent_ns' is not a rollout record field"):
        D.validate([typo])


# -- every reader shows only what the table declares ----------------------------------------------


def test_summary_groups_are_the_table() -> None:
    t = _summary()["transports"]["http"]
    assert list(t)[2:-1] == list(dict.fromkeys(m.group for m in D.METRICS))
    assert list(t)[-1] == "too_few_samples"
    for m in D.METRICS:
        assert {s.key for s in m.stats} <= set(t[m.group]), m.name
    tps = {s.key for m in D.METRICS if m.group == "tps" for s in m.stats}
    tps |= {k for m in D.METRICS if m.group == "tps" for k in m.notes}
    assert set(t["tps"]) == tps


def test_compare_report_cli_and_gate_name_only_table_metrics() -> None:
    stats = {(m.group, s.key) for m in D.METRICS for s in m.stats}
    # compare's rows are the table's compare statistics (harness/report/compare.py reads them)
    assert {(m.group, s.key) for m, s in D.compare_rows()} <= stats
    summary = _summary()
    titles = {m.title(s.key, with_unit=w) for m in D.METRICS for s in m.stats for w in (0, 1)}
    assert set(latency_table(summary).headers[5:]) <= titles
    for table in throughput_tables(summary):
        assert set(table.headers[1:]) <= titles
    for metric in D.gate_metrics():
        parse_rules(
            {"regression": [f"*.{metric}.p50 +10%"], "speedup": [f"ws vs http {metric} >= 1"]}
        )
    with pytest.raises(GateRulesError, match=r"regression\[0\]\.metric"):
        parse_rules({"regression": ["*.itl_ms.p50 +10%"]})  # no per-record samples in the rows


# -- adding a metric is a change to the table ------------------------------------------------------

TAIL = D.Metric(
    "tail_ms",
    "stream tail",
    "ms",
    True,
    "tail_ms",
    D.stats("p50", "p90", "p99", "mean"),
    record="turn",
    when="(done_ns > 0) & (last_token_ns > 0)",
    value="done_ns - last_token_ns",
    histogram="tail",
    column="tail_ms",
    compare=("p50",),
    report=(("p50", 2),),
    cli=("p50",),
    gate=6,
)


def test_a_metric_added_to_the_table_appears_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(D, "METRICS", [*D.METRICS, TAIL])
    synthetic = _synthetic()
    a = load_run(synthetic.make_run(tmp_path / "a", rollout_ms={"http": [900.0] * 6, "ws": [600.0] * 6}, seed=1))  # fmt: skip
    b = load_run(synthetic.make_run(tmp_path / "b", rollout_ms={"http": [900.0] * 6, "ws": [600.0] * 6}, seed=1))  # fmt: skip

    # summary (and its histogram file): done = last token + 1 ms in the synthetic runs
    assert a.summary is not None
    assert a.summary["transports"]["ws"]["tail_ms"]["p50"] == pytest.approx(1.0, abs=0.01)
    assert (a.path / "histograms" / "ws.tail.hlog").exists()
    # pandas analysis
    assert A.turn_table(a)["tail_ms"].dropna().tolist() == pytest.approx([1.0] * 48)
    # compare, with the test on the median row
    (row,) = [
        d
        for d in compare([a, b]).deltas["B"]
        if d.transport == "ws" and d.metric == "stream tail p50"
    ]
    assert row.unit == "ms" and row.verdict == "no significant change"
    # report tables and the end-of-run table
    assert "stream tail p50" in latency_table(a.summary).headers
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_summary(a.summary, a.path)
    assert "stream" in out.getvalue() and "tail" in out.getvalue()  # a header may wrap
    narrow = io.StringIO()
    print_summary(a.summary, a.path, Console(file=narrow, width=80))
    assert "stream tail p50 ms" in narrow.getvalue()  # a row of the transposed table
    # the gate: rules may name it, and it has samples keyed for pairing
    from harness.gate.evaluate import evaluate

    # b re-measures a (same scenario and seed, as the gate requires)
    cfg = parse_rules({"regression": ["ws.tail_ms.p50 +10%"], "speedup": ["ws vs http tail_ms >= 0.5"]})  # fmt: skip
    data_a, data_b = gate_samples.run_data(a), gate_samples.run_data(b)
    assert len(data_b.get("ws", "tail_ms")) == 24
    report = evaluate(cfg, data_b, data_a)
    assert [r.status for r in report.results] == ["pass"] * len(report.results)
    assert {r.kind for r in report.results} >= {"regression", "speedup"}


def test_a_burst_first_arrival_gives_no_decode_rate_and_held_back_only_over_chat_and_messages() -> (
    None
):
    streamed = TURNS[8]  # 40 arrivals over 78 ms
    rates = {n: D.sample(D.get("tpot_ms"), replace(streamed, first_arrival_tokens=n))
             for n in (-1, 0, 1, D.RELEASED_BURST_MIN_TOKENS - 1, D.RELEASED_BURST_MIN_TOKENS)}  # fmt: skip
    # -1: a row from before the count keeps its rate; 0: the name alone, a call held back
    assert rates[-1] == rates[1] == rates[D.RELEASED_BURST_MIN_TOKENS - 1] == pytest.approx(2.0)
    assert rates[0] is None and rates[D.RELEASED_BURST_MIN_TOKENS] is None
    burst = replace(streamed, first_arrival_tokens=D.RELEASED_BURST_MIN_TOKENS)
    assert D.sample(D.get("held_back_ms"), burst) == 2.0  # chat: role chunk -> release
    assert D.sample(D.get("held_back_ms"), replace(burst, transport="messages")) == 2.0
    # over the Responses API the first event is response.created, on the request's arrival
    for transport in ("http", "http-chained", "ws"):
        assert D.sample(D.get("held_back_ms"), replace(burst, transport=transport)) is None
    # a text turn read late in a burst is the client's lateness: its rate stays (leaving such
    # turns out picked a slow engine's turns, TPOT 14-19 % over vLLM's on a loaded machine)
    text = replace(burst, function_calls=0)
    assert D.sample(D.get("decode_tps"), text) == D.sample(D.get("decode_tps"), streamed)
    assert D.sample(D.get("held_back_ms"), text) is None
    # the same on a results table
    frame = _frame([streamed, burst, replace(burst, transport="http")])
    assert D.column(D.get("tpot_ms"), frame).isna().tolist() == [False, True, True]
    assert D.column(D.get("decode_tps"), frame).isna().tolist() == [False, True, True]
