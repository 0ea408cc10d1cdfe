"""Apply gate rules to a candidate run (and a baseline): pure, deterministic for a given seed.

Validity first: if it fails nothing else is judged (exit 3).  A relative rule flags a
regression only when the change is both above the allowance and statistically
significant; the exit codes and why either condition alone is noise: docs/ci.md.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from harness.gate.outcome import GateReport, Kind, RuleResult
from harness.gate.ratios import MIN_SAMPLES, align, per_round, ratio_with_ci, statistic
from harness.gate.rules import (
    GateConfig,
    GateRulesError,
    RegressionRule,
    SelfCheckRule,
    SloRule,
    SpeedupRule,
)
from harness.gate.samples import MEASUREMENT_ERROR, MODELLED_TTFT, RunData, Samples
from harness.gate.validity import check_validity, missing_transports
from harness.metrics import definitions as D
from harness.metrics.results_model import Summary
from harness.metrics.stats import ci_reason, mann_whitney_u
from harness.wire.exit_codes import ExitCode
from harness.wire.plural import counted


def _expand(transport: str, available: Sequence[str]) -> list[str]:
    return list(available) if transport == "*" else [transport]


def _name(rule: SloRule | RegressionRule | SelfCheckRule, t: str) -> str:
    """The rule's testcase name for transport ``t`` (a ``*`` rule gives one per transport)."""
    return rule.model_copy(update={"transport": t}).label


def _outcome_text(regressed: bool, significant: bool, large: bool) -> str:
    if regressed:
        return "REGRESSION: significant and above the allowance"
    if significant:
        return "significant but within the allowance"
    return "above the allowance but not significant" if large else "no regression"


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _summary_value(
    summary: Summary, transport: str, path: Sequence[str], source: str, label: str
) -> Any:
    """The value at a rule's path (data: a user's ``ws.ttft_ms.p99``) in the JSON of a
    transport's figures."""
    t = summary.transport(transport)
    node: Any = t.to_json() if t is not None else {}
    walked = [transport]
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            known = (
                ", ".join(sorted(node)) if isinstance(node, Mapping) else "nothing (not a mapping)"
            )
            raise GateRulesError(
                source,
                f"slo {label!r}",
                f"no {'.'.join([*walked, part])} in summary.json; under {'.'.join(walked)} there is {known}",
            )
        node = node[part]
        walked.append(part)
    return node


def _slo_result(
    rule: SloRule, t: str, cand: RunData, base: RunData | None, cfg: GateConfig
) -> RuleResult:
    assert cand.summary is not None
    name = _name(rule, t)
    value = _summary_value(cand.summary, t, rule.path, cfg.source, rule.label)
    before = None
    if base is not None and base.summary is not None and t in base.transports:
        try:
            b = _summary_value(base.summary, t, rule.path, cfg.source, rule.label)
            before = float(b) if isinstance(b, int | float) else None
        except GateRulesError:
            before = None
    limit = f"{rule.op} {rule.value:g}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return RuleResult(
            "slo",
            name,
            "fail",
            f"{t}.{'.'.join(rule.path)}: no value in the run (got {value!r})",
            baseline=before,
            limit=limit,
        )
    ok = _OPS[rule.op](float(value), rule.value)
    return RuleResult(
        "slo",
        name,
        "pass" if ok else "fail",
        f"{t}.{'.'.join(rule.path)} = {float(value):.4g} ({'meets' if ok else 'breaches'} {limit})",
        baseline=before,
        candidate=float(value),
        limit=limit,
    )


def _regression_result(
    rule: RegressionRule, t: str, cand: RunData, base: RunData | None, cfg: GateConfig
) -> RuleResult:
    assert base is not None  # evaluate refuses relative rules without a baseline
    name = _name(rule, t)
    limit = f"<= +{rule.max_increase_pct:g}% ({rule.test})"
    bs, cs = base.get(t, rule.metric), cand.get(t, rule.metric)
    stat = rule.statistic
    unit = rule.samples
    if unit == "round":
        bs, cs, stat = per_round(bs, rule.statistic), per_round(cs, rule.statistic), "p50"
    if len(bs) < MIN_SAMPLES or len(cs) < MIN_SAMPLES:
        return RuleResult(
            "regression",
            name,
            "skip",
            f"too few samples to test ({len(bs)} baseline, {len(cs)} candidate; need {MIN_SAMPLES})",
            n=(len(bs), len(cs)),
            limit=limit,
        )
    b, c, paired = align(bs, cs)
    if np.any(b <= 0) or np.any(c <= 0):
        return RuleResult(
            "regression", name, "skip", "non-positive latencies: no ratio", limit=limit
        )
    boot = cfg.bootstrap
    ratio, ci = ratio_with_ci(
        b, c, stat, paired=paired, alpha=cfg.alpha, resamples=boot.resamples, seed=boot.seed
    )
    u, p = mann_whitney_u(c, b)
    worse_by_rank = u > c.size * b.size / 2.0
    if rule.test == "bootstrap":
        significant = ci[0] > 1.0
        where = "above 1" if ci[0] > 1.0 else ("below 1" if ci[1] < 1.0 else "includes 1")
        evidence = f"{(1 - cfg.alpha) * 100:g} % CI [{ci[0]:.3f}, {ci[1]:.3f}] {where}"
    else:
        significant = p < cfg.alpha and worse_by_rank
        evidence = (
            f"Mann-Whitney p = {p:.3g}{'' if worse_by_rank else ' (candidate not worse by rank)'}"
        )
    allowed = 1.0 + rule.max_increase_pct / 100.0
    large = ratio > allowed
    regressed = significant and large
    how = "paired" if paired else "unpaired"
    metric = D.get(rule.metric)
    unit_name = "rounds" if unit == "round" else f"{metric.record}s"
    message = (
        f"{t}.{rule.metric}.{rule.statistic}: candidate/baseline {ratio:.3f} "
        f"({(ratio - 1) * 100:+.1f}%), {evidence}; {how} over {c.size} {unit_name}; "
        + _outcome_text(regressed, significant, large)
    )
    return RuleResult(
        "regression",
        name,
        "fail" if regressed else "pass",
        message,
        # the rule's statistic over all samples, whatever unit the test ran on
        baseline=statistic(base.get(t, rule.metric).values, rule.statistic),
        candidate=statistic(cand.get(t, rule.metric).values, rule.statistic),
        ratio=ratio,
        ci=ci,
        p_value=p,
        n=(int(b.size), int(c.size)),
        limit=limit,
        unit=metric.unit,
    )


def _speedup_value(
    run: RunData, rule: SpeedupRule, cfg: GateConfig
) -> tuple[float, tuple[float, float], int, bool] | str:
    """The speedup, its CI, n and pairing; or why it is not measurable."""
    # below MIN_CI_PAIRS a side, pairing keeps every sample or none: n is the smaller side
    b, c, paired = align(run.get(rule.baseline, rule.metric), run.get(rule.candidate, rule.metric))
    if (reason := ci_reason(int(min(b.size, c.size)))) is not None:
        return f"{rule.metric} samples of {rule.candidate} vs {rule.baseline}: {reason}"
    # ratio_with_ci gives second/first: pass the candidate transport first for baseline/candidate.
    boot = cfg.bootstrap
    ratio, ci = ratio_with_ci(
        c, b, "p50", paired=paired, alpha=cfg.alpha, resamples=boot.resamples, seed=boot.seed
    )
    return ratio, ci, int(min(b.size, c.size)), paired


def _speedup_result(
    rule: SpeedupRule, cand: RunData, base: RunData | None, cfg: GateConfig
) -> RuleResult:
    limit = f">= {rule.min:g}x (CI lower bound)"
    got = _speedup_value(cand, rule, cfg)
    if isinstance(got, str):
        # Without a CI the rule cannot be judged either way: a re-measure (exit 3), not a breach.
        return RuleResult(
            "speedup",
            rule.label,
            "fail",
            f"not measurable: {got}; re-measure with more rollouts",
            limit=limit,
            code=ExitCode.INVALID,
        )
    ratio, ci, n, paired = got
    before = None
    if base is not None and {rule.candidate, rule.baseline} <= set(base.transports):
        prev = _speedup_value(base, rule, cfg)
        before = prev[0] if not isinstance(prev, str) else None
    # The lower bound, not the point estimate: "1.533x, CI [0.798, 1.597]" has not shown 1.2x.
    ok = ci[0] >= rule.min
    if ok:
        verdict = f"CI lower bound {ci[0]:.3f} meets >= {rule.min:g}x"
    elif ratio >= rule.min:
        verdict = f"CI lower bound {ci[0]:.3f} below {rule.min:g}x: the speedup is not shown"
    else:
        verdict = f"below {rule.min:g}x"
    return RuleResult(
        "speedup",
        rule.label,
        "pass" if ok else "fail",
        f"{rule.candidate} vs {rule.baseline} {rule.metric} speedup {ratio:.3f}x, "
        f"{(1 - cfg.alpha) * 100:g} % CI [{ci[0]:.3f}, {ci[1]:.3f}] "
        f"({'paired' if paired else 'unpaired'}, n={n}); {verdict}",
        baseline=before,
        candidate=ratio,
        ratio=ratio,
        ci=ci,
        n=(n, n),
        limit=limit,
        unit="x",
    )


def _self_check_result(
    rule: SelfCheckRule, t: str, cand: RunData, base: RunData | None
) -> RuleResult:
    limit = rule.limit()
    name = _name(rule, t)
    err = cand.get(t, MEASUREMENT_ERROR)
    if len(err) == 0:
        return RuleResult(
            "self_check",
            name,
            "skip",
            f"{t}: no sim_timing in the run (target is not the reference server?)",
            limit=limit,
        )
    value = statistic(err.values, rule.statistic)
    modelled = cand.get(t, MODELLED_TTFT).values
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(modelled > 0, err.values / modelled * 100.0, np.nan)
    rel = rel[np.isfinite(rel)]
    pct = statistic(rel, rule.statistic) if rel.size else float("nan")
    problems = []
    if rule.max_ms is not None and value > rule.max_ms:
        problems.append(f"{value:.2f} ms > {rule.max_ms:g} ms")
    if rule.max_pct is not None and not (pct <= rule.max_pct):
        problems.append(f"{pct:.1f}% of modelled > {rule.max_pct:g}%")
    was = base.get(t, MEASUREMENT_ERROR) if base is not None else Samples.of([], [])
    before = statistic(was.values, rule.statistic) if len(was) else None
    return RuleResult(
        "self_check",
        name,
        "fail" if problems else "pass",
        f"{t}: measured - modelled TTFT {rule.statistic} {value:.2f} ms "
        f"({pct:.1f}% of modelled) over {counted(len(err), 'turn')}"
        + (f"; {'; '.join(problems)}" if problems else ""),
        baseline=before,
        candidate=value,
        n=(len(was), len(err)),
        limit=limit,
        unit="ms",
    )


def _cases(
    cfg: GateConfig, cand: RunData, base: RunData | None, common: Sequence[str]
) -> Iterator[tuple[Kind, str, Callable[[], RuleResult]]]:
    """Every testcase the rules produce, in the report's order: its kind, name and judge."""
    for s in cfg.slo:
        for t in _expand(s.transport, cand.transports):
            yield "slo", _name(s, t), partial(_slo_result, s, t, cand, base, cfg)
    for r in cfg.regression:
        for t in _expand(r.transport, common):
            yield "regression", _name(r, t), partial(_regression_result, r, t, cand, base, cfg)
    for sp in cfg.speedup:
        yield "speedup", sp.label, partial(_speedup_result, sp, cand, base, cfg)
    for c in cfg.self_check:
        for t in _expand(c.transport, cand.transports):
            yield "self_check", _name(c, t), partial(_self_check_result, c, t, cand, base)


def evaluate(cfg: GateConfig, candidate: RunData, baseline: RunData | None) -> GateReport:
    """Judge ``candidate`` against ``cfg`` (and ``baseline`` for relative rules).

    Raises :class:`GateRulesError` for a rule that cannot apply to any run
    (a relative rule without a baseline, a metric path summary.json does not have).
    """
    if cfg.regression and baseline is None:
        raise GateRulesError(cfg.source, "regression", "relative rules need --baseline")
    results = check_validity(cfg, candidate, baseline)
    for problem in missing_transports(cfg, candidate, baseline):
        results.append(RuleResult("validity", "transports named by the rules", "fail", problem))
    common = [t for t in candidate.transports if baseline is None or t in baseline.transports]
    invalid = any(r.failed for r in results)
    results += [
        RuleResult(kind, name, "skip", "not evaluated: the runs failed validity")
        if invalid
        else judge()
        for kind, name, judge in _cases(cfg, candidate, baseline, common)
    ]
    return GateReport(
        results=tuple(results),
        candidate_id=candidate.run_id,
        baseline_id=baseline.run_id if baseline is not None else None,
        scenario=str(candidate.manifest.scenario_name or ""),
        seed=candidate.manifest.seed,
        rules_source=cfg.source,
        alpha=cfg.alpha,
    )
