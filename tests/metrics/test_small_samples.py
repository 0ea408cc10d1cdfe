"""Statistics that admit their sample size: no CI below 5 pairs, exact small-sample
percentiles, too-small statistics listed and marked (docs/metrics.md §1.4)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from harness.cli.summary_table import print_summary
from harness.metrics.sample_size import min_samples, sample_size_reasons
from harness.metrics.summary import Accumulator
from harness.report.files import fmt_ci
from harness.report.render import comparison_table, latency_table
from harness.report.results import Run
from harness.workload.records import RolloutRecord, TurnRecord

MS = 1_000_000
S = 1_000_000_000


def _accumulator(n_rollouts: int, turns_per_rollout: int = 1) -> Accumulator:
    acc = Accumulator()
    turns, rollouts = _records(n_rollouts, turns_per_rollout)
    for rec in turns:
        acc.add_turn(rec)
    for rollout in rollouts:
        acc.add_rollout(rollout)
    return acc


def _records(
    n_rollouts: int, turns_per_rollout: int = 1
) -> tuple[list[TurnRecord], list[RolloutRecord]]:
    """http and ws over the same ``n_rollouts`` rollouts; ws is ~1.35x faster."""
    turns: list[TurnRecord] = []
    rollouts: list[RolloutRecord] = []
    for rid in range(n_rollouts):
        start = (rid + 1) * 10 * S
        for transport, latency_ms in (("http", 1350 + 10 * rid), ("ws", 1000 + 7 * rid)):
            for k in range(turns_per_rollout):
                sent = start + k * S
                ttft = (40 + 3 * rid + k) * MS
                turns.append(
                    TurnRecord(
                        transport,
                        rid,
                        k,
                        status="completed",
                        sent_ns=sent,
                        first_event_ns=sent + MS,
                        first_token_ns=sent + ttft,
                        last_token_ns=sent + ttft + 100 * MS,
                        done_ns=sent + ttft + 101 * MS,
                        output_tokens=11,
                    )
                )
            rollouts.append(
                RolloutRecord(
                    transport,
                    rid,
                    intended_start_ns=start,
                    start_ns=start,
                    end_ns=start + latency_ms * MS,
                    turns=turns_per_rollout,
                    status="completed",
                )
            )
    return turns, rollouts


@pytest.mark.parametrize("n", [1, 2, 4])
def test_too_few_rollouts_give_the_speedup_without_a_ci_and_say_why(n: int) -> None:
    (cmp,) = _accumulator(n).summary("small")["comparisons"]
    assert cmp["rollout_speedup"] > 1.3  # the point estimate is still reported
    assert cmp["rollout_speedup_ci95"] == [None, None]
    assert cmp["rollout_pairs"] == n
    assert cmp["rollout_speedup_ci_reason"] == f"n={n}: too few for a CI (need 5)"


def test_five_rollouts_give_a_ci() -> None:
    (cmp,) = _accumulator(5).summary("enough")["comparisons"]
    lo, hi = cmp["rollout_speedup_ci95"]
    assert lo is not None and hi is not None and lo <= cmp["rollout_speedup"] <= hi
    assert cmp["rollout_speedup_ci_reason"] is None
    assert cmp["rollout_pairs"] == 5


def test_console_shows_the_reason_instead_of_brackets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    print_summary(_accumulator(2).summary("n2"), tmp_path)
    out = capsys.readouterr().out
    assert "n=2: too few for a CI (need 5)" in out
    speedup_rows = [line for line in out.splitlines() if "ws vs http" in line]
    assert speedup_rows and all("[" not in line for line in speedup_rows)
    # the too-small percentiles are marked, with the footnote saying what the mark means
    assert "* too few samples for this statistic (p50 needs 2, p90 10, p99 100)" in out


def test_report_tables_show_the_reason_and_the_marks(tmp_path: Path) -> None:
    turns, rollouts = _records(1)
    summary = _accumulator(1).summary("n1")
    run = Run(
        path=tmp_path,
        manifest={},
        summary=summary,
        turns=pd.DataFrame([dataclasses.asdict(t) for t in turns]),
        rollouts=pd.DataFrame([dataclasses.asdict(r) for r in rollouts]),
    )
    table = comparison_table(run)
    assert table is not None
    assert table.rows[0][2] == "n=1: too few for a CI (need 5)"  # rollout speedup
    assert table.rows[0][6] == "n=1: too few for a CI (need 5)"  # TTFT speedup, per turn
    lat = latency_table(summary)
    assert any(cell.endswith("*") for row in lat.rows for cell in row)
    assert "too few samples for this statistic" in lat.caption


def test_fmt_ci() -> None:
    assert fmt_ci(1.234, 1.456, 2) == "[1.23, 1.46]"
    assert fmt_ci(1.2, 1.4, 2, "n=2: too few for a CI (need 5)") == "n=2: too few for a CI (need 5)"
    assert fmt_ci(None, None) == "-"


def test_p99_of_60_samples_in_the_summary_is_the_maximum() -> None:
    summary = _accumulator(60).summary("sixty")
    ttft = summary["transports"]["http"]["ttft_ms"]
    # ttft of rollout i is 40 + 3i ms: the maximum is 217 ms, the nearest-rank p50 the 30th
    assert ttft["p99"] == 40 + 3 * 59
    assert ttft["p50"] == 40 + 3 * 29
    assert ttft["p90"] == 40 + 3 * 53
    too_few = summary["transports"]["http"]["too_few_samples"]
    assert too_few["ttft_ms.p99"] == 60 and "ttft_ms.p90" not in too_few


def _http_turns(ids: range) -> Accumulator:
    acc = Accumulator()
    for rid in ids:
        sent = (rid + 1) * 10 * S
        ttft = (40 + 3 * rid) * MS
        acc.add_turn(
            TurnRecord(
                "http",
                rid,
                0,
                status="completed",
                sent_ns=sent,
                first_token_ns=sent + ttft,
                last_token_ns=sent + ttft + 100 * MS,
                done_ns=sent + ttft + 101 * MS,
                output_tokens=11,
            )
        )
    return acc


def test_exactness_survives_merging_accumulators() -> None:
    # two processes measuring every other rollout (as run --procs and Locust workers do),
    # shipped as state and merged: the same exact percentiles as one process
    whole = _http_turns(range(60)).summary("x")["transports"]["http"]["ttft_ms"]
    a = Accumulator.from_state(_http_turns(range(0, 60, 2)).to_state())
    b = Accumulator.from_state(_http_turns(range(1, 60, 2)).to_state())
    merged = a.merge(b).summary("x")["transports"]["http"]["ttft_ms"]
    assert merged == whole
    assert merged["p99"] == 40 + 3 * 59


def test_sample_size_reasons() -> None:
    reasons = sample_size_reasons(_accumulator(2).summary("n2"))
    assert "ws vs http rollout speedup: n=2: too few for a CI (need 5)" in reasons
    (http,) = [r for r in reasons if r.startswith("http:")]
    assert http.startswith("http: too few samples for p90 (need 10): TTFT, TTFB, turn, rollout")
    assert "; p99 (need 100): TTFT, TTFT text, TTFB, turn, rollout" in http and "(n=2)" in http
    sixty = sample_size_reasons(_accumulator(60).summary("sixty"))
    (ws,) = [r for r in sixty if r.startswith("ws:")]
    assert "p90" not in ws and "TTFT" in ws and "(n=60)" in ws
    assert sample_size_reasons({"transports": {}, "comparisons": []}) == []
    # an older summary, without the new fields, gives no reason and no error
    old = {
        "transports": {"http": {"ttft_ms": {"p99": 1.0}}},
        "comparisons": [{"baseline": "http", "candidate": "ws", "rollout_speedup": 1.3}],
    }
    assert sample_size_reasons(old) == []


def test_min_samples_rule() -> None:
    assert [min_samples(s) for s in ("p50", "p90", "p99", "mean", "peak")] == [2, 10, 100, 1, 1]


def test_no_footnote_when_no_shown_cell_is_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = _accumulator(2).summary("n2")
    # the table shows no value at all (every turn failed, say): nothing to explain
    for t in summary["transports"].values():
        for group in ("ttft_ms", "turn_ms", "rollout_ms"):
            t[group] = {key: None for key in t.get(group, {})}
    print_summary(summary, tmp_path)
    out = capsys.readouterr().out
    assert "*" not in out.replace("**", "")
    assert "too few samples for this statistic" not in out


def test_reasoning_statistics_are_named_only_when_the_run_reasoned() -> None:
    turns, rollouts = _records(2)

    def reasons(reasoning: int) -> str:
        acc = Accumulator()
        for rec in turns:
            # as a stream fills them: TTFOT = TTFT without reasoning, 300 ms later with it
            later = 300 * MS if reasoning else 0
            acc.add_turn(
                dataclasses.replace(
                    rec,
                    first_output_ns=rec.first_token_ns + later,
                    reasoning_tokens=reasoning,
                    output_tokens=rec.output_tokens + reasoning,
                )
            )
        for rollout in rollouts:
            acc.add_rollout(rollout)
        (http,) = [r for r in sample_size_reasons(acc.summary("s")) if r.startswith("http:")]
        return http

    # without reasoning TTFOT repeats TTFT: its small sample is not a second complaint
    assert "TTFOT" not in reasons(0) and "reasoning" not in reasons(0)
    assert "TTFOT" in reasons(300) and "reasoning tok" in reasons(300)
