"""The minimum-speedup rule judges the CI's lower bound, and refuses to judge without a CI."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from harness.gate.evaluate import evaluate
from harness.gate.markdown import render_markdown
from harness.gate.outcome import RuleResult
from harness.gate.rules import parse_rules_text
from harness.wire.exit_codes import ExitCode
from tests.gate.test_evaluate import BASE, jitter, run

RULES = parse_rules_text("speedup: ['ws vs http >= 1.2']", "g.yaml")


def _speedup(results: Sequence[RuleResult]) -> RuleResult:
    (res,) = [r for r in results if r.kind == "speedup"]
    return res


def test_point_estimate_above_min_but_ci_below_fails() -> None:
    # The case: per-pair ratios are bimodal, 6 of 18 near 0.8 and 12 near 1.55, so the
    # median is ~1.53x while the 95 % CI reaches down to ~0.8: 1.2x is not shown.
    ratios = [0.80, 0.82, 0.79, 0.81, 0.80, 0.83] + [1.52, 1.53, 1.54, 1.55, 1.56, 1.57] * 2
    rng = np.random.default_rng(3)
    rng.shuffle(ratios)
    http = BASE[:18]
    ws = [b / r for b, r in zip(http, ratios, strict=True)]
    report = evaluate(RULES, run({"http": http, "ws": ws}), None)
    res = _speedup(report.results)
    assert res.ratio is not None and res.ratio > 1.2
    assert res.ci is not None and res.ci[0] < 1.0
    assert res.failed
    assert report.exit_code == ExitCode.SLO_BREACH
    assert "CI lower bound" in res.message and "not shown" in res.message
    assert "meets" not in res.message


def test_ci_entirely_above_min_passes() -> None:
    report = evaluate(RULES, run({"http": BASE, "ws": jitter(BASE, 1 / 1.5, 0.01, 6)}), None)
    res = _speedup(report.results)
    assert res.ci is not None and res.ci[0] >= 1.2
    assert report.exit_code == ExitCode.OK
    assert "CI lower bound" in res.message and "meets >= 1.2x" in res.message


@pytest.mark.parametrize("n", [1, 2, 4])
def test_too_few_rollouts_for_a_ci_is_not_measurable(n: int) -> None:
    http = BASE[:n]
    ws = [v / 1.5 for v in http]
    report = evaluate(RULES, run({"http": http, "ws": ws}), None)
    res = _speedup(report.results)
    assert res.failed
    assert report.exit_code == ExitCode.INVALID  # re-measure, not an SLO breach
    assert f"n={n}: too few for a CI (need 5)" in res.message
    assert res.message.startswith("not measurable")
    md = render_markdown(report)
    assert f"n={n}: too few for a CI (need 5)" in md and "(exit 3)" in md


def test_five_rollouts_are_enough_for_the_rule() -> None:
    http = BASE[:5]
    ws = [v / 1.5 for v in http]
    report = evaluate(RULES, run({"http": http, "ws": ws}), None)
    res = _speedup(report.results)
    # five pairs: a CI exists (the sign-test interval of five values is their full range)
    assert res.ci is not None
    assert report.exit_code == ExitCode.OK
