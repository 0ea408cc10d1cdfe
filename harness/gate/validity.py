"""Validity and comparability: checked before any rule, a failure judges nothing else (exit 3).

The rules are :mod:`harness.metrics.validity`'s, those ``run`` and ``compare`` apply; a rules
file's ``validity:`` block may set stricter limits (``max_error_rate``, ``min_rollouts``,
``max_loop_lag_ms``) than the scenario's.
"""

from __future__ import annotations

from harness.gate.outcome import RuleResult
from harness.gate.rules import GateConfig
from harness.gate.samples import RunData
from harness.metrics.validity import (
    Limits,
    comparability,
    recorded_reasons,
    rollouts_differ,
    transport_reasons,
)

#: differing scenario fields named in the reason, at most
_MAX_DIFFS = 3


def _comparable(base: RunData, cand: RunData) -> str | None:
    found = comparability(base.manifest, cand.manifest)
    if not found:
        return _same_rollouts(base, cand)
    if found[0].path == "scenario" and (found[0].ref is None or found[0].cand is None):
        return "scenario: missing from a manifest; cannot show the runs replay the same rollouts"
    more = f" and {len(found) - _MAX_DIFFS} more" if len(found) > _MAX_DIFFS else ""
    return (
        "; ".join(f"{d.path}: baseline {d.ref!r}, candidate {d.cand!r}" for d in found[:_MAX_DIFFS])
        + more
    )


def _same_rollouts(base: RunData, cand: RunData) -> str | None:
    for t in cand.transports:
        found = rollouts_differ(t, base.first_turns.get(t, {}), cand.first_turns.get(t, {}))
        if found:
            return found
    return None


def check_validity(cfg: GateConfig, cand: RunData, base: RunData | None) -> list[RuleResult]:
    v = cfg.validity
    out: list[RuleResult] = []

    def add(name: str, problem: str | None, ok_message: str) -> None:
        out.append(
            RuleResult("validity", name, "fail" if problem else "pass", problem or ok_message)
        )

    sides = [("candidate", cand)] + ([("baseline", base)] if base is not None else [])
    for label, run in sides:
        summary = run.summary
        if summary is None:
            add(
                f"{label} run finished",
                f"{label} {run.where}: no summary.json (run did not finish)",
                "",
            )
            continue
        if v.require_valid:
            recorded = recorded_reasons(summary)
            reasons = "; ".join(recorded) if recorded else "no validity verdict in summary.json"
            add(
                f"{label} run valid",
                None if recorded == [] else f"{label} {run.where}: {reasons}",
                f"{label} {run.where} is valid",
            )
        loop = summary.client.loop_lag_ms if summary.client is not None else None
        lag = loop.p99 if loop is not None else None
        if v.max_loop_lag_ms is not None and lag is not None:
            add(
                f"{label} measured on a quiet client",
                f"{label} {run.where}: client event loop woke {lag:.1f} ms late at p99 "
                f"(validity.max_loop_lag_ms {v.max_loop_lag_ms:g}): the machine was too busy "
                "to measure the target; re-run"
                if lag > v.max_loop_lag_ms
                else None,
                f"{label}: client event-loop lag p99 {lag:.1f} ms",
            )
        limits = Limits.of_manifest(run.manifest).overridden(
            max_error_rate=v.max_error_rate, min_rollouts=v.min_rollouts
        )
        settings = {"min_rollouts": "validity.min_rollouts"}
        if v.max_error_rate is not None:
            settings["max_error_rate"] = "validity.max_error_rate"
        problems = transport_reasons(summary, limits, settings=settings)
        add(
            f"{label} errors and sample counts",
            f"{label} {run.where}: " + "; ".join(problems) if problems else None,
            f"{label}: error rates and sample counts within limits",
        )
    if base is not None and v.require_comparable:
        problem = _comparable(base, cand)
        add(
            "comparable runs (scenario and seed)",
            f"not comparable: {problem}" if problem else None,
            f"same scenario {cand.manifest.scenario_name!r} and seed {cand.manifest.seed}",
        )
    return out


def missing_transports(cfg: GateConfig, cand: RunData, base: RunData | None) -> list[str]:
    problems = []
    named: set[tuple[str, bool]] = set()  # (transport, needs baseline)
    named.update((s.transport, False) for s in cfg.slo)
    named.update((c.transport, False) for c in cfg.self_check)
    named.update((r.transport, True) for r in cfg.regression)
    for sp in cfg.speedup:
        named.update({(sp.candidate, False), (sp.baseline, False)})
    for name, needs_base in sorted(named):
        if name == "*":
            continue
        sides = [("candidate", cand)] + ([("baseline", base)] if needs_base and base else [])
        problems += [
            f"{cfg.source}: transport {name!r} is not in {label} {run.where} "
            f"(has {', '.join(run.transports) or 'none'})"
            for label, run in sides
            if name not in run.transports
        ]
    return problems
