"""Whether a run counts, and whether two runs compare: the rules, once (docs/metrics.md §1.3).

Every way of measuring a run finishes through :class:`harness.run.measurement.Measurement`,
which judges it with these rules and writes the verdict into ``summary.json``; ``gate`` and
``compare`` read that verdict and re-judge ``summary.json`` with the same functions, so a
folder counts for all of them or for none.  Pure: documents and numbers in, sentences out.
The limits are the scenario's (:meth:`Limits.of_manifest`); a gate rules file may override
them.  Two runs compare when they replay the same workload: same scenario name and seed, and
the same scenario content apart from :data:`FREE_SCENARIO_KEYS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness.metrics.results_model import Manifest, Num, Summary
from harness.wire.plural import counted
from harness.workload.scenario import Load

_LOAD_FIELDS = Load.model_fields
#: ``load.max_error_rate`` when the scenario sets none
DEFAULT_MAX_ERROR_RATE: float = float(_LOAD_FIELDS["max_error_rate"].default)
#: ``load.max_schedule_lag_ms`` when the scenario sets none
DEFAULT_MAX_SCHEDULE_LAG_MS: float = float(_LOAD_FIELDS["max_schedule_lag_ms"].default)
#: completed measured rollouts a transport needs to count at all
MIN_ROLLOUTS = 1

#: client CPU above this share of one core: the generator itself may be the bottleneck
CPU_SATURATION_SHARE = 0.95
#: The client's health (CPU share, loop lag) is judged only over a measured window at least
#: this long and with at least MIN_JUDGED_TURNS completed turns: over a few milliseconds the
#: first connections and imports dominate the CPU share (a run against a dead target
#: measured "193 % of one core"), and p99 of a handful of wake-ups is one hiccup of a
#: shared machine, not a stall.  Such a run is judged by its error rate instead.  A second
#: holds a hundred watchdog wake-ups, enough for a p99; the shortest real scenarios
#: (tests/harness/test_lifecycle.py: 8 rollouts at 10/s) measure about that long.
MIN_JUDGED_WALL_S = 1.0
MIN_JUDGED_TURNS = 10

#: manifest fields two comparable runs share
SAME_FIELDS = ("scenario_name", "seed")
#: scenario fields that may differ between comparable runs: they change no request.  The
#: server block is what a comparison of servers or settings varies; ``slo`` only judges the
#: records after the fact (goodput rows then differ by definition, which the report shows);
#: ``description`` is prose; ``transports`` is checked by each command for what it measures.
FREE_SCENARIO_KEYS = frozenset(("server", "description", "transports", "slo"))


@dataclass(frozen=True, slots=True)
class Limits:
    """The numbers a run is judged by."""

    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    max_schedule_lag_ms: float = DEFAULT_MAX_SCHEDULE_LAG_MS
    min_rollouts: int = MIN_ROLLOUTS

    @classmethod
    def of_load(cls, load: Load) -> Limits:
        return cls(float(load.max_error_rate), float(load.max_schedule_lag_ms))

    @classmethod
    def of_manifest(cls, manifest: Manifest) -> Limits:
        """The limits of the scenario a ``manifest.json`` records (defaults for what it lacks)."""
        scenario = manifest.scenario_record or {}
        load = scenario.get("load")
        load = load if isinstance(load, Mapping) else {}

        def number(key: str, default: float) -> float:
            for holder in (load, scenario):
                value = finite(holder.get(key))
                if value is not None:
                    return value
            return default

        return cls(
            number("max_error_rate", DEFAULT_MAX_ERROR_RATE),
            number("max_schedule_lag_ms", DEFAULT_MAX_SCHEDULE_LAG_MS),
        )

    def overridden(
        self, *, max_error_rate: float | None = None, min_rollouts: int | None = None
    ) -> Limits:
        """These limits with a gate rules file's own, where it sets one."""
        given: dict[str, Any] = {"max_error_rate": max_error_rate, "min_rollouts": min_rollouts}
        return replace(self, **{k: v for k, v in given.items() if v is not None})


def finite(x: Any) -> float | None:
    """``x`` as a finite float; None for anything else (a bool, a string, NaN, absent)."""
    if isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# -- one transport --------------------------------------------------------------------------------


def error_reason(
    name: str, turns: int, failed: int, limit: float, detail: str = "", setting: str = ""
) -> str | None:
    """More failed turns than ``limit`` of ``turns``, or none succeeded; None when it counts.

    ``detail`` (the error kinds) goes in parentheses; ``setting`` names where ``limit`` came
    from (``load.max_error_rate`` unless told).
    """
    if not turns or not failed:
        return None
    rate = failed / turns
    if failed < turns and rate <= limit:
        return None
    why = (
        "no turn succeeded"
        if failed == turns
        else f"above {setting or 'load.max_error_rate'} {limit:.0%}"
    )
    return f"{name}: {rate:.0%} of {counted(turns, 'turn')} failed, {why}" + (
        f" ({detail})" if detail else ""
    )


def rollouts_reason(name: str, completed: int, minimum: int, setting: str = "") -> str | None:
    """Fewer completed measured rollouts than ``minimum``; None when it counts."""
    if completed >= minimum:
        return None
    done = f"{name}: {completed} completed rollout{'s' * (completed != 1)}"
    return f"{done}, {setting} is {minimum}" if setting else f"{done}, at least {minimum} needed"


def schedule_reason(name: str, lag_p99_ms: Num | None, limit: float, late: str = "") -> str | None:
    """Starts later than ``limit`` ms at p99; ``late`` says how many (``3 of 40 starts late``)."""
    if lag_p99_ms is None or not lag_p99_ms > limit:
        return None
    return (
        f"{name}: schedule lag p99 {lag_p99_ms:.1f} ms exceeds load.max_schedule_lag_ms "
        f"{limit:g}: the load generator fell behind" + (f" ({late})" if late else "")
    )


def client_reasons(
    name: str,
    *,
    loop_lag_p99_ms: float,
    cpu_share: float,
    wall_s: float,
    limit_ms: float,
    turns: int | None = None,
) -> list[str]:
    """One measuring process: its event loop stalled, or its CPU was saturated.

    Judged only over a window that means something (:data:`MIN_JUDGED_WALL_S`, and
    ``turns`` completed turns if given, at least :data:`MIN_JUDGED_TURNS`).
    """
    if wall_s < MIN_JUDGED_WALL_S or (turns is not None and turns < MIN_JUDGED_TURNS):
        return []
    prefix = f"{name}: " if name else ""
    reasons: list[str] = []
    if math.isfinite(loop_lag_p99_ms) and loop_lag_p99_ms > limit_ms:
        reasons.append(
            f"{prefix}client event loop stalled: wake-up lag p99 {loop_lag_p99_ms:.1f} ms exceeds "
            f"load.max_schedule_lag_ms {limit_ms:g}"
        )
    if cpu_share > CPU_SATURATION_SHARE:
        reasons.append(f"{prefix}client CPU saturated: {cpu_share:.0%} of one core over the run")
    return reasons


# -- a summary.json --------------------------------------------------------------------------------


def transport_reasons(
    summary: Summary,
    limits: Limits,
    details: Mapping[str, str] | None = None,
    *,
    settings: Mapping[str, str] | None = None,
    count_rollouts: bool = True,
) -> list[str]:
    """Per transport of a summary: the error rule, else the rollout count (one cause each:
    a transport whose turns fail has few rollouts *because* of them; ``count_rollouts``
    False: the caller already has the cause, a run stopped early).

    ``details``: per transport, the error kinds to name; ``settings``: where the limits came
    from, by ``max_error_rate``/``min_rollouts`` (the scenario's unless told).
    """
    settings = settings or {}
    reasons: list[str] = []
    for name, t in summary.transports.items():
        found = error_reason(
            name,
            t.turns.count,
            t.turns.errors,
            limits.max_error_rate,
            (details or {}).get(name, ""),
            settings.get("max_error_rate", ""),
        )
        # a hand-written summary without a rollouts block says nothing about them
        if not found and count_rollouts and "rollouts" in t.model_fields_set:
            found = rollouts_reason(
                name, t.rollouts.ok, limits.min_rollouts, settings.get("min_rollouts", "")
            )
        if found:
            reasons.append(found)
    return reasons


def lag_reasons(summary: Summary, limits: Limits) -> list[str]:
    """Per transport of a summary: starts later than the limit at p99."""
    found = (
        schedule_reason(name, t.schedule_lag_p99_ms, limits.max_schedule_lag_ms)
        for name, t in summary.transports.items()
    )
    return [r for r in found if r]


def completed_turns(summary: Summary) -> int:
    """Successful turns over every transport: how much the client's health was judged over."""
    return sum(t.turns.ok for t in summary.transports.values())


def recorded_reasons(summary: Summary | None) -> list[str] | None:
    """The verdict the run wrote (None: it wrote none, unfinished or older than ``valid``)."""
    verdict = summary.validity if summary is not None else None
    if verdict is None:
        return None
    return [] if verdict.valid else list(verdict.reasons) or ["marked invalid"]


def summary_reasons(
    summary: Summary, limits: Limits, details: Mapping[str, str] | None = None
) -> list[str]:
    """Why a finished run does not count, from its ``summary.json``.

    The verdict it recorded first (which also holds what only the run could see: its
    client's health, why it stopped early), then what these rules find again in its
    figures with ``limits`` that the verdict does not already say (a summary written
    without a verdict, or by hand; a gate's stricter limits).  A rule's sentence is the
    start of the run's own, which adds the details only the run had; ``details`` are the
    caller's (per transport, the error kinds).
    """
    reasons = list(recorded_reasons(summary) or [])
    recorded = tuple(reasons)
    bare = transport_reasons(summary, limits) + lag_reasons(summary, limits)
    told = transport_reasons(summary, limits, details) + lag_reasons(summary, limits)
    for found, shown in zip(bare, told, strict=True):
        if not any(r.startswith(found) for r in recorded):
            reasons.append(shown)
    return reasons


# -- two runs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Difference:
    """A path where two JSON documents differ, with both values (reference first)."""

    path: str
    ref: Any
    cand: Any


def json_differences(a: Any, b: Any, path: str = "") -> list[Difference]:
    """Every path where two JSON-like documents differ.

    A key only one side has is skipped: it is a field added to the scenario model after
    the older run was recorded (the gate's rollout fingerprint still catches a workload
    that really changed).
    """
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out: list[Difference] = []
        for key in sorted(set(a) & set(b), key=str):
            out += json_differences(a[key], b[key], f"{path}.{key}" if path else str(key))
        return out
    return [] if a == b else [Difference(path, a, b)]


#: a rollout of a transport: (round, rollout id)
RolloutKey = tuple[int, int]


def rollouts_differ(
    transport: str,
    ref: Mapping[RolloutKey, float],
    cand: Mapping[RolloutKey, float],
    labels: tuple[str, str] = ("the baseline", "the candidate"),
) -> str | None:
    """Same scenario text is not enough if the rollout generator changed: the first rollout
    whose fingerprint differs, or None.

    The fingerprint is each rollout's first-turn history size (instructions, tool schema,
    prompt): generated on the client from the seed alone.  Later turns' histories include
    what the server answered, which may differ legitimately.
    """
    for key, value in cand.items():
        if key in ref and ref[key] != value:
            return (
                f"{transport} rollout {key[1]} (round {key[0]}): first-turn history {ref[key]:g} "
                f"tokens in {labels[0]}, {value:g} in {labels[1]}: the runs replay different "
                "rollouts (rollout generator changed? re-record the baseline)"
            )
    return None


def comparability(ref: Manifest, cand: Manifest) -> list[Difference]:
    """Why two runs' manifests do not replay the same workload ([] when they do).

    Scenario name and seed first (when they differ the content is not compared: of
    course it differs); then the scenario content without :data:`FREE_SCENARIO_KEYS`, or
    its hash when a manifest holds no scenario.  A manifest with neither is a
    ``Difference("scenario", ...)`` whose missing side is None.
    """
    found = [
        Difference(k, getattr(ref, k), getattr(cand, k))
        for k in SAME_FIELDS
        if getattr(ref, k) != getattr(cand, k)
    ]
    if found:
        return found
    rs, cs = ref.scenario_record, cand.scenario_record
    if rs is not None and cs is not None:

        def strip(d: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in d.items() if k not in FREE_SCENARIO_KEYS}

        return json_differences(strip(rs), strip(cs), "scenario")
    for key in ("scenario_sha256", "scenario_hash"):
        a, b = ref.get(key), cand.get(key)
        if a and b:
            return [] if a == b else [Difference(key, a, b)]
    return [Difference("scenario", rs, cs)]
