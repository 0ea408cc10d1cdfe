"""The gate's judgement on synthetic runs: pure, no sockets, exact expectations."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from harness.gate.evaluate import evaluate
from harness.gate.ratios import median_order_ci, ratio_with_ci
from harness.gate.rules import GateRulesError, parse_rules_text
from harness.gate.samples import MEASUREMENT_ERROR, MODELLED_TTFT, RunData, Samples
from harness.metrics.results_model import Manifest, Summary
from harness.wire.exit_codes import ExitCode

SCENARIO = {
    "name": "s",
    "seed": 1,
    "description": "",
    "server": {"api_profile": "optimized"},
    "transports": ["http", "ws"],
    "rollout": {"count": 20},
    "load": {"mode": "closed", "concurrency": 2},
}


def _summary(transports: Sequence[str], *, valid: bool = True, errors: int = 0) -> dict[str, Any]:
    return {
        "valid": valid,
        "invalid_reasons": [] if valid else ["client CPU saturated: 99% of one core over the run"],
        "transports": {
            t: {
                "turns": {"count": 60, "errors": errors},
                "rollouts": {"count": 20, "errors": 0},
                "ttft_ms": {"p50": 40.0, "p99": 90.0},
                "tps": {"decode_p50": 1000.0},
            }
            for t in transports
        },
    }


def run(
    rollout_ms: Mapping[str, Sequence[float]],
    *,
    run_id: str = "r",
    manifest: Mapping[str, Any] | None = None,
    summary: dict[str, Any] | None = None,
    keys: Sequence[tuple[int, ...]] | None = None,
    extra: Mapping[tuple[str, str], Samples] | None = None,
    first_turns: Mapping[str, Mapping[tuple[int, int], float]] | None = None,
) -> RunData:
    samples: dict[tuple[str, str], Samples] = {}
    for t, values in rollout_ms.items():
        k = list(keys) if keys is not None else [(0, i) for i in range(len(values))]
        samples[(t, "rollout_ms")] = Samples.of(k, list(values))
    samples.update(extra or {})
    return RunData(
        run_id=run_id,
        manifest=Manifest.of(manifest or {"scenario_name": "s", "seed": 1, "scenario": SCENARIO}),
        summary=Summary.of(summary if summary is not None else _summary(list(rollout_ms))),
        samples=samples,
        rollouts={t: len(v) for t, v in rollout_ms.items()},
        first_turns=first_turns or {},
    )


RNG = np.random.default_rng(11)
# Rollouts of very different lengths, as real agent rollouts are: pairing must cancel this.
BASE = list(RNG.uniform(200.0, 2000.0, size=20))


def jitter(values: Sequence[float], factor: float, noise: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [v * factor * (1.0 + rng.normal(0.0, noise)) for v in values]


REL = parse_rules_text("regression: ['*.rollout_ms.p50 +10%']", "r.yaml")


def test_significant_and_large_change_is_a_regression() -> None:
    base = run({"ws": BASE}, run_id="b")
    cand = run({"ws": jitter(BASE, 1.3, 0.02, 1)}, run_id="c")
    report = evaluate(REL, cand, base)
    assert report.exit_code == ExitCode.REGRESSION and report.verdict == "regression"
    (res,) = [r for r in report.results if r.kind == "regression"]
    assert res.failed and 1.25 < (res.ratio or 0) < 1.35
    assert res.ci is not None and res.ci[0] > 1.2
    assert "REGRESSION" in res.message and "paired over 20 rollouts" in res.message


def test_significant_but_small_change_passes() -> None:
    base = run({"ws": BASE})
    cand = run({"ws": jitter(BASE, 1.04, 0.002, 2)})
    (res,) = [r for r in evaluate(REL, cand, base).results if r.kind == "regression"]
    assert res.status == "pass"
    assert res.ci is not None and res.ci[0] > 1.0  # significant ...
    assert res.ratio is not None and res.ratio < 1.1  # ... but inside the allowance
    assert "significant but within the allowance" in res.message


def test_large_but_unproven_change_passes() -> None:
    # Per-rollout ratios alternate wildly: the median is 20% worse, the evidence is nil.
    ratios = [0.5, 1.9, 0.6, 1.8, 1.2, 0.7, 1.7, 1.2, 0.8, 1.6, 1.2]
    base = run({"ws": BASE[: len(ratios)]})
    cand = run({"ws": [b * r for b, r in zip(BASE, ratios, strict=False)]})
    (res,) = [r for r in evaluate(REL, cand, base).results if r.kind == "regression"]
    assert res.status == "pass"
    assert res.ratio is not None and res.ratio > 1.1
    assert res.ci is not None and res.ci[0] < 1.0
    assert "above the allowance but not significant" in res.message


def test_faster_candidate_is_never_a_regression() -> None:
    base = run({"ws": BASE})
    cand = run({"ws": jitter(BASE, 0.7, 0.01, 3)})
    assert evaluate(REL, cand, base).exit_code == ExitCode.OK


def test_mann_whitney_on_unpaired_samples() -> None:
    rules = parse_rules_text(
        "regression: [{metric: ws.rollout_ms.p50, max_increase_pct: 10, test: mann-whitney}]"
    )
    rng = np.random.default_rng(5)
    b = list(rng.normal(500.0, 20.0, 40))
    slow = list(rng.normal(600.0, 20.0, 40))
    # Different keys: nothing pairs, so the test runs on the two samples as they are.
    keys_b = [(0, i) for i in range(40)]
    keys_c = [(1, i) for i in range(40)]
    base = run({"ws": b}, keys=keys_b)
    (res,) = [
        r
        for r in evaluate(rules, run({"ws": slow}, keys=keys_c), base).results
        if r.kind == "regression"
    ]
    assert res.failed and res.p_value is not None and res.p_value < 1e-6
    assert "unpaired" in res.message
    fast = list(rng.normal(400.0, 20.0, 40))
    (res,) = [
        r
        for r in evaluate(rules, run({"ws": fast}, keys=keys_c), base).results
        if r.kind == "regression"
    ]
    assert res.status == "pass" and "candidate not worse by rank" in res.message


def test_round_samples_use_per_round_statistics() -> None:
    rules = parse_rules_text(
        "regression: [{metric: ws.rollout_ms.p50, max_increase_pct: 10, samples: round}]"
    )
    keys = [(r, i) for r in range(8) for i in range(5)]
    vals = [300.0 + 10 * r + i for r, i in keys]
    base = run({"ws": vals}, keys=keys)
    cand = run({"ws": [v * 1.5 for v in vals]}, keys=keys)
    (res,) = [r for r in evaluate(rules, cand, base).results if r.kind == "regression"]
    assert res.failed and res.n == (8, 8) and "over 8 rounds" in res.message
    assert res.ratio == pytest.approx(1.5)


def test_too_few_samples_skip_the_rule() -> None:
    (res,) = [
        r
        for r in evaluate(REL, run({"ws": BASE[:2]}), run({"ws": BASE[:2]})).results
        if r.kind == "regression"
    ]
    assert res.status == "skip" and "too few samples" in res.message


def test_slo_breach_exits_2_and_wins_over_a_regression() -> None:
    rules = parse_rules_text(
        "slo: ['ws.ttft_ms.p99 < 80', '*.tps.decode_p50 >= 950']\n"
        "regression: ['ws.rollout_ms.p50 +10%']"
    )
    base = run({"ws": BASE, "http": BASE})
    report = evaluate(rules, run({"ws": jitter(BASE, 1.5, 0.01, 4), "http": BASE}), base)
    failed = {(r.kind, r.name) for r in report.results if r.failed}
    assert failed == {
        ("slo", "ws.ttft_ms.p99 < 80"),
        ("regression", "ws.rollout_ms.p50 vs baseline <= +10%"),
    }
    assert report.exit_code == ExitCode.SLO_BREACH
    # the wildcard expands over the candidate's transports
    slo_names = [r.name for r in report.results if r.kind == "slo"]
    assert slo_names == [
        "ws.ttft_ms.p99 < 80",
        "ws.tps.decode_p50 >= 950",
        "http.tps.decode_p50 >= 950",
    ]


def test_slo_on_a_path_the_summary_lacks_is_a_usage_error() -> None:
    rules = parse_rules_text("slo: ['ws.ttft.p99 < 80']", "g.yaml")
    with pytest.raises(GateRulesError, match=r"no ws\.ttft in summary\.json; under ws there is"):
        evaluate(rules, run({"ws": BASE}), None)


def test_slo_without_a_value_fails() -> None:
    summary = _summary(["ws"])
    summary["transports"]["ws"]["ttft_ms"]["p99"] = None
    rules = parse_rules_text("slo: ['ws.ttft_ms.p99 < 80']")
    report = evaluate(rules, run({"ws": BASE}, summary=summary), None)
    assert report.exit_code == ExitCode.SLO_BREACH
    assert "no value" in next(r.message for r in report.results if r.kind == "slo")


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (
            {"scenario_name": "other", "seed": 1, "scenario": SCENARIO},
            "scenario_name: baseline 's', candidate 'other'",
        ),
        ({"scenario_name": "s", "seed": 2, "scenario": SCENARIO}, "seed: baseline 1, candidate 2"),
        (
            {"scenario_name": "s", "seed": 1, "scenario": {**SCENARIO, "rollout": {"count": 21}}},
            "scenario.rollout.count: baseline 20, candidate 21",
        ),
    ],
)
def test_not_comparable_exits_3_and_judges_nothing(manifest: dict[str, Any], expected: str) -> None:
    rules = parse_rules_text("regression: ['*.rollout_ms.p50 +10%']\nslo: ['ws.ttft_ms.p99 < 1']")
    report = evaluate(rules, run({"ws": BASE}, manifest=manifest), run({"ws": BASE}))
    assert report.exit_code == ExitCode.INVALID
    (bad,) = [r for r in report.results if r.failed]
    assert bad.kind == "validity" and expected in bad.message
    # every rule still has its testcase, marked skipped
    assert {r.kind for r in report.results if r.status == "skip"} == {"regression", "slo"}


def test_server_and_description_may_differ_between_comparable_runs() -> None:
    other = {**SCENARIO, "server": {"api_profile": "legacy"}, "description": "changed"}
    manifest = {"scenario_name": "s", "seed": 1, "scenario": other}
    assert evaluate(REL, run({"ws": BASE}, manifest=manifest), run({"ws": BASE})).exit_code == 0


def test_different_rollouts_behind_the_same_scenario_are_not_comparable() -> None:
    def first(tokens: float) -> dict[str, dict[tuple[int, int], float]]:
        return {"ws": {(0, 4): tokens}}

    # (later turns include the server's answers: test_analysis shows they are not compared)
    same = evaluate(
        REL, run({"ws": BASE}, first_turns=first(100)), run({"ws": BASE}, first_turns=first(100))
    )
    assert same.exit_code == ExitCode.OK
    report = evaluate(
        REL, run({"ws": BASE}, first_turns=first(120)), run({"ws": BASE}, first_turns=first(100))
    )
    assert report.exit_code == ExitCode.INVALID
    assert (
        "ws rollout 4 (round 0): first-turn history 100 tokens in the baseline, 120 in the candidate"
        in next(r.message for r in report.results if r.failed)
    )


def test_invalid_or_erroring_runs_exit_3() -> None:
    invalid = run({"ws": BASE}, summary=_summary(["ws"], valid=False))
    report = evaluate(REL, invalid, run({"ws": BASE}))
    assert report.exit_code == ExitCode.INVALID
    assert any("client CPU saturated" in r.message for r in report.results if r.failed)
    # failed turns per turn, within the scenario's load.max_error_rate (5 % by default) as in
    # run and compare; a rules file's own limit is stricter
    within = run({"ws": BASE}, summary=_summary(["ws"], errors=3))
    assert evaluate(REL, run({"ws": BASE}), within).exit_code == ExitCode.OK
    erroring = run({"ws": BASE}, summary=_summary(["ws"], errors=4))
    report = evaluate(REL, run({"ws": BASE}), erroring)
    assert report.exit_code == ExitCode.INVALID
    assert any(
        "baseline r: ws: 7% of 60 turns failed, above load.max_error_rate 5%" in r.message
        for r in report.results
    )
    strict = parse_rules_text(
        "validity: {max_error_rate: 0.0}\nregression: ['*.rollout_ms.p50 +10%']"
    )
    report = evaluate(strict, run({"ws": BASE}), within)
    assert report.exit_code == ExitCode.INVALID
    assert any(
        "baseline r: ws: 5% of 60 turns failed, above validity.max_error_rate 0%" in r.message
        for r in report.results
    )
    unfinished = dataclasses.replace(run({"ws": BASE}), summary=None)
    assert evaluate(REL, unfinished, run({"ws": BASE})).exit_code == ExitCode.INVALID
    lenient = parse_rules_text(
        "validity: {require_valid: false}\nregression: ['*.rollout_ms.p50 +10%']"
    )
    assert evaluate(lenient, invalid, run({"ws": BASE})).exit_code == ExitCode.OK


def test_rules_naming_an_absent_transport_exit_3() -> None:
    rules = parse_rules_text("regression: ['http.rollout_ms.p50 +10%']", "g.yaml")
    report = evaluate(rules, run({"ws": BASE}), run({"ws": BASE}))
    assert report.exit_code == ExitCode.INVALID
    assert "g.yaml: transport 'http' is not in candidate r (has ws)" in [
        r.message for r in report.results
    ]


def test_relative_rules_need_a_baseline() -> None:
    with pytest.raises(GateRulesError, match="relative rules need --baseline"):
        evaluate(REL, run({"ws": BASE}), None)


def test_speedup_between_transports() -> None:
    rules = parse_rules_text("speedup: ['ws vs http >= 1.3']")
    ok = run({"http": BASE, "ws": jitter(BASE, 1 / 1.5, 0.01, 6)})
    (res,) = [r for r in evaluate(rules, ok, None).results if r.kind == "speedup"]
    assert res.status == "pass" and res.ratio == pytest.approx(1.5, rel=0.03)
    slow = run({"http": BASE, "ws": jitter(BASE, 1 / 1.1, 0.01, 7)})
    report = evaluate(rules, slow, ok)
    (res,) = [r for r in report.results if r.kind == "speedup"]
    assert res.failed and report.exit_code == ExitCode.SLO_BREACH
    assert res.baseline == pytest.approx(1.5, rel=0.03)  # the baseline run's speedup, for context


def test_self_check_bounds_measured_minus_modelled() -> None:
    rules = parse_rules_text("self_check: [{transport: '*', max_ms: 5, max_pct: 10}]")
    keys = [(0, i, 0) for i in range(10)]
    extra = {
        ("ws", MEASUREMENT_ERROR): Samples.of(keys, [2.0] * 10),
        ("ws", MODELLED_TTFT): Samples.of(keys, [40.0] * 10),
        ("http", MEASUREMENT_ERROR): Samples.of(keys, [9.0] * 10),
        ("http", MODELLED_TTFT): Samples.of(keys, [60.0] * 10),
    }
    report = evaluate(rules, run({"ws": BASE, "http": BASE}, extra=extra), None)
    res = {r.name: r for r in report.results if r.kind == "self_check"}
    ws = res["self-check ws measured-modelled TTFT p50 <= 5 ms and <= 10% of modelled"]
    http = res["self-check http measured-modelled TTFT p50 <= 5 ms and <= 10% of modelled"]
    assert ws.status == "pass" and "2.00 ms (5.0% of modelled)" in ws.message
    assert http.failed and "9.00 ms > 5 ms; 15.0% of modelled > 10%" in http.message
    assert report.exit_code == ExitCode.REGRESSION
    # A target that is not the reference server reports no model: nothing to check.
    report = evaluate(rules, run({"ws": BASE}), None)
    assert [r.status for r in report.results if r.kind == "self_check"] == ["skip"]


def test_ratio_with_ci_statistics() -> None:
    rng = np.random.default_rng(0)
    b = rng.uniform(100, 200, 200)
    c = b * 1.2
    est, (lo, hi) = ratio_with_ci(b, c, "p90", paired=True, alpha=0.05, resamples=500, seed=0)
    assert est == pytest.approx(1.2) and lo == pytest.approx(1.2) and hi == pytest.approx(1.2)
    est, (lo, hi) = ratio_with_ci(b, c, "mean", paired=False, alpha=0.05, resamples=500, seed=0)
    assert est == pytest.approx(1.2) and lo < 1.2 < hi
    # deterministic for a seed
    assert ratio_with_ci(
        b, c, "p50", paired=False, alpha=0.05, resamples=300, seed=4
    ) == ratio_with_ci(b, c, "p50", paired=False, alpha=0.05, resamples=300, seed=4)


def test_a_run_measured_on_a_busy_client_is_invalid() -> None:
    busy = _summary(["ws"])
    busy["client"] = {"loop_lag_ms": {"p99": 60.0}}
    quiet = _summary(["ws"])
    quiet["client"] = {"loop_lag_ms": {"p99": 3.0}}
    report = evaluate(REL, run({"ws": BASE}, summary=busy), run({"ws": BASE}, summary=quiet))
    assert report.exit_code == ExitCode.INVALID
    (bad,) = [r for r in report.results if r.failed]
    assert bad.name == "candidate measured on a quiet client"
    assert "client event loop woke 60.0 ms late at p99 (validity.max_loop_lag_ms 50)" in bad.message
    relaxed = parse_rules_text(
        "validity: {max_loop_lag_ms: null}\nregression: ['*.rollout_ms.p50 +10%']"
    )
    assert evaluate(relaxed, run({"ws": BASE}, summary=busy), run({"ws": BASE})).exit_code == 0


def test_small_paired_samples_get_the_distribution_free_median_interval() -> None:
    assert median_order_ci(np.arange(1.0, 7.0), 0.05) == (1.0, 6.0)  # n=6: the full range
    assert median_order_ci(np.arange(1.0, 19.0), 0.05) == (5.0, 14.0)
    assert median_order_ci(np.arange(1.0, 101.0), 0.05) == (40.0, 61.0)
    # Five of six rollouts 20-30 % slower, one not: the percentile bootstrap would call
    # that significant; the sign test cannot (p = 7/64 two-sided), so neither does the gate.
    base = np.array([300.0, 500.0, 700.0, 900.0, 1100.0, 1300.0])
    cand = base * np.array([0.98, 1.2, 1.22, 1.25, 1.3, 1.28])
    est, (lo, hi) = ratio_with_ci(
        base, cand, "p50", paired=True, alpha=0.05, resamples=2000, seed=0
    )
    assert est == pytest.approx(1.235) and lo == pytest.approx(0.98) and hi == pytest.approx(1.3)
