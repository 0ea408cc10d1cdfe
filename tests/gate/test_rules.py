from __future__ import annotations

from pathlib import Path

import pytest

from harness.gate.rules import (
    DEFAULT_RULES_YAML,
    GateRulesError,
    RegressionRule,
    SelfCheckRule,
    SloRule,
    SpeedupRule,
    load_rules,
    parse_rules_text,
)
from harness.wire.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def test_full_document_parses_to_the_model() -> None:
    cfg = parse_rules_text(
        """
version: 1
alpha: 0.01
bootstrap: {resamples: 500, seed: 3}
validity: {require_valid: false, max_error_rate: 0.02, min_rollouts: 4, require_comparable: true}
slo:
  - ws.ttft_ms.p99 < 250
  - {metric: http.tps.decode_p50, op: ">=", value: 950, name: decode holds}
regression:
  - "*.rollout_ms.p50 +10%"
  - {metric: ws.ttft_ms.p90, max_increase_pct: 20, test: mann-whitney, samples: round}
speedup:
  - ws vs http >= 1.3
  - ws vs http ttft_ms >= 1.2x
self_check:
  - {transport: ws, max_ms: 15, max_pct: 20}
""",
        "g.yaml",
    )
    assert cfg.alpha == 0.01 and cfg.bootstrap.resamples == 500 and cfg.bootstrap.seed == 3
    assert cfg.validity.max_error_rate == 0.02 and not cfg.validity.require_valid
    assert cfg.slo == (
        SloRule(transport="ws", path=("ttft_ms", "p99"), op="<", value=250.0),
        SloRule(
            transport="http", path=("tps", "decode_p50"), op=">=", value=950.0, name="decode holds"
        ),
    )
    assert cfg.regression == (
        RegressionRule(transport="*", metric="rollout_ms", statistic="p50", max_increase_pct=10.0),
        RegressionRule(
            transport="ws",
            metric="ttft_ms",
            statistic="p90",
            max_increase_pct=20.0,
            test="mann-whitney",
            samples="round",
        ),
    )
    assert cfg.speedup == (
        SpeedupRule(candidate="ws", baseline="http", min=1.3),
        SpeedupRule(candidate="ws", baseline="http", min=1.2, metric="ttft_ms"),
    )
    assert cfg.self_check == (
        SelfCheckRule(transport="ws", statistic="p50", max_ms=15.0, max_pct=20.0),
    )
    assert cfg.slo[0].label == "ws.ttft_ms.p99 < 250"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alpha: 0.7", "g.yaml: alpha: expected a number < 0.5, got 0.7"),
        ("version: 2", "g.yaml: version: expected one of 1, got 2"),
        ("gates: []", "g.yaml: gates: unknown field (expected one of: version, alpha"),
        ("slo: ws.ttft_ms.p99 < 250", "g.yaml: slo: expected a list, got 'ws.ttft_ms.p99"),
        (
            "slo: ['ws.ttft_ms.p99 ~ 250']",
            "g.yaml: slo[0]: expected '<transport>.<metric path> <op>",
        ),
        ("slo: ['ws < 250']", "g.yaml: slo[0].metric: expected <transport>.<summary path>"),
        (
            "slo: [{metric: ws.ttft_ms.p99, op: '<'}]",
            "g.yaml: slo[0].value: required field missing",
        ),
        (
            "slo: [{metric: ws.ttft_ms.p99, op: '=', value: 1}]",
            "g.yaml: slo[0].op: expected one of <, <=, >, >=, got '='",
        ),
        (
            "regression: [{metric: ws.rollout_ms.p50, max_increase_pct: ten}]",
            "g.yaml: regression[0].max_increase_pct: expected a number, got 'ten'",
        ),
        (
            "regression: [{metric: ws.itl_ms.p50, max_increase_pct: 5}]",
            "g.yaml: regression[0].metric: expected one of rollout_ms, turn_ms, ttft_ms",
        ),
        (
            "regression: [{metric: ws.ttft_ms.p95, max_increase_pct: 5}]",
            "g.yaml: regression[0].statistic: expected one of p50, p90, p99, mean, got 'p95'",
        ),
        (
            "regression: [{metric: ws.rollout_ms.p50, max_increase_pct: 5, samples: turn}]",
            "g.yaml: regression[0].samples: expected rollout, round or auto for rollout_ms, got 'turn'",
        ),
        (
            "regression: [{metric: ws.rollout_ms.p50, max_increase_pct: 5, test: t-test}]",
            "g.yaml: regression[0].test: expected one of bootstrap, mann-whitney, got 't-test'",
        ),
        (
            "speedup: ['ws vs ws >= 1.3']",
            "g.yaml: speedup[0]: expected two different, named transports",
        ),
        (
            "speedup: [{candidate: ws, baseline: http, min: 0}]",
            "g.yaml: speedup[0].min: expected a number > 0, got 0",
        ),
        (
            "self_check: [{transport: ws}]",
            "g.yaml: self_check[0]: expected max_ms or max_pct (or both), got nothing",
        ),
        (
            "validity: {max_error_rate: 2}",
            "g.yaml: validity.max_error_rate: expected a number ≤ 1, got 2",
        ),
        (
            "validity: {min_rollouts: true}",
            "g.yaml: validity.min_rollouts: expected an integer, got true",
        ),
        # the dotted metric fills these: written beside it they would be silently overwritten
        (
            "regression: [{metric: ws.ttft_ms.p50, max_increase_pct: 1, statistic: p90}]",
            "g.yaml: regression[0].statistic: unknown field (expected one of: metric,",
        ),
        (
            "regression: [{transport: ws, metric: ttft_ms, statistic: p50, max_increase_pct: 5}]",
            "g.yaml: regression[0].transport: unknown field",
        ),
        (
            "slo: [{metric: ws.ttft_ms.p99, op: '<', value: 5, path: [ttft_ms, p50]}]",
            "g.yaml: slo[0].path: unknown field (expected one of: metric, op, value, name)",
        ),
        ("slo: [\n  - a: b", "g.yaml: line "),
    ],
)
def test_errors_name_file_field_expectation_and_value(text: str, message: str) -> None:
    with pytest.raises(GateRulesError) as info:
        parse_rules_text(text, "g.yaml")
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, UsageError)


def test_defaults_and_missing_file() -> None:
    cfg = load_rules(None)
    assert cfg.source == "<default rules>"
    assert [r.metric for r in cfg.regression] == ["rollout_ms", "ttft_ms", "turn_ms"]
    assert all(r.transport == "*" and r.max_increase_pct == 20 for r in cfg.regression)
    ab = load_rules(None, ab=True)
    assert ab.source == "<default A/B rules>"
    assert [(r.metric, r.max_increase_pct) for r in ab.regression] == [
        ("rollout_ms", 10.0),
        ("ttft_ms", 8.0),
        ("turn_ms", 8.0),
    ]
    assert parse_rules_text(DEFAULT_RULES_YAML).regression == cfg.regression
    with pytest.raises(GateRulesError, match=r"^nope\.yaml: file not found$"):
        load_rules("nope.yaml")
    # An empty file is a valid, empty rule set (validity only).
    assert parse_rules_text("").regression == ()


@pytest.mark.parametrize("name", ["gates.yaml", "gates-ab.yaml", "gates-slo.yaml"])
def test_shipped_examples_parse(name: str) -> None:
    cfg = load_rules(str(ROOT / "examples" / "ci" / name))
    assert cfg.slo or cfg.regression or cfg.speedup
