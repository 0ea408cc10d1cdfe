"""Validity and comparability: checked before any rule, a failure judges nothing else (exit 3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.gate.outcome import RuleResult
from harness.gate.rules import GateConfig
from harness.gate.samples import HISTORY_TOKENS, RunData
from harness.wire.plural import counted

#: scenario fields that may differ between comparable runs: they do not change the rollouts
_SCENARIO_FREE_KEYS = frozenset(("server", "description", "transports"))


def _diff(a: Any, b: Any, path: str) -> str | None:
    """The first path where two JSON-like documents differ, with both values.

    A key only one side has is skipped: it is a field added to the scenario
    model after the older run was recorded, and the rollout fingerprint
    (:func:`_same_rollouts`) still catches a workload that really changed.
    """
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) & set(b), key=str):
            found = _diff(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if a != b:
        return f"{path}: baseline {a!r}, candidate {b!r}"
    return None


def _comparable(base: RunData, cand: RunData) -> str | None:
    bm, cm = base.manifest, cand.manifest
    for key in ("scenario_name", "seed"):
        if bm.get(key) != cm.get(key):
            return f"{key}: baseline {bm.get(key)!r}, candidate {cm.get(key)!r}"
    bs, cs = bm.get("scenario"), cm.get("scenario")
    if not isinstance(bs, Mapping) or not isinstance(cs, Mapping):
        return "scenario: missing from a manifest; cannot show the runs replay the same rollouts"
    strip = lambda d: {k: v for k, v in d.items() if k not in _SCENARIO_FREE_KEYS}  # noqa: E731
    return _diff(strip(bs), strip(cs), "scenario") or _same_rollouts(base, cand)


def _same_rollouts(base: RunData, cand: RunData) -> str | None:
    """Same scenario text is not enough if the rollout generator changed.

    The fingerprint is each rollout's first-turn history size (instructions, tool
    schema, prompt): generated on the client from the seed alone.  Later turns'
    histories include what the server answered, which may differ legitimately.
    """
    for t in cand.transports:
        b = base.get(t, HISTORY_TOKENS)
        first = {k: v for k, v in zip(b.keys, b.values.tolist(), strict=True) if k[-1] == 0}
        c = cand.get(t, HISTORY_TOKENS)
        for key, value in zip(c.keys, c.values.tolist(), strict=True):
            if key in first and first[key] != value:
                return (
                    f"{t} rollout {key[1]} (round {key[0]}): first-turn history {first[key]:g} "
                    f"tokens in the baseline, {value:g} in the candidate: the runs replay "
                    "different rollouts (rollout generator changed? re-record the baseline)"
                )
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
            reasons = "; ".join(summary.get("invalid_reasons") or []) or "marked invalid"
            add(
                f"{label} run valid",
                None if summary.get("valid", False) else f"{label} {run.where}: {reasons}",
                f"{label} {run.where} is valid",
            )
        client = summary.get("client") or {}
        lag = (client.get("loop_lag_ms") or {}).get("p99") if isinstance(client, Mapping) else None
        if v.max_loop_lag_ms is not None and isinstance(lag, int | float):
            add(
                f"{label} measured on a quiet client",
                f"{label} {run.where}: client event loop woke {lag:.1f} ms late at p99 "
                f"(validity.max_loop_lag_ms {v.max_loop_lag_ms:g}): the machine was too busy "
                "to measure the target; re-run"
                if lag > v.max_loop_lag_ms
                else None,
                f"{label}: client event-loop lag p99 {lag:.1f} ms",
            )
        problems = []
        for name, t in (summary.get("transports") or {}).items():
            done = int(t["turns"]["count"]) + int(t["rollouts"]["count"])
            bad = int(t["turns"]["errors"]) + int(t["rollouts"]["errors"])
            rate = bad / done if done else 1.0
            if rate > v.max_error_rate:
                problems.append(
                    f"{name}: error rate {rate:.1%} ({bad} of "
                    f"{counted(done, 'turn+rollout', 'turns+rollouts')}) exceeds "
                    f"validity.max_error_rate {v.max_error_rate:.1%}"
                )
            got = run.rollouts.get(name, 0)
            if got < v.min_rollouts:
                problems.append(
                    f"{name}: {got} completed rollouts, validity.min_rollouts is {v.min_rollouts}"
                )
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
            f"same scenario {cand.manifest.get('scenario_name')!r} and seed {cand.manifest.get('seed')}",
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
        if name not in cand.transports:
            problems.append(
                f"{cfg.source}: transport {name!r} is not in candidate {cand.where} "
                f"(has {', '.join(cand.transports) or 'none'})"
            )
        if needs_base and base is not None and name not in base.transports:
            problems.append(
                f"{cfg.source}: transport {name!r} is not in baseline {base.where} "
                f"(has {', '.join(base.transports) or 'none'})"
            )
    return problems
