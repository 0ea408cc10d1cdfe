"""Fitting the model to a run: exact on synthetic turns, within 10% on a real run of the server."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.model.calibrate import (
    FITTED_ENGINE,
    FOLDED_PREFILL_TPS,
    CalibrationError,
    Turn,
    describe,
    fit,
    folded,
    profile_yaml,
    profiles_from_fit,
    turns_from_rows,
    unidentified,
)
from harness.model.reproduce import ReproductionResult
from harness.report.results import load_run
from reference_server.core.engine import first_token_ns
from reference_server.core.profiles import load_profiles
from tests.runs import run_cli


def _synthetic_rows(
    seed: int = 1, noise_ms: float = 0.0, bursts: bool = True
) -> list[dict[str, Any]]:
    """Turn rows of http and ws rollouts timed exactly by a known model (plus optional noise)."""
    rng = random.Random(seed)
    per_token_ms, prefill_ms, a_http, a_ws, connect, post = 0.009, 1 / 40, 35.0, 26.0, 25.0, 20.0
    rows = []
    for transport in ("http", "ws"):
        for rollout in range(3):
            history, prev_in, prev_out = 0, 0, 0
            t = 1_000_000_000
            for turn in range(12):
                new = 3000 if turn == 0 else rng.randint(1000, 3000)
                inp = history + new
                cached = 0 if turn == 0 else history
                processed = inp if transport == "http" or turn == 0 else inp - prev_in - prev_out
                first_conn = turn == 0
                a = a_http if transport == "http" or first_conn else a_ws
                ttft = a + per_token_ms * processed + prefill_ms * (inp - cached)
                if first_conn:
                    ttft += connect
                ttft += rng.gauss(0, noise_ms) if noise_ms else 0.0
                out = 150
                burst = bursts and turn % 4 == 0
                decode_ms = 149 / (4.0 if burst else 1.0)
                sent = t
                first = sent + round(ttft * 1e6)
                last = first + round(decode_ms * 1e6)
                done = last + round((post if transport == "http" else 0.5) * 1e6)
                rows.append(
                    {
                        "transport": transport,
                        "round": 0,
                        "rollout_id": rollout,
                        "turn_index": turn,
                        "status": "completed",
                        "sent_ns": sent,
                        "first_token_ns": first,
                        "last_token_ns": last,
                        "done_ns": done,
                        "input_tokens": inp,
                        "cached_tokens": cached,
                        "output_tokens": out,
                        "new_connection": first_conn,
                        "burst_tokens_max": 150 if burst else 100,
                    }
                )
                t = done + 10**8
                history, prev_in, prev_out = inp + out, inp, out
    return rows


def test_exact_recovery_on_synthetic_turns() -> None:
    f = fit(turns_from_rows(_synthetic_rows()))
    assert f.per_token_us == pytest.approx(9.0, rel=1e-6)
    assert f.prefill_tps == pytest.approx(40_000, rel=1e-6)
    assert f.intercept_http_ms == pytest.approx(35.0, abs=1e-6)
    assert f.intercept_ws_ms == pytest.approx(26.0, abs=1e-6)
    assert f.connect_ms == pytest.approx(25.0, abs=1e-6)
    assert f.post_ms == pytest.approx(19.5, abs=1e-3)
    assert f.sustained_tps == pytest.approx(1000.0, rel=1e-3)
    assert f.burst_probability == pytest.approx(0.25)
    assert f.rehydrate_us is None and f.overhead_http_ms is None
    assert f.r2 == pytest.approx(1.0)


def test_a_run_without_bursts_marks_the_burst_rate_unidentified() -> None:
    f = fit(turns_from_rows(_synthetic_rows(bursts=False)))
    assert f.burst_probability == 0.0 and f.burst_tps is None
    _, engine_missing = unidentified(f)
    # one run: its concurrency barely varies, the interference is not identifiable either
    assert set(engine_missing) == {
        "burst_tps",
        "burst_min_tokens",
        "burst_max_tokens",
        "ttft_per_active_ms",
        "decode_slowdown_per_stream",
        "idle_wake_ms",
        "busy_admit_ms",
        "ttft_spread_ms",
        "ttft_spread_per_active_ms",
    }
    base_api, base_engine = load_profiles("optimized", "cerebras-spark")
    _, engine = profiles_from_fit(f, base_api.model_dump(), base_engine.model_dump(), "x")
    assert engine["burst_probability"] == 0.0
    # not written as "= sustained": the base profile's values stay, marked by the writer
    assert engine["burst_tps"] == base_engine.burst_tps != engine["sustained_tps"]


def test_outliers_do_not_drag_the_fit() -> None:
    rows = _synthetic_rows(noise_ms=0.5)
    for row in rows[5::17]:  # a few turns 300 ms late (a GC pause, a busy host)
        row["first_token_ns"] += 300_000_000
    f = fit(turns_from_rows(rows))
    assert f.per_token_us == pytest.approx(9.0, rel=0.03)
    assert f.prefill_tps == pytest.approx(40_000, rel=0.05)


def test_prefill_is_not_fitted_when_it_cannot_be_separated() -> None:
    rows = [r for r in _synthetic_rows() if r["transport"] == "http"]
    for r in rows:  # every turn adds the same amount: uncached tokens are constant
        r["cached_tokens"] = r["input_tokens"] - 2000
    f = fit(turns_from_rows(rows))
    assert f.prefill_tps is None
    assert any("prefill rate not identifiable" in n for n in f.notes)
    # the intercept holds the constant 2,000 tokens' prefill (50 ms): the profile must not
    # charge it again at the base profile's 40,000 tokens/s
    base_api, base_engine = load_profiles("optimized", "cerebras-spark")
    _, engine = profiles_from_fit(f, base_api.model_dump(), base_engine.model_dump(), "x")
    assert engine["prefill_tps"] == FOLDED_PREFILL_TPS and folded(f) == ["prefill_tps"]
    assert "prefill_tps" not in unidentified(f)[1]
    text = profile_yaml(engine, FITTED_ENGINE, [], "cerebras-spark", "# h", folded(f))
    assert "prefill_tps: 1000000000.0  # not separable" in text


def test_too_few_turns_is_a_clear_error() -> None:
    with pytest.raises(CalibrationError, match="at least 8 successful turns"):
        fit(turns_from_rows(_synthetic_rows()[:5]))


def test_fitted_profiles_load_and_reproduce_the_intercepts() -> None:
    f = fit(turns_from_rows(_synthetic_rows()))
    base_api, base_engine = load_profiles("optimized", "cerebras-spark")
    api, engine = profiles_from_fit(f, base_api.model_dump(), base_engine.model_dump(), "x")
    # Cheapest path (ws) on the engine, the rest on the API tier: both intercepts survive.
    assert engine["base_ttft_ms"] == pytest.approx(26.0)
    assert api["fixed_ms"] + api["hops"] * api["hop_ms"] + engine["base_ttft_ms"] == pytest.approx(
        35
    )
    assert api["fixed_resolved_ms"] == pytest.approx(0.0)
    # The burst rate comes from whole-response bursts (150 tokens at 4,000 TPS), not from
    # their 100 ms windows (1,500); the shortest burst then fills a whole window.
    assert engine["burst_tps"] == pytest.approx(4000.0)
    assert engine["burst_min_tokens"] == 400
    assert api["workers"] == base_api.workers  # capacity is not observable: kept from the base


# serial: the verdict reads the machine's timing (`make test` runs it alone)
@pytest.mark.serial
def test_recovers_the_reference_servers_own_parameters(
    reduced_reproduction: ReproductionResult, tmp_path: Path
) -> None:
    """The issue's validation: fit a run against the reference server, get its profile back."""
    run_dir = reduced_reproduction.run_dirs["codex-cerebras"]
    proc = run_cli("calibrate", run_dir, "--out", tmp_path, timeout=60)
    print("\n" + proc.stdout)
    api = yaml.safe_load((tmp_path / "api-fitted.yaml").read_text())
    engine = yaml.safe_load((tmp_path / "engine-fitted.yaml").read_text())
    truth_api, truth_engine = load_profiles("optimized", "cerebras-spark")
    hops = truth_api.hops * truth_api.hop_ms
    # The slopes get 15% here: 4 rollouts x 6 calls on a shared 2-core host, where other
    # processes' load stretches the CPU-bound handling of large HTTP bodies.  The full-size
    # reproduction run recovers both within 5% (docs/model.md §10).
    assert api["per_token_us"] == pytest.approx(truth_api.per_token_us, rel=0.15)
    # At this size re-hydration spreads http-chained TTFTs by only 3 µs x <15k tokens, against
    # several ms of real store I/O per turn; the full-size run recovers it within 2 %.
    assert api["rehydrate_us"] == pytest.approx(truth_api.rehydrate_us, rel=0.5)
    assert api["post_ms"] == pytest.approx(truth_api.post_ms, rel=0.10)
    assert engine["prefill_tps"] == pytest.approx(truth_engine.prefill_tps, rel=0.15)
    assert engine["sustained_tps"] == pytest.approx(truth_engine.sustained_tps, rel=0.10)
    # Identifiable sums: the fixed path of a fresh request and of a resolved WebSocket.  They
    # are intercepts of ~26-35 ms, and the harness's own per-turn overhead that the fit takes
    # out is a few ms and varies with the load on the machine: at this size they get an
    # absolute +-10 ms (a fresh-clone run once fitted the ws path at 19.1 ms for 26); the
    # full-size run is the one held to 10 % (docs/model.md §10).
    http_path = api["fixed_ms"] + engine["base_ttft_ms"]
    ws_path = api["fixed_resolved_ms"] + engine["base_ttft_ms"]
    assert http_path == pytest.approx(truth_api.fixed_ms + hops + truth_engine.base_ttft_ms, abs=10)
    assert ws_path == pytest.approx(
        truth_api.fixed_resolved_ms + hops + truth_engine.base_ttft_ms, abs=10
    )
    # Burst rate: the decode part has bursting 600-token responses.
    decode_rows = load_run(reduced_reproduction.run_dirs["decode-cerebras"]).turns
    f = fit(turns_from_rows(decode_rows.to_dict("records")))
    assert f.burst_tps == pytest.approx(truth_engine.burst_tps, rel=0.10)
    assert f.burst_probability == pytest.approx(truth_engine.burst_probability, abs=0.2)


def _chat_row(run: int, rollout: int, sent: int, first: int, last: int) -> dict[str, Any]:
    """One single-turn chat request of the real-engine sim's shape (383 tokens in, 128 out)."""
    return {
        "run": run,
        "transport": "chat",
        "round": 0,
        "rollout_id": rollout,
        "turn_index": 0,
        "status": "completed",
        "sent_ns": sent,
        "first_token_ns": first,
        "last_token_ns": last,
        "done_ns": last + 100_000,
        "input_tokens": 383,
        "cached_tokens": 0,
        "output_tokens": 128,
        "output_arrivals": 128,
        "new_connection": False,
    }


def _concurrent_rows(
    levels: tuple[int, ...] = (1, 2, 4),
    *,
    k_ms: float = 2.0,
    slowdown: float = 0.1,
    wake_ms: float = 0.0,
) -> list[dict[str, Any]]:
    """Single-turn chat requests of one run per concurrency, lanes in lock-step, timed by a
    batching engine: TTFT 5 ms + k per other request in flight (+ ``wake_ms`` with none),
    time per token 0.8 ms x (1 + slowdown per other request decoding)."""
    rows = []
    for run, c in enumerate(levels):
        t = 10**9
        for step in range(8):
            ttft_ms = 5.0 + k_ms * (c - 1) + (wake_ms if c == 1 else 0.0)
            tpot_ms = 0.8 * (1 + slowdown * (c - 1))
            for lane in range(c):
                first = t + round(ttft_ms * 1e6)
                last = first + round(127 * tpot_ms * 1e6)
                rows.append(_chat_row(run, step * c + lane, t, first, last))
            t = last + 10**6
    return rows


def test_interference_is_recovered_from_runs_at_several_concurrencies() -> None:
    turns = turns_from_rows(_concurrent_rows())
    assert {(t.run, t.others_at_send) for t in turns} == {(0, 0), (1, 1), (2, 3)}
    assert {round(t.others_decoding, 6) for t in turns} == {0.0, 1.0, 3.0}
    f = fit(turns)
    assert f.ttft_per_active_ms == pytest.approx(2.0, rel=1e-6)
    assert f.decode_slowdown_per_stream == pytest.approx(0.1, rel=1e-3)
    # the sustained rate is the rate alone, not the median over the levels
    assert f.sustained_tps == pytest.approx(1000 / 0.8, rel=1e-3)
    assert f.burst_probability == 0.0
    # one prompt size: the per-token work is the intercept's, not a slope
    assert f.per_token_us == 0.0 and any("per-token API work" in n for n in f.notes)
    base_api, base_engine = load_profiles("optimized", "cerebras-spark")
    _, engine = profiles_from_fit(f, base_api.model_dump(), base_engine.model_dump(), "x")
    assert engine["ttft_per_active_ms"] == pytest.approx(2.0)
    assert engine["decode_slowdown_per_stream"] == pytest.approx(0.1, rel=1e-3)
    assert engine["base_ttft_ms"] == pytest.approx(5.0, rel=1e-3)
    assert "ttft_per_active_ms" not in unidentified(f)[1]


def test_an_idle_wake_up_is_told_apart_from_the_slope() -> None:
    """vLLM on the CPU: TTFT alone above TTFT beside one other request (issue 38)."""
    f = fit(turns_from_rows(_concurrent_rows(k_ms=0.5, wake_ms=3.0)))
    # alone 8 ms, beside one 5.5, beside three 6.5: a slope alone cannot pass through them
    assert f.idle_wake_ms == pytest.approx(3.0, rel=1e-6)
    assert f.ttft_per_active_ms == pytest.approx(0.5, rel=1e-6)
    base_api, base_engine = load_profiles("optimized", "cerebras-spark")
    _, engine = profiles_from_fit(f, base_api.model_dump(), base_engine.model_dump(), "x")
    assert engine["idle_wake_ms"] == pytest.approx(3.0)
    assert engine["base_ttft_ms"] == pytest.approx(5.0, rel=1e-3)
    assert "idle_wake_ms" not in unidentified(f)[1]
    assert "idle engine wake-up:    3.000 ms" in describe(f)


def test_a_negative_wake_up_is_written_as_a_busy_admission() -> None:
    """Alone 4 ms, beside one 7, beside three 11: a request alone is 1 ms sooner than the line
    through the busier levels.  Refitted without the step (before), the profile charged the
    request alone ~0.5 ms too much and the others too little; written as a step paid beside
    others, every level is reproduced (vLLM with its worker pinned: issue 38)."""
    f = fit(turns_from_rows(_concurrent_rows(k_ms=2.0, wake_ms=-1.0)))
    assert f.idle_wake_ms == 0.0
    assert f.busy_admit_ms == pytest.approx(1.0, rel=1e-6)
    assert any("a request beside others pays 1 ms once" in n for n in f.notes)
    assert "busy engine admission:  1.000 ms" in describe(f)
    base_api, base_engine = load_profiles("optimized", "cerebras-spark")
    api, engine = profiles_from_fit(f, base_api.model_dump(), base_engine.model_dump(), "x")
    assert engine["idle_wake_ms"] == 0.0
    assert engine["busy_admit_ms"] == pytest.approx(1.0)
    assert engine["ttft_per_active_ms"] == pytest.approx(2.0, rel=1e-6)
    # alone: base + the API's fixed work is the 4 ms measured
    assert engine["base_ttft_ms"] + api["fixed_ms"] == pytest.approx(4.0, rel=1e-3)
    assert "busy_admit_ms" not in unidentified(f)[1]


def test_a_request_joined_before_its_first_token_is_not_alone() -> None:
    """At concurrency 2 one lane sends 0.5 ms after the other: the first finds nobody in
    flight at its send, yet waits beside the second (vLLM with its worker pinned: such turns
    took as long as the others).  Counted alone, they pulled the fitted intercept from the
    4 ms alone towards the 7 ms beside one (issue 38)."""
    rows = _concurrent_rows(k_ms=2.0, wake_ms=-1.0)
    for r in rows:
        if r["run"] == 1 and r["rollout_id"] % 2 == 1:
            for key in ("sent_ns", "first_token_ns", "last_token_ns", "done_ns"):
                r[key] += 500_000
    turns = turns_from_rows(rows)
    early = [t for t in turns if t.run == 1 and t.others_at_send == 0]
    assert len(early) >= 7 and all(t.others_joining == 1 for t in early)
    f = fit(turns)
    assert f.intercept_http_ms == pytest.approx(4.0, rel=1e-3)  # alone: the 4 ms measured
    assert f.busy_admit_ms is not None and f.busy_admit_ms > 0
    # beside three (every lane in flight at the send): the 11 ms measured, within 0.5
    assert f.ttft_per_active_ms is not None
    assert 4.0 + f.busy_admit_ms + 3 * f.ttft_per_active_ms == pytest.approx(11.0, abs=0.5)


def test_a_positive_wake_up_charges_no_busy_admission() -> None:
    f = fit(turns_from_rows(_concurrent_rows(k_ms=0.5, wake_ms=3.0)))
    assert f.busy_admit_ms == 0.0


def test_two_levels_leave_the_wake_up_unidentified_and_keep_the_slope() -> None:
    f = fit(turns_from_rows(_concurrent_rows((1, 2), k_ms=2.0)))
    assert f.idle_wake_ms is None and "idle_wake_ms" in unidentified(f)[1]
    assert f.busy_admit_ms is None and "busy_admit_ms" in unidentified(f)[1]
    assert f.ttft_per_active_ms == pytest.approx(2.0, rel=1e-6)
    assert any("idle wake-up not identifiable" in n for n in f.notes)


def _varied_turns(
    levels: tuple[int, ...],
    *,
    seed: int = 7,
    per_level: int = 12,
    wake_ms: float = 0.0,
    late: Callable[[random.Random, int], float] | None = None,
) -> list[Turn]:
    """Chat turns, one run per concurrency, whose processed and uncached tokens vary apart:
    TTFT 5 ms + 1 us per processed token + 0.5 us per uncached one (2,000,000 tokens/s)
    + 2 ms per other request in flight (+ ``wake_ms`` with none; + ``late(rng, i)`` for the
    level's i-th turn)."""
    rng = random.Random(seed)
    turns = []
    for run, c in enumerate(levels):
        for i in range(per_level * c):
            processed = rng.randint(1000, 5000)
            uncached = rng.randint(0, processed)
            ttft = 5.0 + 0.001 * processed + 0.0005 * uncached + 2.0 * (c - 1)
            ttft += (wake_ms if c == 1 else 0.0) + (late(rng, i) if late else 0.0)
            turns.append(
                Turn("chat", ttft, processed, uncached, 0, False, 128, None, None,
                     run=run, others_at_send=c - 1)
            )  # fmt: skip
    return turns


@pytest.mark.parametrize("levels", [(1, 1), (1, 2)])
def test_a_wake_up_the_levels_cannot_show_leaves_prefill_and_per_token_work_fitted(
    levels: tuple[int, ...],
) -> None:
    """At concurrency 1 only, ``w`` is the intercept; at 1 and 2, the intercept less ``k``:
    the wake-up column goes, not the prefill or per-token columns the others do not span."""
    f = fit(_varied_turns(levels))
    assert f.prefill_tps == pytest.approx(2_000_000, rel=1e-6)
    assert f.per_token_us == pytest.approx(1.0, rel=1e-6)
    assert f.intercept_http_ms == pytest.approx(5.0, rel=1e-6)
    # one level: nobody else in flight, no slope to fit
    assert f.ttft_per_active_ms == (None if levels == (1, 1) else pytest.approx(2.0, rel=1e-6))
    assert f.idle_wake_ms is None
    assert any("idle wake-up not identifiable" in n for n in f.notes)
    assert not any("prefill rate not identifiable" in n for n in f.notes)
    assert not any("per-token API work not identifiable" in n for n in f.notes)


def test_far_off_turns_that_alone_show_a_column_come_back_and_true_outliers_stay_out() -> None:
    """Two WebSocket connections whose first turns cost 5 and 50 ms are the only turns that show
    the connection column, and both sit far off the fit; three turns 200 ms late are a GC
    pause's.  The connection turns come back (enough of them to show the column), the late
    ones stay dropped: before, the outlier rounds were abandoned and the late turns dragged
    every coefficient (prefill not identifiable, per-token work 1.47 us against 1.0)."""
    turns = _varied_turns((1, 2, 4), seed=3, wake_ms=3.0)
    rng = random.Random(3)
    for connect_ms in (5.0, 50.0):
        for turn in range(10):
            processed = rng.randint(1000, 5000)
            uncached = rng.randint(0, processed)
            ttft = 5.0 + 0.001 * processed + 0.0005 * uncached + (connect_ms if turn == 0 else 0)
            turns.append(
                Turn("ws", ttft, processed, uncached, 0, turn == 0, 128, None, None, run=0)
            )  # fmt: skip
    for i in (3, 40, 70):
        turns[i] = replace(turns[i], ttft_ms=turns[i].ttft_ms + 200.0)
    f = fit(turns)
    assert f.prefill_tps == pytest.approx(2_000_000, rel=0.01)
    assert f.per_token_us == pytest.approx(1.0, rel=0.01)
    assert f.ttft_per_active_ms == pytest.approx(2.0, rel=0.02)
    assert f.idle_wake_ms == pytest.approx(3.0, rel=0.05)


def test_a_heavy_tail_of_late_turns_is_still_left_out() -> None:
    """vLLM on this machine: a sixth of the turns come several ms late (front-end stalls)
    around a tight core.  They are a tail, not a level off the line: a cap of a tenth on
    what the rounds may leave out kept them all in, and the fitted slope read 8.9 ms per
    active request where 1.3 was right (make real-engine-sim, 17:43 UTC)."""
    turns = _varied_turns(
        (1, 2, 4),
        seed=11,
        per_level=20,
        late=lambda rng, i: rng.gauss(0, 0.05) + (rng.uniform(5, 40) if i % 6 == 0 else 0.0),
    )
    f = fit(turns)
    assert f.ttft_per_active_ms == pytest.approx(2.0, rel=0.1)
    assert f.intercept_http_ms == pytest.approx(5.0, abs=0.5)


def test_one_run_leaves_the_interference_unidentified() -> None:
    f = fit(turns_from_rows([r for r in _concurrent_rows() if r["run"] == 2]))
    assert f.ttft_per_active_ms is None and f.decode_slowdown_per_stream is None


def test_output_read_whole_gives_no_decode_rate() -> None:
    """A front end that held the output back and wrote it in two reads, the second late
    (vLLM's API server starved of CPU): the span is the reads', not the engine's, so no
    rate comes from it (with it, the median rate read ~30 % low)."""
    rows = _concurrent_rows((1,))
    for r in rows[::2]:
        r["output_arrivals"] = 2
        r["last_token_ns"] += 60_000_000
    f = fit(turns_from_rows(rows))
    assert f.sustained_tps == pytest.approx(1000 / 0.8, rel=1e-3)
    assert sum(t.decode_tps is not None for t in turns_from_rows(rows)) == len(rows) // 2


def test_a_few_stalled_turns_do_not_move_the_slowdown() -> None:
    """A busy host stalls a few streams for 80 ms: each run's median time per token is
    unmoved (the stalled turns stay in flight longer, so the requests beside the others
    grow a little): 0.084 for 0.1, where a least-squares fit over the turns read 0.144."""
    rows = _concurrent_rows()
    for r in rows[-32::5]:  # every fifth turn of the run at concurrency 4
        r["last_token_ns"] += 80_000_000
    f = fit(turns_from_rows(rows))
    assert f.decode_slowdown_per_stream == pytest.approx(0.1, rel=0.2)


def _spread_rows(
    spread_ms: float, per_active_ms: float, levels: tuple[int, ...] = (1, 2, 4), n: int = 2000
) -> list[dict[str, Any]]:
    """Single-turn chat requests, ``n`` a level, lanes in lock-step, whose first tokens the
    reference server's own engine model times (``first_token_ns`` with a seeded generator):
    base 5 ms, busy admission 3 ms, 1 ms per other stream, and the given TTFT spread."""
    eng = load_profiles(
        "optimized",
        "cerebras-spark",
        {
            "engine.base_ttft_ms": "5",
            "engine.busy_admit_ms": "3",
            "engine.ttft_per_active_ms": "1",
            "engine.ttft_spread_ms": str(spread_ms),
            "engine.ttft_spread_per_active_ms": str(per_active_ms),
        },
    )[1]
    rng = random.Random(38)
    rows = []
    for run, c in enumerate(levels):
        t = 10**9
        for step in range(n // c):
            end = t
            for lane in range(c):
                first = t + first_token_ns(0, eng, c - 1, rng)
                last = first + round(127 * 0.8e6)
                end = max(end, last)
                rows.append(_chat_row(run, step * c + lane, t, first, last))
            t = end + 10**6
    return rows


def test_calibrate_recovers_the_ttft_spread_the_engine_model_drew() -> None:
    """The closure for the TTFT spread (issue 38 item 4): first tokens drawn by the server's
    engine model with a spread of 1.5 ms + 2 ms per other stream come back from the fit
    within 15 % (2,000 turns a level: the p99 of each is known to ~5 %), and the profile
    names them."""
    f = fit(turns_from_rows(_spread_rows(1.5, 2.0)))
    assert f.ttft_spread_ms == pytest.approx(1.5, rel=0.15)
    assert f.ttft_spread_per_active_ms == pytest.approx(2.0, rel=0.15)
    # the fixed part is still found (truth 5 ms, 3 ms busy, 1 ms per other), each run's tail
    # trimmed against its own spread; the trimmed mean sits ~0.13 x scale under the mean.
    # Trimmed against the pooled spread, concurrency 4 lost 15 % of its turns, all late:
    # 1 ms per other read -0.26, and a replay's concurrency 4 came 3 ms early
    assert f.intercept_http_ms == pytest.approx(5.0, abs=0.3)
    assert f.busy_admit_ms == pytest.approx(3.0, abs=0.3)
    assert f.ttft_per_active_ms == pytest.approx(1.0, abs=0.4)
    base_api, base_engine = load_profiles("optimized", "cerebras-spark")
    _, engine = profiles_from_fit(f, base_api.model_dump(), base_engine.model_dump(), "x")
    assert engine["ttft_spread_ms"] == pytest.approx(1.5, rel=0.15)
    assert engine["ttft_spread_per_active_ms"] == pytest.approx(2.0, rel=0.15)
    assert "ttft_spread_ms" not in unidentified(f)[1]
    assert "TTFT spread:" in describe(f)


def test_an_engine_without_a_spread_is_fitted_zero() -> None:
    f = fit(turns_from_rows(_spread_rows(0.0, 0.0, n=200)))
    assert f.ttft_spread_ms == pytest.approx(0.0, abs=1e-3)
    assert f.ttft_spread_per_active_ms == pytest.approx(0.0, abs=1e-3)


def test_one_run_or_few_turns_leave_the_spread_unidentified() -> None:
    """One run: the spread is fitted with the interference, from several; 16 turns a level:
    a p99 of 16 is the slowest turn, not a spread (the closure test's runs)."""
    one = fit(turns_from_rows([r for r in _spread_rows(1.5, 2.0, n=200) if r["run"] == 2]))
    few = fit(turns_from_rows(_spread_rows(1.5, 2.0, n=16)))
    for f in (one, few):
        assert f.ttft_spread_ms is None and f.ttft_spread_per_active_ms is None
        assert {"ttft_spread_ms", "ttft_spread_per_active_ms"} <= set(unidentified(f)[1])


def _server_charged_rows(
    seed: int, *, wake_ms: float = 0.0, busy_ms: float = 0.0
) -> list[dict[str, Any]]:
    """Turns at concurrency 1, 2 and 4 with think time between a lane's turns, each first
    token charged as the reference server charges it: 7 ms, 1 ms per other stream active at
    the send, and the idle step (or the busy admission) by who was active at the send."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for run, c in enumerate((1, 2, 4)):
        lanes = [10**9 + rng.randint(0, 3_000_000) for _ in range(c)]
        spans: list[tuple[int, int]] = []
        for rid in range(120):
            lane = min(range(c), key=lambda j: lanes[j])
            sent = lanes[lane]
            others = sum(1 for s, e in spans if s <= sent < e)
            ttft = 7.0 + 1.0 * others + (wake_ms if others == 0 else busy_ms)
            first = sent + round(ttft * 1e6)
            last = first + round(127 * 0.8e6)
            spans.append((sent, last))
            rows.append(_chat_row(run, rid, sent, first, last))
            lanes[lane] = last + 100_000 + rng.randint(0, 150_000_000)
    return rows


@pytest.mark.parametrize(("wake_ms", "busy_ms"), [(3.0, 0.0), (0.0, 4.0)])
def test_a_turn_alone_at_its_send_that_another_joined_forces_no_label(
    wake_ms: float, busy_ms: float
) -> None:
    """With think time some turns find the engine idle at their send and get company before
    their first token.  The server charges them by the send; labelled "beside others" by the
    joiner (as the fit once did), a server of known parameters was fitted with a wake-up of
    2.2-2.4 for 3 and a slope of 0.6-0.7 for 1.  Left out of the TTFT line, it is exact."""
    turns = turns_from_rows(_server_charged_rows(3, wake_ms=wake_ms, busy_ms=busy_ms))
    assert any(t.others_at_send == 0 and t.others_joining > 0 for t in turns)
    f = fit(turns)
    assert f.ttft_per_active_ms == pytest.approx(1.0, abs=0.01)
    assert f.idle_wake_ms == pytest.approx(wake_ms, abs=0.01)
    assert f.busy_admit_ms == pytest.approx(busy_ms, abs=0.01)
    assert f.intercept_http_ms == pytest.approx(7.0, abs=0.01)
